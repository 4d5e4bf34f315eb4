package program

import (
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/stacks"
)

// ReadStackOutputsToken is the engine's built-in function that reads a
// stack's outputs: what a StackReference resource reads, without a resource.
const ReadStackOutputsToken = "pulumi:pulumi:readStackOutputs" //nolint:gosec // a function token, not a credential

// Names of the stack outputs the program adds to the cluster's: what the
// next run compares itself with.
const (
	ClusterNameOutput = talos.ClusterNameOutput
	PlatformOutput    = "platform"
)

// Last is the stack as the last `up` left it.
type Last struct {
	// Platform the stack ran on; empty when unknown.
	Platform stacks.Platform
	// Cluster is the cluster the refusals of TalosCluster compare with;
	// nil when unknown.
	Cluster *talos.Previous
	// VMs are a Proxmox cluster's VMs as the last run left them, by node
	// name (nil on other platforms, or when the state was unreadable).
	VMs map[string]proxmox.PreviousVM
	// CSIRegions are the Proxmox CSI plugin's regions as the last run gave
	// them, by API URL (nil without the plugin).
	CSIRegions map[string]string
	// LocalPorts are the host ports a local cluster's containers
	// published, by node and container port (nil on other platforms).
	LocalPorts map[string]map[int]int
}

// ReadPrevious reads the cluster as the last `up` left it from this stack's
// own outputs (see ReadLast); nil when unknown.
func ReadPrevious(ctx *pulumi.Context) (*talos.Previous, error) {
	last, err := ReadLast(ctx)
	return last.Cluster, err
}

// ReadLast reads the stack as the last `up` left it from the stack's own
// outputs, which the engine keeps until this run registers new ones; Cluster is
// nil when there are none. It calls readStackOutputs, not a StackReference, so
// that a failure is only a warning and a preview shows no read
// (docs/decisions/0001-day2-hooks.md#consequences).
func ReadLast(ctx *pulumi.Context) (Last, error) {
	name := fmt.Sprintf("%s/%s/%s", ctx.Organization(), ctx.Project(), ctx.Stack())
	outputs, err := talos.ReadStack(ctx, ReadStackOutputsToken, &readStackOutputsArgs{Name: name},
		"unable to read the stack's last outputs (%v): "+talos.SkippedWithoutPrevious)
	if err != nil || outputs == nil {
		return Last{}, err
	}
	last := Last{Cluster: talos.PreviousFromOutputs(outputs)}
	if p, ok := outputs[PlatformOutput].(string); ok {
		last.Platform = stacks.Platform(p)
	}
	if last.Cluster == nil {
		return last, nil
	}
	resources, err := talos.ReadStackResources(ctx,
		"unable to read the stack's last state (%v): nodes still leaving the cluster after a failed removal are not counted")
	if err != nil {
		return Last{}, err
	}
	last.Cluster.AddLeaving(resources, "")
	last.Cluster.AddAddons(resources)
	last.VMs = proxmox.PreviousVMsFrom(resources)
	last.CSIRegions = proxmox.PreviousCSIRegionsFrom(resources)
	last.LocalPorts = previousLocalPorts(resources)
	return last, nil
}

// checkPlatform refuses a move of a running cluster to another platform:
// every resource would be replaced, the machine secrets among them.
func checkPlatform(last Last, platform stacks.Platform) error {
	if last.Platform == "" || last.Platform == platform {
		return nil
	}
	return fmt.Errorf("invalid stack configuration (1 problem; nothing was created):\n  - platform: %q moves the running cluster from %q: every resource, the machine secrets and their CA included, would be replaced; a cluster on another platform is a new stack (`make init STACK=...`)",
		platform, last.Platform)
}

// ReadStackResourcesToken is the engine's built-in function that reads the
// outputs of every resource of a stack's last state, by URN.
const ReadStackResourcesToken = talos.ReadStackResourcesToken

// readStackOutputsArgs are the arguments of ReadStackOutputsToken.
type readStackOutputsArgs struct {
	Name string `pulumi:"name"`
}

// PreviousFromOutputs is the cluster as a stack's outputs (their plain
// values) describe it (talos.PreviousFromOutputs); stackctl backup reads it.
func PreviousFromOutputs(outputs map[string]any) *talos.Previous {
	return talos.PreviousFromOutputs(outputs)
}
