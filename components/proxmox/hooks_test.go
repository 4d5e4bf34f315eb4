package proxmox_test

import (
	"fmt"
	"testing"
	"time"

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

// Hook names are kept in state: these must never change.
func TestFastStopHookNames(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "talos-proxmox-hard-stop", proxmox.LegacyFastStopHookName)
	assert.Equal(t, "lab-vm-hard-stop", proxmox.FastStopHookName("lab"))
	// No cluster's name gives the earlier versions' name.
	assert.NotEqual(t, proxmox.LegacyFastStopHookName, proxmox.FastStopHookName("talos-proxmox"))
}

// A ProxmoxCluster as the package builds it (NewCluster, no
// Deps.FastStop): no VM carries a delete hook, so a program that drops the
// cluster can delete its VMs (the provider stops them, stopOnDestroy);
// both fast-stop names are still registered, for VMs whose state (of an
// earlier version) names one.
func TestWithoutFastStopNoVMCarriesAHook(t *testing.T) {
	t.Parallel()
	cfg, d := stacks.Load(stackstest.Example(t, stackstest.ProxmoxExample))
	require.NoError(t, d.Err())
	hooks := &componentstest.Hooks{}
	e := &componentstest.Engine{}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		_, err := proxmox.NewClusterWithDeps(ctx, "homelab", program.ProxmoxArgs(cfg), proxmox.Deps{Hooks: hooks, Talos: talos.Deps{Hooks: &componentstest.Hooks{}}})
		return err
	}, pulumi.WithMocks("talos-cluster", "test", e))
	require.NoError(t, err)
	vms := e.ByType(componentstest.VM)
	require.Len(t, vms, 3)
	for _, vm := range vms {
		assert.Empty(t, hooks.On(vm.Name), vm.Name)
		assert.True(t, vm.Inputs["stopOnDestroy"].BoolValue(), "%s: the provider powers it off", vm.Name)
	}
	var registered []string
	for _, b := range hooks.Bindings {
		if b.Point != talos.BeforeDelete {
			continue // the ISO ejects' before-create hooks
		}
		assert.Empty(t, b.Resource, "%s bound to nothing", b.Hook)
		registered = append(registered, b.Hook)
	}
	assert.ElementsMatch(t, []string{proxmox.LegacyFastStopHookName, proxmox.FastStopHookName("homelab")}, registered)

	// Instead, each VM depends on a record of its placement, whose
	// update (a new vmId or Proxmox node: a new VM) takes the node out of
	// the cluster first.
	for _, vm := range vms {
		node := vm.Inputs["name"].StringValue()
		record := e.Named(t, componentstest.LocalCommand, "homelab"+proxmox.PlacementInfix+node)
		assert.True(t, e.After(vm, record), "%s is replaced after its record's update", vm.Name)
		bound := hooks.On(record.Name)
		require.Len(t, bound, 1, record.Name)
		assert.Equal(t, "homelab"+proxmox.PlacementHookSuffix, bound[0].Hook)
		assert.Equal(t, talos.BeforeUpdate, bound[0].Point)
	}
}

// A placement record changes with what replaces the VM (its vmId, Proxmox
// node and addressing for bpg, its BIOS for the component), and not with
// what changes in place (its cores): a node leaves only for a new VM.
func TestAPlacementRecordChangesOnlyWithANewVM(t *testing.T) {
	t.Parallel()
	placementOf := func(edit func(*proxmox.ClusterArgs)) string {
		cfg, d := stacks.Load(stackstest.Example(t, stackstest.ProxmoxExample))
		require.NoError(t, d.Err())
		args := program.ProxmoxArgs(cfg)
		if edit != nil {
			edit(args)
		}
		e := &componentstest.Engine{}
		err := pulumi.RunErr(func(ctx *pulumi.Context) error {
			_, err := proxmox.NewClusterWithDeps(ctx, "homelab", args, proxmox.Deps{Hooks: &componentstest.Hooks{}, Talos: talos.Deps{Hooks: &componentstest.Hooks{}}})
			return err
		}, pulumi.WithMocks("talos-cluster", "test", e))
		require.NoError(t, err)
		env := e.Named(t, componentstest.LocalCommand, "homelab"+proxmox.PlacementInfix+"worker-0").Inputs["environment"]
		return env.ObjectValue()["PLACEMENT"].StringValue()
	}
	was := placementOf(nil)
	assert.Equal(t, "proxmox node pve, vmId 120, bios seabios, addressing dhcp-reservation", was)
	for change, edit := range map[string]func(*proxmox.ClusterArgs){
		"vmId":        func(a *proxmox.ClusterArgs) { a.Nodes[1].VMID = 130 },
		"proxmoxNode": func(a *proxmox.ClusterArgs) { a.Nodes[1].ProxmoxNode = "pve2" },
		"bios":        func(a *proxmox.ClusterArgs) { a.Proxmox.BIOS = "ovmf" },
		"addressing":  func(a *proxmox.ClusterArgs) { a.Proxmox.Addressing = proxmox.AddressingStatic },
	} {
		assert.NotEqual(t, was, placementOf(edit), change)
	}
	assert.Equal(t, was, placementOf(func(a *proxmox.ClusterArgs) { a.Nodes[1].Cores = 8 }), "cores change in place")
}

