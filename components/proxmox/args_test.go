package proxmox_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/image"
	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// The component checks its own inputs (another language's program reaches
// it without the stack file's validation): every problem at once, by its
// path in the schema, and nothing registered.
func TestProxmoxArgsAreChecked(t *testing.T) {
	t.Parallel()
	valid := func(t *testing.T) *proxmox.ClusterArgs {
		cfg, d := stacks.Load(stackstest.Example(t, stackstest.ProxmoxExample))
		require.NoError(t, d.Err())
		return program.ProxmoxArgs(cfg)
	}
	for _, tc := range []struct {
		name  string
		edit  func(a *proxmox.ClusterArgs)
		paths []string
	}{
		{"api", func(a *proxmox.ClusterArgs) {
			a.Proxmox.Endpoint, a.Proxmox.APITokenID, a.Proxmox.APITokenSecret = "pve:8006", "root@pam", nil
		}, []string{"proxmox.endpoint", "proxmox.apiTokenId", "proxmox.apiTokenSecret"}},
		{"vm settings", func(a *proxmox.ClusterArgs) {
			a.Proxmox.Bridge, a.Proxmox.BIOS, a.Proxmox.VLANID, a.Proxmox.Addressing = "vmbr 1", "uefi", 5000, "dhcp"
		}, []string{"proxmox.bridge", "proxmox.bios", "proxmox.vlanId", "proxmox.addressing"}},
		{"what Proxmox and Talos refuse, as the stack file does", func(a *proxmox.ClusterArgs) {
			a.Proxmox.APITokenID = "root@pam!"
			a.Proxmox.Bridge, a.Proxmox.DiskDatastore, a.Proxmox.ISODatastore = "vmbr-with-a-long-name", "local lvm", "1iso"
			a.Proxmox.CPUType = "kvm64"
			a.Nodes[0].ProxmoxNode = "pve_1"
			a.Nodes[1].Cores, a.Nodes[1].Memory, a.Nodes[1].DiskSize = proxmox.MaxCores+1, proxmox.MaxMemoryMiB+1, proxmox.MaxDiskGiB+1
			a.Nodes[2].DataDiskSize = proxmox.MaxDiskGiB + 1
		}, []string{"proxmox.apiTokenId", "proxmox.bridge", "proxmox.diskDatastore", "proxmox.isoDatastore", "proxmox.cpuType",
			"nodes[0].proxmoxNode", "nodes[1].cores", "nodes[1].memory", "nodes[1].diskSize", "nodes[2].dataDiskSize"}},
		// A pool's problems at the pool's inputs, once however many nodes
		// it has; its nodes are checked as nodes (here, their size and
		// taints, and a clash with a listed node's IP and VM id).
		{"pools", func(a *proxmox.ClusterArgs) {
			a.Pools = []proxmox.Pool{
				{Name: "gpu", Count: 3, IP: "10.10.0.40", VMID: 140, ProxmoxNode: "pve", Cores: proxmox.MaxCores + 1, Taints: map[string]string{"example.com/gpu": "Never"}},
				{Name: "Big_Pool", Count: 101, IP: "10.10.0.50", VMID: 150, ProxmoxNode: "pve"},
				{Name: "clash", Count: 2, IP: a.Nodes[2].IP, VMID: a.Nodes[2].VMID, ProxmoxNode: "pve"},
			}
		}, []string{"pools[0].cores", `pools[0].taints["example.com/gpu"]`, "pools[1].name", "pools[1].count", "pools[2].ip", "pools[2].vmId"}},
		{"static addressing without a gateway (the prefix length defaults to 24)", func(a *proxmox.ClusterArgs) {
			a.Proxmox.Addressing, a.Proxmox.PrefixLength, a.Proxmox.Gateway = proxmox.AddressingStatic, 0, ""
		}, []string{"proxmox.gateway"}},
		{"a /31 node network", func(a *proxmox.ClusterArgs) {
			a.Proxmox.Addressing, a.Proxmox.PrefixLength, a.Proxmox.Gateway = proxmox.AddressingStatic, 31, "10.10.0.1"
		}, []string{"proxmox.prefixLength"}},
		{"dnsmasq", func(a *proxmox.ClusterArgs) {
			a.Proxmox.DNSMasq.RestartCommand = "systemctl restart dnsmasq\nreboot"
			a.Proxmox.DNSMasq.SSH.Port = 70000
		}, []string{"proxmox.dnsmasq.restartCommand", "proxmox.dnsmasq.ssh.port"}},
		{"dnsmasq paths, as the stack file checks them", func(a *proxmox.ClusterArgs) {
			a.Proxmox.DNSMasq.ConfigDir, a.Proxmox.DNSMasq.LeaseFile = "etc/dnsmasq.d", "/var/lib/../misc/dnsmasq.leases"
			a.Proxmox.DNSMasq.RestartCommand = " "
		}, []string{"proxmox.dnsmasq.configDir", "proxmox.dnsmasq.leaseFile", "proxmox.dnsmasq.restartCommand"}},
		{"nodes", func(a *proxmox.ClusterArgs) {
			a.Nodes[1].VMID = a.Nodes[0].VMID
			a.Nodes[2].VMID, a.Nodes[2].Cores, a.Nodes[2].Memory, a.Nodes[2].DiskSize = 7, -1, 512, 2
			a.Nodes[2].ProxmoxNode = ""
		}, []string{"nodes[1].vmId", "nodes[2].vmId", "nodes[2].cores", "nodes[2].memory", "nodes[2].diskSize", "nodes[2].proxmoxNode"}},
		{"cluster and node basics, through TalosCluster's checks", func(a *proxmox.ClusterArgs) {
			a.Cluster.TalosVersion = "1.12"
			a.Nodes[1].IP = "10.0.0"
		}, []string{"cluster.talosVersion", "nodes[1].ip"}},
		{"where the addresses sit in the node network, with DHCP reservations too", func(a *proxmox.ClusterArgs) {
			a.Nodes[0].IP, a.Nodes[1].IP, a.Nodes[2].IP = "10.10.0.1", "10.20.0.20", "10.10.0.255"
			a.Cluster.VIP = "10.10.0.0"
		}, []string{"nodes[0].ip", "nodes[1].ip", "nodes[2].ip", "cluster.vip"}},
		{"a VIP that is the gateway", func(a *proxmox.ClusterArgs) { a.Cluster.VIP = a.Proxmox.Gateway }, []string{"cluster.vip"}},
		{"nothing follows from a loopback gateway, whose nameserver copy is not reported again", func(a *proxmox.ClusterArgs) {
			a.Proxmox.Gateway, a.Cluster.Nameservers = "127.0.0.1", []string{"127.0.0.1"}
		}, []string{"proxmox.gateway"}},
		{"a loopback nameserver of its own", func(a *proxmox.ClusterArgs) {
			a.Cluster.Nameservers = []string{"10.10.0.1", "::1"}
		}, []string{"cluster.nameservers[1]"}},
		{"API URLs the stack file refuses", func(a *proxmox.ClusterArgs) {
			a.Proxmox.Endpoint = "https://root:pw@pve:8006/"
		}, []string{"proxmox.endpoint"}},
		{"an API URL with the API path", func(a *proxmox.ClusterArgs) {
			a.Proxmox.Endpoint = "https://pve:8006/api2/json"
		}, []string{"proxmox.endpoint"}},
		{"an API URL's port", func(a *proxmox.ClusterArgs) {
			a.Proxmox.Endpoint = "https://pve:80060/"
		}, []string{"proxmox.endpoint"}},
		{"a given MAC that a derived one takes", func(a *proxmox.ClusterArgs) {
			a.Nodes[0].MAC = proxmox.DeriveMAC("test", a.Cluster.Name, a.Nodes[1].Name)
		}, []string{"nodes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := valid(t)
			tc.edit(args)
			m := &componentstest.Engine{}
			err := pulumi.RunErr(func(ctx *pulumi.Context) error {
				_, err := proxmox.NewClusterWithDeps(ctx, "lab", args, proxmox.Deps{Hooks: &componentstest.Hooks{}, Talos: talos.Deps{Hooks: &componentstest.Hooks{}}})
				return err
			}, pulumi.WithMocks("talos-cluster", "test", m))
			var ie *inputs.Error
			require.ErrorAs(t, err, &ie)
			assert.ElementsMatch(t, tc.paths, ie.Paths(), "%v", err)
			assert.Contains(t, err.Error(), `invalid arguments of ProxmoxCluster "lab"`)
			assert.Empty(t, m.All(), "nothing may be registered")
		})
	}
}

