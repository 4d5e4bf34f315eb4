package tests

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/internals"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/image"
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/pveapi"
	"github.com/fluodata/talos-pulumi/internal/pveapi/pveapitest"
	"github.com/fluodata/talos-pulumi/internal/testkit/factorytest"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/program/programtest"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// deploy runs the whole program under the mock engine and awaits every
// stack output.
func deploy(t testing.TB, src stacks.Source) (*componentstest.Engine, map[string]internals.UnsafeAwaitOutputResult) {
	t.Helper()
	e, outs, _ := deployWithHooks(t, src)
	return e, outs
}

func deployWithHooks(t testing.TB, src stacks.Source) (*componentstest.Engine, map[string]internals.UnsafeAwaitOutputResult, *componentstest.Hooks) {
	t.Helper()
	return deployWith(t, src, program.Options{})
}

// deployWith runs the program as the stack proxmox-homelab (the name the
// example's tags and MACs are derived from) with the given seams.
func deployWith(t testing.TB, src stacks.Source, o program.Options) (*componentstest.Engine, map[string]internals.UnsafeAwaitOutputResult, *componentstest.Hooks) {
	t.Helper()
	e, outs, hooks, err := programtest.Run(t, src, "proxmox-homelab", o)
	require.NoError(t, err)
	return e, outs, hooks
}

// edit changes one top-level config object of src (a copy).
func edit(t testing.TB, src stacks.Source, key string, f func(m map[string]any)) stacks.Source {
	t.Helper()
	src.Values = maps.Clone(src.Values)
	full := "talos-cluster:" + key
	m := map[string]any{}
	if raw, ok := src.Values[full]; ok {
		require.NoError(t, json.Unmarshal([]byte(raw), &m))
	}
	f(m)
	raw, err := json.Marshal(m)
	require.NoError(t, err)
	src.Values[full] = string(raw)
	return src
}

func obj(p resource.PropertyValue, key string) resource.PropertyValue {
	return p.ObjectValue()[resource.PropertyKey(key)]
}

func strs(p resource.PropertyValue) []string {
	var out []string
	for _, v := range p.ArrayValue() {
		out = append(out, v.StringValue())
	}
	return out
}

