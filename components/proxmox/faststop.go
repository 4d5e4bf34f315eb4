package proxmox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/internal/pveapi"
)

// FastStopHookName names the BeforeDelete hook in Pulumi state. It must stay
// the same forever: state written by earlier runs refers to it by name, and a
// destroy fails if the program does not register it.
const FastStopHookName = "talos-proxmox-hard-stop"

// Bounds of one hook run.
const (
	fastStopTimeout = 2 * time.Minute
	fastStopPoll    = 100 * time.Millisecond
)

// StopAPI is what the hook needs from the Proxmox API.
type StopAPI interface {
	VMStatus(ctx context.Context, node string, vmid int) (pveapi.VMStatus, error)
	StopVM(ctx context.Context, node string, vmid int) (string, error)
	WaitTask(ctx context.Context, node, upid string, poll time.Duration) error
}

// VMRef identifies the VM a hook run is about, from the resource's old state.
type VMRef struct {
	Node string
	VMID int
	Name string
	Tags []string
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
func HardStop(ctx context.Context, api StopAPI, vm VMRef, stackTag string, poll time.Duration) error {
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
	get := func(k resource.PropertyKey) resource.PropertyValue {
		v := outs[k]
		for v.IsSecret() {
			v = v.SecretValue().Element
		}
		return v
	}
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
func FastStopHook(api StopAPI, stackTag string, timeout, poll time.Duration) pulumi.ResourceHookFunction {
	return func(args *pulumi.ResourceHookArgs) error {
		vm, err := VMRefFromState(args.OldOutputs)
		if err != nil {
			return fmt.Errorf("unable to hard-stop %s before deleting it: %w", args.Name, err)
		}
		if !slices.Contains(vm.Tags, stackTag) {
			return fmt.Errorf("%s: refusing to stop it: its state lacks this stack's tag %q: %w", vm, stackTag, ErrForeignVM)
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return HardStop(ctx, api, vm, stackTag, poll)
	}
}

// Hooks binds the fast-stop hook to VMs. The SDK's mock engine cannot
// register hooks (it panics), so tests inject their own Hooks.
type Hooks interface {
	// BindFastStop registers the hook (once per run) and returns the option
	// that binds it to the VM named vm.
	BindFastStop(vm string, fn pulumi.ResourceHookFunction) (pulumi.ResourceOption, error)
}

// The seams' real implementations, checked at compile time.
var (
	_ StopAPI = (*pveapi.Client)(nil)
	_ Hooks   = (*SDKHooks)(nil)
)

// SDKHooks registers hooks with the Pulumi engine.
type SDKHooks struct {
	Ctx *pulumi.Context

	once sync.Once
	hook *pulumi.ResourceHook
	err  error
}

// BindFastStop implements Hooks.
func (h *SDKHooks) BindFastStop(_ string, fn pulumi.ResourceHookFunction) (pulumi.ResourceOption, error) {
	h.once.Do(func() {
		h.hook, h.err = h.Ctx.RegisterResourceHook(FastStopHookName, fn, nil)
	})
	if h.err != nil {
		return nil, fmt.Errorf("unable to register hook %s: %w", FastStopHookName, h.err)
	}
	return pulumi.ResourceHooks(&pulumi.ResourceHookBinding{BeforeDelete: []*pulumi.ResourceHook{h.hook}}), nil
}
