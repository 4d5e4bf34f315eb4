//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/servers"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubesim"
	"github.com/fluodata/talos-pulumi/internal/pveapi/pveapitest"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest/realetcd"
	"github.com/fluodata/talos-pulumi/internal/testkit/e2etest"
	"github.com/fluodata/talos-pulumi/internal/testkit/factorytest"
)

// multiHostStack is the stack of testdata/Pulumi.e2e-multihost.yaml.
const multiHostStack = "e2e-multihost"

// spreadMachine is a node of the multi-host stack and the host it is on.
type spreadMachine struct {
	machine
	host string // "" for the proxmox section's (home)
}

// The hosts of the multi-host stack by name ("" for home), each with its
// API fake's address; garage joins and leaves during the test.
var (
	hostAPIs = map[string]string{"": "10.77.0.2:8006", "office": "10.78.0.2:8006", "attic": "10.79.0.2:8006", "garage": "10.80.0.2:8006"}
	spread   = []spreadMachine{
		{machine{"cp-0", "10.77.0.10", 110, true}, ""},
		{machine{"cp-1", "10.78.0.10", 110, true}, "office"},
		{machine{"cp-2", "10.79.0.10", 110, true}, "attic"},
		{machine{"worker-0", "10.77.0.20", 120, false}, ""},
		{machine{"worker-1", "10.78.0.20", 120, false}, "office"},
		// A rented server of the hosts entry hetzner: no Proxmox API.
		{machine{"worker-s", "10.81.0.20", 0, false}, "hetzner"},
		{machine{"worker-2", "10.80.0.20", 120, false}, "garage"},
	}
	// initial are the nodes of the first up (garage's joins later).
	initial = spread[:6]
)

// multiWorld is a world of several Proxmox VE hosts.
type multiWorld struct {
	*world
	pves map[string]*pveapitest.Server
	// configs are the machine configs the nodes were last given, by IP.
	mu      sync.Mutex
	configs map[string][]byte
}