func TestProxmoxExampleGraph(t *testing.T) {
	t.Parallel()
	e, outs := deploy(t, stackstest.Example(t, stackstest.ProxmoxExample))

	provider := e.One(t, componentstest.PVEProvider)
	assert.Equal(t, "https://192.168.122.70:8006/", provider.Inputs["endpoint"].StringValue())
	assert.True(t, provider.Inputs["apiToken"].IsSecret(), "API token is a secret")
	assert.False(t, provider.Inputs["insecure"].BoolValue())

	isos := e.ByType(componentstest.Download)
	require.Len(t, isos, 1, "one Proxmox node hosts every VM: one ISO")
	iso := isos[0]
	wantISO := proxmox.ISOFileName(proxmox.ISOFile{
		Stack: "proxmox-homelab", Cluster: "homelab", TalosVersion: "v1.13.9", SchematicID: componentstest.SchematicID, Platform: "metal",
	})
	assert.Regexp(t, `^talos-v1\.13\.9-`+componentstest.SchematicID[:12]+`-metal-proxmox-homelab-homelab-[0-9a-f]{8}-amd64\.iso$`, wantISO)
	assert.Equal(t, wantISO, iso.Inputs["fileName"].StringValue())
	assert.Equal(t, "pve", iso.Inputs["nodeName"].StringValue())
	assert.Equal(t, "https://factory.talos.dev/image/"+componentstest.SchematicID+"/v1.13.9/metal-amd64.iso", iso.Inputs["url"].StringValue())
	assert.False(t, iso.Inputs["overwrite"].BoolValue())
	assert.True(t, iso.Inputs["overwriteUnmanaged"].BoolValue(), "a file of this stack's ISO name in the way is downloaded again, not an error")
	assert.False(t, iso.RetainOnDelete, "destroy deletes the ISO by default")

	schematic := e.One(t, componentstest.Schematic).Inputs["schematic"].StringValue()
	assert.Contains(t, schematic, "siderolabs/qemu-guest-agent")

	dhcp := e.One(t, componentstest.RemoteCommand)
	stdin := dhcp.Inputs["stdin"].StringValue()

	want := map[string]struct {
		id, ip       string
		cores, mem   float64
		disks        []float64
		proxmoxNode  string
		controlPlane bool
	}{
		"cp-0":     {"110", "10.10.0.10", 2, 4096, []float64{20}, "pve", true},
		"worker-0": {"120", "10.10.0.20", 4, 8192, []float64{20, 20}, "pve", false},
		"worker-1": {"121", "10.10.0.21", 4, 8192, []float64{20, 20}, "pve", false},
	}
	vms := e.ByType(componentstest.VM)
	require.Len(t, vms, len(want))
	for _, v := range vms {
		name := v.Inputs["name"].StringValue()
		w, ok := want[name]
		require.True(t, ok, name)
		in := v.Inputs
		assert.Equal(t, []string{"bios", "tpmState"}, v.ReplaceOnChanges, "%s: a new BIOS is a new VM (bpg would change it in place, and the installed Talos would not boot); so is a TPM added or dropped", name)
		assert.Equal(t, w.id, fmt.Sprint(in["vmId"].NumberValue()), name)
		assert.Equal(t, w.proxmoxNode, in["nodeName"].StringValue(), name)
		assert.Equal(t, "host", obj(in["cpu"], "type").StringValue(), name)
		assert.Equal(t, w.cores, obj(in["cpu"], "cores").NumberValue(), name)
		assert.Equal(t, w.mem, obj(in["memory"], "dedicated").NumberValue(), name)
		var sizes []float64
		for i, d := range in["disks"].ArrayValue() {
			sizes = append(sizes, obj(d, "size").NumberValue())
			assert.Equal(t, []string{"scsi0", "scsi1"}[i], obj(d, "interface").StringValue(), name)
			assert.Equal(t, "local-lvm", obj(d, "datastoreId").StringValue(), name)
		}
		assert.Equal(t, w.disks, sizes, name)
		assert.Equal(t, []string{"scsi0", "ide2"}, strs(in["bootOrders"]), "%s: disk first, so only an empty disk falls through to the ISO", name)
		assert.Equal(t, "local:iso/"+wantISO, obj(in["cdrom"], "fileId").StringValue(), name)
		assert.Equal(t, "ide2", obj(in["cdrom"], "interface").StringValue(), "%s: q35 has no ide3", name)
		assert.Equal(t, "q35", in["machine"].StringValue())
		assert.True(t, obj(in["agent"], "enabled").BoolValue(), "%s: the image has the guest agent", name)
		nic := in["networkDevices"].ArrayValue()
		require.Len(t, nic, 1)
		assert.Equal(t, "vmbr1", obj(nic[0], "bridge").StringValue(), name)
		assert.Equal(t, "virtio", obj(nic[0], "model").StringValue(), name)
		mac := proxmox.DeriveMAC("proxmox-homelab", "homelab", name)
		assert.Equal(t, mac, obj(nic[0], "macAddress").StringValue(), name)
		assert.Contains(t, stdin, "dhcp-host="+mac+","+w.ip+","+name+"\n", "reservation of %s", name)
		tags := strs(in["tags"])
		assert.True(t, slices.IsSorted(tags), "%s: tags sorted, as Proxmox stores them: %v", name, tags)
		assert.Contains(t, tags, "stack-proxmox-homelab")
		assert.True(t, in["stopOnDestroy"].BoolValue(), name)
		assert.LessOrEqual(t, in["timeoutShutdownVm"].NumberValue(), 60.0, name)
		assert.LessOrEqual(t, in["timeoutStopVm"].NumberValue(), 60.0, name)
		assert.False(t, in["rebootAfterUpdate"].BoolValue(), name)
		assert.True(t, in["onBoot"].BoolValue(), name)
		assert.Nil(t, in["initialization"].V, "%s: no cloud-init drive with DHCP reservations", name)
		assert.Subset(t, v.IgnoreChanges, []string{"cdrom", "disks[0].speed"}, name)
		assert.True(t, provider.Is(v.Provider), "%s uses the explicit provider, not a default one: %s", name, v.Provider)

		assert.True(t, e.After(v, iso), "%s after its ISO", name)
		assert.True(t, e.After(v, dhcp), "%s after its DHCP reservation", name)
		apply := e.Named(t, componentstest.Apply, "homelab-apply-"+name)
		assert.True(t, e.After(apply, v), "Talos apply of %s after its VM", name)
		assert.True(t, strings.HasSuffix(apply.DeletedWith, "::homelab-vm-"+name), "apply of %s goes with its VM", name)
		eject := e.Named(t, componentstest.LocalCommand, "homelab-eject-iso-"+name)
		assert.True(t, e.After(eject, v))
		for _, rel := range e.ByType(componentstest.Release) {
			assert.True(t, e.After(eject, rel), "ISO of %s ejected only after the cluster is up (%s)", name, rel.Name)
		}
		assert.False(t, eject.Inputs.HasValue("create"), "the eject runs in the program (its hook), no curl")
		assert.False(t, eject.Inputs.HasValue("stdin"), "no token in the eject's inputs")
		assert.Equal(t, w.id, eject.Inputs["environment"].ObjectValue()["PVE_VMID"].StringValue())
	}
	for _, rel := range e.ByType(componentstest.Release) {
		assert.True(t, strings.HasSuffix(rel.DeletedWith, "::homelab-vm-cp-0"), "%s goes with the first control plane", rel.Name)
	}
	for _, a := range e.ByType(componentstest.Apply) {
		assert.Contains(t, strings.Join(strs(a.Inputs["configPatches"]), "\n"),
			"factory.talos.dev/metal-installer/"+componentstest.SchematicID+":v1.13.9", "installer from the same schematic")
	}
	for _, r := range e.Created() {
		if r.Type != componentstest.ProxmoxCluster {
			assert.Contains(t, r.Parent, "ProxmoxCluster", "%s %s is inside the component", r.Type, r.Name)
		}
	}

	assert.True(t, outs["kubeconfig"].Secret)
	assert.True(t, outs["talosconfig"].Secret)
	assert.False(t, outs["vmIds"].Secret)
	assert.Equal(t, map[string]int{"cp-0": 110, "worker-0": 120, "worker-1": 121}, outs["vmIds"].Value)
	assert.Equal(t, "https://10.10.0.5:6443", outs["endpoint"].Value)
	assert.Equal(t, map[string]string{"cp-0": "10.10.0.10", "worker-0": "10.10.0.20", "worker-1": "10.10.0.21"}, outs["nodeIps"].Value)
	for _, k := range []string{"kubeconfig", "talosconfig", "endpoint", "nodeIps", "vmIds", "talosVersion", "kubernetesVersion", "schematicId", "installerImage", "macs"} {
		assert.Contains(t, outs, k)
	}
}

