package proxmox_test

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/pveapi"
	"github.com/fluodata/talos-pulumi/internal/pveapi/pveapitest"
)

// Token secrets of the two hosts' APIs in the cluster below: fixtures.
const (
	homeSecret   = "11111111-1111-4111-8111-111111111111" //nolint:gosec // test fixture
	officeSecret = "22222222-2222-4222-8222-222222222222" //nolint:gosec // test fixture
)

// hostsArgs is a valid cluster on two hosts on different networks: the
// proxmox input's (10.10.0.0/24) with cp-0 and worker-0, and the hosts
// entry office (192.168.50.0/24, its own API, token, bridge, datastores,
// BIOS and dnsmasq) with worker-1 and worker-2. worker-1 has the VM id of
// cp-0 (110) and the Proxmox node name of the proxmox host's VMs (pve):
// each host has its own. KubeSpan is on and there is no VIP, as different
// networks require.
func hostsArgs() *proxmox.ClusterArgs {
	dnsmasq := func(host string) *proxmox.DNSMasqSettings {
		return &proxmox.DNSMasqSettings{SSH: proxmox.SSHSettings{Host: host}}
	}
	return &proxmox.ClusterArgs{
		Cluster: talos.ClusterSettings{
			Name: "homelab", TalosVersion: "v1.12.4", Endpoint: "https://10.10.0.10:6443",
			KubeSpan: &talos.KubeSpanSettings{Enabled: true},
		},
		Proxmox: proxmox.HostSettings{
			Endpoint: "https://192.168.122.70:8006/", APITokenID: "root@pam!pulumi", APITokenSecret: pulumi.String(homeSecret),
			Bridge: "vmbr1", Gateway: "10.10.0.1", DNSMasq: dnsmasq("192.168.122.70"),
		},
		Hosts: []proxmox.Host{{Name: "office", Proxmox: &proxmox.HostSettings{
			Endpoint: "https://198.51.100.7:8006/", APITokenID: "pulumi@pve!office", APITokenSecret: pulumi.String(officeSecret),
			Bridge: "vmbr2", DiskDatastore: "fast", ISODatastore: "isos", BIOS: "ovmf",
			Gateway: "192.168.50.1", DNSMasq: dnsmasq("198.51.100.7"),
		}}},
		Nodes: []proxmox.Node{
			{Name: "cp-0", Role: talos.RoleControlPlane, IP: "10.10.0.10", ProxmoxNode: "pve", VMID: 110},
			{Name: "worker-0", Role: talos.RoleWorker, IP: "10.10.0.20", ProxmoxNode: "pve", VMID: 120},
			{Name: "worker-1", Role: talos.RoleWorker, IP: "192.168.50.21", ProxmoxNode: "pve", Host: "office", VMID: 110},
			{Name: "worker-2", Role: talos.RoleWorker, IP: "192.168.50.22", ProxmoxNode: "pve-b", Host: "office", VMID: 111},
		},
	}
}

// sameNetwork puts the office host on the proxmox host's network, with
// a VIP there and KubeSpan off.
func sameNetwork(a *proxmox.ClusterArgs) {
	a.Hosts[0].Proxmox.Gateway = "10.10.0.1"
	a.Proxmox.Site, a.Hosts[0].Proxmox.Site = "home", "home"
	a.Nodes[2].IP, a.Nodes[3].IP = "10.10.0.21", "10.10.0.22"
	a.Cluster.KubeSpan = nil
	a.Cluster.VIP = "10.10.0.5"
	a.Cluster.Endpoint = ""
}

// problemsAt are the paths of the problems, and the problems by path.
func problemsAt(a *proxmox.ClusterArgs) ([]string, map[string]string) {
	var paths []string
	msgs := map[string]string{}
	for _, p := range a.Problems("test") {
		if !slices.Contains(paths, p.Path) {
			paths = append(paths, p.Path)
		}
		msgs[p.Path] += p.Message + "\n"
	}
	return paths, msgs
}

func TestHostsValidClusterHasNoProblems(t *testing.T) {
	t.Parallel()
	paths, msgs := problemsAt(hostsArgs())
	assert.Empty(t, paths, "%v", msgs)

	a := hostsArgs()
	sameNetwork(a)
	paths, msgs = problemsAt(a)
	assert.Empty(t, paths, "hosts on one network: a VIP and no KubeSpan are fine: %v", msgs)

	a = hostsArgs()
	a.Hosts = append(a.Hosts, proxmox.Host{Name: "spare", Proxmox: &proxmox.HostSettings{
		Endpoint: "https://198.51.100.9:8006/", APITokenID: "root@pam!spare", APITokenSecret: pulumi.String(officeSecret),
	}})
	paths, msgs = problemsAt(a)
	assert.Empty(t, paths, "an entry without nodes needs no gateway: %v", msgs)

	a = hostsArgs()
	a.Nodes[3].VMID = 120
	paths, msgs = problemsAt(a)
	assert.Empty(t, paths, "VM ids are each host's own: %v", msgs)
}