// TestE2EClusterSpansThreeProxmoxHosts runs a cluster whose nodes sit on
// three Proxmox VE hosts that are not one PVE cluster, each with its own
// API (a fake each, on its own network) and token, through make with the
// real CLI and plugins (issue 39): first up, one control plane per host,
// KubeSpan and each node's zone and region in its machine config (loaded
// by Talos's own code), a preview with no change; a Talos upgrade across
// the hosts, one node at a time, control planes first; a fourth host
// added with a worker, and removed again; a host lost (its API and its
// machines down): quorum holds, and the next rollout stops at its node
// with a message naming it; the host back, the rollout finishes; the host
// lost for good, marked gone and dropped with its control plane; destroy.
func TestE2EClusterSpansThreeProxmoxHosts(t *testing.T) {
	w := newMultiWorld(t)
	// The rented server runs Talos in maintenance mode already: up's probe
	// (servers.TalosMaintenanceProbe) skips its rescue install.
	probeCtx, probeCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer probeCancel()
	require.True(t, servers.TalosMaintenanceProbe(50000)(probeCtx, "10.81.0.20"), "the server answers in maintenance mode")

	start := time.Now()
	w.make("up", "YES=1")
	t.Logf("first up: %s", time.Since(start).Round(time.Second))
	for _, m := range initial {
		w.assertSpreadConfig(m)
		if m.host == "hetzner" {
			// Already in maintenance mode when up probed it: no rescue
			// install ran, its config was applied behind its firewall.
			assert.False(t, w.nodes.Node(m.ip).InMaintenance(), "%s installed", m.name)
			assert.Contains(t, string(w.config(m.ip)), "NetworkRuleConfig", "%s: behind the firewall of platform vps", m.name)
			continue
		}
		pve := w.pves[m.host]
		vm := pve.VM(m.vmID)
		require.NotNil(t, vm, "%s: VM %d on its host's API", m.name, m.vmID)
		assert.Equal(t, m.name, vm.Config["name"], "%s: the VM on host %q is the node's", m.name, m.host)
		assert.False(t, w.nodes.Node(m.ip).InMaintenance(), "%s installed", m.name)
		if m.host != "" {
			assert.Contains(t, vm.Config["tags"], "host-"+m.host, "%s: the VM names its host", m.name)
		}
	}
	assert.Empty(t, w.pves["garage"].VMIDs(), "garage holds no VM yet")
	assert.Len(t, w.pves["office"].VMIDs(), 2, "office holds its two VMs, not the others'")
	w.noChange("after the first up")

	// A Talos upgrade across the hosts: one node at a time, control planes
	// first, in the stack's order whatever host they are on.
	w.edit("v1.13.9 # e2e: talosVersion", "v1.13.10 # e2e: talosVersion")
	start = time.Now()
	w.make("up", "YES=1")
	t.Logf("Talos upgrade across three hosts: %s", time.Since(start).Round(time.Second))
	ups := w.nodes.Events("Upgrade")
	require.Len(t, ups, len(initial), "one upgrade per node, the rented server's too")
	for i, m := range spread[:3] {
		assert.Equal(t, m.ip, ups[i].Node, "control plane %s upgraded in order", m.name)
	}
	w.noChange("after the upgrade")

	// A fourth host added with a worker: its provider, ISO and VM; nothing
	// else changes.
	w.setGarage(true)
	out := w.make("preview")
	// What a new worker changes anywhere (the approver's list, the roster,
	// the readiness wait, the rented server's firewall, which lists every
	// node, as on platform vps), and nothing of the other hosts: no VM, ISO
	// or provider of theirs, no other node's config.
	for _, other := range []string{"proxmoxve:VM/virtualMachine:VirtualMachine: (update)", "(replace)\n        [id=spread-iso", " to delete"} {
		assert.NotContains(t, out, other, "adding a host touches nothing of the others")
	}
	for _, m := range initial {
		updated := strings.Contains(out, "ConfigurationApply: (update)\n        [id=machine_configuration_apply]\n        [urn=urn:pulumi:e2e-multihost::talos-cluster::talos-cluster:index:ProxmoxCluster$talos-cluster:index:TalosCluster$talos:machine/configurationApply:ConfigurationApply::spread-apply-"+m.name+"]")
		assert.Equal(t, m.host == "hetzner", updated, "%s: only the rented server's config changes (its firewall lists the new node)", m.name)
	}
	for _, res := range []string{"spread-pve-garage", "spread-iso-garage/pve4", "spread-vm-worker-2", "spread-apply-worker-2"} {
		assert.Contains(t, out, "::"+res+"]", "the new host's %s is created", res)
	}
	w.make("up", "YES=1")
	require.NotNil(t, w.pves["garage"].VM(120), "worker-2's VM on garage")
	assert.False(t, w.nodes.Node("10.80.0.20").InMaintenance(), "worker-2 installed")
	w.assertSpreadConfig(spread[6])
	w.noChange("after a host was added")

	// The host removed again with its worker: the worker leaves, its VM
	// goes through garage's API, then garage's provider goes.
	w.setGarage(false)
	w.make("up", "YES=1")
	assert.Empty(t, w.pves["garage"].VMIDs(), "worker-2's VM gone from garage")
	assert.Len(t, w.pves["office"].VMIDs(), 2, "office keeps its VMs")
	w.noChange("after a host was removed")

	// attic lost: its API and its machines down. etcd keeps its quorum (two
	// of three members), so the cluster runs on; but a rollout that takes
	// down another control plane would lose it: the rollout gate refuses to
	// touch any, naming the lost host's member, and no node takes the new
	// config.
	w.pves["attic"].SetDown(true)
	w.nodes.Node("10.79.0.10").PowerOff()
	w.edit("[time.cloudflare.com] # e2e: time servers", "[time.google.com] # e2e: time servers")
	start = time.Now()
	out = w.upFails("YES=1")
	t.Logf("config change with attic lost: refused after %s", time.Since(start).Round(time.Second))
	assert.Contains(t, out, "unable to confirm that etcd keeps a quorum without node 10.77.0.10: member cp-2 (node 10.79.0.10", "the refusal names the lost member")
	for _, m := range initial {
		assert.NotContains(t, string(w.config(m.ip)), "time.google.com", "%s: no node took the change", m.name)
	}
	// A Talos upgrade fails sooner: the new ISO cannot reach attic's
	// storage, and the engine starts nothing after that error.
	w.edit("v1.13.10 # e2e: talosVersion", "v1.13.11 # e2e: talosVersion")
	before := len(w.nodes.Events("Upgrade"))
	out = w.upFails("YES=1")
	assert.Contains(t, out, "spread-iso-attic/pve3", "the lost host's step fails, named")
	assert.Empty(t, w.nodes.Events("Upgrade")[before:], "no node upgraded while a control plane is lost")

	// attic back: the rollout finishes.
	w.pves["attic"].SetDown(false)
	w.nodes.Node("10.79.0.10").PowerOn()
	w.make("up", "YES=1")
	for _, m := range initial {
		assert.Equal(t, "v1.13.11", w.nodes.Node(m.ip).Version(), "%s upgraded once attic was back", m.name)
		assert.Contains(t, string(w.config(m.ip)), "time.google.com", "%s took the config change", m.name)
	}
	w.noChange("after attic came back")

	// attic lost for good: marked gone (an up that asks it nothing and
	// records that its resources leave the state alone), then its control
	// plane and its entry removed: the member is taken out of etcd through
	// the other control planes, and its VM, ISO and provider leave the
	// stack without a call to its API.
	w.pves["attic"].SetDown(true)
	w.nodes.Node("10.79.0.10").PowerOff()
	w.pulumi("config", "set", "--path", "--type", "bool", "hosts[1].gone", "true")
	out = w.make("up", "YES=1")
	assert.Contains(t, out, "hosts[1].gone: host attic is gone for good", "the next step is named")
	w.pulumi("config", "rm", "--path", "nodes.controlPlanes[2]")
	w.pulumi("config", "rm", "--path", "hosts[1]")
	start = time.Now()
	out = w.make("up", "YES=1")
	t.Logf("attic dropped: %s", time.Since(start).Round(time.Second))
	assert.Contains(t, out, "spread-vm-cp-2", "its VM left the stack")
	assert.Len(t, w.nodes.Members(), 2, "cp-2's member taken out of etcd")
	assert.NotNil(t, w.pves["attic"].VM(110), "nothing was asked of the lost host: its VM is as it was left")
	out = w.make("preview")
	for _, change := range []string{" to create", " to update", " to delete", " to replace"} {
		assert.NotContains(t, out, change, "after attic was dropped: no change")
	}

	w.make("destroy", "YES=1")
	for host, pve := range w.pves {
		if host != "attic" {
			assert.Empty(t, pve.VMIDs(), "host %q: every VM gone", host)
		}
	}
}