func TestProxmoxStaticAddressing(t *testing.T) {
	t.Parallel()
	src := edit(t, stackstest.Example(t, stackstest.ProxmoxExample), "proxmox", func(m map[string]any) {
		m["addressing"] = "static"
		delete(m, "dnsmasq")
	})
	e, _ := deploy(t, src)
	assert.Empty(t, e.ByType(componentstest.RemoteCommand), "no DHCP reservations with static addressing")
	iso := e.One(t, componentstest.Download)
	assert.Contains(t, iso.Inputs["fileName"].StringValue(), "-nocloud-proxmox-homelab-homelab-")
	assert.Contains(t, iso.Inputs["url"].StringValue(), "/nocloud-amd64.iso")
	for _, v := range e.ByType(componentstest.VM) {
		name := v.Inputs["name"].StringValue()
		ci := v.Inputs["initialization"]
		require.True(t, ci.IsObject(), name)
		assert.Equal(t, "nocloud", obj(ci, "type").StringValue())
		assert.Equal(t, "ide0", obj(ci, "interface").StringValue(), "the CD-ROM holds ide2")
		ipc := obj(ci, "ipConfigs").ArrayValue()[0]
		assert.Regexp(t, `^10\.10\.0\.\d+/24$`, obj(obj(ipc, "ipv4"), "address").StringValue())
		assert.Equal(t, "10.10.0.1", obj(obj(ipc, "ipv4"), "gateway").StringValue())
		assert.Equal(t, []string{"10.10.0.1"}, strs(obj(obj(ci, "dns"), "servers")))
	}
	for _, a := range e.ByType(componentstest.Apply) {
		patches := strings.Join(strs(a.Inputs["configPatches"]), "\n")
		assert.Contains(t, patches, "factory.talos.dev/nocloud-installer/")
		assert.Contains(t, patches, "HostnameConfig", "static nodes name themselves")
	}
}

