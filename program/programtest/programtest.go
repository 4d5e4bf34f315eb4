// Package programtest runs the whole program under the mock engine, as the
// tests of several packages do: the program's own, adopt's import plan and
// the URN guard.
package programtest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/internals"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// NoTalosYet is the VPS probe of servers in their rescue system: none
// answers the Talos API, and no test dials the example's addresses.
func NoTalosYet(context.Context, string) bool { return false }

// Run is one program run: src deployed as stack under a new mock engine.
// Unset seams get test stand-ins: recording Hooks (returned), NoTalosYet.
// It returns the engine, the awaited stack outputs and the program's error.
func Run(t testing.TB, src stacks.Source, stack string, o program.Options) (*componentstest.Engine, map[string]internals.UnsafeAwaitOutputResult, *componentstest.Hooks, error) {
	t.Helper()
	return RunOn(t, &componentstest.Engine{}, src, stack, o)
}

// RunOn is Run on a given engine (one that holds the stack's last outputs,
// say).
func RunOn(t testing.TB, e *componentstest.Engine, src stacks.Source, stack string, o program.Options) (*componentstest.Engine, map[string]internals.UnsafeAwaitOutputResult, *componentstest.Hooks, error) {
	t.Helper()
	hooks, _ := o.Hooks.(*componentstest.Hooks)
	if o.Hooks == nil {
		hooks = &componentstest.Hooks{}
		o.Hooks = hooks
	}
	if o.Talos.Hooks == nil {
		th := hooks
		if th == nil {
			th = &componentstest.Hooks{}
		}
		o.Talos.Hooks = th
	}
	if o.TalosProbe == nil {
		o.TalosProbe = NoTalosYet
	}
	if o.FreePorts == nil {
		o.FreePorts = PreferredPorts
	}
	outs := map[string]internals.UnsafeAwaitOutputResult{}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		m, err := program.Deploy(ctx, src, o)
		if err != nil {
			return err
		}
		for k, v := range m {
			r, err := internals.UnsafeAwaitOutput(ctx.Context(), pulumi.ToOutput(v))
			if err != nil {
				return err
			}
			outs[k] = r
		}
		return nil
	}, pulumi.WithMocks(src.Project, stack, e), stackstest.WithConfig(src))
	if failed := e.FailedSteps(); err == nil && len(failed) > 0 {
		// The engine fails the deployment after a failed step.
		err = fmt.Errorf("the engine fails the deployment: %s", strings.Join(failed, "; "))
	}
	return e, outs, hooks, err
}

// PreferredPorts takes the preferred host ports as free: the graph does
// not depend on what listens on the test machine.
func PreferredPorts(preferred []int) ([]int, error) { return preferred, nil }
