package proxmox

import (
	"fmt"
	"strings"

	"github.com/pulumi/pulumi-command/sdk/go/command/local"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/talos"
)

const (
	// PlacementInfix names a VM's placement record
	// (<cluster>-placement-<node>), made when no fast stop is bound.
	PlacementInfix = "-placement-"
	// PlacementHookSuffix names the hook that takes a node out of the
	// cluster before its VM is replaced (<cluster>-placement-leave).
	PlacementHookSuffix = "-placement-leave"
)

// placementRecord registers, for a program that binds no fast stop
// (Deps.FastStop false: a program using the package), a record of the
// node's machine (its NodeSpec.Machine: what replaces the VM). bpg v0.95
// replaces a VM for a new vm_id or node_name (proxmoxtf/resource/vm/vm.go,
// CustomizeDiff) or initialization type (the addressing); another host is
// another provider; the component replaces it for a new BIOS. An edit of
// these changes the record first, and its
// before-update hook takes the node out of the cluster (talos.Leaver), as
// the fast stop does, before the replacement deletes the old VM, which
// depends on the record. A failed leave fails the step: the VM stays.
// Creating or deleting the record calls nothing.
func placementRecord(ctx *pulumi.Context, name string, hooks Hooks, leaver *talos.Leaver, ref Node, machine string, opts ...pulumi.ResourceOption) (pulumi.Resource, error) {
	record := name + PlacementInfix + ref.Name
	leave := func(args *pulumi.ResourceHookArgs) error {
		node, ok := strings.CutPrefix(args.Name, name+PlacementInfix)
		if !ok {
			return nil
		}
		return leaver.Leave(node)
	}
	hook, err := hooks.Bind(name+PlacementHookSuffix, talos.BeforeUpdate, record, leave)
	if err != nil {
		return nil, err
	}
	res, err := local.NewCommand(ctx, record, &local.CommandArgs{
		Environment: pulumi.StringMap{"PLACEMENT": pulumi.String(machine)},
	}, append(opts, hook)...)
	if err != nil {
		return nil, fmt.Errorf("unable to create the placement record of node %q: %w", ref.Name, err)
	}
	return res, nil
}