func TestProxmoxMultiHostAgentAndGivenMAC(t *testing.T) {
	t.Parallel()
	src := stackstest.Example(t, stackstest.ProxmoxExample)
	src = edit(t, src, "nodes", func(m map[string]any) {
		ws := m["workers"].([]any)
		ws[1].(map[string]any)["proxmoxNode"] = "pve2"
		ws[0].(map[string]any)["mac"] = "BC:24:11:00:00:20"
	})
	// Reservations in one host's dnsmasq reach a VM on pve2 only over a
	// bridge spanning the hosts (without it the config is refused).
	src = edit(t, src, "proxmox", func(m map[string]any) {
		m["dnsmasq"].(map[string]any)["bridgeSpansHosts"] = true
	})
	src = edit(t, src, "cluster", func(m map[string]any) {
		m["schematic"] = map[string]any{"extensions": []any{"siderolabs/iscsi-tools"}}
	})
	e, outs := deploy(t, src)

	isos := e.ByType(componentstest.Download)
	require.Len(t, isos, 2, "one ISO per Proxmox node hosting a VM")
	byNode := map[string]componentstest.Registered{}
	for _, iso := range isos {
		byNode[iso.Inputs["nodeName"].StringValue()] = iso
	}
	w1 := e.Named(t, componentstest.VM, "homelab-vm-worker-1")
	assert.Equal(t, "pve2", w1.Inputs["nodeName"].StringValue())
	assert.True(t, e.After(w1, byNode["pve2"]))
	assert.False(t, e.After(w1, byNode["pve"]), "worker-1 waits only for the ISO on its own host")

	for _, v := range e.ByType(componentstest.VM) {
		assert.False(t, obj(v.Inputs["agent"], "enabled").BoolValue(), "no qemu-guest-agent extension, no agent")
	}
	w0 := e.Named(t, componentstest.VM, "homelab-vm-worker-0")
	assert.Equal(t, "bc:24:11:00:00:20", obj(w0.Inputs["networkDevices"].ArrayValue()[0], "macAddress").StringValue())
	assert.Contains(t, e.One(t, componentstest.RemoteCommand).Inputs["stdin"].StringValue(), "dhcp-host=bc:24:11:00:00:20,10.10.0.20,worker-0\n")
	assert.Empty(t, e.ByType(componentstest.RandomID), "derived MACs need no state")
	assert.Equal(t, "bc:24:11:00:00:20", outs["macs"].Value.(map[string]string)["worker-0"])
}

