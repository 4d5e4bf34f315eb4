package proxmox_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/pveapi"
	"github.com/fluodata/talos-pulumi/internal/pveapi/pveapitest"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// said records what a hook says.
type said struct {
	mu   sync.Mutex
	info []string
}

func (s *said) Status(string)        {}
func (s *said) Info(msg string)      { s.mu.Lock(); s.info = append(s.info, msg); s.mu.Unlock() }
func (s *said) String() string       { s.mu.Lock(); defer s.mu.Unlock(); return strings.Join(s.info, "\n") }
func (s *said) logger() talos.Logger { return s }

// ejectHarness is the example cluster under mocks, its VMs on the fake
// Proxmox API with the Talos ISO in their CD-ROM, and its eject hook.
type ejectHarness struct {
	pve    *pveapitest.Server
	engine *componentstest.Engine
	hooks  *componentstest.Hooks
	log    *said
}

func newEjectHarness(t *testing.T, secret string) *ejectHarness {
	t.Helper()
	vms := map[int]*pveapitest.VM{}
	cfg, d := stacks.Load(stackstest.Example(t, stackstest.ProxmoxExample))
	require.NoError(t, d.Err())
	args := program.ProxmoxArgs(cfg)
	for _, n := range args.Nodes {
		vms[n.VMID] = &pveapitest.VM{Node: n.ProxmoxNode, Name: n.Name, Running: true, Config: map[string]string{"ide2": "local:iso/talos.iso,media=cdrom"}}
	}
	h := &ejectHarness{pve: pveapitest.New(t, vms), engine: &componentstest.Engine{}, hooks: &componentstest.Hooks{}, log: &said{}}
	api, err := pveapi.New(h.pve.URL, pveapitest.TokenID, secret,
		pveapi.Options{HTTPClient: h.pve.Client(), Backoff: 5 * time.Millisecond, CallTimeout: 2 * time.Second})
	require.NoError(t, err)
	err = pulumi.RunErr(func(ctx *pulumi.Context) error {
		_, err := proxmox.NewClusterWithDeps(ctx, "homelab", args, proxmox.Deps{Hooks: h.hooks, API: api, Talos: talos.Deps{
			Hooks: &componentstest.Hooks{}, Log: func(*pulumi.Context, pulumi.URN) talos.Logger { return h.log.logger() },
		}})
		return err
	}, pulumi.WithMocks("talos-cluster", "test", h.engine))
	require.NoError(t, err)
	return h
}

// eject runs the hook of a node's eject as the engine does before its
// create: with the inputs the program gave it.
func (h *ejectHarness) eject(t *testing.T, node string) (int, error) {
	t.Helper()
	r := h.engine.Named(t, componentstest.LocalCommand, "homelab-eject-iso-"+node)
	bound := h.hooks.On(r.Name)
	require.Len(t, bound, 1, "the eject runs in its before-create hook")
	require.Equal(t, "homelab"+proxmox.EjectHookSuffix, bound[0].Hook)
	require.Equal(t, talos.BeforeCreate, bound[0].Point, "a failed eject fails the create: the next up ejects again")
	vmid := int(h.engine.Named(t, componentstest.VM, "homelab-vm-"+node).Inputs["vmId"].NumberValue())
	// The mock engine resolves the VM's vmId output as its input.
	inputs := r.Inputs.Copy()
	env := inputs["environment"].ObjectValue()
	env["PVE_VMID"] = resource.NewStringProperty(strconv.Itoa(vmid))
	return vmid, bound[0].Fn(&pulumi.ResourceHookArgs{Name: r.Name, NewInputs: inputs})
}

func TestEjectEmptiesTheCDROMInTheProgram(t *testing.T) {
	t.Parallel()
	h := newEjectHarness(t, pveapitest.TokenSecret)
	for _, r := range h.engine.ByType(componentstest.LocalCommand) {
		if !strings.Contains(r.Name, "-eject-iso-") {
			continue
		}
		assert.False(t, r.Inputs.HasValue("create"), "%s runs no command on the operator's machine", r.Name)
		assert.False(t, r.Inputs.HasValue("stdin"), "%s carries no token", r.Name)
		assert.NotContains(t, fmt.Sprint(r.Inputs.Mappable()), pveapitest.TokenSecret)
	}
	vmid, err := h.eject(t, "cp-0")
	require.NoError(t, err)
	assert.Equal(t, "none,media=cdrom", h.pve.ConfigValue(vmid, "ide2"))
	require.Len(t, h.pve.ConfigUpdates(vmid), 1)
	assert.Equal(t, "ide2=none%2Cmedia%3Dcdrom", h.pve.ConfigUpdates(vmid)[0].Encode(), "the drive stays, empty")
	assert.Contains(t, h.log.String(), "ejected the Talos ISO from VM")
}

func TestEjectRetriesTransientErrors(t *testing.T) {
	t.Parallel()
	h := newEjectHarness(t, pveapitest.TokenSecret)
	h.pve.Fail500 = 2
	vmid, err := h.eject(t, "worker-0")
	require.NoError(t, err)
	assert.Equal(t, "none,media=cdrom", h.pve.ConfigValue(vmid, "ide2"))
}

func TestEjectFailsWithWhatTheTokenNeeds(t *testing.T) {
	t.Parallel()
	h := newEjectHarness(t, "11111111-2222-3333-4444-555555555555")
	vmid, err := h.eject(t, "cp-0")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "401")
	assert.Contains(t, err.Error(), "run 'pulumi up' again to retry")
	assert.Empty(t, h.pve.ConfigUpdates(vmid))

	h = newEjectHarness(t, pveapitest.TokenSecret)
	h.pve.Forbidden = true
	vmid, err = h.eject(t, "cp-0")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Permission check failed")
	assert.Contains(t, err.Error(), "VM.Config.CDROM on /vms/")
	assert.Equal(t, "local:iso/talos.iso,media=cdrom", h.pve.ConfigValue(vmid, "ide2"))
}

func TestEjectStopsWhenTheRunIsCancelled(t *testing.T) {
	t.Parallel()
	api := blockingAPI{}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := proxmox.Eject(ctx, api, &said{}, map[string]string{"PVE_NODE": "pve", "PVE_VMID": "110"})
	require.ErrorIs(t, err, context.Canceled)
	assert.NotContains(t, err.Error(), "pulumi up' again")

	err = proxmox.Eject(t.Context(), api, &said{}, map[string]string{"PVE_NODE": "pve"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "names no VM")
}

// blockingAPI ejects nothing until its context ends.
type blockingAPI struct{ proxmox.API }

func (blockingAPI) EjectCDROM(ctx context.Context, _ string, _ int, _ string) error {
	<-ctx.Done()
	return ctx.Err()
}