// setGarage adds (or removes) the host garage and its worker, with
// pulumi config set --path (rm --path), as an operator might.
func (w *multiWorld) setGarage(add bool) {
	w.t.Helper()
	if !add {
		w.pulumi("config", "rm", "--path", "nodes.workers[3]")
		w.pulumi("config", "rm", "--path", "hosts[3]")
		return
	}
	for _, kv := range [][]string{
		{"nodes.workers[3].name", "worker-2"}, {"nodes.workers[3].ip", "10.80.0.20"}, {"nodes.workers[3].host", "garage"},
		{"hosts[3].name", "garage"}, {"hosts[3].proxmox.endpoint", "https://10.80.0.2:8006/"},
		{"hosts[3].proxmox.node", "pve4"},
		{"hosts[3].proxmox.addressing", "dhcp-reservation"}, {"hosts[3].network.gateway", "10.80.0.1"},
	} {
		w.pulumi("config", "set", "--path", kv[0], kv[1])
	}
	// Pulumi takes a key named like a token for a secret: the id is not.
	w.pulumi("config", "set", "--path", "--plaintext", "hosts[3].proxmox.apiTokenId", pveapitest.TokenID)
	w.pulumi("config", "set", "--path", "--type", "int", "nodes.workers[3].vmId", "120")
	w.pulumi("config", "set", "--path", "nodes.workers[3].kubeSpanEndpoints[0]", "10.80.0.2:51820")
	w.pulumi("config", "set", "--path", "--type", "bool", "hosts[3].proxmox.dnsmasq.enabled", "false")
	w.pulumi("config", "set", "--secret", "--path", "hosts[3].proxmox.apiTokenSecret", pveapitest.TokenSecret)
}

// config is the machine config a node was last given.
func (w *multiWorld) config(ip string) []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.configs[ip]
}

// assertSpreadConfig checks a node's last machine config, loaded by
// Talos's own code: KubeSpan and discovery on, and its failure domain
// (region its host, zone its Proxmox node).
func (w *multiWorld) assertSpreadConfig(m spreadMachine) {
	w.t.Helper()
	raw := w.config(m.ip)
	require.NotEmpty(w.t, raw, "%s was given a machine config", m.name)
	cfg, err := configloader.NewFromBytes(raw)
	require.NoError(w.t, err, "%s: Talos loads its config", m.name)
	ks := cfg.NetworkKubeSpanConfig()
	assert.True(w.t, ks != nil && ks.Enabled(), "%s: KubeSpan on", m.name)
	assert.True(w.t, cfg.Cluster().Discovery().Enabled(), "%s: discovery on", m.name)
	region := m.host
	if region == "" {
		region = "proxmox"
	}
	labels := cfg.Machine().NodeLabels()
	assert.Equal(w.t, region, labels["topology.kubernetes.io/region"], "%s: its host is its region", m.name)
	zone := map[string]string{"": "pve", "office": "pve2", "attic": "pve3", "garage": "pve4", "hetzner": m.name}[m.host]
	assert.Equal(w.t, zone, labels["topology.kubernetes.io/zone"], "%s: its Proxmox node is its zone", m.name)
}

