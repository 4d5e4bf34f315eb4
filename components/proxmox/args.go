// Package proxmox holds the ProxmoxCluster component: Talos VMs on Proxmox VE.
package proxmox

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/image"
	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/servers"
	"github.com/fluodata/talos-pulumi/components/talos"
)

// ComponentName is how errors name the component.
const ComponentName = "ProxmoxCluster"

// Addressing modes of the VMs.
const (
	// AddressingDHCPReservation: DHCP (dnsmasq on the host hands each MAC
	// its reserved IP when Host.DNSMasq is on).
	AddressingDHCPReservation = "dhcp-reservation"
	// AddressingStatic: the nocloud image reads its address from the VM's
	// cloud-init drive.
	AddressingStatic = "static"
)

// ClusterArgs are the inputs of a ProxmoxCluster: the cluster settings, the
// image, the Proxmox VE hosts (proxmox, and hosts entries, which may be
// rented servers instead) and the nodes, each a VM on one of them or a
// rented server. Optional inputs left out take WithDefaults' values.
type ClusterArgs struct {
	// Cluster holds the cluster-wide Talos and Kubernetes settings.
	Cluster talos.ClusterSettings `pulumi:"cluster"`
	// Schematic selects the Image Factory schematic (an id, or extensions
	// to register one from); with neither, the extensions the VMs need:
	// siderolabs/qemu-guest-agent (clean VM status and shutdown), and
	// iscsi-tools and util-linux-tools for Longhorn.
	Schematic image.Schematic `pulumi:"schematic"`
	// Proxmox is the API, host and VM settings shared by every VM that
	// names no other host (Node.Host).
	Proxmox HostSettings `pulumi:"proxmox"`
	// Hosts are further Proxmox VE hosts (or PVE clusters) that are not
	// the proxmox one's cluster, each with its own API, token,
	// datastores, bridge, network and reservations; a node names its own
	// with Node.Host. Several hosts on different networks need
	// cluster.kubeSpan (WireGuard between them) and refuse a VIP.
	Hosts []Host `pulumi:"hosts,optional"`
	// Nodes are the VMs, control planes first; the first is bootstrapped.
	Nodes []Node `pulumi:"nodes"`
	// Pools are the groups of alike workers, each Count VMs named
	// <name>-<n>, after the nodes; a lower Count removes the
	// highest-numbered ones, as removing them from Nodes would.
	Pools []Pool `pulumi:"pools,optional"`
	// CSI installs the Proxmox CSI plugin and a StorageClass on one
	// datastore; none when unset.
	CSI *CSISettings `pulumi:"csi,optional"`

	// Previous is the cluster as the last `up` left it (Go only, read by
	// the program from the stack's outputs): TalosCluster refuses changes
	// a rollout cannot make safely against it.
	Previous *talos.Previous
	// PreviousVMs are the nodes' VMs as the last `up` left them, by node
	// name (Go only, read by the program from the stack's state): disk
	// changes the provider would get wrong are refused against them.
	PreviousVMs map[string]PreviousVM
	// PreviousCSIRegions are the Proxmox CSI plugin's regions as the last
	// `up` gave them, by API URL as the plugin was given it (Go only, read
	// by the program from the stack's state): a changed region is refused.
	PreviousCSIRegions map[string]string
	// InputName names an input path of the TalosCluster in the caller's
	// terms (Go only: the program's stack keys), for the warnings it logs;
	// see talos.ClusterArgs.InputName.
	InputName func(path string) string

	// listed is how many of Nodes were given as nodes, the pools' nodes
	// after them (WithDefaults), poolCounts how many each pool has.
	listed     int
	poolCounts []int
}

// Pool is a group of alike worker VMs (a node group): the n-th (from 0)
// is node <Name>-<n> at IP plus n with VM id VMID plus n, each with the
// pool's size, labels, taints and patches. Each VM gets its own MAC,
// derived from its name.
type Pool struct {
	// Name names the pool's nodes (<name>-<n>): a DNS label.
	Name string `pulumi:"name"`
	// Count is how many nodes the pool has (0-100).
	Count int `pulumi:"count"`
	// IP is the first node's IPv4 address; the others follow it.
	IP string `pulumi:"ip"`
	// VMID is the first node's VM id; the others follow it.
	VMID int `pulumi:"vmId"`
	// ProxmoxNode is the Proxmox node that runs the VMs.
	ProxmoxNode string `pulumi:"proxmoxNode"`
	// Host is the entry of Hosts the VMs run on (default: Proxmox); not
	// one of rented servers.
	Host string `pulumi:"host,optional"`
	// Cores are each VM's virtual CPU cores (default 4).
	Cores int `pulumi:"cores,optional"`
	// Memory is each VM's memory in MiB (default 8192).
	Memory int `pulumi:"memory,optional"`
	// DiskSize is each VM's boot disk size in GiB (default 20).
	DiskSize int `pulumi:"diskSize,optional"`
	// DataDiskSize is the size in GiB of each VM's second disk (0: none).
	DataDiskSize int `pulumi:"dataDiskSize,optional"`
	// InstallDisk is the disk Talos installs to (default /dev/sda).
	InstallDisk string `pulumi:"installDisk,optional"`
	// Patches are Talos patches of each of the pool's nodes.
	Patches []string `pulumi:"patches,optional" package:"input,secret"`
	// Labels are each node's Kubernetes labels, as a node's are.
	Labels map[string]string `pulumi:"labels,optional"`
	// Taints are each node's Kubernetes taints, as a node's are.
	Taints map[string]string `pulumi:"taints,optional"`
	// Schematic is the pool's own Image Factory schematic, as a node's
	// is.
	Schematic *image.Schematic `pulumi:"schematic,optional"`
}

