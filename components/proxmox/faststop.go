package proxmox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/pveapi"
)

// Names of the fast-stop hook in Pulumi state. Pulumi keeps a resource's
// hook names in its state, and deleting the resource (a destroy too) fails
// with `hook "<name>" was not registered` unless the program registers a
// hook of that name again: a name, once written to a state, stays.
const (
	// FastStopHookSuffix: a cluster's VMs carry a hook named after the
	// cluster (FastStopHookName), because the engine refuses a second hook
	// of a name, and a program may have any number of ProxmoxClusters.
	// The "-vm-" keeps it from ever being LegacyFastStopHookName.
	FastStopHookSuffix = "-vm-hard-stop"
	// LegacyFastStopHookName is the one name of the VMs' hook in the
	// versions before per-cluster names, still in the state of their
	// stacks until an up binds each VM to its cluster's hook: every
	// cluster registers it too, bound to nothing.
	LegacyFastStopHookName = "talos-proxmox-hard-stop"
)

// FastStopHookName is the name of the fast-stop hook of the VMs of the
// ProxmoxCluster named cluster.
func FastStopHookName(cluster string) string { return cluster + FastStopHookSuffix }

// vmInfix joins the cluster's name and a node's name into the name of the
// node's VM resource.
const vmInfix = "-vm-"

// Bounds of one hook run.
const (
	fastStopTimeout = 2 * time.Minute
	fastStopPoll    = 100 * time.Millisecond
)

// API is what the cluster's hooks need from the Proxmox API: the fast
// stop's status, stop and task calls, and the ISO eject.
type API interface {
	VMStatus(ctx context.Context, node string, vmid int) (pveapi.VMStatus, error)
	StopVM(ctx context.Context, node string, vmid int) (string, error)
	WaitTask(ctx context.Context, node, upid string, poll time.Duration) error
	EjectCDROM(ctx context.Context, node string, vmid int, iface string) error
}

// HostAPIs are the Proxmox APIs of a cluster's hosts by host name: "" for
// the proxmox input's, a hosts entry's name for the others.
type HostAPIs map[string]API

// VMRef identifies the VM a hook run is about, from the resource's old state.
type VMRef struct {
	Node string
	VMID int
	Name string
	Tags []string
	// Host is the hosts entry the VM's tag names (HostTag), "" for the
	// proxmox input's host.
	Host string
}

func (v VMRef) String() string { return fmt.Sprintf("VM %d (%s) on %s", v.VMID, v.Name, v.Node) }

// ErrForeignVM is returned for a VM that is not the one this stack created.
var ErrForeignVM = errors.New("not this stack's VM")

// HardStop makes sure the VM is stopped before the provider deletes it: a
// running VM is powered off (no guest shutdown; a pending shutdown task, say
// the provider's or one started by hand, is overruled where Proxmox can, see
// pveapi.Client.StopVM) and the Proxmox task awaited; a stopped or missing VM
// is success. It refuses a VM whose live name or tags say it is not this
// stack's (the id was reused, or state is stale).
func HardStop(ctx context.Context, api API, vm VMRef, stackTag string, poll time.Duration) error {
	st, err := api.VMStatus(ctx, vm.Node, vm.VMID)
	switch {
	case errors.Is(err, pveapi.ErrNotFound):
		return nil // already gone: the provider's delete will agree
	case err != nil:
		return fmt.Errorf("unable to read the status of %s: %w", vm, err)
	}
	if st.Name != vm.Name {
		return fmt.Errorf("%s: refusing to stop it: Proxmox calls it %q: %w", vm, st.Name, ErrForeignVM)
	}
	if !slices.Contains(pveapi.TagList(st.Tags), stackTag) {
		return fmt.Errorf("%s: refusing to stop it: it lacks this stack's tag %q (tags: %q): %w", vm, stackTag, st.Tags, ErrForeignVM)
	}
	if st.Status == "stopped" {
		return nil
	}
	upid, err := api.StopVM(ctx, vm.Node, vm.VMID)
	if errors.Is(err, pveapi.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("unable to hard-stop %s: %w", vm, err)
	}
	if err := api.WaitTask(ctx, vm.Node, upid, poll); err != nil {
		return fmt.Errorf("unable to hard-stop %s: %w", vm, err)
	}
	return nil
}