// newMultiWorld starts an API fake per host, the machines and the API
// server, copies the repository and makes the stack.
func newMultiWorld(t *testing.T) *multiWorld {
	t.Helper()
	for _, addr := range hostAPIs {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("SKIPPED: %s is not local here (%v): make e2e runs this test in a network namespace where 10.77-80.0.0/24 are", addr, err)
		}
		_ = l.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	t.Cleanup(cancel)
	charts := e2etest.Charts(t, talos.DefaultCiliumVersion, talos.DefaultApproverVersion)
	t.Setenv("NO_PROXY", "10.77.0.0/24,10.78.0.0/24,10.79.0.0/24,10.80.0.0/24,10.81.0.0/24")
	w := &multiWorld{world: &world{t: t, ctx: ctx, stack: multiHostStack}, pves: map[string]*pveapitest.Server{}, configs: map[string][]byte{}}

	factory := factorytest.New(t)
	charts.Trust(t, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: factory.Certificate().Raw}))
	for host, addr := range hostAPIs {
		pve := pveapitest.NewAt(t, map[int]*pveapitest.VM{}, addr)
		charts.Trust(t, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: pve.Certificate().Raw}))
		pve.AddDatastore("local-lvm", pveapitest.Datastore{Content: []string{"images", "rootdir"}})
		pve.Web = factory.Client()
		w.pves[host] = pve
	}

	var specs []talosapitest.NodeSpec
	var cpIPs []string
	for _, m := range spread {
		if pve := w.pves[m.host]; pve != nil {
			pve.AgentAddresses(m.vmID, m.ip)
		}
		role := talosapitest.Worker
		if m.cp {
			role = talosapitest.ControlPlane
			cpIPs = append(cpIPs, m.ip)
		}
		specs = append(specs, talosapitest.NodeSpec{IP: m.ip, Hostname: m.name, Role: role, Listen: m.ip + ":50000", Maintenance: true,
			RebootLatency: 200 * time.Millisecond, Version: "v1.13.9"})
	}
	w.nodes = realetcd.StartFresh(t, specs...)
	// No VIP across networks: the endpoint is the first control plane.
	w.kube = &e2etest.Kube{Addr: cpIPs[0] + ":6443", More: cpIPs[1:], CNI: talos.SystemNamespace + "/" + talos.CiliumRelease}
	for _, m := range spread {
		w.kube.Nodes = append(w.kube.Nodes, kubesim.Node{Name: m.name, IP: m.ip, ControlPlane: m.cp, KubeletVersion: "v1.35.4"})
	}
	w.nodes.OnApply(func(node string, config []byte) {
		w.mu.Lock()
		w.configs[node] = bytes.Clone(config)
		w.mu.Unlock()
		if node == cpIPs[0] {
			w.kube.Start(ctx, t, config)
		}
	})
	for host, pve := range w.pves {
		pve.OnDestroy = func(vmid int) {
			for _, m := range spread {
				if m.host == host && m.vmID == vmid {
					w.nodes.NewMachine(m.ip)
				}
			}
		}
	}

	w.repo = copyRepo(t)
	stackFile, err := os.ReadFile("testdata/Pulumi." + multiHostStack + ".yaml")
	require.NoError(t, err)
	stackFile = bytes.ReplaceAll(stackFile, []byte("FACTORY_URL"), []byte(factory.URL))
	stackFile = bytes.ReplaceAll(stackFile, []byte("TOKEN_ID"), []byte(pveapitest.TokenID))
	require.NoError(t, os.WriteFile(filepath.Join(w.repo, "Pulumi."+multiHostStack+".yaml"), stackFile, 0o600))
	w.make("init")
	for _, key := range []string{"proxmox", "hosts[0].proxmox", "hosts[1].proxmox"} {
		w.pulumi("config", "set", "--secret", "--path", key+".apiTokenSecret", pveapitest.TokenSecret)
	}
	w.pulumi("config", "set", "--secret", "--path", "nodes.workers[2].rescue.password", "rescue-not-used")
	require.False(t, strings.Contains(string(stackFile), pveapitest.TokenSecret), "no token in the stack file in plain text")
	return w
}