// nodes are the pool's workers (inputs.PoolMembers).
func (pl Pool) nodes() []Node {
	var out []Node
	for _, m := range inputs.PoolMembers(pl.Name, pl.Count, pl.IP) {
		out = append(out, Node{
			Name: m.Name, Role: talos.RoleWorker, IP: m.IP, VMID: pl.VMID + m.Index,
			ProxmoxNode: pl.ProxmoxNode, Host: pl.Host, Cores: pl.Cores, Memory: pl.Memory, DiskSize: pl.DiskSize, DataDiskSize: pl.DataDiskSize,
			InstallDisk: pl.InstallDisk, Patches: pl.Patches, Labels: pl.Labels, Taints: pl.Taints, Schematic: pl.Schematic,
		})
	}
	return out
}

// checkPools records the problems of the pools' own inputs; their nodes'
// are checked with the nodes and named by the pool (NamePoolNodes).
func (a *ClusterArgs) checkPools(p *inputs.Problems) {
	for i, pl := range a.Pools {
		at := fmt.Sprintf("pools[%d]", i)
		p.CheckPool(at, pl.Name, pl.Count, pl.IP)
		if pl.Host != "" && a.serverSettings(pl.Host) != nil {
			p.Add(at+".host", "%q is rented servers, which cannot be a pool: each has its own address and rescue access; list them in nodes", pl.Host)
		}
	}
	p.NamePoolNodes(a.listed, a.poolCounts)
}

// HostSettings are the Proxmox API and the settings shared by the VMs.
type HostSettings struct {
	// Endpoint is the API URL, e.g. https://192.168.122.70:8006/.
	Endpoint string `pulumi:"endpoint" package:"input"`
	// APITokenID is the API token's id, user@realm!tokenname.
	APITokenID string `pulumi:"apiTokenId" package:"input"`
	// APITokenSecret is the token's secret (a UUID).
	APITokenSecret pulumi.StringInput `pulumi:"apiTokenSecret" provider:"secret"`
	// Insecure skips TLS verification of the API.
	Insecure bool `pulumi:"insecure,optional" package:"input"`
	// Bridge the VM NICs attach to (default vmbr0).
	Bridge string `pulumi:"bridge,optional"`
	// VLANID tags the NICs (0: untagged).
	VLANID int `pulumi:"vlanId,optional"`
	// DiskDatastore holds the VM disks (default local-lvm).
	DiskDatastore string `pulumi:"diskDatastore,optional"`
	// ISODatastore holds the Talos ISO (content type iso; default local).
	ISODatastore string `pulumi:"isoDatastore,optional"`
	// KeepISO leaves the ISO in the datastore on destroy.
	KeepISO bool `pulumi:"keepIso,optional"`
	// CPUType is the QEMU CPU type (host, x86-64-v2-AES or newer; default
	// host).
	CPUType string `pulumi:"cpuType,optional"`
	// BIOS is seabios or ovmf (UEFI, with an EFI disk; default seabios).
	BIOS string `pulumi:"bios,optional"`
	// Addressing is dhcp-reservation (the default) or static.
	Addressing string `pulumi:"addressing,optional"`
	// PrefixLength is the node network's (8-30; default 24), which static
	// addressing configures and where the node IPs and the VIP must sit.
	PrefixLength int `pulumi:"prefixLength,optional"`
	// Gateway is the nodes' IPv4 gateway, required for static addressing;
	// given, it is the default nameserver (cluster.nameservers).
	Gateway string `pulumi:"gateway,optional"`
	// DNSMasq writes the DHCP reservations on the host (nil: none).
	DNSMasq *DNSMasqSettings `pulumi:"dnsmasq,optional"`
	// Site is the place the host stands (a house, an office, a data
	// centre), a DNS label: hosts of one site share its power and uplink,
	// and hosts with the same gateway and prefix length share one network
	// only when they name the same site (default: the host's name).
	Site string `pulumi:"site,optional"`
	// CSIEndpoint is the API URL the Proxmox CSI plugin uses from inside
	// the cluster (default Endpoint): its controller runs on the control
	// planes, which may not reach the address this machine uses.
	CSIEndpoint string `pulumi:"csiEndpoint,optional"`
}

