package proxmox

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/pveapi"
	"github.com/fluodata/talos-pulumi/internal/pveapi/pveapitest"
)

const ourTags = "cluster-homelab;stack-proxmox-homelab;talos"

var ourTag = StackTag("proxmox-homelab")

func client(t testing.TB, s *pveapitest.Server) *pveapi.Client {
	t.Helper()
	c, err := pveapi.New(s.URL, pveapitest.TokenID, pveapitest.TokenSecret,
		pveapi.Options{HTTPClient: s.Client(), Backoff: 5 * time.Millisecond, CallTimeout: 2 * time.Second})
	require.NoError(t, err)
	return c
}

// oldOutputs is a VM's state as the provider records it.
func oldOutputs(vmid int, name string, tags ...string) resource.PropertyMap {
	if tags == nil {
		tags = []string{"cluster-homelab", "stack-proxmox-homelab", "talos"}
	}
	var ts []resource.PropertyValue
	for _, t := range tags {
		ts = append(ts, resource.NewStringProperty(t))
	}
	return resource.PropertyMap{
		"nodeName": resource.NewStringProperty("pve"),
		"vmId":     resource.NewNumberProperty(float64(vmid)),
		"name":     resource.NewStringProperty(name),
		"tags":     resource.NewArrayProperty(ts),
	}
}

func hook(t testing.TB, s *pveapitest.Server, timeout time.Duration) pulumi.ResourceHookFunction {
	return FastStopHook(client(t, s), ourTag, timeout, 10*time.Millisecond)
}

func TestHardStopRunningVMOnceAndWaits(t *testing.T) {
	t.Parallel()
	const latency = 150 * time.Millisecond
	s := pveapitest.New(t, map[int]*pveapitest.VM{110: {Node: "pve", Name: "cp-0", Tags: ourTags, Running: true}})
	s.TaskLatency = latency
	start := time.Now()
	require.NoError(t, hook(t, s, time.Minute)(&pulumi.ResourceHookArgs{Name: "homelab-vm-cp-0", OldOutputs: oldOutputs(110, "cp-0")}))
	assert.GreaterOrEqual(t, time.Since(start), latency, "the hook waits for the stop task")
	assert.Equal(t, 1, s.StopCalls(110))
	assert.False(t, s.Running(110))
}

func TestHardStopNoOpCases(t *testing.T) {
	t.Parallel()
	s := pveapitest.New(t, map[int]*pveapitest.VM{120: {Node: "pve", Name: "worker-0", Tags: ourTags}})
	h := hook(t, s, time.Minute)
	require.NoError(t, h(&pulumi.ResourceHookArgs{OldOutputs: oldOutputs(120, "worker-0")}), "stopped VM")
	assert.Zero(t, s.StopCalls(120), "a stopped VM is not stopped again")
	require.NoError(t, h(&pulumi.ResourceHookArgs{OldOutputs: oldOutputs(999, "gone")}), "a deleted VM is success")
}

func TestHardStopRefusesForeignVMs(t *testing.T) {
	t.Parallel()
	s := pveapitest.New(t, map[int]*pveapitest.VM{
		110: {Node: "pve", Name: "nas", Tags: ourTags, Running: true},
		111: {Node: "pve", Name: "cp-1", Tags: "talos;stack-other", Running: true},
		112: {Node: "pve", Name: "cp-2", Tags: ourTags, Running: true},
	})
	h := hook(t, s, time.Minute)
	err := h(&pulumi.ResourceHookArgs{OldOutputs: oldOutputs(110, "cp-0")})
	require.ErrorIs(t, err, ErrForeignVM)
	assert.Contains(t, err.Error(), `VM 110 (cp-0) on pve: refusing to stop it: Proxmox calls it "nas"`)
	err = h(&pulumi.ResourceHookArgs{OldOutputs: oldOutputs(111, "cp-1")})
	require.ErrorIs(t, err, ErrForeignVM)
	assert.Contains(t, err.Error(), `lacks this stack's tag "stack-proxmox-homelab"`)
	err = h(&pulumi.ResourceHookArgs{OldOutputs: oldOutputs(112, "cp-2", "talos")})
	require.ErrorIs(t, err, ErrForeignVM, "state of another stack")
	for _, id := range []int{110, 111, 112} {
		assert.Zero(t, s.StopCalls(id), "VM %d untouched", id)
	}
}