// Every problem of the hosts entries and of the nodes' placement on them,
// at its input path, and only there.
func TestHostsProblems(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		edit  func(a *proxmox.ClusterArgs)
		paths []string
		// says are parts of the message at the first path.
		says []string
	}{
		{"a node's host that is no entry", func(a *proxmox.ClusterArgs) { a.Nodes[3].Host = "lab" },
			[]string{"nodes[3].host"}, []string{`"lab" is no entry of hosts (office)`}},
		{"two entries of one name", func(a *proxmox.ClusterArgs) {
			a.Hosts = append(a.Hosts, a.Hosts[0])
		}, []string{"hosts[1].name"}, []string{`"office" is already hosts[0].name`}},
		// The nodes naming office are the first entry's: the second's
		// network says nothing of them (nor the proxmox host's nodes of an
		// entry without a name, below).
		{"two entries of one name on two networks", func(a *proxmox.ClusterArgs) {
			second := a.Hosts[0]
			px := *second.Proxmox
			px.Gateway = "172.16.0.1"
			second.Proxmox = &px
			a.Hosts = append(a.Hosts, second)
		}, []string{"hosts[1].name"}, []string{`"office" is already hosts[0].name`}},
		{"an entry named as the proxmox host's region", func(a *proxmox.ClusterArgs) {
			a.Hosts[0].Name, a.Nodes[2].Host, a.Nodes[3].Host = "proxmox", "proxmox", "proxmox"
		}, []string{"hosts[0].name"}, []string{`"proxmox" is already the proxmox host's region`}},
		{"an entry named as the CSI plugin's region", func(a *proxmox.ClusterArgs) {
			a.CSI = &proxmox.CSISettings{Datastore: "local-zfs", Region: "office"}
		}, []string{"hosts[0].name"}, []string{`"office" is already the proxmox host's region`}},
		{"an entry named no DNS label", func(a *proxmox.ClusterArgs) {
			a.Hosts[0].Name, a.Nodes[2].Host, a.Nodes[3].Host = "Office_1", "Office_1", "Office_1"
		}, []string{"hosts[0].name"}, []string{`"Office_1" is not a DNS label`}},
		{"an entry without a name", func(a *proxmox.ClusterArgs) {
			a.Hosts = append(a.Hosts, proxmox.Host{Proxmox: a.Hosts[0].Proxmox})
		}, []string{"hosts[1].name"}, []string{"required"}},
		{"an entry of another addressing", func(a *proxmox.ClusterArgs) {
			a.Hosts[0].Proxmox.Addressing = proxmox.AddressingStatic
		}, []string{"hosts[0].proxmox.addressing"}, []string{`"static" differs from proxmox.addressing "dhcp-reservation"`}},
		{"the CSI plugin with a token of the user's across hosts", func(a *proxmox.ClusterArgs) {
			a.CSI = &proxmox.CSISettings{Datastore: "local-zfs", TokenID: "csi@pve!csi", TokenSecret: pulumi.String("s")}
		}, []string{"csi.tokenId"}, []string{"serves one Proxmox VE API"}},
		{"an entry with nodes and no gateway", func(a *proxmox.ClusterArgs) { a.Hosts[0].Proxmox.Gateway = "" },
			[]string{"hosts[0].proxmox.gateway"}, []string{"is required when the cluster spans several hosts"}},
		{"the proxmox host with nodes and no gateway", func(a *proxmox.ClusterArgs) { a.Proxmox.Gateway = "" },
			[]string{"proxmox.gateway"}, []string{"is required when the cluster spans several hosts"}},
		{"different networks without KubeSpan", func(a *proxmox.ClusterArgs) { a.Cluster.KubeSpan = nil },
			[]string{"cluster.kubeSpan.enabled"}, []string{"the proxmox host on 10.10.0.0/24", "host office on 192.168.50.0/24", "set it to true"}},
		{"different networks with KubeSpan off", func(a *proxmox.ClusterArgs) { a.Cluster.KubeSpan.Enabled = false },
			[]string{"cluster.kubeSpan.enabled"}, nil},
		{"different networks with a VIP", func(a *proxmox.ClusterArgs) { a.Cluster.VIP = "10.10.0.5" },
			[]string{"cluster.vip"}, []string{"a layer-2 VIP cannot span hosts on different networks", "cluster.endpoint", "reaches them directly (not over KubeSpan, which it cannot join"}},
		{"different networks with a VIP and without KubeSpan", func(a *proxmox.ClusterArgs) {
			a.Cluster.VIP, a.Cluster.KubeSpan = "10.10.0.5", nil
		}, []string{"cluster.kubeSpan.enabled", "cluster.vip"}, nil},
		{"one gateway, another prefix length: another network", func(a *proxmox.ClusterArgs) {
			sameNetwork(a)
			a.Hosts[0].Proxmox.PrefixLength = 16
		}, []string{"cluster.kubeSpan.enabled", "cluster.vip"}, []string{"10.10.0.0/16"}},
		{"an entry's own settings", func(a *proxmox.ClusterArgs) {
			px := a.Hosts[0].Proxmox
			px.Endpoint, px.APITokenID, px.APITokenSecret = "http://office:8006/", "office", nil
			px.Bridge, px.DiskDatastore, px.ISODatastore, px.CPUType = "vmbr 2", "fast lvm", "1iso", "kvm64"
			px.BIOS, px.VLANID = "uefi", 5000
			px.DNSMasq.RestartCommand, px.DNSMasq.SSH.Port, px.DNSMasq.ConfigDir = "a\nb", 70000, "etc/dnsmasq.d"
		}, []string{
			"hosts[0].proxmox.endpoint", "hosts[0].proxmox.apiTokenId", "hosts[0].proxmox.apiTokenSecret",
			"hosts[0].proxmox.bridge", "hosts[0].proxmox.diskDatastore", "hosts[0].proxmox.isoDatastore", "hosts[0].proxmox.cpuType",
			"hosts[0].proxmox.bios", "hosts[0].proxmox.vlanId",
			"hosts[0].proxmox.dnsmasq.restartCommand", "hosts[0].proxmox.dnsmasq.ssh.port", "hosts[0].proxmox.dnsmasq.configDir",
		}, []string{"must use https"}},
		{"look-alike networks without sites", func(a *proxmox.ClusterArgs) {
			sameNetwork(a)
			a.Proxmox.Site, a.Hosts[0].Proxmox.Site = "", "home"
		}, []string{"hosts[0].proxmox.site"}, []string{"the proxmox host and host office both put their VMs on 10.10.0.0/24 via 10.10.0.1: give both a site"}},
		{"look-alike networks at two sites", func(a *proxmox.ClusterArgs) {
			sameNetwork(a)
			a.Hosts[0].Proxmox.Site = "office"
		}, []string{"cluster.kubeSpan.enabled", "cluster.vip"}, []string{"host office on 10.10.0.0/24 via 10.10.0.1"}},
		{"a site that is no DNS label", func(a *proxmox.ClusterArgs) { a.Hosts[0].Proxmox.Site = "Home Lab" },
			[]string{"hosts[0].proxmox.site"}, []string{"not a DNS label"}},
		{"an entry's network", func(a *proxmox.ClusterArgs) {
			a.Hosts[0].Proxmox.PrefixLength = 31
		}, []string{"hosts[0].proxmox.prefixLength"}, nil},
		{"an entry's loopback gateway", func(a *proxmox.ClusterArgs) {
			a.Hosts[0].Proxmox.Gateway = "127.0.0.1"
		}, []string{"hosts[0].proxmox.gateway"}, nil},
		{"node IPs outside their own host's network", func(a *proxmox.ClusterArgs) {
			a.Nodes[1].IP, a.Nodes[3].IP = "192.168.50.20", "10.10.0.22"
		}, []string{"nodes[1].ip", "nodes[3].ip"}, []string{"192.168.50.20 is outside the node network 10.10.0.0/24 of gateway 10.10.0.1"}},
		{"a node IP that is its own host's gateway", func(a *proxmox.ClusterArgs) { a.Nodes[2].IP = "192.168.50.1" },
			[]string{"nodes[2].ip"}, nil},
		{"one VM id twice on the entry", func(a *proxmox.ClusterArgs) { a.Nodes[3].VMID = 110 },
			[]string{"nodes[3].vmId"}, []string{"110 is already the VM id of nodes[2] on the same host"}},
		{"one VM id twice on the proxmox host", func(a *proxmox.ClusterArgs) { a.Nodes[1].VMID = 110 },
			[]string{"nodes[1].vmId"}, []string{"110 is already the VM id of nodes[0] on the same host"}},
		{"one IP on two hosts of one network", func(a *proxmox.ClusterArgs) {
			sameNetwork(a)
			a.Nodes[2].IP = "10.10.0.20"
		}, []string{"nodes[2].ip"}, []string{"already the IP of nodes[1]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := hostsArgs()
			tc.edit(a)
			paths, msgs := problemsAt(a)
			assert.ElementsMatch(t, tc.paths, paths, "%v", msgs)
			for _, s := range tc.says {
				assert.Contains(t, msgs[tc.paths[0]], s)
			}
		})
	}
}

