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
	d, err := l.cluster("take node " + node + " out of the cluster before its machine goes")
	if err != nil {
		return err
	}
	return d.leaveBeforeReplacement(node)
}

// Restart gates a node whose machine the platform replaces with its state
// kept, which comes back as the same member (a container on a new image,
// its volumes kept): before the old machine stops, every node restarted or
// updated before it in this run came back healthy, and etcd keeps its
// quorum while the node is away. It does nothing for a node that leaves
// the stack, one the last run did not have, or in a whole-stack destroy.
func (l *Leaver) Restart(node string) error {
	d, err := l.cluster("restart node " + node)
	if err != nil {
		return err
	}
	return d.beforeRestart(node)
}

// Restarted waits, after the new machine of a node Restart let go is
// created (or of a node the last run had, whose old machine a stopped run
// deleted), until the node is back and healthy (for a control plane: its
// etcd member with the others), and records it as a config apply's wait
// does: the rollout does not go on past a node that did not come back.
func (l *Leaver) Restarted(node string) error {
	d, err := l.cluster("wait for node " + node)
	if err != nil {
		return err
	}
	return d.afterRestart(node)
}

// cluster is the cluster built in this run, once NewCluster set it.
func (l *Leaver) cluster(doing string) (*dayTwo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), leaverWait)
	defer cancel()
	d, err := l.day2.get(ctx)
	if err != nil {
		return nil, fmt.Errorf("unable to %s: the cluster was not built in this run: %w", doing, err)
	}
	return d, nil
}

// beforeRestart is Restart, in this run.
func (d *dayTwo) beforeRestart(name string) error {
	if d.deps.Destroy || !d.has(name) {
		return nil
	}
	n, err := d.node(d.applyPrefix + name)
	if err != nil || !d.hadBefore(n) {
		return err
	}
	if err := d.earlierSettled(n); err != nil {
		return err
	}
	ctx, cancel := d.hookContext()
	defer cancel()
	ops, err := d.ops(ctx, "")
	if err != nil {
		return err
	}
	if err := ops.Gate(ctx, n); err != nil {
		return err
	}
	booted := ops.BootTime(ctx, n)
	_ = d.ctx.Log.Info(fmt.Sprintf("%s restarts on its new machine, its state kept", n), nil)
	d.mu.Lock()
	d.booted[n.Name], d.restarting[n.Name] = booted, true
	d.mu.Unlock()
	return nil
}

// afterRestart is Restarted, in this run.
func (d *dayTwo) afterRestart(name string) error {
	d.mu.Lock()
	restarting, booted := d.restarting[name], d.booted[name]
	d.mu.Unlock()
	if !restarting && (d.deps.Destroy || !d.has(name)) {
		return nil
	}
	n, err := d.node(d.applyPrefix + name)
	if err != nil {
		return err
	}
	// A new machine of a node the last run had, which this run did not
	// let go: a run stopped between the old machine's delete and this
	// one's create. It is waited for all the same (from any boot), so the
	// rollout does not go on past it.
	if !restarting && !d.hadBefore(n) {
		return nil
	}
	ctx, cancel := d.hookContext()
	defer cancel()
	ops, err := d.ops(ctx, "")
	if err == nil {
		err = ops.SettleAfter(ctx, n, booted, d.kubernetes, rollout.RebootNeeded)
	}
	d.mu.Lock()
	d.settled[n.Name] = err
	d.mu.Unlock()
	return err
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