// What a program may leave out gets the defaults of a usual single Proxmox
// VE host, the stack file's: a YAML or TypeScript user need not restate
// them.
func TestProxmoxDefaults(t *testing.T) {
	t.Parallel()
	a := proxmox.ClusterArgs{
		Proxmox: proxmox.HostSettings{DNSMasq: &proxmox.DNSMasqSettings{SSH: proxmox.SSHSettings{Host: "pve"}}},
		Nodes:   []proxmox.Node{{Name: "cp-0", Role: talos.RoleControlPlane}, {Name: "w-0", Role: talos.RoleWorker, Cores: 8}},
	}
	d := a.WithDefaults()
	px := d.Proxmox
	assert.Equal(t, []string{"vmbr0", "local-lvm", "local", "host", "seabios", proxmox.AddressingDHCPReservation},
		[]string{px.Bridge, px.DiskDatastore, px.ISODatastore, px.CPUType, px.BIOS, px.Addressing})
	assert.Equal(t, proxmox.DNSMasqSettings{
		ConfigDir: "/etc/dnsmasq.d", LeaseFile: "/var/lib/misc/dnsmasq.leases", RestartCommand: "systemctl restart dnsmasq",
		SSH: proxmox.SSHSettings{Host: "pve", Port: 22, User: "root"},
	}, *px.DNSMasq)
	assert.Equal(t, []int{2, 4096, 20}, []int{d.Nodes[0].Cores, d.Nodes[0].Memory, d.Nodes[0].DiskSize}, "a control plane")
	assert.Equal(t, []int{8, 8192, 20}, []int{d.Nodes[1].Cores, d.Nodes[1].Memory, d.Nodes[1].DiskSize}, "a worker, its cores as given")
	assert.Empty(t, a.Proxmox.Bridge, "the caller's arguments are not changed")
	assert.Empty(t, a.Proxmox.DNSMasq.ConfigDir)
	assert.Zero(t, a.Nodes[0].Cores)
	assert.Equal(t, 24, px.PrefixLength)
	assert.Equal(t, proxmox.DefaultExtensions(), d.Schematic.Extensions, "neither an id nor extensions")
	assert.Nil(t, d.Cluster.Nameservers, "no gateway, no default nameserver: DHCP's")

	a.Proxmox.Gateway = "10.10.0.1"
	a.Schematic.Extensions = []string{}
	d = a.WithDefaults()
	assert.Equal(t, []string{"10.10.0.1"}, d.Cluster.Nameservers, "the gateway")
	assert.Empty(t, d.Schematic.Extensions, "an empty list: a plain image")
	a.Cluster.Nameservers = []string{"1.1.1.1"}
	a.Schematic = image.Schematic{ID: strings.Repeat("a", 64)}
	d = a.WithDefaults()
	assert.Equal(t, []string{"1.1.1.1"}, d.Cluster.Nameservers, "given ones stay")
	assert.Nil(t, d.Schematic.Extensions, "a given schematic id")
}