// The component refuses what Problems reports, before it registers
// anything.
func TestHostsProblemsRefuseTheCluster(t *testing.T) {
	t.Parallel()
	a := hostsArgs()
	a.Nodes[3].Host = "lab"
	a.Cluster.KubeSpan = nil
	e := &componentstest.Engine{}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		_, err := proxmox.NewClusterWithDeps(ctx, "homelab", a, proxmox.Deps{Hooks: &componentstest.Hooks{}, API: blockingAPI{},
			HostAPIs: proxmox.HostAPIs{"office": blockingAPI{}}, Talos: talos.Deps{Hooks: &componentstest.Hooks{}}})
		return err
	}, pulumi.WithMocks("talos-cluster", "test", e))
	var ie *inputs.Error
	require.ErrorAs(t, err, &ie)
	assert.ElementsMatch(t, []string{"nodes[3].host", "cluster.kubeSpan.enabled"}, ie.Paths(), "%v", err)
	assert.Empty(t, e.All(), "nothing may be registered")
}

// Nameservers default to the proxmox host's gateway only when every host
// has it: a host behind another router could not reach it.
func TestHostsNameserversDefault(t *testing.T) {
	t.Parallel()
	a := hostsArgs()
	assert.Nil(t, a.WithDefaults().Cluster.Nameservers, "another gateway on office")
	a.Hosts[0].Proxmox.Gateway = ""
	assert.Nil(t, a.WithDefaults().Cluster.Nameservers, "no gateway on office (DHCP's nameservers)")
	sameNetwork(a)
	assert.Equal(t, []string{"10.10.0.1"}, a.WithDefaults().Cluster.Nameservers, "one gateway for all")
	a.Hosts = nil
	assert.Equal(t, []string{"10.10.0.1"}, a.WithDefaults().Cluster.Nameservers, "no hosts, as before")

	d := hostsArgs().WithDefaults()
	assert.Equal(t, []string{"vmbr2", "fast", "isos", "ovmf", proxmox.DefaultCPUType, proxmox.AddressingDHCPReservation},
		[]string{d.Hosts[0].Proxmox.Bridge, d.Hosts[0].Proxmox.DiskDatastore, d.Hosts[0].Proxmox.ISODatastore,
			d.Hosts[0].Proxmox.BIOS, d.Hosts[0].Proxmox.CPUType, d.Hosts[0].Proxmox.Addressing}, "an entry's own settings, defaulted")
	assert.Equal(t, proxmox.DefaultPrefixLength, d.Hosts[0].Proxmox.PrefixLength)
	assert.Equal(t, proxmox.DefaultDNSMasqDir, d.Hosts[0].Proxmox.DNSMasq.ConfigDir)
	assert.Equal(t, proxmox.DefaultSSHUser, d.Hosts[0].Proxmox.DNSMasq.SSH.User)
}

// The TalosCluster's nodes: each placed on its host's Proxmox node, with
// its host's region and its Proxmox node's zone, its host in what replaces
// its VM, and its host's network with static addressing.
func TestHostsTalosNodes(t *testing.T) {
	t.Parallel()
	a := hostsArgs()
	a.Proxmox.Addressing, a.Hosts[0].Proxmox.Addressing = proxmox.AddressingStatic, proxmox.AddressingStatic
	a.Hosts[0].Proxmox.PrefixLength = 26
	d := a.WithDefaults()
	nodes := d.TalosArgs(nil).Nodes
	require.Len(t, nodes, 4)
	for i, want := range []struct {
		host, region, address, gateway string
		onEntry                        bool
	}{
		{"pve", proxmox.DefaultCSIRegion, "10.10.0.10/24", "10.10.0.1", false},
		{"pve", proxmox.DefaultCSIRegion, "10.10.0.20/24", "10.10.0.1", false},
		{"office/pve", "office", "192.168.50.21/26", "192.168.50.1", true},
		{"office/pve-b", "office", "192.168.50.22/26", "192.168.50.1", true},
	} {
		n, ref := nodes[i], d.Nodes[i]
		assert.Equal(t, want.host, n.Host, n.Name)
		assert.Equal(t, []string{proxmox.TopologyPatch(want.region, ref)}, n.PlatformPatches, n.Name)
		assert.Contains(t, n.PlatformPatches[0], "topology.kubernetes.io/region: "+want.region, n.Name)
		assert.Contains(t, n.PlatformPatches[0], "topology.kubernetes.io/zone: "+ref.ProxmoxNode, n.Name)
		assert.Equal(t, want.onEntry, strings.HasSuffix(n.Machine, ", host office"), "%s: %s", n.Name, n.Machine)
		assert.Contains(t, n.Machine, fmt.Sprintf("proxmox node %s, vmId %d", ref.ProxmoxNode, ref.VMID))
		assert.False(t, n.Network.DHCP, n.Name)
		assert.Equal(t, []string{want.address}, n.Network.Addresses, n.Name)
		require.Len(t, n.Network.Routes, 1, n.Name)
		assert.Equal(t, talos.Route{Network: "0.0.0.0/0", Gateway: want.gateway}, n.Network.Routes[0], n.Name)
	}

	// Every node on one Proxmox node of an entry: one placement, no
	// topology patch, as on a single host.
	a = hostsArgs()
	a.Nodes = a.Nodes[2:3]
	a.Nodes[0].Role = talos.RoleControlPlane
	nodes = a.TalosArgs(nil).Nodes
	require.Len(t, nodes, 1)
	assert.Empty(t, nodes[0].PlatformPatches)
	assert.Equal(t, "office/pve", nodes[0].Host)

	// The proxmox host's pve and office's pve are two failure domains, but
	// office/pve and office/pve-b share a site (issue 48, item 12): office
	// cut off takes two of the three control planes.
	a = hostsArgs()
	a.Nodes[2].Role, a.Nodes[3].Role = talos.RoleControlPlane, talos.RoleControlPlane
	w := a.TalosArgs(nil).PlacementWarnings()
	require.Len(t, w, 1, "%q", w)
	assert.Contains(t, w[0], "2 of the 3 control planes run at site office (on office/pve, office/pve-b): if it fails, etcd loses its quorum")
	assert.Contains(t, w[0], "so that no site has more than 1")
	// On one Proxmox node there, the host is named, once.
	a.Nodes[3].ProxmoxNode = "pve"
	w = a.TalosArgs(nil).PlacementWarnings()
	require.Len(t, w, 1, "%q", w)
	assert.Contains(t, w[0], "2 of the 3 control planes run on host office/pve")

	// Two hosts entries at one site (one house, two standalone hosts):
	// the site is counted once, whatever the hosts.
	a = hostsArgs()
	dedi := *a.Hosts[0].Proxmox
	a.Hosts = append(a.Hosts, proxmox.Host{Name: "dedi", Proxmox: &dedi})
	a.Proxmox.Site, a.Hosts[0].Proxmox.Site = "home", "home"
	a.Nodes[2].Role, a.Nodes[3].Role, a.Nodes[3].Host = talos.RoleControlPlane, talos.RoleControlPlane, "dedi"
	w = a.TalosArgs(nil).PlacementWarnings()
	require.Len(t, w, 1, "%q", w)
	assert.Contains(t, w[0], "2 of the 3 control planes run at site home (on office/pve, pve)")
}

// hostsHarness is the two-host cluster under the mock engine, each host's
// hooks' API a fake Proxmox VE of its own holding the VMs it should.
type hostsHarness struct {
	engine       *componentstest.Engine
	hooks        *componentstest.Hooks
	home, office *pveapitest.Server
}

const hostsStackTags = "cluster-homelab;stack-test;talos"

