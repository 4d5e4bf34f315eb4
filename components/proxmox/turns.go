package proxmox

import (
	"errors"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/talos"
)

// errNoTurn settles the waits of a run that failed before its nodes'
// config applies were registered: nothing of the chain is registered then.
var errNoTurn = errors.New("the cluster's nodes were not registered")

// turns chain the VMs this run replaces (talos.ClusterArgs.ReplacedInTurn,
// in its order): a node's VM, and its placement record, wait for the
// config apply of the node replaced before it, which the engine creates
// once that node's new machine rejoined (the apply's after-create hook
// waits for it). The VM's delete, and the node's leave before it, come
// only then: one node at a time is away, whatever the count, and a node
// that does not come back stops the chain there.
type turns struct {
	order []string
	// waits are, by node, what its VM waits for, and settle resolves
	// them once the applies are registered.
	waits   map[string]pulumi.ResourceArrayOutput
	resolve []func(any)
	reject  []func(error)
}

func newTurns(ctx *pulumi.Context, order []string) *turns {
	t := &turns{order: order, waits: map[string]pulumi.ResourceArrayOutput{}}
	for _, name := range order[min(1, len(order)):] {
		out, resolve, reject := ctx.NewOutput()
		t.waits[name] = out.ApplyT(func(v any) []pulumi.Resource { return v.([]pulumi.Resource) }).(pulumi.ResourceArrayOutput)
		t.resolve, t.reject = append(t.resolve, resolve), append(t.reject, reject)
	}
	return t
}

// options are the node's resource options of its turn: none for the first
// node replaced and for the nodes not replaced.
func (t *turns) options(node string) []pulumi.ResourceOption {
	w, ok := t.waits[node]
	if !ok {
		return nil
	}
	return []pulumi.ResourceOption{pulumi.DependsOnInputs(w)}
}

// settle gives each node's turn the apply of the node before it; with no
// cluster (its registration failed), it fails them.
func (t *turns) settle(cluster *talos.Cluster) {
	for i := range t.resolve {
		if cluster == nil || cluster.Applies[t.order[i]] == nil {
			t.reject[i](errNoTurn)
			continue
		}
		t.resolve[i]([]pulumi.Resource{cluster.Applies[t.order[i]]})
	}
}
