// Command removeprogram is a Pulumi program for the integration test of
// removing a cluster from a program, built as a TalosCluster is: a
// component "lab" with a membership per node and a roster whose
// before-update hook takes the departed nodes out (talos.RosterSuffix).
//
//   - LEGACY=1: the earlier versions' graph, every membership bound to the
//     before-delete hook "lab-node-remove" and no roster;
//   - NODES: the nodes, comma-separated ("cp-0,w-0" when empty);
//   - REMOVE_LAB=1: the program declares nothing.
//
// Every hook run appends a line to HOOK_LOG.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/pulumi/pulumi-command/sdk/go/command/local"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/talos"
)

type lab struct{ pulumi.ResourceState }

func logLine(format string, args ...any) error {
	f, err := os.OpenFile(os.Getenv("HOOK_LOG"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	_, err = fmt.Fprintf(f, format+"\n", args...)
	return err
}

// environment is a resource's environment input from a hook's inputs.
func environment(in resource.PropertyMap) resource.PropertyMap {
	if env := in["environment"]; env.IsObject() {
		return env.ObjectValue()
	}
	return resource.PropertyMap{}
}

func main() {
	pulumi.Run(func(ctx *pulumi.Context) error {
		if os.Getenv("REMOVE_LAB") == "1" {
			return nil
		}
		nodes := strings.Split(os.Getenv("NODES"), ",")
		if os.Getenv("NODES") == "" {
			nodes = []string{"cp-0", "w-0"}
		}
		legacy := os.Getenv("LEGACY") == "1"
		// The removal hook's name is registered on every run, as the
		// cluster registers it.
		remove, err := ctx.RegisterResourceHook("lab"+talos.RemoveHookSuffix, func(args *pulumi.ResourceHookArgs) error {
			return logLine("remove %s", args.Name)
		}, nil)
		if err != nil {
			return err
		}
		c := &lab{}
		if err := ctx.RegisterComponentResource("test:index:Lab", "lab", c); err != nil {
			return err
		}
		var members []pulumi.Resource
		roster := pulumi.StringMap{}
		for _, n := range nodes {
			opts := []pulumi.ResourceOption{pulumi.Parent(c)}
			if legacy {
				opts = append(opts, pulumi.ResourceHooks(&pulumi.ResourceHookBinding{BeforeDelete: []*pulumi.ResourceHook{remove}}))
			}
			a := &local.CommandArgs{Environment: pulumi.StringMap{"NODE_NAME": pulumi.String(n)}}
			if !legacy {
				// The delete says when it runs (the test's own witness;
				// a membership runs nothing).
				a.Environment = pulumi.StringMap{"NODE_NAME": pulumi.String(n), "HOOK_LOG": pulumi.String(os.Getenv("HOOK_LOG"))}
				a.Delete = pulumi.String(`echo "deleted $NODE_NAME" >> "$HOOK_LOG"`)
			}
			m, err := local.NewCommand(ctx, "lab"+talos.MemberSuffix+n, a, opts...)
			if err != nil {
				return err
			}
			members = append(members, m)
			roster[n] = pulumi.String("worker 10.0.0.1")
		}
		if legacy {
			return nil
		}
		depart, err := ctx.RegisterResourceHook("lab"+talos.DepartHookSuffix, func(args *pulumi.ResourceHookArgs) error {
			staying := environment(args.NewInputs)
			for k := range environment(args.OldInputs) {
				if _, ok := staying[k]; !ok {
					if err := logLine("depart %s", k); err != nil {
						return err
					}
				}
			}
			return nil
		}, nil)
		if err != nil {
			return err
		}
		_, err = local.NewCommand(ctx, "lab"+talos.RosterSuffix, &local.CommandArgs{Environment: roster},
			pulumi.Parent(c), pulumi.DependsOn(members),
			pulumi.ResourceHooks(&pulumi.ResourceHookBinding{BeforeUpdate: []*pulumi.ResourceHook{depart}}))
		return err
	})
}