func newHostsHarness(t *testing.T, edit func(a *proxmox.ClusterArgs)) *hostsHarness {
	t.Helper()
	iso := map[string]string{"ide2": "local:iso/talos.iso,media=cdrom"}
	vm := func(node, name, tags string) *pveapitest.VM {
		return &pveapitest.VM{Node: node, Name: name, Tags: tags, Running: true, Config: maps.Clone(iso)}
	}
	h := &hostsHarness{
		engine: &componentstest.Engine{}, hooks: &componentstest.Hooks{},
		home: pveapitest.New(t, map[int]*pveapitest.VM{
			110: vm("pve", "cp-0", hostsStackTags), 120: vm("pve", "worker-0", hostsStackTags),
		}),
		office: pveapitest.New(t, map[int]*pveapitest.VM{
			110: vm("pve", "worker-1", "cluster-homelab;host-office;stack-test;talos"),
			111: vm("pve-b", "worker-2", "cluster-homelab;host-office;stack-test;talos"),
		}),
	}
	a := hostsArgs()
	if edit != nil {
		edit(a)
	}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		_, err := proxmox.NewClusterWithDeps(ctx, "homelab", a, proxmox.Deps{
			Hooks: h.hooks, API: fakeClient(t, h.home), HostAPIs: proxmox.HostAPIs{"office": fakeClient(t, h.office)},
			Talos:    talos.Deps{Hooks: &componentstest.Hooks{}, Log: func(*pulumi.Context, pulumi.URN) talos.Logger { return &said{} }},
			FastStop: true,
		})
		return err
	}, pulumi.WithMocks("talos-cluster", "test", h.engine))
	require.NoError(t, err)
	return h
}

func fakeClient(t *testing.T, s *pveapitest.Server) *pveapi.Client {
	t.Helper()
	c, err := pveapi.New(s.URL, pveapitest.TokenID, pveapitest.TokenSecret,
		pveapi.Options{HTTPClient: s.Client(), Backoff: 5 * time.Millisecond, CallTimeout: 2 * time.Second})
	require.NoError(t, err)
	return c
}

func names(rs []componentstest.Registered) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Name)
	}
	sort.Strings(out)
	return out
}

func prop(v resource.PropertyValue, path ...string) resource.PropertyValue {
	for _, k := range path {
		v = talos.PlainValue(v)
		if !v.IsObject() {
			return resource.PropertyValue{}
		}
		v = v.ObjectValue()[resource.PropertyKey(k)]
	}
	return talos.PlainValue(v)
}

func stringsOf(v resource.PropertyValue) []string {
	var out []string
	for _, e := range talos.PlainValue(v).ArrayValue() {
		out = append(out, talos.PlainValue(e).StringValue())
	}
	return out
}

// onEntry says which nodes of hostsArgs run on the office entry.
var onEntry = map[string]bool{"cp-0": false, "worker-0": false, "worker-1": true, "worker-2": true}