// Host is one more Proxmox VE host of the cluster.
type Host struct {
	// Name names the host in Node.Host, in messages and as its nodes'
	// topology.kubernetes.io/region: a DNS label.
	Name string `pulumi:"name"`
	// Proxmox is the host's API, VM settings, network and reservations,
	// as the proxmox input has them for the others; or VPS.
	Proxmox *HostSettings `pulumi:"proxmox,optional"`
	// VPS makes the entry rented servers installed from their provider's
	// rescue system, as a VpsCluster installs them (their nodes give
	// rescue, and gateway and prefixLength where vps gives none), instead
	// of a Proxmox VE host.
	VPS *servers.Settings `pulumi:"vps,optional"`
	// Gone says the host is lost for good: nothing calls its API or SSH
	// any more, and its VMs, ISOs and reservations are dropped from the
	// stack without a call once its nodes are removed (an `up` with it
	// set first records that in the state).
	Gone bool `pulumi:"gone,optional"`
}

// DNSMasqSettings are the DHCP reservations on the Proxmox host, written
// over SSH.
type DNSMasqSettings struct {
	// ConfigDir is the directory dnsmasq reads extra config from (default
	// /etc/dnsmasq.d).
	ConfigDir string `pulumi:"configDir,optional"`
	// RestartCommand makes dnsmasq read the reservations: one line of shell
	// (default systemctl restart dnsmasq).
	RestartCommand string `pulumi:"restartCommand,optional"`
	// LeaseFile is the dnsmasq lease file; stale leases are dropped from it
	// (default /var/lib/misc/dnsmasq.leases).
	LeaseFile string `pulumi:"leaseFile,optional"`
	// SSH reaches the host.
	SSH SSHSettings `pulumi:"ssh"`
}

// SSHSettings are SSH access to the Proxmox host.
type SSHSettings struct {
	// Host is the SSH host.
	Host string `pulumi:"host"`
	// Port is the SSH port (default 22).
	Port int `pulumi:"port,optional"`
	// User is the SSH user (default root).
	User string `pulumi:"user,optional"`
	// PrivateKey is the private key (PEM); the SSH agent when unset.
	PrivateKey pulumi.StringInput `pulumi:"privateKey,optional" provider:"secret"`
	// HostKey is the host's public key line (ed25519 or ECDSA), checked on
	// every connection; any key is accepted when empty.
	HostKey string `pulumi:"hostKey,optional"`
}

// Node is one VM.
type Node struct {
	// Name is the VM name, hostname and Kubernetes node name: a DNS label.
	Name string `pulumi:"name"`
	// Role is the node's machine type: controlplane or worker.
	Role talos.Role `pulumi:"role"`
	// IP is the node's IPv4 address.
	IP string `pulumi:"ip"`
	// ProxmoxNode is the Proxmox node (host) that runs the VM; required
	// but for a node on rented servers.
	ProxmoxNode string `pulumi:"proxmoxNode,optional"`
	// Host names the entry of hosts the VM runs on; the proxmox input's
	// host when empty.
	Host string `pulumi:"host,optional"`
	// VMID is the VM id, unique on the Proxmox cluster; required but for a
	// node on rented servers.
	VMID int `pulumi:"vmId,optional"`
	// MAC of the NIC; derived from the stack, cluster and node names when
	// empty (the same after a destroy and up).
	MAC string `pulumi:"mac,optional"`
	// Cores are the virtual CPU cores (default 2 for a control plane, 4 for
	// a worker).
	Cores int `pulumi:"cores,optional" package:"input"`
	// Memory in MiB (default 4096 for a control plane, 8192 for a worker).
	Memory int `pulumi:"memory,optional" package:"input"`
	// DiskSize is the boot disk's size in GiB (default 20).
	DiskSize int `pulumi:"diskSize,optional" package:"input"`
	// DataDiskSize is a second disk's size in GiB (0: none).
	DataDiskSize int `pulumi:"dataDiskSize,optional" package:"input"`
	// InstallDisk is the disk Talos installs itself to (default /dev/sda).
	InstallDisk string `pulumi:"installDisk,optional"`
	// Patches are this node's own machine-config patches (YAML).
	Patches []string `pulumi:"patches,optional" package:"input,secret"`
	// KubeSpanEndpoints are the extra addresses (ip:port) the other nodes reach
	// this node's KubeSpan at, e.g. a NAT's forwarded port; only with
	// cluster.kubeSpan.
	KubeSpanEndpoints []string `pulumi:"kubeSpanEndpoints,optional"`
	// Labels are the node's Kubernetes labels, set and kept by Talos
	// (machine.nodeLabels); a worker may not set labels under
	// kubernetes.io or k8s.io but the kubelet's own.
	Labels map[string]string `pulumi:"labels,optional"`
	// Taints are the node's Kubernetes taints, key to "Effect" or
	// "value:Effect" (NoSchedule, PreferNoSchedule, NoExecute); one
	// removed here is removed from the Node.
	Taints map[string]string `pulumi:"taints,optional"`
	// Schematic is the node's own Image Factory schematic, its keys left
	// out taken from the cluster's (e.g. only kernelArgs: the cluster's
	// extensions with them): the ISO its VM boots, the installer it
	// installs and upgrades with, and its guest agent (on with
	// siderolabs/qemu-guest-agent among its extensions).
	Schematic *image.Schematic `pulumi:"schematic,optional"`
	// Server holds what a node on a hosts entry of rented servers (vps)
	// has instead of a VM: its rescue system and addressing.
	Server *ServerNode `pulumi:"server,optional"`
}