// A pool's nodes are workers after the listed nodes, named <pool>-<n> at
// consecutive addresses and VM ids, each a VM of the pool's size; the
// caller's arguments are not changed.
func TestAPoolIsWorkerVMs(t *testing.T) {
	t.Parallel()
	cfg, d := stacks.Load(stackstest.Example(t, stackstest.ProxmoxExample))
	require.NoError(t, d.Err())
	a := program.ProxmoxArgs(cfg)
	a.Pools = []proxmox.Pool{{Name: "gpu", Count: 2, IP: "10.10.0.40", VMID: 140, ProxmoxNode: "pve", Memory: 16384, Labels: map[string]string{"example.com/pool": "gpu"}}}
	listed := len(a.Nodes)
	m := &componentstest.Engine{}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		_, err := proxmox.NewClusterWithDeps(ctx, "lab", a, proxmox.Deps{Hooks: &componentstest.Hooks{}, Talos: talos.Deps{Hooks: &componentstest.Hooks{}}})
		return err
	}, pulumi.WithMocks("talos-cluster", "test", m))
	require.NoError(t, err)
	assert.Len(t, a.Nodes, listed, "the caller's nodes as they were")
	for i, name := range []string{"gpu-0", "gpu-1"} {
		vm := m.Named(t, componentstest.VM, "lab-vm-"+name)
		assert.Equal(t, float64(140+i), vm.Inputs["vmId"].NumberValue(), name)
		assert.Equal(t, float64(16384), vm.Inputs["memory"].ObjectValue()["dedicated"].NumberValue(), name)
		apply := m.Named(t, componentstest.Apply, "lab-apply-"+name)
		assert.Equal(t, fmt.Sprintf("10.10.0.4%d", i), apply.Inputs["node"].StringValue())
	}
}