// Destroy then up: the state, and with it anything random, is gone; the
// VMs must come back with the MACs their DHCP reservations name, or dnsmasq
// (still holding the old leases) hands them no reserved address.
func TestProxmoxDestroyThenUpKeepsMACs(t *testing.T) {
	t.Parallel()
	src := stackstest.Example(t, stackstest.ProxmoxExample)
	macsOf := func(e *componentstest.Engine) (map[string]string, string) {
		out := map[string]string{}
		for _, v := range e.ByType(componentstest.VM) {
			out[v.Inputs["name"].StringValue()] = obj(v.Inputs["networkDevices"].ArrayValue()[0], "macAddress").StringValue()
		}
		return out, e.One(t, componentstest.RemoteCommand).Inputs["stdin"].StringValue()
	}
	first, firstFile := macsOf(func() *componentstest.Engine { e, _ := deploy(t, src); return e }())
	again, againFile := macsOf(func() *componentstest.Engine { e, _ := deploy(t, src); return e }())
	require.Len(t, first, 3)
	assert.Equal(t, first, again, "the same MACs after destroy and up")
	assert.Equal(t, firstFile, againFile, "the same reservations")

	// Another stack with the same cluster and node names on the bridge
	// gets other MACs.
	other := stackstest.Example(t, stackstest.ProxmoxExample)
	e, _, _, err := programtest.Run(t, other, "proxmox-staging", program.Options{})
	require.NoError(t, err)
	staging, _ := macsOf(e)
	for n, mac := range first {
		assert.NotEqual(t, mac, staging[n], "%s: another stack, another MAC", n)
	}
}

// The reservation scripts release stale leases in the lease file the stack
// names, through dhcp_release on the VMs' bridge.
func TestProxmoxReservationScriptsGetTheLeaseFileAndBridge(t *testing.T) {
	t.Parallel()
	src := edit(t, stackstest.Example(t, stackstest.ProxmoxExample), "proxmox", func(m map[string]any) {
		m["dnsmasq"].(map[string]any)["leaseFile"] = "/var/lib/misc/dnsmasq.vmbr1.leases"
	})
	e, _ := deploy(t, src)
	dhcp := e.One(t, componentstest.RemoteCommand)
	for _, script := range []string{"create", "update", "delete"} {
		s := dhcp.Inputs[resource.PropertyKey(script)].StringValue()
		assert.Contains(t, s, "\nlease_file='/var/lib/misc/dnsmasq.vmbr1.leases'\n", script)
		assert.Contains(t, s, "\niface='vmbr1'\n", script)
	}
}

func TestProxmoxSSHKeyFile(t *testing.T) {
	t.Parallel()
	key := t.TempDir() + "/id_ed25519"
	src := edit(t, stackstest.Example(t, stackstest.ProxmoxExample), "proxmox", func(m map[string]any) {
		m["ssh"].(map[string]any)["privateKeyFile"] = key
	})

	// A missing key file fails before anything is created, naming the key.
	rec := &recorder{}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error { return program.Run(ctx, src) },
		pulumi.WithMocks("talos-cluster", "proxmox-homelab", rec), stackstest.WithConfig(src))
	require.ErrorContains(t, err, "proxmox.ssh.privateKeyFile")
	assert.Empty(t, rec.types)

	require.NoError(t, writeFile(key, "-----BEGIN OPENSSH PRIVATE KEY-----\nkey\n-----END OPENSSH PRIVATE KEY-----\n"))
	e, _ := deploy(t, src)
	conn := e.One(t, componentstest.RemoteCommand).Inputs["connection"]
	require.True(t, conn.IsSecret(), "the SSH connection (with the key) is secret")
	inner := conn.SecretValue().Element
	assert.Contains(t, inner.ObjectValue()["privateKey"].String(), "BEGIN OPENSSH PRIVATE KEY", "the key file's content is used")
	assert.Equal(t, "192.168.122.70", obj(inner, "host").StringValue())
	assert.Equal(t, 22.0, obj(inner, "port").NumberValue())
}