// ServerNode is a node on a hosts entry of rented servers (vps): the keys
// of a VpsCluster's node that a VM does not have.
type ServerNode struct {
	// Rescue is SSH access to the rescue system its install runs in.
	Rescue servers.Rescue `pulumi:"rescue"`
	// Gateway is its IPv4 default gateway, where the entry's vps settings
	// give none.
	Gateway string `pulumi:"gateway,optional"`
	// PrefixLength is its network's length (8-32), where the entry's vps
	// settings give none.
	PrefixLength int `pulumi:"prefixLength,optional"`
}

// Deps are what the component talks to besides the engine: seams for tests
// and for the program, which builds them from the stack file. The zero value
// is the real engine and a client built from the arguments.
type Deps struct {
	// Hooks binds the fast-stop hooks to the VMs (the engine's when nil;
	// clusters may share one).
	Hooks Hooks
	// API is the Proxmox API the hooks stop VMs and eject ISOs with (a client for
	// Proxmox.Endpoint when nil).
	API API
	// HostAPIs are those of the hosts entries by name (a client for each
	// entry's endpoint when missing).
	HostAPIs HostAPIs
	// Probe tells whether a rented server already runs Talos in
	// maintenance mode (servers.TalosMaintenanceProbe when nil).
	Probe servers.MaintenanceProbe
	// Talos are the TalosCluster's seams (its day-2 hooks).
	Talos talos.Deps
	// FastStop binds the fast-stop hook to every VM (see bindFastStop):
	// a VM's delete hard-stops it through the Proxmox API, after the
	// node left the cluster when an edit replaces the VM (talos.Leaver).
	// Only a program that declares its cluster on every run, a destroy
	// too, may set it, as the stack-file program does: Pulumi finds a
	// deleted VM's hook by the name in its state, and a cluster removed
	// from a program registers none, so its VMs could not be deleted.
	// Without it the provider stops the VMs itself (stopOnDestroy: a
	// power-off, no guest shutdown) and a plain `pulumi destroy` works.
	FastStop bool
}

// withDefaults fills the seams left nil: the engine's hooks, and for each
// host a Proxmox client that is built once the token secret resolves (the
// hook runs at a VM's delete, long after).
func (d Deps) withDefaults(ctx *pulumi.Context, a *ClusterArgs) (Hooks, HostAPIs) {
	hooks := d.Hooks
	if hooks == nil {
		hooks = &talos.SDKHooks{Ctx: ctx}
	}
	apis := HostAPIs{"": d.API}
	if d.API == nil {
		px := a.Proxmox
		apis[""] = newTokenClient(px.Endpoint, px.APITokenID, px.Insecure, px.APITokenSecret)
	}
	for _, h := range a.Hosts {
		if h.Gone || h.VPS != nil {
			// Its VMs' hooks find no API: nothing is asked of it.
			continue
		}
		if api, ok := d.HostAPIs[h.Name]; ok {
			apis[h.Name] = api
			continue
		}
		px := h.settings()
		apis[h.Name] = newTokenClient(px.Endpoint, px.APITokenID, px.Insecure, px.APITokenSecret)
	}
	return hooks, apis
}

// TalosArgs are the TalosCluster's arguments for these VMs: every node's
// hostname pinned to its name in the machine config, whatever the
// addressing (a DHCP server that sends no hostname, another router than our
// dnsmasq, would leave the node a generated talos-xxx-yyy name, which the
// serving-certificate approver's name pattern never matches; Talos 1.12
// takes it as a HostnameConfig document, which does not clash with a name
// from DHCP). With static addressing the nocloud image reads the address
// from the cloud-init drive, and the machine config repeats it so that the
// installed system keeps it. The platform's node options are the caller's.
func (a *ClusterArgs) TalosArgs(installer pulumi.StringInput) *talos.ClusterArgs {
	t := &talos.ClusterArgs{
		Cluster: a.Cluster, InstallerImage: installer, Nodes: a.talosNodes(), Previous: a.Previous,
		Machines: talos.Machines{NodeNetwork: a.nodeNetwork(), NodeGateway: a.nodeGateway()}, InputName: a.InputName,
	}
	t.ReplacedInTurn = a.vmsReplacedInTurn(t)
	return t
}