func TestHostsUnderTheEngine(t *testing.T) {
	t.Parallel()
	h := newHostsHarness(t, nil)
	e := h.engine

	home := e.Named(t, componentstest.PVEProvider, "homelab-pve")
	office := e.Named(t, componentstest.PVEProvider, "homelab-pve-office")
	providerOf := map[bool]componentstest.Registered{false: home, true: office}

	t.Run("a provider per host, with its own API and token", func(t *testing.T) {
		assert.Equal(t, []string{"homelab-pve", "homelab-pve-office"}, names(e.ByType(componentstest.PVEProvider)))
		for _, tc := range []struct {
			p                 componentstest.Registered
			endpoint, token   string
			notToken, notHost string
		}{
			{home, "https://192.168.122.70:8006/", "root@pam!pulumi=" + homeSecret, officeSecret, "198.51.100.7"},
			{office, "https://198.51.100.7:8006/", "pulumi@pve!office=" + officeSecret, homeSecret, "192.168.122.70"},
		} {
			assert.Equal(t, tc.endpoint, tc.p.Inputs["endpoint"].StringValue(), tc.p.Name)
			tok := tc.p.Inputs["apiToken"]
			require.True(t, tok.IsSecret(), "%s: the token is a secret", tc.p.Name)
			assert.Equal(t, tc.token, talos.PlainValue(tok).StringValue(), tc.p.Name)
			assert.False(t, tc.p.Inputs["insecure"].BoolValue(), tc.p.Name)
		}
	})

	isoFile := proxmox.ISOFileName(proxmox.ISOFile{
		Stack: "test", Cluster: "homelab", TalosVersion: "v1.12.4", SchematicID: componentstest.SchematicID, Platform: "metal",
	})
	t.Run("an ISO per Proxmox node of each host, in the host's datastore, through its provider", func(t *testing.T) {
		isos := e.ByType(componentstest.Download)
		assert.Equal(t, []string{"homelab-iso-office/pve", "homelab-iso-office/pve-b", "homelab-iso-pve"}, names(isos))
		for _, tc := range []struct {
			name, node, store string
			entry             bool
		}{
			{"homelab-iso-pve", "pve", "local", false},
			{"homelab-iso-office/pve", "pve", "isos", true},
			{"homelab-iso-office/pve-b", "pve-b", "isos", true},
		} {
			iso := e.Named(t, componentstest.Download, tc.name)
			assert.Equal(t, tc.node, iso.Inputs["nodeName"].StringValue(), tc.name)
			assert.Equal(t, tc.store, iso.Inputs["datastoreId"].StringValue(), tc.name)
			assert.Equal(t, isoFile, iso.Inputs["fileName"].StringValue(), tc.name)
			assert.True(t, providerOf[tc.entry].Is(iso.Provider), "%s through %s, not %s", tc.name, providerOf[tc.entry].Name, iso.Provider)
		}
	})

	t.Run("reservations per host, each with its own nodes", func(t *testing.T) {
		dhcp := e.ByType(componentstest.RemoteCommand)
		assert.Equal(t, []string{"homelab-dhcp-reservations", "homelab-dhcp-reservations-office"}, names(dhcp))
		for _, tc := range []struct {
			name, sshHost, bridge string
			entry                 bool
		}{
			{"homelab-dhcp-reservations", "192.168.122.70", "vmbr1", false},
			{"homelab-dhcp-reservations-office", "198.51.100.7", "vmbr2", true},
		} {
			r := e.Named(t, componentstest.RemoteCommand, tc.name)
			assert.Equal(t, tc.sshHost, prop(r.Inputs["connection"], "host").StringValue(), tc.name)
			script := prop(r.Inputs["create"]).StringValue()
			assert.Contains(t, script, tc.bridge, "%s: dnsmasq's interface is the host's bridge", tc.name)
			assert.NotContains(t, script, map[string]string{"vmbr1": "vmbr2", "vmbr2": "vmbr1"}[tc.bridge], tc.name)
			stdin := prop(r.Inputs["stdin"]).StringValue()
			for node, entry := range onEntry {
				line := fmt.Sprintf("dhcp-host=%s,", proxmox.DeriveMAC("test", "homelab", node))
				if entry == tc.entry {
					assert.Contains(t, stdin, line, "%s reserves %s", tc.name, node)
				} else {
					assert.NotContains(t, stdin, line, "%s does not reserve %s", tc.name, node)
				}
			}
		}
	})

	t.Run("each VM on its host: provider, settings, tag, ISO and reservation", func(t *testing.T) {
		vms := e.ByType(componentstest.VM)
		assert.Equal(t, []string{"homelab-vm-cp-0", "homelab-vm-worker-0", "homelab-vm-worker-1", "homelab-vm-worker-2"}, names(vms))
		for _, v := range vms {
			node := strings.TrimPrefix(v.Name, "homelab-vm-")
			entry := onEntry[node]
			in := v.Inputs
			assert.True(t, providerOf[entry].Is(v.Provider), "%s through %s, not %s", v.Name, providerOf[entry].Name, v.Provider)
			tags := stringsOf(in["tags"])
			assert.True(t, slices.IsSorted(tags), "%s: %v", v.Name, tags)
			assert.Equal(t, entry, slices.Contains(tags, proxmox.HostTag("office")), "%s: %v", v.Name, tags)
			assert.Equal(t, entry, slices.ContainsFunc(tags, func(t string) bool { return strings.HasPrefix(t, proxmox.HostTagPrefix) }),
				"%s: only an entry's VMs carry a host tag: %v", v.Name, tags)
			assert.Subset(t, tags, proxmox.Tags("homelab", "test"), v.Name)

			bridge, disks, store, bios, at := "vmbr1", "local-lvm", "local", "seabios", ""
			dhcp := e.Named(t, componentstest.RemoteCommand, "homelab-dhcp-reservations")
			other := e.Named(t, componentstest.RemoteCommand, "homelab-dhcp-reservations-office")
			if entry {
				bridge, disks, store, bios, at = "vmbr2", "fast", "isos", "ovmf", "office/"
				dhcp, other = other, dhcp
			}
			iso := e.Named(t, componentstest.Download, "homelab-iso-"+at+in["nodeName"].StringValue())
			assert.Equal(t, bridge, prop(in["networkDevices"].ArrayValue()[0], "bridge").StringValue(), v.Name)
			for _, d := range in["disks"].ArrayValue() {
				assert.Equal(t, disks, prop(d, "datastoreId").StringValue(), v.Name)
			}
			assert.Equal(t, bios, in["bios"].StringValue(), v.Name)
			assert.Equal(t, entry, prop(in["efiDisk"]).IsObject(), "%s: an EFI disk with ovmf only", v.Name)
			if entry {
				assert.Equal(t, "fast", prop(in["efiDisk"], "datastoreId").StringValue(), v.Name)
			}
			assert.Equal(t, store+":iso/"+isoFile, prop(in["cdrom"], "fileId").StringValue(), v.Name)
			assert.True(t, e.After(v, iso), "%s after its ISO %s", v.Name, iso.Name)
			assert.True(t, e.After(v, dhcp), "%s after its reservations %s", v.Name, dhcp.Name)
			assert.False(t, e.After(v, other), "%s does not wait for the other host's reservations %s", v.Name, other.Name)
		}
		assert.Equal(t, 110.0, e.Named(t, componentstest.VM, "homelab-vm-worker-1").Inputs["vmId"].NumberValue(), "VM 110 on both hosts")
		assert.Equal(t, 110.0, e.Named(t, componentstest.VM, "homelab-vm-cp-0").Inputs["vmId"].NumberValue())
	})

	t.Run("ejects name their host", func(t *testing.T) {
		for node, entry := range onEntry {
			ej := e.Named(t, componentstest.LocalCommand, "homelab-eject-iso-"+node)
			env := talos.HookEnv(ej.Inputs)
			host, ok := env["PVE_HOST"]
			assert.Equal(t, entry, ok, "%s: PVE_HOST only on an entry's VM: %v", node, env)
			api := "https://192.168.122.70:8006/api2/json"
			if entry {
				assert.Equal(t, "office", host, node)
				api = "https://198.51.100.7:8006/api2/json"
			}
			assert.Equal(t, api, env["PVE_API"], node)
			assert.NotContains(t, fmt.Sprint(ej.Inputs.Mappable()), officeSecret, node)
		}
	})

	t.Run("topology labels of the nodes' hosts", func(t *testing.T) {
		for node, entry := range onEntry {
			patches := strings.Join(stringsOf(e.Named(t, componentstest.Apply, "homelab-apply-"+node).Inputs["configPatches"]), "\n---\n")
			region := map[bool]string{false: proxmox.DefaultCSIRegion, true: "office"}[entry]
			zone := map[string]string{"worker-2": "pve-b"}[node]
			if zone == "" {
				zone = "pve"
			}
			assert.Contains(t, patches, "topology.kubernetes.io/region: "+region, node)
			assert.Contains(t, patches, "topology.kubernetes.io/zone: "+zone, node)
			assert.Equal(t, 1, strings.Count(patches, "topology.kubernetes.io/region:"), node)
		}
	})

	t.Run("the fast stop goes to the VM's host's API", func(t *testing.T) {
		run := func(node string) error {
			v := e.Named(t, componentstest.VM, "homelab-vm-"+node)
			bound := h.hooks.On(v.Name)
			require.Len(t, bound, 1, v.Name)
			require.Equal(t, proxmox.FastStopHookName("homelab"), bound[0].Hook)
			// The engine runs it with the VM's old outputs: its inputs here.
			return bound[0].Fn(&pulumi.ResourceHookArgs{Name: v.Name, OldOutputs: v.Inputs})
		}
		require.NoError(t, run("worker-1"))
		assert.Equal(t, 1, h.office.StopCalls(110), "office's VM 110")
		assert.False(t, h.office.Running(110))
		assert.Zero(t, h.home.StopCalls(110), "not the proxmox host's VM 110")
		assert.True(t, h.home.Running(110))

		require.NoError(t, run("cp-0"))
		assert.Equal(t, 1, h.home.StopCalls(110))
		assert.Equal(t, 1, h.office.StopCalls(110), "office untouched")
	})

	t.Run("the ISO eject goes to the VM's host's API", func(t *testing.T) {
		eject := func(node string) error {
			r := e.Named(t, componentstest.LocalCommand, "homelab-eject-iso-"+node)
			bound := h.hooks.On(r.Name)
			require.Len(t, bound, 1, r.Name)
			require.Equal(t, "homelab"+proxmox.EjectHookSuffix, bound[0].Hook)
			in := r.Inputs.Copy()
			env := prop(in["environment"]).ObjectValue().Copy()
			vmid := e.Named(t, componentstest.VM, "homelab-vm-"+node).Inputs["vmId"].NumberValue()
			env["PVE_VMID"] = resource.NewStringProperty(strconv.Itoa(int(vmid)))
			in["environment"] = resource.NewObjectProperty(env)
			return bound[0].Fn(&pulumi.ResourceHookArgs{Name: r.Name, NewInputs: in})
		}
		require.NoError(t, eject("worker-1"))
		assert.Equal(t, "none,media=cdrom", h.office.ConfigValue(110, "ide2"), "office's VM 110 ejected")
		assert.Empty(t, h.home.ConfigUpdates(110), "not the proxmox host's VM 110")
		require.NoError(t, eject("worker-2"))
		assert.Equal(t, "none,media=cdrom", h.office.ConfigValue(111, "ide2"))

		require.NoError(t, eject("cp-0"))
		assert.Equal(t, "none,media=cdrom", h.home.ConfigValue(110, "ide2"))
		assert.Len(t, h.office.ConfigUpdates(110), 1, "office's VM 110 ejected once")

		// Every eject binding dispatches alike (the engine keeps the
		// first's function for all): the cp-0 binding ejects an office
		// VM when its environment names office.
		r := e.Named(t, componentstest.LocalCommand, "homelab-eject-iso-cp-0")
		fn := h.hooks.Hook("homelab" + proxmox.EjectHookSuffix)
		require.NotNil(t, fn)
		env := resource.PropertyMap{
			"PVE_NODE": resource.NewStringProperty("pve"), "PVE_VMID": resource.NewStringProperty("110"),
			"PVE_HOST": resource.NewStringProperty("lab"),
		}
		err := fn(&pulumi.ResourceHookArgs{Name: r.Name, NewInputs: resource.PropertyMap{"environment": resource.NewObjectProperty(env)}})
		require.Error(t, err, "an unknown host")
		assert.Contains(t, err.Error(), `host "lab" is no host of the cluster`)
		assert.Len(t, h.home.ConfigUpdates(110), 1)
		assert.Len(t, h.office.ConfigUpdates(110), 1)
	})
}

