package talos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/internal/progress"
	"github.com/fluodata/talos-pulumi/internal/rollout"
)

// remove runs before a node's membership is deleted (bound only where the
// removal resets the node; registered always, for earlier versions' state).
// Pulumi runs it even in a whole-stack destroy, where a node the program still
// has is only reset. A node the roster took out is done; one that left before
// the roster existed is taken out here
// (docs/decisions/0001-day2-hooks.md#consequences).
func (d *dayTwo) remove(args *pulumi.ResourceHookArgs) error {
	n, err := memberNode(args.OldInputs)
	if err != nil {
		return fmt.Errorf("unable to remove %s from the cluster: %w", args.Name, err)
	}
	if d.deps.Destroy || d.has(n.Name) {
		if d.deps.Destroy {
			_ = d.ctx.Log.Info(fmt.Sprintf("the whole stack is destroyed: %s is not taken out of the cluster first", n), nil)
		} else {
			_ = d.ctx.Log.Info(fmt.Sprintf("%s is still in the stack: the whole cluster goes, nothing to take out of it", n), nil)
		}
		if resetsOnRemoval(args.OldInputs) {
			ctx, cancel := d.hookContext()
			defer cancel()
			d.reset(ctx, n)
		}
		return nil
	}
	if d.hasDeparted(n.Name) {
		return nil
	}
	return d.takeOut(args.URN, n, resetsOnRemoval(args.OldInputs))
}

// removalTurn waits until n may leave the cluster: as many at once as the
// rollout policy lets a change reach (RolloutPolicy.AtOnce). release ends
// the turn.
func (d *dayTwo) removalTurn(n rollout.Node) (release func(), err error) {
	turns := d.workerTurns
	if n.Role == rollout.ControlPlane {
		turns = d.controlPlaneTurn
	}
	waiting := time.NewTicker(progress.DefaultEvery)
	defer waiting.Stop()
	for {
		select {
		case turns <- struct{}{}:
			return func() { <-turns }, nil
		case <-d.deps.Context.Done():
			return nil, fmt.Errorf("unable to take %s out of the cluster: the run was cancelled while it waited for its turn", n)
		case <-waiting.C:
			_ = d.ctx.Log.Info(fmt.Sprintf("%s waits for its turn to leave the cluster (%d at once)", n, cap(turns)), nil)
		}
	}
}

// rejoin runs before a node's config apply is created. A node the last run had
// gets a new apply when its machine was replaced, and its stale etcd member
// would keep the new machine from joining: if the node does not answer as a
// configured member, its old member and Node are removed, behind a removal's
// checks. A node that answers is the running machine, left alone.
func (d *dayTwo) rejoin(args *pulumi.ResourceHookArgs) error {
	n, err := d.node(args.Name)
	if err != nil || !d.hadBefore(n) || d.deps.Destroy {
		return err
	}
	ctx, cancel := d.hookContext()
	defer cancel()
	ops, err := d.ops(ctx, args.URN)
	if err != nil {
		return err
	}
	if _, err := ops.API.Version(ctx, n.IP); err == nil {
		_ = d.ctx.Log.Info(fmt.Sprintf("%s answers as a configured node: its config is applied again, nothing to clean up", n), nil)
		return nil
	}
	release, err := d.removalTurn(n)
	if err != nil {
		return err
	}
	defer release()
	_ = d.ctx.Log.Info(fmt.Sprintf("%s is a new machine: its old etcd member and Kubernetes Node go before it joins", n), nil)
	if err := ops.Remove(ctx, n); err != nil {
		return fmt.Errorf("unable to clear the old machine of %s before the new one joins: %w", n, err)
	}
	d.mu.Lock()
	d.rejoining[n.Name] = true
	d.mu.Unlock()
	return nil
}

// rejoined runs after a node's config apply was created: for a new machine
// of a node the cluster had (see rejoin), it waits until the machine runs
// its config and is healthy (for a control plane: its etcd member with
// the others), and records the result as settle does, so the rollout does
// not go on past a replacement that did not come back.
func (d *dayTwo) rejoined(args *pulumi.ResourceHookArgs) error {
	n, err := d.node(args.Name)
	if err != nil {
		return err
	}
	d.mu.Lock()
	rejoining := d.rejoining[n.Name]
	d.mu.Unlock()
	if !rejoining {
		return nil
	}
	return d.settle(args)
}

// hadBefore reports whether the last run had the node.
func (d *dayTwo) hadBefore(n rollout.Node) bool {
	if d.previous == nil {
		return false
	}
	_, ok := d.previous.Roles[n.Name]
	return ok
}

// memberEnv is a membership's environment: the node it stands for,
// whether its removal resets it and how its volumes are encrypted (each
// only when set, so that the memberships of other stacks see no change).
// The next run reads the encryption back (Previous.AddLeaving): Talos never
// re-encrypts a volume, so a node keeps the one it was made with.
func memberEnv(n NodeSpec, reset bool, enc Encryption) pulumi.StringMap {
	env := pulumi.StringMap{
		"NODE_NAME": pulumi.String(n.Name),
		"NODE_IP":   pulumi.String(n.IP),
		"NODE_ROLE": pulumi.String(string(n.Role)),
	}
	if reset {
		env[resetEnv] = pulumi.String("1")
	}
	if enc != EncryptionNone {
		env[encryptionEnv] = pulumi.String(string(enc))
	}
	return env
}

// resetsOnRemoval reports whether a membership's removal resets its node.
func resetsOnRemoval(inputs resource.PropertyMap) bool {
	env := inputs["environment"]
	if !env.IsObject() {
		return false
	}
	v := env.ObjectValue()[resetEnv]
	return v.IsString() && v.StringValue() == "1"
}

// reset wipes a node that leaves (vps.onDestroy: reset). A node that does
// not answer is left as it is, with a warning: it is dead or already in
// maintenance mode, and the removal must not wait on it.
func (d *dayTwo) reset(ctx context.Context, n rollout.Node) {
	ops, err := d.ops(ctx, "")
	if err == nil {
		_ = d.ctx.Log.Info(fmt.Sprintf("resetting %s: its STATE and EPHEMERAL partitions are wiped, it reboots into maintenance mode", n), nil)
		err = ops.API.Reset(ctx, n.IP)
	}
	if err != nil {
		_ = d.ctx.Log.Warn(fmt.Sprintf("%s was not reset (%v): if the machine still runs Talos with this cluster's credentials, reset or reinstall it", n, err), nil)
	}
}

// memberNode reads the node back from a membership's inputs.
func memberNode(inputs resource.PropertyMap) (rollout.Node, error) {
	env := inputs["environment"]
	if !env.IsObject() {
		return rollout.Node{}, errors.New("its state has no environment")
	}
	get := func(k resource.PropertyKey) string {
		if v := env.ObjectValue()[k]; v.IsString() {
			return v.StringValue()
		}
		return ""
	}
	n := rollout.Node{Name: get("NODE_NAME"), IP: get("NODE_IP"), Role: rollout.Role(get("NODE_ROLE"))}
	if n.Name == "" || n.IP == "" || (n.Role != rollout.ControlPlane && n.Role != rollout.Worker) {
		return n, fmt.Errorf("its state names no node: %v", n)
	}
	return n, nil
}