// vmsReplacedInTurn are the nodes on VMs whose VM this run replaces, in
// the rollout's order: each VM is replaced once the node before it
// rejoined (see turns). A servers entry's machines are not among them.
func (a *ClusterArgs) vmsReplacedInTurn(t *talos.ClusterArgs) []string {
	var out []string
	for _, name := range t.ReplacementOrder() {
		i := slices.IndexFunc(a.Nodes, func(n Node) bool { return n.Name == name })
		if i >= 0 && a.serverSettings(a.Nodes[i].Host) == nil {
			out = append(out, name)
		}
	}
	return out
}

// talosNodes are the TalosCluster's nodes, one per VM, in order.
func (a *ClusterArgs) talosNodes() []talos.NodeSpec {
	spread := a.spansProxmoxNodes()
	nodes := make([]talos.NodeSpec, 0, len(a.Nodes))
	for _, n := range a.Nodes {
		if s := a.serverSettings(n.Host); s != nil {
			nodes = append(nodes, a.serverSpec(*s, n, spread))
			continue
		}
		px := a.settingsOf(n.Host)
		static := px.Addressing == AddressingStatic
		spec := talos.NodeSpec{
			Name:        n.Name,
			IP:          n.IP,
			Role:        n.Role,
			InstallDisk: n.InstallDisk,
			UserPatches: n.Patches,
			// KubeSpan's extra endpoints, announced through discovery.
			KubeSpanEndpoints: n.KubeSpanEndpoints,
			Labels:            n.Labels,
			Taints:            n.Taints,
			Network:           talos.NodeNetwork{DHCP: !static},
			Hostname:          n.Name,
			Host:              placement(n),
			Site:              a.siteOf(n.Host),
			Machine:           machineOf(n, px, a.Cluster.SecureBoot),
			// The VM's second SCSI disk (vm.go) becomes the user volume.
			DataDiskSize: n.DataDiskSize,
		}
		switch {
		case a.CSI != nil:
			spec.PlatformPatches = append(spec.PlatformPatches, CSINodePatch(a.regionOf(n.Host), n))
		case spread:
			spec.PlatformPatches = append(spec.PlatformPatches, TopologyPatch(a.regionOf(n.Host), n))
		}
		if static {
			spec.Network.Addresses = []string{fmt.Sprintf("%s/%d", n.IP, px.PrefixLength)}
			spec.Network.Routes = []talos.Route{{Network: "0.0.0.0/0", Gateway: px.Gateway}}
		}
		nodes = append(nodes, spec)
	}
	return nodes
}

// spansProxmoxNodes says the VMs run on more than one Proxmox node (of
// one host or several).
func (a *ClusterArgs) spansProxmoxNodes() bool {
	for _, n := range a.Nodes {
		if a.where(n) != a.where(a.Nodes[0]) {
			return true
		}
	}
	return false
}

// where is a node's failure domain: its Proxmox node, on its host when
// that is a hosts entry; a rented server is one of its own.
func (a *ClusterArgs) where(n Node) string {
	if a.onServer(n) {
		return placementOf(n.Host, n.Name)
	}
	return placement(n)
}

// machineOf names what of a node's VM the provider cannot change in place:
// a new value replaces the VM (bpg's VM resource: the vmId, the node
// without migration, the EFI disk that the BIOS adds or drops, the
// cloud-init drive of static addressing; another host's API; Secure Boot,
// whose TPM holds the keys of disks a new VM makes anew).
func machineOf(n Node, px HostSettings, secureBoot bool) string {
	m := fmt.Sprintf("proxmox node %s, vmId %d, bios %s, addressing %s", n.ProxmoxNode, n.VMID, px.BIOS, px.Addressing)
	if n.Host != "" {
		m += ", host " + n.Host
	}
	if secureBoot {
		m += ", secure boot"
	}
	return m
}