// TestFastDestroyWiring: every VM carries the fast-stop BeforeDelete hook and
// the provider's own hard stop; every resource that would call the cluster
// on delete goes with a VM; what must run at destroy (DHCP reservations,
// ISO) does not. The hook the program builds stops a VM described by its
// registered inputs on a fake Proxmox API.
func TestFastDestroyWiring(t *testing.T) {
	t.Parallel()
	src := stackstest.Example(t, stackstest.ProxmoxExample)
	e, _, hooks := deployWithHooks(t, src)

	vms := e.ByType(componentstest.VM)
	require.Len(t, vms, 3)
	for _, v := range vms {
		assert.True(t, v.Inputs["stopOnDestroy"].BoolValue())
		assert.Equal(t, []string{"before delete homelab-vm-hard-stop"}, hookBindings(hooks, v.Name), "%s: the BeforeDelete binding of its cluster's hook, only", v.Name)
	}
	require.NotNil(t, hooks.Hook(proxmox.FastStopHookName("homelab")))
	// The names of the earlier versions, for VMs and memberships whose
	// state still names them: registered, bound to nothing.
	assert.Equal(t, []string{"before delete talos-proxmox-hard-stop", "before delete homelab-node-remove"}, hookBindings(hooks, ""))

	secrets := e.One(t, componentstest.Secrets)
	for _, typ := range []string{componentstest.Bootstrap, componentstest.Kubeconfig, componentstest.Release, componentstest.Apply, componentstest.LocalCommand} {
		for _, r := range e.ByType(typ) {
			if strings.HasPrefix(r.Name, "homelab"+talos.MemberSuffix) || strings.HasPrefix(r.Name, "homelab"+talos.TaintsSuffix) || r.Name == "homelab"+talos.RosterSuffix || r.Name == "homelab"+talos.ManifestsSuffix {
				// The memberships, the workers' taints, the roster
				// (whose update takes the nodes that left the stack out
				// of etcd) and the bootstrap manifests go with the
				// secrets, which only a whole-stack destroy deletes:
				// never replaced with a VM.
				assert.True(t, secrets.Is(r.DeletedWith), "%s goes with the secrets", r.Name)
				continue
			}
			assert.Contains(t, r.DeletedWith, "proxmoxve:VM/virtualMachine:VirtualMachine::homelab-vm-", "%s %s goes with a VM", typ, r.Name)
		}
	}
	assert.Empty(t, e.One(t, componentstest.RemoteCommand).DeletedWith, "reservations are removed at destroy")
	for _, iso := range e.ByType(componentstest.Download) {
		assert.Empty(t, iso.DeletedWith)
	}

	// The hook from a real program run, against a fake Proxmox API, with the
	// VM's registered inputs standing in for its state.
	fake := pveapitest.New(t, map[int]*pveapitest.VM{
		110: {Node: "pve", Name: "cp-0", Tags: "cluster-homelab;stack-proxmox-homelab;talos", Running: true},
		120: {Node: "pve", Name: "worker-0", Tags: "cluster-homelab;stack-proxmox-homelab;talos", Running: true},
	})
	api, err := pveapi.New(fake.URL, pveapitest.TokenID, pveapitest.TokenSecret, pveapi.Options{HTTPClient: fake.Client()})
	require.NoError(t, err)
	_, _, hooks2, err := programtest.Run(t, src, "proxmox-homelab", program.Options{ProxmoxAPI: api})
	require.NoError(t, err)
	cp0 := e.Named(t, componentstest.VM, "homelab-vm-cp-0")
	require.NoError(t, hooks2.Hook("homelab-vm-hard-stop")(&pulumi.ResourceHookArgs{Name: cp0.Name, OldOutputs: cp0.Inputs}))
	assert.Equal(t, 1, fake.StopCalls(110))
	assert.False(t, fake.Running(110))
	// A VM whose state still names the earlier versions' hook is stopped
	// by it as well.
	w0 := e.Named(t, componentstest.VM, "homelab-vm-worker-0")
	require.NoError(t, hooks2.Hook(proxmox.LegacyFastStopHookName)(&pulumi.ResourceHookArgs{Name: w0.Name, OldOutputs: w0.Inputs}))
	assert.Equal(t, 1, fake.StopCalls(120))
	assert.False(t, fake.Running(120))
}