func TestHardStopRetriesTransientErrors(t *testing.T) {
	t.Parallel()
	s := pveapitest.New(t, map[int]*pveapitest.VM{110: {Node: "pve", Name: "cp-0", Tags: ourTags, Running: true}})
	s.Fail500 = 2
	require.NoError(t, hook(t, s, time.Minute)(&pulumi.ResourceHookArgs{OldOutputs: oldOutputs(110, "cp-0")}))
	assert.Equal(t, 1, s.StopCalls(110))
	assert.False(t, s.Running(110))
}

func TestHardStopPermanentErrorsAreClear(t *testing.T) {
	t.Parallel()
	s := pveapitest.New(t, map[int]*pveapitest.VM{110: {Node: "pve", Name: "cp-0", Tags: ourTags, Running: true}})
	s.Forbidden = true
	err := hook(t, s, time.Minute)(&pulumi.ResourceHookArgs{OldOutputs: oldOutputs(110, "cp-0")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unable to hard-stop VM 110 (cp-0) on pve")
	assert.Contains(t, err.Error(), "Permission check failed (/vms/110, VM.PowerMgmt)")

	locked := pveapitest.New(t, map[int]*pveapitest.VM{110: {Node: "pve", Name: "cp-0", Tags: ourTags, Running: true, Locked: true}})
	err = hook(t, locked, time.Minute)(&pulumi.ResourceHookArgs{OldOutputs: oldOutputs(110, "cp-0")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unable to hard-stop VM 110 (cp-0) on pve: proxmox task")
	assert.Contains(t, err.Error(), "can't lock file '/var/lock/qemu-server/lock-110.conf' - got timeout")

	err = hook(t, s, time.Minute)(&pulumi.ResourceHookArgs{Name: "homelab-vm-x", OldOutputs: resource.PropertyMap{}})
	assert.ErrorContains(t, err, "unable to hard-stop homelab-vm-x before deleting it: the VM's state lacks")
}

// A guest that ignored a graceful shutdown leaves the shutdown task holding
// the VM's lock; the hard stop overrules it instead of failing on the lock.
func TestHardStopOverrulesPendingShutdown(t *testing.T) {
	t.Parallel()
	s := pveapitest.New(t, map[int]*pveapitest.VM{110: {Node: "pve", Name: "cp-0", Tags: ourTags, Running: true, ShutdownPending: true}})
	require.NoError(t, hook(t, s, time.Minute)(&pulumi.ResourceHookArgs{OldOutputs: oldOutputs(110, "cp-0")}))
	assert.Equal(t, 1, s.StopCalls(110))
	assert.False(t, s.Running(110))
	assert.False(t, s.ShutdownPending(110), "the shutdown task was aborted")
	forms := s.StopForms(110)
	require.Len(t, forms, 1)
	assert.Equal(t, "1", forms[0].Get("overrule-shutdown"))
}

// Proxmox VE before 8.2 refuses overrule-shutdown, and every version refuses
// it for HA-managed VMs: the stop is sent again without it.
func TestHardStopWhereOverruleIsRefused(t *testing.T) {
	t.Parallel()
	old := pveapitest.New(t, map[int]*pveapitest.VM{110: {Node: "pve", Name: "cp-0", Tags: ourTags, Running: true}})
	old.OldPVE = true
	require.NoError(t, hook(t, old, time.Minute)(&pulumi.ResourceHookArgs{OldOutputs: oldOutputs(110, "cp-0")}))
	assert.Equal(t, 1, old.StopCalls(110), "one stop accepted")
	assert.Len(t, old.StopForms(110), 2, "the first, with overrule-shutdown, refused")
	assert.False(t, old.Running(110))

	ha := pveapitest.New(t, map[int]*pveapitest.VM{110: {Node: "pve", Name: "cp-0", Tags: ourTags, Running: true, HA: true}})
	require.NoError(t, hook(t, ha, time.Minute)(&pulumi.ResourceHookArgs{OldOutputs: oldOutputs(110, "cp-0")}))
	assert.Equal(t, 1, ha.StopCalls(110))
	assert.Len(t, ha.StopForms(110), 2)
	assert.False(t, ha.Running(110))

	// Without overrule a pending shutdown still wins: the lock error, named.
	stuck := pveapitest.New(t, map[int]*pveapitest.VM{110: {Node: "pve", Name: "cp-0", Tags: ourTags, Running: true, ShutdownPending: true}})
	stuck.OldPVE = true
	err := hook(t, stuck, time.Minute)(&pulumi.ResourceHookArgs{OldOutputs: oldOutputs(110, "cp-0")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unable to hard-stop VM 110 (cp-0) on pve: proxmox task")
	assert.Contains(t, err.Error(), "can't lock file '/var/lock/qemu-server/lock-110.conf' - got timeout")
	assert.True(t, stuck.Running(110))
}

func TestHardStopHonoursDeadline(t *testing.T) {
	t.Parallel()
	s := pveapitest.New(t, map[int]*pveapitest.VM{110: {Node: "pve", Name: "cp-0", Tags: ourTags, Running: true}})
	s.TaskLatency = time.Hour
	start := time.Now()
	err := hook(t, s, 100*time.Millisecond)(&pulumi.ResourceHookArgs{OldOutputs: oldOutputs(110, "cp-0")})
	require.Error(t, err)
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	assert.Contains(t, err.Error(), "VM 110 (cp-0) on pve")
	assert.Less(t, time.Since(start), 10*time.Second)
}

func TestHardStopTenVMsInParallel(t *testing.T) {
	t.Parallel()
	vms := map[int]*pveapitest.VM{}
	for i := range 10 {
		vms[200+i] = &pveapitest.VM{Node: "pve", Name: "w-" + string(rune('0'+i)), Tags: ourTags, Running: true}
	}
	s := pveapitest.New(t, vms)
	s.TaskLatency = 50 * time.Millisecond
	h := hook(t, s, time.Minute)
	errs := runParallel(h, vms)
	for id, err := range errs {
		require.NoError(t, err, "VM %d", id)
		assert.Equal(t, 1, s.StopCalls(id))
		assert.False(t, s.Running(id))
	}
}

// runParallel runs the hook for every VM at once, as the engine does for
// independent deletes.
func runParallel(h pulumi.ResourceHookFunction, vms map[int]*pveapitest.VM) map[int]error {
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := map[int]error{}
	for id, vm := range vms {
		wg.Go(func() {
			err := h(&pulumi.ResourceHookArgs{OldOutputs: oldOutputs(id, vm.Name)})
			mu.Lock()
			errs[id] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	return errs
}

// BenchmarkHardStop reports hook time / task latency (goal: at most 1.2) for
// one VM and for ten VMs stopped in parallel.
func BenchmarkHardStop(b *testing.B) {
	const latency = 500 * time.Millisecond
	for _, n := range []int{1, 10} {
		b.Run(map[int]string{1: "one-vm", 10: "ten-vms-parallel"}[n], func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				b.StopTimer()
				vms := map[int]*pveapitest.VM{}
				for i := range n {
					vms[300+i] = &pveapitest.VM{Node: "pve", Name: "vm-" + string(rune('a'+i)), Tags: ourTags, Running: true}
				}
				s := pveapitest.New(b, vms)
				s.TaskLatency = latency
				h := FastStopHook(client(b, s), ourTag, time.Minute, fastStopPoll)
				b.StartTimer()
				start := time.Now()
				for id, err := range runParallel(h, vms) {
					if err != nil {
						b.Fatalf("VM %d: %v", id, err)
					}
				}
				total += time.Since(start)
			}
			b.ReportMetric(float64(total)/float64(b.N)/float64(latency), "hook/latency")
		})
	}
}