// A hosts entry without nodes keeps its provider (where the deletes of
// its last VMs go) and has nothing else.
func TestHostsEntryWithoutNodesKeepsItsProvider(t *testing.T) {
	t.Parallel()
	h := newHostsHarness(t, func(a *proxmox.ClusterArgs) {
		a.Hosts = append(a.Hosts, proxmox.Host{Name: "spare", Proxmox: &proxmox.HostSettings{
			Endpoint: "https://198.51.100.9:8006/", APITokenID: "root@pam!spare", APITokenSecret: pulumi.String(officeSecret),
			DNSMasq: &proxmox.DNSMasqSettings{SSH: proxmox.SSHSettings{Host: "198.51.100.9"}},
		}})
	})
	e := h.engine
	assert.Equal(t, []string{"homelab-pve", "homelab-pve-office", "homelab-pve-spare"}, names(e.ByType(componentstest.PVEProvider)))
	assert.Equal(t, "https://198.51.100.9:8006/", e.Named(t, componentstest.PVEProvider, "homelab-pve-spare").Inputs["endpoint"].StringValue())
	for _, r := range e.All() {
		if r.Type != componentstest.PVEProvider {
			assert.NotContains(t, r.Name, "spare", "%s %s", r.Type, r.Name)
		}
	}
	assert.Len(t, e.ByType(componentstest.RemoteCommand), 2, "no reservations without nodes")
}

// The fast stop of VMs on several hosts: each through the API its host
// tag names; a VM of a host the program does not know is the provider's
// to stop.
func TestFastStopHookOnHosts(t *testing.T) {
	t.Parallel()
	const stackTag = "stack-test"
	// The same VM on both, so that a stop through the wrong API would
	// succeed there, unseen but for the counts.
	both := func() map[int]*pveapitest.VM {
		return map[int]*pveapitest.VM{
			110: {Node: "pve", Name: "w-1", Tags: "host-office;stack-test;talos", Running: true},
			120: {Node: "pve", Name: "w-0", Tags: "stack-test;talos", Running: true},
		}
	}
	home, office := pveapitest.New(t, both()), pveapitest.New(t, both())
	hook := proxmox.FastStopHookOnHosts(proxmox.HostAPIs{"": fakeClient(t, home), "office": fakeClient(t, office)},
		stackTag, time.Minute, 10*time.Millisecond)
	state := func(vmid int, name string, tags ...string) resource.PropertyMap {
		var ts []resource.PropertyValue
		for _, t := range tags {
			ts = append(ts, resource.NewStringProperty(t))
		}
		return resource.PropertyMap{
			"nodeName": resource.NewStringProperty("pve"), "vmId": resource.NewNumberProperty(float64(vmid)),
			"name": resource.NewStringProperty(name), "tags": resource.NewArrayProperty(ts),
		}
	}

	// A host the program no longer knows: the provider's to stop, no
	// call to any API (every VM still runs).
	require.NoError(t, hook(&pulumi.ResourceHookArgs{Name: "homelab-vm-w-1", OldOutputs: state(110, "w-1", "host-lab", "stack-test", "talos")}))
	for _, s := range []*pveapitest.Server{home, office} {
		assert.Zero(t, s.StopCalls(110))
		assert.True(t, s.Running(110))
	}

	require.NoError(t, hook(&pulumi.ResourceHookArgs{Name: "homelab-vm-w-1", OldOutputs: state(110, "w-1", "host-office", "stack-test", "talos")}))
	assert.Equal(t, 1, office.StopCalls(110), "through office's API")
	assert.False(t, office.Running(110))
	assert.Zero(t, home.StopCalls(110), "not through the proxmox host's")
	assert.True(t, home.Running(110))

	require.NoError(t, hook(&pulumi.ResourceHookArgs{Name: "homelab-vm-w-0", OldOutputs: state(120, "w-0", "stack-test", "talos")}))
	assert.Equal(t, 1, home.StopCalls(120), "a VM without a host tag: the proxmox host's")
	assert.Zero(t, office.StopCalls(120))

	// Tags kept as a secret in the state name the host all the same:
	// office's VM 120 (running) is stopped there.
	st := state(120, "w-0")
	st["tags"] = resource.MakeSecret(resource.NewArrayProperty([]resource.PropertyValue{
		resource.NewStringProperty("host-office"), resource.NewStringProperty("stack-test"),
	}))
	require.NoError(t, hook(&pulumi.ResourceHookArgs{Name: "homelab-vm-w-0", OldOutputs: st}))
	assert.Equal(t, 1, office.StopCalls(120))
	assert.False(t, office.Running(120))
	assert.Equal(t, 1, home.StopCalls(120), "the proxmox host's, stopped once before")

	// Still not another stack's VM, whatever its host.
	err := hook(&pulumi.ResourceHookArgs{Name: "homelab-vm-w-1", OldOutputs: state(110, "w-1", "host-office", "stack-other")})
	require.ErrorIs(t, err, proxmox.ErrForeignVM)
	err = hook(&pulumi.ResourceHookArgs{Name: "homelab-vm-x", OldOutputs: state(120, "w-0", "host-lab")})
	require.ErrorIs(t, err, proxmox.ErrForeignVM, "an unknown host does not skip the stack's check")
}

func TestHostsVMRefFromStateReadsTheHost(t *testing.T) {
	t.Parallel()
	outs := func(tags ...string) resource.PropertyMap {
		var ts []resource.PropertyValue
		for _, t := range tags {
			ts = append(ts, resource.NewStringProperty(t))
		}
		return resource.PropertyMap{
			"nodeName": resource.NewStringProperty("pve"), "vmId": resource.NewNumberProperty(110),
			"name": resource.NewStringProperty("w-1"), "tags": resource.NewArrayProperty(ts),
		}
	}
	ref, err := proxmox.VMRefFromState(outs("cluster-homelab", "host-office", "stack-test", "talos"))
	require.NoError(t, err)
	assert.Equal(t, proxmox.VMRef{Node: "pve", VMID: 110, Name: "w-1", Host: "office",
		Tags: []string{"cluster-homelab", "host-office", "stack-test", "talos"}}, ref)
	ref, err = proxmox.VMRefFromState(outs("cluster-homelab", "stack-test", "talos"))
	require.NoError(t, err)
	assert.Empty(t, ref.Host, "the proxmox host's VM")

	assert.Equal(t, "host-office", proxmox.HostTag("office"))
	assert.Empty(t, proxmox.HostTag(""), "the proxmox host's VMs carry none")
	assert.Equal(t, proxmox.HostTagPrefix+"office", proxmox.HostTag("office"))
}

