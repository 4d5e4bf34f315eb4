package talos

import (
	"context"
	"fmt"
	"time"

	"github.com/fluodata/talos-pulumi/internal/rollout"
)

// Leaver lets a platform take a node out of the cluster before the engine
// deletes its machine for a replacement. A replaced machine is deleted
// first (its VM holds the vmId the new one needs), while the program
// registers its resources, before any hook of the cluster's applies: the
// platform's before-delete hook of the machine calls Leave, which waits
// until the cluster is built in this run (NewCluster sets it).
type Leaver struct {
	day2 *future[*dayTwo]
}

// NewLeaver is a Leaver for one TalosCluster (ClusterArgs.Leaver).
func NewLeaver() *Leaver { return &Leaver{day2: newFuture[*dayTwo]()} }

// leaverWait bounds the wait for the cluster to be built in this run.
const leaverWait = time.Minute

// Leave takes the node out of the cluster when its machine is replaced
// because of an edit of the stack file (its Machine changed since the last
// run): a control plane leaves etcd, a worker is drained, its Kubernetes
// Node deleted, taking turns as removals do. It does nothing for a node
// that leaves the stack (its membership's removal did that), in a
// whole-stack destroy, or when nothing says the machine changed (an
// explicit `--replace`: the old member is cleaned up before the new
// machine joins instead).
func (l *Leaver) Leave(node string) error {
	ctx, cancel := context.WithTimeout(context.Background(), leaverWait)
	d, err := l.day2.get(ctx)
	cancel()
	if err != nil {
		return fmt.Errorf("unable to take node %s out of the cluster before its machine goes: the cluster was not built in this run: %w", node, err)
	}
	return d.leaveBeforeReplacement(node)
}

// leaveBeforeReplacement is Leave, in this run.
func (d *dayTwo) leaveBeforeReplacement(name string) error {
	if d.deps.Destroy || !d.has(name) || !d.machineChanged[name] {
		return nil
	}
	n, err := d.node(d.applyPrefix + name)
	if err != nil {
		return err
	}
	return d.inTurn(n, "", nil, func(ctx context.Context, ops rollout.Ops) error {
		_ = d.ctx.Log.Info(fmt.Sprintf("%s gets a new machine: it leaves the cluster before the old one goes", n), nil)
		if err := ops.Remove(ctx, n); err != nil {
			return fmt.Errorf("unable to take %s out of the cluster before its machine is replaced: %w", n, err)
		}
		return nil
	})
}