// hookBindings are the hooks bound to the resource named resource (none:
// the ones registered only), as "<point> <hook>".
func hookBindings(h *componentstest.Hooks, resource string) []string {
	var out []string
	for _, b := range h.On(resource) {
		out = append(out, fmt.Sprintf("%s %s", b.Point, b.Hook))
	}
	return out
}

func TestKeepISO(t *testing.T) {
	t.Parallel()
	src := edit(t, stackstest.Example(t, stackstest.ProxmoxExample), "proxmox", func(m map[string]any) { m["keepIso"] = true })
	e, _ := deploy(t, src)
	assert.True(t, e.One(t, componentstest.Download).RetainOnDelete)
}

// A replaced VM (a proxmoxNode change, `pulumi up --replace`) keeps its
// vmId: the old one must go first, and the new one, back in maintenance mode
// with the ISO inserted, needs its node's config applied and the ISO ejected
// again, while nothing else of the cluster is touched.
func TestProxmoxReplacingAVMReRunsOnlyItsApplyAndEject(t *testing.T) {
	t.Parallel()
	e, _, hooks := deployWithHooks(t, stackstest.Example(t, stackstest.ProxmoxExample))
	vms := e.ByType(componentstest.VM)
	require.Len(t, vms, 3)
	for _, v := range vms {
		assert.True(t, v.DeleteBeforeReplace, "%s: deleted before its replacement (same vmId)", v.Name)
	}
	for _, node := range []string{"cp-0", "worker-0", "worker-1"} {
		vm := e.Named(t, componentstest.VM, "homelab-vm-"+node)
		assert.Equal(t, []string{"before delete homelab-vm-hard-stop"}, hookBindings(hooks, vm.Name),
			"the fast-stop hook is bound to every VM, so it runs for a replacement's delete too")
		var names []string
		for _, r := range e.ReplacedWith(vm) {
			names = append(names, r.Name)
		}
		assert.ElementsMatch(t, []string{"homelab-apply-" + node, "homelab-eject-iso-" + node}, names,
			"replacing %s re-runs its apply and eject, nothing else", vm.Name)
	}
}

func TestDerivedMACClashingWithAGivenOneFails(t *testing.T) {
	t.Parallel()
	derived := proxmox.DeriveMAC("proxmox-homelab", "homelab", "worker-1")
	src := edit(t, stackstest.Example(t, stackstest.ProxmoxExample), "nodes", func(m map[string]any) {
		m["workers"].([]any)[0].(map[string]any)["mac"] = strings.ToUpper(derived)
	})
	e, _, _, err := programtest.Run(t, src, "proxmox-homelab", program.Options{})
	require.ErrorContains(t, err, `node "worker-1": its derived MAC `+derived+` is the MAC of "worker-0"`)
	assert.Empty(t, e.Created(), "nothing is registered")
}