// Two ProxmoxClusters in one program, sharing one Hooks: each VM carries
// the hook of its own cluster, under a name of its own, and nothing else;
// the earlier versions' name is registered too, bound to nothing, and
// stops the VMs of the cluster that registered it first (the one cluster
// of the stacks whose state names it), leaving other VMs alone.
func TestTwoClustersBindHooksOfTheirOwn(t *testing.T) {
	t.Parallel()
	const tags = "cluster-%s;stack-test;talos"
	pve := pveapitest.New(t, map[int]*pveapitest.VM{
		110: {Node: "pve", Name: "cp-0", Tags: fmt.Sprintf(tags, "homelab"), Running: true},
		120: {Node: "pve", Name: "worker-0", Tags: fmt.Sprintf(tags, "homelab"), Running: true},
		210: {Node: "pve", Name: "cp-0", Tags: fmt.Sprintf(tags, "lab2"), Running: true},
		220: {Node: "pve", Name: "worker-0", Tags: fmt.Sprintf(tags, "lab2"), Running: true},
	})
	api, err := pveapi.New(pve.URL, pveapitest.TokenID, pveapitest.TokenSecret,
		pveapi.Options{HTTPClient: pve.Client(), Backoff: 5 * time.Millisecond, CallTimeout: 2 * time.Second})
	require.NoError(t, err)
	cfg, d := stacks.Load(stackstest.Example(t, stackstest.ProxmoxExample))
	require.NoError(t, d.Err())
	args := func(cluster string, vmidOffset int) *proxmox.ClusterArgs {
		a := program.ProxmoxArgs(cfg)
		a.Cluster.Name = cluster
		for i := range a.Nodes {
			a.Nodes[i].VMID += vmidOffset
		}
		return a
	}

	hooks := &componentstest.Hooks{}
	e := &componentstest.Engine{}
	err = pulumi.RunErr(func(ctx *pulumi.Context) error {
		deps := proxmox.Deps{Hooks: hooks, API: api, Talos: talos.Deps{Hooks: &componentstest.Hooks{}}, FastStop: true}
		if _, err := proxmox.NewClusterWithDeps(ctx, "homelab", args("homelab", 0), deps); err != nil {
			return err
		}
		_, err := proxmox.NewClusterWithDeps(ctx, "lab2", args("lab2", 100), deps)
		return err
	}, pulumi.WithMocks("talos-cluster", "test", e))
	require.NoError(t, err)

	vms := e.ByType(componentstest.VM)
	require.Len(t, vms, 6)
	for _, vm := range vms {
		var bound []string
		for _, b := range hooks.On(vm.Name) {
			bound = append(bound, fmt.Sprintf("%s %s", b.Point, b.Hook))
		}
		cluster := map[bool]string{true: "homelab", false: "lab2"}[vm.Inputs["vmId"].NumberValue() < 200]
		assert.Equal(t, []string{"before delete " + cluster + "-vm-hard-stop"}, bound, "%s", vm.Name)
	}
	var legacy []componentstest.Binding
	for _, b := range hooks.Bindings {
		if b.Hook == proxmox.LegacyFastStopHookName {
			legacy = append(legacy, b)
		}
	}
	// Each cluster asks for it, bound to nothing; a Hooks registers a name
	// once, with the first function (the provider's tests register them
	// with a stand-in of the engine's registry).
	require.Len(t, legacy, 2)
	for _, b := range legacy {
		assert.Empty(t, b.Resource, "bound to nothing")
		assert.Equal(t, talos.BeforeDelete, b.Point)
	}

	// Each hook as the engine runs it for a delete: found by the name in
	// the VM's state, given the VM's name and old outputs (its inputs
	// here).
	run := func(hook, vm string) error {
		r := e.Named(t, componentstest.VM, vm)
		fn := hooks.Hook(hook)
		require.NotNil(t, fn, hook)
		return fn(&pulumi.ResourceHookArgs{Name: r.Name, OldOutputs: r.Inputs})
	}
	require.NoError(t, run("lab2-vm-hard-stop", "lab2-vm-cp-0"))
	assert.Equal(t, 1, pve.StopCalls(210))
	require.NoError(t, run("homelab-vm-hard-stop", "homelab-vm-cp-0"))
	assert.Equal(t, 1, pve.StopCalls(110))
	// A VM of the earlier versions: its state names the earlier hook.
	require.NoError(t, run(proxmox.LegacyFastStopHookName, "homelab-vm-worker-0"))
	assert.Equal(t, 1, pve.StopCalls(120))
	assert.False(t, pve.Running(120))
	// Another cluster's VM is not the registering cluster's to stop (its
	// API may be another Proxmox's): the provider's own stop does it.
	require.NoError(t, run(proxmox.LegacyFastStopHookName, "lab2-vm-worker-0"))
	assert.Zero(t, pve.StopCalls(220))
	assert.True(t, pve.Running(220))
}