// checkEncryption refuses diskEncryption (VMs take secureBoot), and
// Secure Boot where a node cannot have it: a host whose VMs boot SeaBIOS
// (Secure Boot is UEFI's), and rented servers.
func (a *ClusterArgs) checkEncryption(p *inputs.Problems) {
	if a.Cluster.DiskEncryption != "" {
		p.Add("cluster.diskEncryption", "is for rented servers (platform vps), which have no TPM; Proxmox VMs have one: set cluster.secureBoot instead, whose keys only the VM's TPM unlocks")
	}
	if !a.Cluster.SecureBoot {
		return
	}
	for _, h := range a.hostViews() {
		switch {
		case h.VPS != nil:
			if len(h.Nodes) > 0 {
				p.Add("cluster.secureBoot", "hosts entry %q is rented servers: %s", h.Name, servers.SecureBootRefusal)
			}
		case h.Settings.BIOS != "ovmf":
			p.Add(h.Path+"bios", "%q cannot boot with cluster.secureBoot, which needs UEFI firmware: set ovmf, or leave bios out (ovmf is then the default)", h.Settings.BIOS)
		}
	}
}

// validate checks every input (the cluster's through TalosCluster's own
// checks) and the derived MACs, then the user's patches and Helm values,
// through the platforms' shared talos.ValidatePlatform, before anything is
// registered, and returns every node's MAC.
func (a *ClusterArgs) validate(name, stack string) (map[string]string, error) {
	var macs map[string]string
	check := func(p *inputs.Problems) { macs = a.check(p, stack) }
	talosArgs := func() *talos.ClusterArgs { return a.TalosArgs(nil) }
	if err := talos.ValidatePlatform(ComponentName, name, check, talosArgs, a.nodeNetwork()); err != nil {
		return nil, err
	}
	return macs, nil
}

// Problems are the invalid inputs of a (with its defaults) in a stack of
// that name, by input path, as NewCluster refuses them; the guard of the
// user's patches and Helm values aside (talos.ClusterArgs.CheckOverrides).
// A front-end (the stack file's) runs it before anything is registered
// and names the paths in its own terms.
func (a *ClusterArgs) Problems(stack string) []inputs.Problem {
	d := a.WithDefaults()
	var p inputs.Problems
	d.check(&p, stack)
	return p.List()
}

// check records the problems of the inputs and returns each node's MAC.
func (a *ClusterArgs) check(p *inputs.Problems, stack string) map[string]string {
	cluster := a.Cluster
	if len(cluster.Nameservers) == 1 && cluster.Nameservers[0] == a.Proxmox.Gateway {
		// The gateway (the stack file's default nameserver): checked as
		// such below, and reported once.
		cluster.Nameservers = nil
	}
	cluster.Check(p, "cluster.")
	a.Schematic.Check(p, "schematic")
	if a.CSI != nil {
		a.CSI.check(p, "csi.")
	}
	nodes := a.talosNodes()
	for i, n := range a.Nodes {
		if a.onServer(n) {
			// Its network is the VpsCluster's to check (checkServers), at
			// its own keys: not the addresses derived from them.
			nodes[i] = talos.NodeSpec{Name: n.Name, IP: n.IP, Role: n.Role, KubeSpanEndpoints: n.KubeSpanEndpoints, Labels: n.Labels, Taints: n.Taints, Host: nodes[i].Host, Site: nodes[i].Site}
		}
	}
	(&talos.ClusterArgs{
		Cluster: a.Cluster, Nodes: nodes, Previous: a.Previous,
		Machines: talos.Machines{NodeNetwork: a.nodeNetwork(), NodeGateway: a.nodeGateway(), ReplacedInTurn: a.TalosArgs(nil).ReplacedInTurn},
	}).CheckNodes(p, "")
	for _, h := range a.hostViews() {
		if h.VPS == nil {
			h.check(p)
		}
	}
	a.checkEncryption(p)
	a.checkHosts(p)
	a.csiHostProblems(p)
	a.checkServers(p)
	a.checkNetwork(p)
	type hostVMID struct {
		host string
		id   int
	}
	vmIDs := map[hostVMID]string{} // the node that has it first
	var macNodes []NodeMAC
	for i, n := range a.Nodes {
		at := fmt.Sprintf("nodes[%d].", i)
		if n.Schematic != nil {
			n.Schematic.CheckOver(p, at+"schematic", a.Schematic)
		}
		if a.onServer(n) {
			// A rented server: no VM (its own checks are vps's, checkHosts).
			continue
		}
		a.refuseServerKeys(p, at, n)
		if p.Required(at+"proxmoxNode", n.ProxmoxNode) && NodeNameProblem(n.ProxmoxNode) != "" {
			p.Add(at+"proxmoxNode", "%s", NodeNameProblem(n.ProxmoxNode))
		}
		// VM ids are each Proxmox VE cluster's own: two hosts may both
		// have a VM 101.
		switch first, dup := vmIDs[hostVMID{n.Host, n.VMID}]; {
		case n.VMID < MinVMID || n.VMID > MaxVMID:
			p.Add(at+"vmId", "%s", inputs.RangeProblem(n.VMID, MinVMID, MaxVMID))
		case dup:
			p.Add(at+"vmId", "%d is already the VM id of %s on the same host", n.VMID, first)
		default:
			vmIDs[hostVMID{n.Host, n.VMID}] = fmt.Sprintf("nodes[%d]", i)
		}
		n.checkSize(p, at)
		macNodes = append(macNodes, NodeMAC{Name: n.Name, MAC: n.MAC})
	}
	a.checkResizes(p)
	macs, clashes := NodeMACs(stack, a.Cluster.Name, macNodes)
	for _, c := range clashes {
		p.Add("nodes", "%s", c)
	}
	a.checkPools(p)
	return macs
}