// VMRefFromState reads the VM's identity from its old outputs.
func VMRefFromState(outs resource.PropertyMap) (VMRef, error) {
	get := func(k resource.PropertyKey) resource.PropertyValue { return talos.PlainValue(outs[k]) }
	ref := VMRef{}
	if v := get("nodeName"); v.IsString() {
		ref.Node = v.StringValue()
	}
	if v := get("vmId"); v.IsNumber() {
		ref.VMID = int(v.NumberValue())
	}
	if v := get("name"); v.IsString() {
		ref.Name = v.StringValue()
	}
	if v := get("tags"); v.IsArray() {
		for _, t := range v.ArrayValue() {
			if t.IsString() {
				ref.Tags = append(ref.Tags, t.StringValue())
				if host, ok := strings.CutPrefix(t.StringValue(), HostTagPrefix); ok {
					ref.Host = host
				}
			}
		}
	}
	if ref.Node == "" || ref.VMID == 0 || ref.Name == "" {
		return ref, fmt.Errorf("the VM's state lacks nodeName, vmId or name (%v)", ref)
	}
	return ref, nil
}

// FastStopHook is the hook body: the VM from old state, checked against the
// stack tag in state as well as live, hard-stopped within the timeout.
func FastStopHook(api API, stackTag string, timeout, poll time.Duration) pulumi.ResourceHookFunction {
	return FastStopHookOnHosts(HostAPIs{"": api}, stackTag, timeout, poll)
}

// FastStopHookOnHosts is FastStopHook for VMs on several hosts: each is
// stopped through its host's API, which its host tag names. A VM of a host
// the program no longer knows (its entry went with its nodes) is left to
// the provider's own stop (stopOnDestroy: a power-off, slower, not stuck).
func FastStopHookOnHosts(apis HostAPIs, stackTag string, timeout, poll time.Duration) pulumi.ResourceHookFunction {
	return func(args *pulumi.ResourceHookArgs) error {
		vm, err := VMRefFromState(args.OldOutputs)
		if err != nil {
			return fmt.Errorf("unable to hard-stop %s before deleting it: %w", args.Name, err)
		}
		if !slices.Contains(vm.Tags, stackTag) {
			return fmt.Errorf("%s: refusing to stop it: its state lacks this stack's tag %q: %w", vm, stackTag, ErrForeignVM)
		}
		api, ok := apis[vm.Host]
		if !ok {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return HardStop(ctx, api, vm, stackTag, poll)
	}
}

// leaveThenStop is stop after the node of the VM leaves the cluster, when
// the VM is replaced (see talos.Leaver).
func leaveThenStop(leaver *talos.Leaver, cluster string, stop pulumi.ResourceHookFunction) pulumi.ResourceHookFunction {
	return func(args *pulumi.ResourceHookArgs) error {
		if node, ok := strings.CutPrefix(args.Name, cluster+vmInfix); ok {
			if err := leaver.Leave(node); err != nil {
				return err
			}
		}
		return stop(args)
	}
}

// Hooks binds the fast-stop hooks to VMs: the TalosCluster's seam, whose
// Bind registers a name once per Hooks. The SDK's mock engine cannot
// register hooks (it panics), so tests inject their own
// (componentstest.Hooks).
type Hooks = talos.Hooks

// The seams' real implementations, checked at compile time.
var (
	_ API   = (*pveapi.Client)(nil)
	_ Hooks = (*talos.SDKHooks)(nil)
)

// bindFastStop registers the cluster's fast-stop hook and the earlier
// versions' name (bound to nothing, for the VMs whose state still names it),
// and returns the option that binds the cluster's hook to the VM named vm; with
// bind false (Deps.FastStop) no VM is bound. Another cluster's registration of
// the earlier name is refused, which fails nothing
// (docs/decisions/0004-upstream-behaviours.md#hook-registration-when-clusters-share-a-program).
func bindFastStop(hooks Hooks, cluster string, bind bool, fn pulumi.ResourceHookFunction) (func(vm string) (pulumi.ResourceOption, error), error) {
	own := cluster + vmInfix
	legacy := func(args *pulumi.ResourceHookArgs) error {
		if !strings.HasPrefix(args.Name, own) {
			return nil
		}
		return fn(args)
	}
	if _, err := hooks.Bind(LegacyFastStopHookName, talos.BeforeDelete, "", legacy); err != nil {
		return nil, err
	}
	if !bind {
		if _, err := hooks.Bind(FastStopHookName(cluster), talos.BeforeDelete, "", fn); err != nil {
			return nil, err
		}
		return func(string) (pulumi.ResourceOption, error) { return pulumi.Composite(), nil }, nil
	}
	return func(vm string) (pulumi.ResourceOption, error) {
		return hooks.Bind(FastStopHookName(cluster), talos.BeforeDelete, vm, fn)
	}, nil
}
