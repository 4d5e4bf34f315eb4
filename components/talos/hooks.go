package talos

import (
	"fmt"
	"sync"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// HookPoint is when a hook runs in a resource's step.
type HookPoint int

// The hook points the cluster uses.
const (
	BeforeUpdate HookPoint = iota
	AfterUpdate
	BeforeDelete
	BeforeCreate
	AfterCreate
)

func (p HookPoint) String() string {
	return [...]string{"before update", "after update", "before delete", "before create", "after create"}[p]
}

// Names of the day-2 hooks, after the cluster's name. Pulumi keeps a
// resource's hook names in state, and a later run (a destroy too) must
// register them again: they are fixed here once.
const (
	// GateHookSuffix: before a node's config apply updates it, the etcd
	// gate and the Talos upgrade of the node.
	GateHookSuffix = "-rollout-gate"
	// SettleHookSuffix: after a node's config apply, the wait until the
	// node is back and healthy.
	SettleHookSuffix = "-rollout-settle"
	// RemoveHookSuffix: before a node's membership is deleted, the reset
	// of a node whose removal resets it (see dayTwo.remove); the earlier
	// versions bound it to every membership to take the node out.
	RemoveHookSuffix = "-node-remove"
	// DepartHookSuffix: before the cluster's roster is updated, the nodes
	// that left the stack leave the cluster: their etcd members leave,
	// their Kubernetes Nodes are drained and deleted (see RosterSuffix).
	DepartHookSuffix = "-node-depart"
	// RejoinHookSuffix: before a node's config apply is created for a node
	// the last run had (its machine was replaced or wiped), the stale etcd
	// member and Kubernetes Node of the old machine go.
	RejoinHookSuffix = "-node-rejoin"
	// RejoinedHookSuffix: after that apply, the wait until the new machine
	// is back and healthy, before the rollout goes on.
	RejoinedHookSuffix = "-node-rejoined"
	// TaintsHookSuffix: before a worker's taints resource (TaintsSuffix)
	// is created or updated, its Kubernetes Node gets the taints (see
	// dayTwo.setTaints).
	TaintsHookSuffix = "-node-taints"
)

// Hooks binds resource hooks. The SDK's mock engine cannot register hooks
// (it panics), so tests bring their own (componentstest.Hooks).
type Hooks interface {
	// Bind registers the hook under name (once per run, the first fn
	// wins) and returns the option that binds it at point to the resource
	// named resource. Options of several Bind calls add up.
	Bind(name string, point HookPoint, resource string, fn pulumi.ResourceHookFunction) (pulumi.ResourceOption, error)
}

// SDKHooks registers hooks with the Pulumi engine.
type SDKHooks struct {
	Ctx *pulumi.Context

	mu    sync.Mutex
	hooks map[string]*pulumi.ResourceHook
}

var _ Hooks = (*SDKHooks)(nil)

// Bind implements Hooks.
func (h *SDKHooks) Bind(name string, point HookPoint, _ string, fn pulumi.ResourceHookFunction) (pulumi.ResourceOption, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hook, ok := h.hooks[name]
	if !ok {
		var err error
		hook, err = h.Ctx.RegisterResourceHook(name, fn, nil)
		if err != nil {
			return nil, fmt.Errorf("unable to register hook %s: %w", name, err)
		}
		if h.hooks == nil {
			h.hooks = map[string]*pulumi.ResourceHook{}
		}
		h.hooks[name] = hook
	}
	b := &pulumi.ResourceHookBinding{}
	switch point {
	case BeforeUpdate:
		b.BeforeUpdate = []*pulumi.ResourceHook{hook}
	case AfterUpdate:
		b.AfterUpdate = []*pulumi.ResourceHook{hook}
	case BeforeDelete:
		b.BeforeDelete = []*pulumi.ResourceHook{hook}
	case BeforeCreate:
		b.BeforeCreate = []*pulumi.ResourceHook{hook}
	case AfterCreate:
		b.AfterCreate = []*pulumi.ResourceHook{hook}
	}
	return pulumi.ResourceHooks(b), nil
}