// check records the problems of the host's API and VM settings and of
// its reservations, at its path.
func (h hostView) check(p *inputs.Problems) {
	px, at := h.Settings, h.Path
	if msg := EndpointProblem(px.Endpoint); msg != "" {
		p.Add(at+"endpoint", "%s", msg)
	}
	if px.CSIEndpoint != "" {
		if msg := EndpointProblem(px.CSIEndpoint); msg != "" {
			p.Add(at+"csiEndpoint", "%s", msg)
		}
	}
	if px.Site != "" && !inputs.IsDNSLabel(px.Site) {
		p.Add(at+"site", "%q is not a DNS label (lowercase letters, digits and '-')", px.Site)
	}
	switch {
	case px.APITokenID == "":
		p.Add(at+"apiTokenId", "is required, e.g. root@pam!pulumi")
	case !IsAPITokenID(px.APITokenID):
		p.Add(at+"apiTokenId", "%q is not a token id like user@realm!tokenname", px.APITokenID)
	}
	if px.APITokenSecret == nil {
		p.Add(at+"apiTokenSecret", "is required")
	}
	if p.Required(at+"bridge", px.Bridge) && !IsBridgeName(px.Bridge) {
		p.Add(at+"bridge", "%q is not a bridge name like vmbr0", px.Bridge)
	}
	checkDatastore(p, at+"diskDatastore", px.DiskDatastore)
	checkDatastore(p, at+"isoDatastore", px.ISODatastore)
	if msg := CPUTypeProblem(px.CPUType); msg != "" {
		p.Add(at+"cpuType", "%s", msg)
	}
	if px.VLANID < 0 || px.VLANID > MaxVLAN {
		p.Add(at+"vlanId", "%d is out of range 0-%d (a VLAN tag, or 0 for none)", px.VLANID, MaxVLAN)
	}
	if px.BIOS != "seabios" && px.BIOS != "ovmf" {
		p.Add(at+"bios", "%q is not seabios or ovmf", px.BIOS)
	}
	switch px.Addressing {
	case AddressingDHCPReservation, AddressingStatic:
	default:
		p.Add(at+"addressing", "%q is not %s or %s", px.Addressing, AddressingDHCPReservation, AddressingStatic)
	}
	dm := px.DNSMasq
	if dm == nil {
		return
	}
	if p.Required(at+"dnsmasq.configDir", dm.ConfigDir) {
		if msg := HostPathProblem(dm.ConfigDir, true); msg != "" {
			p.Add(at+"dnsmasq.configDir", "%s", msg)
		}
	}
	if p.Required(at+"dnsmasq.leaseFile", dm.LeaseFile) {
		if msg := HostPathProblem(dm.LeaseFile, false); msg != "" {
			p.Add(at+"dnsmasq.leaseFile", "%s", msg)
		}
	}
	if msg := RestartCommandProblem(dm.RestartCommand); msg != "" {
		p.Add(at+"dnsmasq.restartCommand", "%s", msg)
	}
	p.Required(at+"dnsmasq.ssh.host", dm.SSH.Host)
	dm.SSH.Check(p, at+"dnsmasq.ssh.")
}

// hostKeyInput is a pinned host key as the command provider's
// connection.hostKey, or nil (nothing checked) when none is pinned.
func hostKeyInput(key string) pulumi.StringPtrInput {
	if key == "" {
		return nil
	}
	return pulumi.String(key)
}

// checkSize records the problems of a node's cores, memory and disks
// (inputs under at): what Talos needs at least, what Proxmox VE accepts at
// most, and a data disk only on a worker.
func (n Node) checkSize(p *inputs.Problems, at string) {
	switch {
	case n.Cores < 1:
		p.Add(at+"cores", "%d: at least one core is required", n.Cores)
	case n.Cores > MaxCores:
		p.Add(at+"cores", "%d cores is more than %d, the most Proxmox VE offers a VM (and a VM cannot start with more vCPUs than its host has)", n.Cores, MaxCores)
	}
	switch {
	case n.Memory < MinMemoryMiB:
		p.Add(at+"memory", "%d MiB is below the %d MiB Talos needs", n.Memory, MinMemoryMiB)
	case n.Memory > MaxMemoryMiB:
		p.Add(at+"memory", "%d MiB is more than %d MiB (4 TiB), the most Proxmox VE gives a VM; memory is in MiB", n.Memory, MaxMemoryMiB)
	}
	switch {
	case n.DiskSize < MinDiskGiB:
		p.Add(at+"diskSize", "%d GiB is below the %d GiB Talos needs", n.DiskSize, MinDiskGiB)
	case n.DiskSize > MaxDiskGiB:
		p.Add(at+"diskSize", "%d GiB is more than %d GiB (128 TiB), the largest disk Proxmox VE offers; sizes are in GiB", n.DiskSize, MaxDiskGiB)
	}
	// 0 is a valid data disk size: none; a negative one is TalosCluster's
	// problem (checkDataVolume).
	switch {
	case n.DataDiskSize > 0 && n.Role == talos.RoleControlPlane:
		p.Add(at+"dataDiskSize", "data disks are for workers only")
	case n.DataDiskSize > MaxDiskGiB:
		p.Add(at+"dataDiskSize", "%d GiB is more than %d GiB (128 TiB), the largest disk Proxmox VE offers; sizes are in GiB", n.DataDiskSize, MaxDiskGiB)
	}
}

