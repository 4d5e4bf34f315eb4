// Package program is the body of the Pulumi program: load and validate the
// stack config, build the platform's cluster component, export its outputs.
// It lives outside package main so that tests can run it under Pulumi mocks.
package program

import (
	"fmt"
	"os"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/servers"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/cancelfile"
	"github.com/fluodata/talos-pulumi/program/overrides"
	"github.com/fluodata/talos-pulumi/stacks"
)

// Run is the program body. src is the run's raw config (see
// stacks.CaptureSource). Nothing is registered unless the config is valid,
// user patches and Helm values included (see Validate).
func Run(ctx *pulumi.Context, src stacks.Source, opts ...Options) error {
	outputs, err := Deploy(ctx, src, opts...)
	if err != nil {
		return err
	}
	for k, v := range outputs {
		ctx.Export(k, v)
	}
	return nil
}

// Options are seams for tests; the zero value is the real engine.
type Options struct {
	// Hooks binds resource hooks (the engine's own when nil; the SDK's mock
	// engine cannot register hooks).
	Hooks proxmox.Hooks
	// ProxmoxAPI is what the fast-stop hook talks to (a client for the
	// stack's endpoint when nil).
	ProxmoxAPI proxmox.API
	// TalosProbe tells whether a VPS node already runs Talos in maintenance
	// mode (a probe of its Talos API when nil).
	TalosProbe servers.MaintenanceProbe
	// Talos are the TalosCluster's seams: its day-2 hooks and how they
	// reach the cluster (the engine's and real clients when zero).
	Talos talos.Deps
	// FreePorts chooses a first local cluster's host ports
	// (FreeLocalPorts when nil).
	FreePorts func(preferred []int) ([]int, error)
}

// Deploy registers the stack's resources and returns the stack outputs.
// Kubeconfig and talosconfig are secret outputs of the components, so the
// stack keeps them encrypted; `make outputs` writes them to files.
func Deploy(ctx *pulumi.Context, src stacks.Source, opts ...Options) (pulumi.Map, error) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if os.Getenv(talos.DestroyEnv) == "1" {
		o.Talos.Destroy = true
	}
	// The program reads the last state itself (ReadLast), to name what it
	// refuses by stack key: the components do not read it again.
	o.Talos.LastRead = true
	if o.Talos.Context == nil {
		o.Talos.Context = cancelfile.ForProgram()
	}
	// The config, and the platform's Args built once: the component's
	// problems and the guard's errors by stack key come from them, before
	// anything is registered. The stack file's own warnings are logged
	// here; the components log theirs (the guard's), named by the stack's
	// keys through InputName.
	cfg, diags, args := load(src, ctx.Stack())
	for _, w := range diags.Warnings {
		if err := ctx.Log.Warn(w.String(), nil); err != nil {
			return nil, fmt.Errorf("unable to log config warning: %w", err)
		}
	}
	if err := diags.Err(); err != nil {
		return nil, err
	}
	inputName := func(path string) string { return StackKey(cfg, path) }
	etcdBackup := EtcdBackupSettings(cfg, ctx.Stack())
	if err := ReadBackupCA(cfg, etcdBackup); err != nil {
		return nil, err
	}
	args.share(inputName, etcdBackup)
	if err := overrides.CheckOverrides(cfg, args.talos()).Err(); err != nil {
		return nil, err
	}
	prev, err := ReadLast(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkPlatform(prev, cfg.Platform); err != nil {
		return nil, err
	}
	// What the component refuses against the last run, named by the stack's
	// keys like the rest (it refuses it too, by its own paths, when called
	// from another program).
	args.remember(prev)
	if pc, ok := args.(portChooser); ok {
		free := o.FreePorts
		if free == nil {
			free = FreeLocalPorts
		}
		if err := pc.choosePorts(free); err != nil {
			return nil, err
		}
	}
	var changes stacks.Diagnostics
	changes.AddErrors(componentProblems(cfg, args.problems(ctx.Stack()), nil)...)
	if err := changes.Err(); err != nil {
		return nil, fmt.Errorf("unable to make this change from the last run (nothing was created): %w", err)
	}
	outputs, err := args.deploy(ctx, cfg, o)
	if err != nil {
		return nil, err
	}
	// What the next run compares itself with, besides the cluster's own
	// outputs: a rename or a move to another platform replaces everything.
	outputs[ClusterNameOutput] = pulumi.String(cfg.Cluster.Name)
	outputs[PlatformOutput] = pulumi.String(string(cfg.Platform))
	outputs[CertificateExpiryOutput] = certificateExpiry(outputs["talosconfig"], outputs["kubeconfig"])
	return outputs, nil
}