// Longhorn data volumes on an image without the extensions Longhorn needs
// are a warning naming what is missing; the default extensions have them,
// the plain layout needs none, and a schematic id cannot be checked here.
func TestLonghornVolumesWarnOfMissingExtensions(t *testing.T) {
	t.Parallel()
	a := proxmox.ClusterArgs{
		Cluster: talos.ClusterSettings{Name: "lab", TalosVersion: "v1.12.4"},
		Nodes:   []proxmox.Node{{Name: "cp-0", Role: talos.RoleControlPlane}, {Name: "w-0", Role: talos.RoleWorker, DataDiskSize: 20}},
	}
	warn := func() []string { d := a.WithDefaults(); return d.Warnings() }
	assert.Empty(t, warn(), "the default extensions")

	a.Schematic.Extensions = []string{"siderolabs/qemu-guest-agent", "siderolabs/iscsi-tools"}
	w := warn()
	require.Len(t, w, 1)
	assert.Contains(t, w[0], "schematic.extensions: the workers' data disks are Longhorn volumes, and Longhorn needs siderolabs/util-linux-tools")
	assert.NotContains(t, w[0], "iscsi-tools and", "what is there is not named")

	a.Cluster.DataVolume = &talos.DataVolumeSettings{Layout: talos.LayoutPlain}
	assert.Empty(t, warn(), "a plain volume")

	a.Cluster.DataVolume = nil
	a.Schematic = image.Schematic{ID: strings.Repeat("a", 64)}
	w = warn()
	require.Len(t, w, 1)
	assert.Contains(t, w[0], "schematic.id: the workers' data disks are Longhorn volumes; make sure schematic")

	a.Nodes[1].DataDiskSize = 0
	assert.Empty(t, warn(), "no data disk")
}

// The VMs' Proxmox nodes are the TalosCluster's hosts: control planes
// that a host's loss would take etcd's quorum with are a warning naming
// the host.
func TestControlPlanesOnOneProxmoxNodeAreWarned(t *testing.T) {
	t.Parallel()
	a := proxmox.ClusterArgs{
		Cluster: talos.ClusterSettings{Name: "lab", TalosVersion: "v1.12.4"},
		Nodes: []proxmox.Node{
			{Name: "cp-0", Role: talos.RoleControlPlane, ProxmoxNode: "pve1"}, {Name: "cp-1", Role: talos.RoleControlPlane, ProxmoxNode: "pve1"},
			{Name: "cp-2", Role: talos.RoleControlPlane, ProxmoxNode: "pve2"}, {Name: "w-0", Role: talos.RoleWorker, ProxmoxNode: "pve3"},
		},
	}
	w := a.TalosArgs(nil).PlacementWarnings()
	require.Len(t, w, 1)
	assert.Contains(t, w[0], "2 of the 3 control planes run on host pve1")
	a.Nodes[1].ProxmoxNode = "pve3"
	assert.Empty(t, a.TalosArgs(nil).PlacementWarnings())
}