// TestHostsSharingAProxmoxNodeNameAreWarned: worker-1 on office's "pve"
// gets the zone of the proxmox host's "pve" nodes; Longhorn would take
// them for one failure domain, which the warning names. Distinct names
// are not warned.
func TestHostsSharingAProxmoxNodeNameAreWarned(t *testing.T) {
	t.Parallel()
	a := hostsArgs()
	a.Schematic.Extensions = []string{"siderolabs/qemu-guest-agent"} // no data disk: no Longhorn warning
	w := a.Warnings()
	require.Len(t, w, 1, "%q", w)
	assert.Contains(t, w[0], `nodes[2].proxmoxNode: Proxmox node "pve" is on the proxmox host and on host office`)
	assert.Contains(t, w[0], "topology.kubernetes.io/zone")

	a.Nodes[2].ProxmoxNode = "pve-a"
	assert.Empty(t, a.Warnings(), "distinct Proxmox node names")
	a.Hosts = nil
	a.Nodes = a.Nodes[:2]
	assert.Empty(t, a.Warnings(), "a single host has nothing to tell apart")
}

// TestHostsWithAllNodesOnOneHostNeedNoGateway: an entry that holds no
// node yet (one being set up) spans no networks: no gateway is required
// of either host, and no KubeSpan.
func TestHostsWithAllNodesOnOneHostNeedNoGateway(t *testing.T) {
	t.Parallel()
	a := hostsArgs()
	a.Nodes = a.Nodes[:2]
	a.Proxmox.Gateway = ""
	a.Cluster.KubeSpan = nil
	paths, msgs := problemsAt(a)
	assert.Empty(t, paths, "%v", msgs)
}

// TestHostGoneForGood: office marked gone. Its VMs, ISOs and reservations
// are registered retained on delete (their deletes drop them from the
// state without a call), its ISOs and reservations ignoring what a new
// version or node list would change there; the
// proxmox host's are as before. Its VMs' fast stop asks nothing, a warning
// says what to do next, and no new node may be placed there.
func TestHostGoneForGood(t *testing.T) {
	t.Parallel()
	h := newHostsHarness(t, func(a *proxmox.ClusterArgs) { a.Hosts[0].Gone = true })
	e := h.engine
	for _, r := range e.All() {
		gone := strings.Contains(r.Name, "office") || r.Name == "homelab-vm-worker-1" || r.Name == "homelab-vm-worker-2"
		switch r.Type {
		case componentstest.VM, componentstest.Download, componentstest.RemoteCommand:
			assert.Equal(t, gone, r.RetainOnDelete, "%s retained on delete only on the gone host", r.Name)
			assert.NotContains(t, r.IgnoreChanges, "*", "%s: a VM's state holds inputs bpg's own Check refuses", r.Name)
			want := map[string][]string{componentstest.Download: {"fileName", "url"}, componentstest.RemoteCommand: {"stdin", "connection"}}[r.Type]
			for _, in := range want {
				assert.Equal(t, gone, slices.Contains(r.IgnoreChanges, in), "%s ignores %s only on the gone host", r.Name, in)
			}
		}
	}
	stop := func(node string) error {
		v := e.Named(t, componentstest.VM, "homelab-vm-"+node)
		bound := h.hooks.On(v.Name)
		require.Len(t, bound, 1, v.Name)
		return bound[0].Fn(&pulumi.ResourceHookArgs{Name: v.Name, OldOutputs: v.Inputs})
	}
	require.NoError(t, stop("worker-1"))
	assert.Zero(t, h.office.StopCalls(110), "nothing asked of the gone host")
	assert.True(t, h.office.Running(110))
	require.NoError(t, stop("cp-0"))
	assert.Equal(t, 1, h.home.StopCalls(110), "the proxmox host's VMs are stopped as before")

	a := hostsArgs()
	a.Hosts[0].Gone = true
	w := a.Warnings()
	require.NotEmpty(t, w)
	assert.Contains(t, w[0], "hosts[0].gone: host office is gone for good")
	assert.Contains(t, w[0], "remove its nodes (worker-1, worker-2)")

	// The last run knew worker-1 and worker-2 there: they may stay until
	// removed; a new node there is refused.
	a.PreviousVMs = map[string]proxmox.PreviousVM{"cp-0": {}, "worker-0": {}, "worker-1": {}, "worker-2": {}}
	paths, msgs := problemsAt(a)
	assert.Empty(t, paths, "%v", msgs)
	a.Nodes = append(a.Nodes, proxmox.Node{Name: "worker-3", Role: talos.RoleWorker, IP: "192.168.50.23", ProxmoxNode: "pve", Host: "office", VMID: 112})
	paths, msgs = problemsAt(a)
	assert.Equal(t, []string{"nodes[4].host"}, paths)
	assert.Contains(t, msgs["nodes[4].host"], "is gone (hosts[0].gone): no new VM can be made there")
}

// TestHostsCSIPluginOnEachHost: the CSI plugin on a cluster of two Proxmox
// VE hosts. Each host gets its own role, user, ACLs (its datastore and its
// own VMs) and token through its own provider, the proxmox host's under
// the names of a one-host stack; the plugin knows both APIs, each as a
// cluster of its region, and each node carries its host's region in its
// labels and provider id.
func TestHostsCSIPluginOnEachHost(t *testing.T) {
	t.Parallel()
	h := newHostsHarness(t, func(a *proxmox.ClusterArgs) { a.CSI = &proxmox.CSISettings{Datastore: "local-zfs"} })
	e := h.engine
	home := e.Named(t, componentstest.PVEProvider, "homelab-pve")
	office := e.Named(t, componentstest.PVEProvider, "homelab-pve-office")
	for _, tc := range []struct {
		name     string
		provider componentstest.Registered
	}{
		{"homelab" + proxmox.CSITokenSuffix, home},
		{"homelab" + proxmox.CSITokenSuffix + "-office", office},
		{"homelab" + proxmox.CSIACLSuffix + "storage-local-zfs", home},
		{"homelab" + proxmox.CSIACLSuffix + "storage-local-zfs-office", office},
		{"homelab" + proxmox.CSIACLSuffix + "vms-110", home},
		{"homelab" + proxmox.CSIACLSuffix + "vms-120", home},
		{"homelab" + proxmox.CSIACLSuffix + "vms-110-office", office},
		{"homelab" + proxmox.CSIACLSuffix + "vms-111-office", office},
	} {
		var found *componentstest.Registered
		for _, r := range e.All() {
			if r.Name == tc.name {
				found = &r
			}
		}
		require.NotNil(t, found, "%s registered", tc.name)
		assert.True(t, tc.provider.Is(found.Provider), "%s through %s, not %s", tc.name, tc.provider.Name, found.Provider)
	}
	for _, r := range e.All() {
		assert.NotEqual(t, "homelab"+proxmox.CSIACLSuffix+"vms-111", r.Name, "office's VM 111 is granted on office only")
	}
	release := e.Named(t, componentstest.Release, "homelab"+proxmox.CSIReleaseSuffix)
	clusters := prop(release.Inputs["values"], "config", "clusters").ArrayValue()
	require.Len(t, clusters, 2, "a cluster per Proxmox VE API")
	assert.Equal(t, "proxmox", prop(clusters[0], "region").StringValue())
	assert.Equal(t, "https://192.168.122.70:8006/api2/json", prop(clusters[0], "url").StringValue())
	assert.Equal(t, "office", prop(clusters[1], "region").StringValue())
	assert.Equal(t, "https://198.51.100.7:8006/api2/json", prop(clusters[1], "url").StringValue())

	a := hostsArgs()
	a.CSI = &proxmox.CSISettings{Datastore: "local-zfs"}
	for _, n := range a.TalosArgs(nil).Nodes {
		region := map[bool]string{false: "proxmox", true: "office"}[strings.HasPrefix(n.Host, "office/")]
		vmid := map[string]string{"cp-0": "110", "worker-0": "120", "worker-1": "110", "worker-2": "111"}[n.Name]
		require.Len(t, n.PlatformPatches, 1, n.Name)
		assert.Contains(t, n.PlatformPatches[0], "topology.kubernetes.io/region: "+region, n.Name)
		assert.Contains(t, n.PlatformPatches[0], "proxmox://"+region+"/"+vmid, n.Name)
	}
}

