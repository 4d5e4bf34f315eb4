// Command hookprogram is a Pulumi program for the integration test of a
// cancelled run: a resource whose before-create hook waits, as a day-2
// hook does, until the run is cancelled (internal/cancelfile) or three
// minutes pass, saying every second what it waits for.
package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pulumi/pulumi-command/sdk/go/command/local"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/internal/cancelfile"
)

func main() {
	pulumi.Run(func(ctx *pulumi.Context) error {
		cancelled := cancelfile.ForProgram()
		hook, err := ctx.RegisterResourceHook("wait-for-cancel", func(*pulumi.ResourceHookArgs) error {
			wait, stop := context.WithTimeout(cancelled, 3*time.Minute)
			defer stop()
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-wait.Done():
					if errors.Is(wait.Err(), context.DeadlineExceeded) {
						return errors.New("hook: waited 3 minutes, never cancelled")
					}
					return errors.New("hook: the run was cancelled, stopped waiting")
				case <-tick.C:
					_ = ctx.Log.Info("hook: waiting for the run to be cancelled", nil)
				}
			}
		}, nil)
		if err != nil {
			return fmt.Errorf("unable to register the hook: %w", err)
		}
		_, err = local.NewCommand(ctx, "waits", &local.CommandArgs{Create: pulumi.String("true")},
			pulumi.ResourceHooks(&pulumi.ResourceHookBinding{BeforeCreate: []*pulumi.ResourceHook{hook}}))
		return err
	})
}
