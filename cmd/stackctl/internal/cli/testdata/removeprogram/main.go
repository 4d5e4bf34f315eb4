// Command removeprogram is a Pulumi program for the integration test of
// removing a component whose children carry delete hooks (as a cluster's
// VMs and memberships do): a component "lab" with a child bound to a
// before-delete hook named after it, declared unless REMOVE_LAB=1. The hook
// writes a line to HOOK_LOG when it runs.
package main

import (
	"fmt"
	"os"

	"github.com/pulumi/pulumi-command/sdk/go/command/local"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

type lab struct{ pulumi.ResourceState }

func main() {
	pulumi.Run(func(ctx *pulumi.Context) error {
		if os.Getenv("REMOVE_LAB") == "1" {
			return nil
		}
		hook, err := ctx.RegisterResourceHook("lab-node-remove", func(args *pulumi.ResourceHookArgs) error {
			f, err := os.OpenFile(os.Getenv("HOOK_LOG"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			defer func() { _ = f.Close() }()
			_, err = fmt.Fprintf(f, "before delete %s\n", args.Name)
			return err
		}, nil)
		if err != nil {
			return err
		}
		c := &lab{}
		if err := ctx.RegisterComponentResource("test:index:Lab", "lab", c); err != nil {
			return err
		}
		_, err = local.NewCommand(ctx, "lab-member-cp-0", &local.CommandArgs{}, pulumi.Parent(c),
			pulumi.ResourceHooks(&pulumi.ResourceHookBinding{BeforeDelete: []*pulumi.ResourceHook{hook}}))
		return err
	})
}
