package talos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/pulumi/pulumi-command/sdk/go/command/local"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/internal/rollout"
)

// RosterSuffix names the cluster's roster: the resource that lists the nodes
// and whose update takes those that left the stack out of the cluster. A hook
// on each node's delete failed once the cluster left the program
// (docs/decisions/0004-upstream-behaviours.md#hooks-of-a-cluster-removed-from-a-program).
const RosterSuffix = "-roster"

// rosterEnv is the roster's environment (a command that runs nothing: the
// environment is only state): one entry per node, the node's name to its
// role and address, and "reset" when its removal resets it. A preview
// shows a departure as that entry going.
func rosterEnv(nodes []NodeSpec, reset func(NodeSpec) bool) pulumi.StringMap {
	env := pulumi.StringMap{}
	for _, n := range nodes {
		v := string(n.Role) + " " + n.IP
		if reset(n) {
			v += " " + resetWord
		}
		env[n.Name] = pulumi.String(v)
	}
	return env
}

// resetWord marks a roster entry whose node is reset when it leaves.
const resetWord = "reset"

// departure is a node that left the stack, read back from the roster's
// old inputs.
type departure struct {
	node  rollout.Node
	reset bool
}

// departures are the nodes of the roster's old inputs that its new inputs
// no longer have, control planes first, each group by name.
func departures(oldInputs, newInputs resource.PropertyMap) ([]departure, error) {
	entries := func(in resource.PropertyMap) resource.PropertyMap {
		if env := in["environment"]; env.IsObject() {
			return env.ObjectValue()
		}
		return resource.PropertyMap{}
	}
	staying := entries(newInputs)
	var out []departure
	var problems []error
	for k, v := range entries(oldInputs) {
		if _, ok := staying[k]; ok {
			continue
		}
		fields := []string{}
		if v.IsString() {
			fields = strings.Fields(v.StringValue())
		}
		n := rollout.Node{Name: string(k)}
		if len(fields) >= 2 {
			n.Role, n.IP = rollout.Role(fields[0]), fields[1]
		}
		if n.IP == "" || (n.Role != rollout.ControlPlane && n.Role != rollout.Worker) {
			problems = append(problems, fmt.Errorf("the roster's entry %q names no node: %v", k, v))
			continue
		}
		out = append(out, departure{node: n, reset: slices.Contains(fields[2:], resetWord)})
	}
	slices.SortFunc(out, func(a, b departure) int {
		if a.node.Role != b.node.Role {
			if a.node.Role == rollout.ControlPlane {
				return -1
			}
			return 1
		}
		return strings.Compare(a.node.Name, b.node.Name)
	})
	return out, errors.Join(problems...)
}

// roster registers the cluster's roster, after every membership: the
// nodes leave once the rollout of the others is done, before the engine
// deletes anything of theirs (deletes come after the program's
// registrations).
func (b *build) roster(members []pulumi.Resource) error {
	name := b.name + RosterSuffix
	depart, err := b.deps.Hooks.Bind(b.name+DepartHookSuffix, BeforeUpdate, name, b.day2.depart)
	if err != nil {
		return err
	}
	r, err := local.NewCommand(b.ctx, name, &local.CommandArgs{
		Environment: rosterEnv(b.args.Nodes, b.args.resets),
	}, b.parent, pulumi.DependsOn(members), depart,
		// Deleted with the secrets, as the memberships: never replaced
		// with another resource (an update is what takes nodes out).
		pulumi.DeletedWith(b.secrets))
	if err != nil {
		return fmt.Errorf("unable to create the roster of cluster %q: %w", b.name, err)
	}
	b.c.Roster = r
	return nil
}

// resets reports whether n is reset when it leaves the stack.
func (a *ClusterArgs) resets(n NodeSpec) bool {
	return a.ResetOnDestroy || a.NodeOptions[n.Name].ResetOnDestroy
}

// depart runs before the roster is updated: every node the stack dropped
// leaves the cluster (a control plane leaves etcd, a worker is drained,
// its Kubernetes Node deleted, and it is reset if its entry says so),
// taking turns as a rollout does: control planes one at a time, workers by
// workerParallelism. A failure fails the update, so the roster keeps the
// node and the next `up` tries again; the engine deletes nothing of the
// node before then. Taking a node out is idempotent: a node already gone
// from etcd and Kubernetes is success.
func (d *dayTwo) depart(args *pulumi.ResourceHookArgs) error {
	gone, err := departures(args.OldInputs, args.NewInputs)
	if err != nil {
		return fmt.Errorf("unable to read the nodes that leave the cluster: %w", err)
	}
	if len(gone) == 0 || d.deps.Destroy {
		return nil
	}
	var wg sync.WaitGroup
	errs := make([]error, len(gone))
	for i, g := range gone {
		if g.node.Role == rollout.ControlPlane {
			// One control plane at a time, in order, before any worker.
			errs[i] = d.takeOut(args.URN, g.node, g.reset)
			if errs[i] != nil {
				break
			}
			continue
		}
		wg.Go(func() { errs[i] = d.takeOut(args.URN, g.node, g.reset) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// takeOut takes n out of the cluster in its turn and resets it if asked,
// reporting on the resource at; it records n as departed in this run.
func (d *dayTwo) takeOut(at pulumi.URN, n rollout.Node, reset bool) error {
	var extra []string
	if n.Role == rollout.ControlPlane {
		extra = append(extra, n.IP)
	}
	return d.inTurn(n, at, extra, func(ctx context.Context, ops rollout.Ops) error {
		if err := ops.Remove(ctx, n); err != nil {
			return err
		}
		if reset {
			d.reset(ctx, n)
		}
		d.mu.Lock()
		d.departed[n.Name] = true
		d.mu.Unlock()
		return nil
	})
}

// inTurn runs fn with the cluster's operations (reporting on the resource
// at, extraCPs added to the etcd checks) once n may leave the cluster (see
// removalTurn), within one hook run's bounds.
func (d *dayTwo) inTurn(n rollout.Node, at pulumi.URN, extraCPs []string, fn func(context.Context, rollout.Ops) error) error {
	release, err := d.removalTurn(n)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := d.hookContext()
	defer cancel()
	ops, err := d.ops(ctx, at, extraCPs...)
	if err != nil {
		return err
	}
	return fn(ctx, ops)
}

// hasDeparted reports whether the roster took n out in this run.
func (d *dayTwo) hasDeparted(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.departed[name]
}