// A pool and a node with schematics of their own: each distinct schematic
// is registered once, its ISO is downloaded on the Proxmox node its VMs run
// on and booted by them, their guest agent follows its extensions, and
// their configs install its installer; the others keep the cluster's.
func TestProxmoxPoolAndNodeSchematics(t *testing.T) {
	t.Parallel()
	src := stackstest.Example(t, stackstest.ProxmoxExample)
	gpu := []any{"siderolabs/nvidia-open-gpu-kernel-modules-production"}
	src = edit(t, src, "nodes", func(m map[string]any) {
		ws := m["workers"].([]any)
		ws[1].(map[string]any)["schematic"] = map[string]any{"extensions": gpu}
		ws[1].(map[string]any)["dataDiskSize"] = 0
		m["pools"] = []any{map[string]any{
			"name": "serial", "count": 2, "ip": "10.10.0.30", "vmId": 130, "proxmoxNode": "pve2",
			"schematic": map[string]any{"kernelArgs": []any{"console=ttyS0"}},
		}}
	})
	src = edit(t, src, "proxmox", func(m map[string]any) {
		m["dnsmasq"].(map[string]any)["bridgeSpansHosts"] = true
	})
	e, _ := deploy(t, src)

	clusterDoc, err := image.SchematicYAML(proxmox.DefaultExtensions(), nil)
	require.NoError(t, err)
	poolDoc, err := image.SchematicYAML(proxmox.DefaultExtensions(), []string{"console=ttyS0"})
	require.NoError(t, err)
	gpuDoc, err := image.SchematicYAML([]string{gpu[0].(string)}, nil)
	require.NoError(t, err)
	pool := image.Schematic{Extensions: proxmox.DefaultExtensions(), KernelArgs: []string{"console=ttyS0"}}
	own := image.Schematic{Extensions: []string{gpu[0].(string)}}
	docs := map[string]string{}
	for _, s := range e.ByType(componentstest.Schematic) {
		docs[s.Name] = s.Inputs["schematic"].StringValue()
	}
	assert.Equal(t, map[string]string{
		"homelab-schematic":                  clusterDoc,
		"homelab-schematic-" + pool.Suffix(): poolDoc,
		"homelab-schematic-" + own.Suffix():  gpuDoc,
	}, docs, "each schematic once: the pool's two nodes share theirs")
	assert.Contains(t, poolDoc, "extraKernelArgs")
	poolID, err := factorytest.SchematicID([]byte(poolDoc))
	require.NoError(t, err)
	gpuID, err := factorytest.SchematicID([]byte(gpuDoc))
	require.NoError(t, err)

	isos := map[string]componentstest.Registered{}
	for _, iso := range e.ByType(componentstest.Download) {
		isos[iso.Name] = iso
	}
	require.Len(t, isos, 3, "pve: the cluster's ISO and worker-1's; pve2: the pool's")
	poolISO := isos["homelab-iso-pve2-"+pool.Suffix()]
	assert.Equal(t, "pve2", poolISO.Inputs["nodeName"].StringValue())
	assert.Equal(t, "https://factory.talos.dev/image/"+poolID+"/v1.13.9/metal-amd64.iso", poolISO.Inputs["url"].StringValue())
	gpuISO := isos["homelab-iso-pve-"+own.Suffix()]
	assert.Equal(t, "https://factory.talos.dev/image/"+gpuID+"/v1.13.9/metal-amd64.iso", gpuISO.Inputs["url"].StringValue())
	assert.NotEqual(t, poolISO.Inputs["fileName"].StringValue(), gpuISO.Inputs["fileName"].StringValue())

	want := map[string]struct {
		iso         componentstest.Registered
		agent       bool
		schematicID string
	}{
		"cp-0":     {isos["homelab-iso-pve"], true, componentstest.SchematicID},
		"worker-0": {isos["homelab-iso-pve"], true, componentstest.SchematicID},
		"worker-1": {gpuISO, false, gpuID},
		"serial-0": {poolISO, true, poolID},
		"serial-1": {poolISO, true, poolID},
	}
	for node, w := range want {
		v := e.Named(t, componentstest.VM, "homelab-vm-"+node)
		assert.Equal(t, "local:iso/"+w.iso.Inputs["fileName"].StringValue(), obj(v.Inputs["cdrom"], "fileId").StringValue(), "%s boots its schematic's ISO", node)
		assert.True(t, e.After(v, w.iso), node)
		assert.Equal(t, w.agent, obj(v.Inputs["agent"], "enabled").BoolValue(), "%s: the agent follows its schematic's extensions", node)
		patches := fmt.Sprint(e.Named(t, componentstest.Apply, "homelab-apply-"+node).Inputs["configPatches"])
		assert.Contains(t, patches, "factory.talos.dev/metal-installer/"+w.schematicID+":v1.13.9", "%s installs its schematic's installer", node)
	}
}