// TestHostsCSIEndpoint (issue 48, item 10): the plugin's controller runs
// on the control planes, so it is given each host's csiEndpoint (default
// endpoint); a private address while a control plane is on another
// network is warned by key, a loopback one (a local port forward's) is
// refused.
func TestHostsCSIEndpoint(t *testing.T) {
	t.Parallel()
	a := hostsArgs()
	a.CSI = &proxmox.CSISettings{Datastore: "local-zfs"}
	a.Nodes[2].ProxmoxNode = "pve-a" // no zone shared: that warning apart
	assert.Empty(t, defaultedWarnings(a), "every control plane on the proxmox host's network")
	a.Nodes[2].Role = talos.RoleControlPlane
	w := defaultedWarnings(a)
	require.Len(t, w, 1, "%q", w)
	assert.Contains(t, w[0], "proxmox.csiEndpoint: the Proxmox CSI plugin's controller runs on the control planes, and worker-1 (host office) is on another network than the proxmox host's private address 192.168.122.70")
	a.Proxmox.CSIEndpoint = "https://pve.example.net:8006/"
	assert.Empty(t, defaultedWarnings(a), "a name: the operator's to make reachable")
	a.Proxmox.CSIEndpoint = "https://127.0.0.1:8006/"
	paths, msgs := problemsAt(a)
	assert.Equal(t, []string{"proxmox.csiEndpoint"}, paths)
	assert.Contains(t, msgs["proxmox.csiEndpoint"], "127.0.0.1 is a loopback address, which inside the cluster is the CSI plugin's own pod")
	a.Proxmox.CSIEndpoint = "http://pve:8006/"
	paths, _ = problemsAt(a)
	assert.Equal(t, []string{"proxmox.csiEndpoint"}, paths, "checked as endpoint is")

	h := newHostsHarness(t, func(a *proxmox.ClusterArgs) {
		a.CSI = &proxmox.CSISettings{Datastore: "local-zfs"}
		a.Proxmox.CSIEndpoint = "https://pve.example.net:8006"
	})
	clusters := prop(h.engine.Named(t, componentstest.Release, "homelab"+proxmox.CSIReleaseSuffix).Inputs["values"], "config", "clusters").ArrayValue()
	require.Len(t, clusters, 2)
	assert.Equal(t, "https://pve.example.net:8006/api2/json", prop(clusters[0], "url").StringValue())
	assert.Equal(t, "https://198.51.100.7:8006/api2/json", prop(clusters[1], "url").StringValue(), "office's default: its endpoint")
}

// TestCSIRegionChangeIsRefused (issue 48, item 16): the plugin's region
// is in every volume's handle (region/zone/storage/disk, proxmox-csi-plugin
// pkg/volume) and node affinity, so a region other than the last run's for
// the same API is refused by key; the same region, or another API, passes.
func TestCSIRegionChangeIsRefused(t *testing.T) {
	t.Parallel()
	a := hostsArgs()
	a.CSI = &proxmox.CSISettings{Datastore: "local-zfs", Region: "home"}
	a.PreviousCSIRegions = map[string]string{"https://192.168.122.70:8006/api2/json": "pve-home", "https://198.51.100.7:8006/api2/json": "office"}
	paths, msgs := problemsAt(a)
	assert.Equal(t, []string{"csi.region"}, paths)
	assert.Contains(t, msgs["csi.region"], `was "pve-home": the volumes the plugin made carry it in their handles and node affinity, so "home" would orphan them; keep "pve-home"`)
	a.CSI.Region = "pve-home"
	paths, _ = problemsAt(a)
	assert.Empty(t, paths)
	a.CSI.Region, a.PreviousCSIRegions = "home", map[string]string{"https://10.0.0.9:8006/api2/json": "pve-home"}
	paths, _ = problemsAt(a)
	assert.Empty(t, paths, "another API: nothing to compare")
}

// defaultedWarnings are the warnings of the arguments with their defaults,
// as NewCluster logs them.
func defaultedWarnings(a *proxmox.ClusterArgs) []string {
	d := a.WithDefaults()
	return d.Warnings()
}

// TestGoneHostsCSIGrantsLeaveWithoutACall (issue 48, item 9): with the CSI
// plugin, a gone host's role, user, ACLs and token are registered retained
// on delete and ignoring their inputs, as its VMs are, so that removing
// its nodes drops them from the state without a call to its dead API; the
// proxmox host's are as before.
func TestGoneHostsCSIGrantsLeaveWithoutACall(t *testing.T) {
	t.Parallel()
	h := newHostsHarness(t, func(a *proxmox.ClusterArgs) {
		a.CSI = &proxmox.CSISettings{Datastore: "local-zfs"}
		a.Hosts[0].Gone = true
	})
	// The types' tokens and input names as the proxmoxve SDK registers them.
	inputs := map[string][]string{
		"proxmoxve:Permission/role:Role": {"roleId", "privileges"}, "proxmoxve:Permission/user:User": {"userId", "comment"},
		"proxmoxve:index/acl:Acl": {"path", "roleId", "userId", "propagate"}, "proxmoxve:User/token:Token": {"userId", "tokenName", "privilegesSeparation", "comment"},
	}
	seen := map[bool]int{}
	for _, r := range h.engine.All() {
		want, csi := inputs[r.Type]
		if !csi {
			continue
		}
		gone := strings.HasSuffix(r.Name, "-office")
		seen[gone]++
		assert.Equal(t, gone, r.RetainOnDelete, "%s retained on delete only on the gone host", r.Name)
		for _, in := range want {
			assert.Equal(t, gone, slices.Contains(r.IgnoreChanges, in), "%s ignores %s only on the gone host", r.Name, in)
		}
	}
	assert.Equal(t, map[bool]int{false: 6, true: 6}, seen, "role, user, token and three ACLs on each host")
}