// Warnings are what the inputs allow but probably do not mean, by input
// path in the caller's terms: Longhorn data volumes on an image without the
// extensions Longhorn needs.
func (a *ClusterArgs) Warnings() []string {
	name := a.InputName
	if name == nil {
		name = func(path string) string { return path }
	}
	out := slices.Concat(a.goneWarnings(name), a.zoneWarnings(name), a.kubeSpanWarnings(name), a.csiWarnings(name))
	if !a.TalosArgs(nil).LonghornNodes() {
		return out
	}
	// The cluster's schematic, then each node's own that a worker with a
	// data disk boots (a pool's once).
	out = append(out, longhornWarnings(name, "schematic", a.Schematic)...)
	seen := map[string]bool{}
	for i, n := range a.Nodes {
		if n.Schematic == nil || n.Role != talos.RoleWorker || n.DataDiskSize == 0 {
			continue
		}
		w := longhornWarnings(name, fmt.Sprintf("nodes[%d].schematic", i), a.schematicOf(n))
		for _, msg := range w {
			if !seen[msg] {
				seen[msg] = true
				out = append(out, msg)
			}
		}
	}
	return out
}

// longhornWarnings say what of Longhorn's extensions the schematic at path
// (in the caller's terms through name) lacks, or that an id's cannot be
// told.
func longhornWarnings(name func(string) string, path string, s image.Schematic) []string {
	if s.ID != "" {
		return []string{fmt.Sprintf("%s: the workers' data disks are Longhorn volumes; make sure schematic %s carries %s, which Longhorn needs",
			name(path+".id"), s.ID, strings.Join(talos.LonghornExtensions, " and "))}
	}
	var missing []string
	for _, ext := range talos.LonghornExtensions {
		if !slices.Contains(s.Extensions, ext) {
			missing = append(missing, ext)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("%s: the workers' data disks are Longhorn volumes, and Longhorn needs %s: add it to the extensions, or set cluster.dataVolume.layout to plain",
		name(path+".extensions"), strings.Join(missing, " and "))}
}

// schematicOf is the node's schematic: its own over the cluster's
// (image.Schematic.Over), or the cluster's.
func (a *ClusterArgs) schematicOf(n Node) image.Schematic {
	if n.Schematic == nil {
		return a.Schematic
	}
	return n.Schematic.Over(a.Schematic)
}

// zoneWarnings are the Proxmox node names that two hosts share: each
// node's zone label is its Proxmox node, so Longhorn's zone anti-affinity
// (and the scheduler's topology spread) would take both hosts for one
// failure domain.
func (a *ClusterArgs) zoneWarnings(name func(string) string) []string {
	if len(a.Hosts) == 0 {
		return nil
	}
	first := map[string]string{} // the host of the first node in each zone
	var out []string
	for i, n := range a.Nodes {
		if a.onServer(n) {
			continue // a zone of its own: its name
		}
		host, seen := first[n.ProxmoxNode]
		switch {
		case !seen:
			first[n.ProxmoxNode] = n.Host
		case host != n.Host:
			out = append(out, fmt.Sprintf("%s: Proxmox node %q is on %s and on %s: both give their nodes the zone %s (topology.kubernetes.io/zone), so Longhorn and the scheduler take them for one failure domain; give the Proxmox nodes distinct names (their hostnames) where that matters",
				name(fmt.Sprintf("nodes[%d].proxmoxNode", i)), n.ProxmoxNode, hostLabel(host), hostLabel(n.Host), n.ProxmoxNode))
			first[n.ProxmoxNode] = n.Host
		}
	}
	return out
}

// checkDatastore records a missing or malformed datastore name at path.
func checkDatastore(p *inputs.Problems, path, store string) {
	if p.Required(path, store) && !IsDatastoreName(store) {
		p.Add(path, "%q is not a datastore name", store)
	}
}
