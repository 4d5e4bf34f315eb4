package program

import (
	"fmt"
	"slices"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/internals"

	"github.com/fluodata/talos-pulumi/components/talos"
)

// ReadPrevious reads the cluster as the last `up` left it from this stack's
// own outputs, through a stack reference to the stack itself: the engine
// keeps the root stack's outputs of the last deployment until this run
// registers new ones, so a run (a preview too) sees the previous cluster
// before it registers anything. It returns nil when the stack has none
// (its first `up`, or a stack from before the `nodes` output): the checks
// against it are then skipped. A stack reference that cannot be read is
// not an error: it is reported as a warning and the checks are skipped.
func ReadPrevious(ctx *pulumi.Context) (*talos.Previous, error) {
	name := fmt.Sprintf("%s/%s/%s", ctx.Organization(), ctx.Project(), ctx.Stack())
	skip := func(err error) (*talos.Previous, error) {
		msg := fmt.Sprintf("unable to read the stack's last outputs (%v): the checks of a Kubernetes version change and of removed control planes are skipped", err)
		if werr := ctx.Log.Warn(msg, nil); werr != nil {
			return nil, fmt.Errorf("unable to log a warning: %w", werr)
		}
		return nil, nil
	}
	ref, err := pulumi.NewStackReference(ctx, name, nil)
	if err != nil {
		return skip(err)
	}
	res, err := internals.UnsafeAwaitOutput(ctx.Context(), ref.Outputs)
	if err != nil {
		return skip(err)
	}
	outputs, _ := res.Value.(map[string]any)
	return previousFrom(outputs), nil
}

// previousFrom reads the previous cluster from the stack's outputs: the
// kubernetesVersion the API servers ran and the control planes of the
// nodes map. Outputs without the nodes map give nil.
func previousFrom(outputs map[string]any) *talos.Previous {
	nodes, ok := outputs["nodes"].(map[string]any)
	if !ok {
		return nil
	}
	prev := &talos.Previous{ControlPlanes: []string{}}
	if v, ok := outputs["kubernetesVersion"].(string); ok && v != talos.Unknown {
		prev.KubernetesVersion = v
	}
	for name, n := range nodes {
		if m, ok := n.(map[string]any); ok && m["role"] == string(talos.RoleControlPlane) {
			prev.ControlPlanes = append(prev.ControlPlanes, name)
			if ip, ok := m["ip"].(string); ok && ip != "" {
				prev.ControlPlaneIPs = append(prev.ControlPlaneIPs, ip)
			}
		}
	}
	// Map order is random: sorted, the messages that list them are stable.
	slices.Sort(prev.ControlPlanes)
	slices.Sort(prev.ControlPlaneIPs)
	return prev
}
