// Package program is the body of the Pulumi program: load and validate the
// stack config, build the platform's cluster component, export its outputs.
// It lives outside package main so that tests can run it under Pulumi mocks.
package program

import (
	"errors"
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/stacks"
)

// ErrPlatformNotImplemented is returned for a platform whose component does
// not exist yet, rather than pretending to deploy it.
var ErrPlatformNotImplemented = errors.New("platform not implemented yet")

// Run is the program body. src is the run's raw config (see
// stacks.CaptureSource). Nothing is registered unless the config is valid.
func Run(ctx *pulumi.Context, src stacks.Source) error {
	cfg, diags := stacks.Load(src)
	for _, w := range diags.Warnings {
		if err := ctx.Log.Warn(w.String(), nil); err != nil {
			return fmt.Errorf("unable to log config warning: %w", err)
		}
	}
	if err := diags.Err(); err != nil {
		return err
	}
	switch cfg.Platform {
	case stacks.PlatformProxmox, stacks.PlatformVPS:
		return fmt.Errorf("platform %q: %w; nothing was created", cfg.Platform, ErrPlatformNotImplemented)
	default:
		// Load rejects other platforms; reaching this is a bug.
		return fmt.Errorf("platform %q has no component", cfg.Platform)
	}
}
