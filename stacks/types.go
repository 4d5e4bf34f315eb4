// Package stacks holds the typed stack configuration of this project: one
// Pulumi.<stack>.yaml per environment, loaded from the project's config
// namespace, given defaults and validated in one pass that reports every
// problem at once.
//
// Every field's doc comment describes its key (internal/godoc reads it, as it
// reads the components' inputs), and a `default` tag gives its default where
// it has one; docs/configuration.md and the stack file's JSON Schema are
// generated from them (`make docs`), and a test keeps them in sync.
package stacks

import "strings"

// Platform names the infrastructure a stack runs on.
type Platform string

const (
	// PlatformProxmox runs Talos in VMs on one or more Proxmox VE hosts.
	PlatformProxmox Platform = "proxmox"
	// PlatformVPS installs Talos on rented servers from their rescue system.
	PlatformVPS Platform = "vps"
	// PlatformLocal runs Talos in Docker containers on the operator's
	// machine.
	PlatformLocal Platform = "local"
)

// Platforms are the platforms a stack file may name, in the order the
// messages list them; program's platform registry has one entry each.
func Platforms() []Platform { return []Platform{PlatformProxmox, PlatformVPS, PlatformLocal} }

// platformList is Platforms as a message lists them: `proxmox` or `vps`.
func platformList() string {
	var names []string
	for _, p := range Platforms() {
		names = append(names, "`"+string(p)+"`")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Addressing modes for Proxmox VMs.
const (
	// AddressingDHCPReservation: dnsmasq on the Proxmox host hands each MAC its
	// reserved IP and hostname.
	AddressingDHCPReservation = "dhcp-reservation"
	// AddressingStatic: the Talos nocloud image reads its address from the VM's
	// Proxmox cloud-init drive; no DHCP server is needed.
	AddressingStatic = "static"
)

// Namespace is the stack file's config namespace: the project's name in
// Pulumi.yaml (a test keeps the two equal).
const Namespace = "talos-cluster"

// Config is the whole stack configuration. Each field is one top-level key in
// the project's config namespace (`talos-cluster:<key>`).
type Config struct {
	// Where the cluster runs: 'proxmox' (VMs on Proxmox VE), 'vps' (rented servers installed from
	// rescue mode) or 'local' (Docker containers on this machine, docs/local.md).
	Platform Platform `json:"platform" required:"true"`
	// The Talos/Kubernetes cluster, shared by both platforms.
	Cluster ClusterConfig `json:"cluster"`
	// The machines of the cluster.
	Nodes NodesConfig `json:"nodes"`
	// The Proxmox VE host(s); only for platform 'proxmox'.
	Proxmox ProxmoxConfig `json:"proxmox"`
	// Further Proxmox VE hosts of the cluster that are not 'proxmox''s PVE cluster, each with its own
	// API, token, datastores, bridge, network, reservations and SSH (docs/multi-host.md); a node names
	// its own with 'host'. Only for platform 'proxmox'.
	Hosts []HostConfig `json:"hosts"`
	// Settings of the rescue-mode install; only for platform 'vps'.
	VPS VPSConfig `json:"vps"`
	// The Docker containers of the nodes; only for platform 'local'.
	Local LocalConfig `json:"local"`
	// Encrypted backups of etcd, the stack's state and this file (docs/backup.md); none when left out.
	Backup BackupConfig `json:"backup"`
	// Storage for the workloads besides the workers' data disks (docs/storage.md).
	Storage StorageConfig `json:"storage"`
	// Hand the cluster to Argo CD after the bootstrap: Argo CD with KSOPS, the SOPS age key, the
	// repository credential and a root Application (docs/gitops.md); none when left out.
	GitOps GitOpsConfig `json:"gitops" rules:"component"`
}

// GitOpsConfig is the GitOps hand-off.
type GitOpsConfig struct {
	// The GitOps repository the root Application follows.
	Repository GitOpsRepositoryConfig `json:"repository" rules:"component"`
	// The age identity KSOPS decrypts the repository's SOPS files with: the text of an age keys.txt
	// (AGE-SECRET-KEY-1...; secret): 'pulumi config set --secret --path gitops.sopsAgeKey < keys.txt'.
	// None when left out.
	SopsAgeKey Secret `json:"sopsAgeKey" secret:"true"`
	// Argo CD's Helm chart (https://argoproj.github.io/argo-helm).
	ArgoCD ArgoCDConfig `json:"argoCd"`
	// The KSOPS image the repository server's init container runs 'ksops install --with-kustomize'
	// from (v4.5.1 or newer).
	KsopsImage string `json:"ksopsImage" default:"viaductoss/ksops:v4.5.1" rules:"component"`
	// Namespaces labelled for Pod Security's privileged level (created when missing) before Argo CD
	// syncs into them, e.g. 'longhorn-system'. Left out later: the labels go, the namespace stays.
	PrivilegedNamespaces []string `json:"privilegedNamespaces" rules:"component"`
	// Argo CD manages Cilium and the approver from the repository: 'up' installs them at the
	// bootstrap, then never changes or deletes their releases (cluster.cilium and cluster.certApprover
	// no longer apply).
	OwnsAddons bool `json:"ownsAddons" default:"false"`
}

// Enabled reports whether the section says anything.
func (c GitOpsConfig) Enabled() bool {
	return c.Repository != (GitOpsRepositoryConfig{}) || c.SopsAgeKey.IsSet() || c.ArgoCD.Version != "" || len(c.ArgoCD.Values) > 0 ||
		c.KsopsImage != "" || len(c.PrivilegedNamespaces) > 0 || c.OwnsAddons
}

// GitOpsRepositoryConfig is the repository and its credential.
type GitOpsRepositoryConfig struct {
	// The Git URL: 'https://github.com/me/gitops.git' or 'git@github.com:me/gitops.git'; required with
	// the section.
	URL string `json:"url" rules:"component"`
	// Branch, tag or commit the root Application follows.
	Revision string `json:"revision" default:"HEAD" rules:"component"`
	// Folder of the root Application's manifests in the repository.
	Path string `json:"path" default:"." rules:"component"`
	// User name for an https URL, with password.
	Username string `json:"username" rules:"component"`
	// Password or token for an https URL (secret): 'pulumi config set --secret --path
	// gitops.repository.password'.
	Password Secret `json:"password" secret:"true" rules:"component"`
	// Deploy key for an SSH URL, PEM or OpenSSH (secret): 'pulumi config set --secret --path
	// gitops.repository.sshPrivateKey < key'.
	SSHPrivateKey Secret `json:"sshPrivateKey" secret:"true"`
}

// ArgoCDConfig pins Argo CD's chart and adds values.
type ArgoCDConfig struct {
	// argo-cd chart version, without a 'v' prefix.
	Version string `json:"version" default:"10.1.1" rules:"component"`
	// Extra Helm values, merged over the ones KSOPS needs.
	Values map[string]any `json:"values"`
}

// StorageConfig is the cluster's storage plugins.
type StorageConfig struct {
	// The Proxmox CSI plugin (sergelogvinov/proxmox-csi-plugin): volumes as disks of a Proxmox
	// datastore, a StorageClass whose volumes are kept (Retain); platform 'proxmox' only; none when
	// left out.
	ProxmoxCSI ProxmoxCSIConfig `json:"proxmoxCsi" rules:"component"`
}

// ProxmoxCSIConfig installs the Proxmox CSI plugin.
type ProxmoxCSIConfig struct {
	// The Proxmox storage the volumes are disks of, e.g. 'local-zfs'; required with the section.
	Datastore string `json:"datastore"`
	// The StorageClass's name; default 'proxmox'.
	StorageClass string `json:"storageClass"`
	// The nodes' topology.kubernetes.io/region, the Proxmox cluster's name; default 'proxmox'. Their
	// zone is their proxmoxNode. Every volume carries it in its handle, so a change is refused once
	// the plugin ran.
	Region string `json:"region"`
	// The volumes' filesystem, 'ext4' (default) or 'xfs'.
	FsType string `json:"fsType"`
	// A Proxmox API token of yours for the plugin (user@realm!name), with tokenSecret; without, the
	// program makes a role with the plugin's five privileges, a user, ACLs on the datastore and the
	// cluster's VMs only, and a token.
	TokenID string `json:"tokenId"`
	// The secret of tokenId (secret): 'pulumi config set --secret --path
	// storage.proxmoxCsi.tokenSecret'.
	TokenSecret Secret `json:"tokenSecret" secret:"true"`
	// The plugin's Helm chart version; default 0.3.5.
	ChartVersion string `json:"chartVersion"`
}

// Enabled reports whether the section says anything.
func (c ProxmoxCSIConfig) Enabled() bool {
	return c.Datastore != "" || c.StorageClass != "" || c.Region != "" || c.FsType != "" || c.TokenID != "" || c.TokenSecret.IsSet() || c.ChartVersion != ""
}

// ClusterConfig describes the Talos cluster independently of the platform.
type ClusterConfig struct {
	// Cluster name: a DNS label (lowercase letters, digits, '-'), also used in VM tags, MACs and file
	// names.
	Name string `json:"name" required:"true" rules:"component"`
	// Talos version with the 'v' prefix, e.g. 'v1.13.9' (v1.8 or newer).
	TalosVersion string `json:"talosVersion" required:"true" rules:"component"`
	// Kubernetes version, e.g. '1.36.3'; empty means the default of the Talos release.
	KubernetesVersion string `json:"kubernetesVersion" rules:"component"`
	// Image Factory schematic: a given id, or one built from a list of system extensions.
	Schematic SchematicConfig `json:"schematic" rules:"component"`
	// Disk Talos installs itself to.
	InstallDisk string `json:"installDisk" default:"/dev/sda"`
	// Node network shared by all nodes.
	Network NetworkConfig `json:"network" rules:"component"`
	// Shared layer-2 virtual IP of the control planes (Proxmox); the Kubernetes endpoint when
	// 'endpoint' is empty.
	VIP string `json:"vip" rules:"component"`
	// Host name or IP in the Kubernetes API URL 'https://<endpoint>:6443'; default: the VIP (Proxmox)
	// or the first control plane's IP.
	Endpoint string `json:"endpoint"`
	// Cilium CNI Helm chart (https://helm.cilium.io).
	Cilium CiliumConfig `json:"cilium"`
	// Kubelet serving-certificate approver Helm chart (postfinance/kubelet-csr-approver).
	CertApprover ApproverConfig `json:"certApprover"`
	// Extra Talos machine-config patches (strategic merge), applied after the generated ones.
	Patches PatchesConfig `json:"patches"`
	// How upgrades and config changes reach running nodes (docs/day2.md): control planes always one at
	// a time.
	Rollout RolloutConfig `json:"rollout" rules:"component"`
	// What a worker's data disk (nodes.workers[].dataDiskSize) becomes: a Talos user volume at
	// /var/mnt/<name> (docs/storage.md).
	DataVolume DataVolumeConfig `json:"dataVolume"`
	// Talos's KubeSpan: a WireGuard mesh between the nodes, found through Talos's discovery service,
	// for nodes on networks that do not reach each other in the clear
	// (docs/talos-cluster.md#kubespan).
	KubeSpan KubeSpanConfig `json:"kubeSpan"`
	// Mirrors the nodes pull images from first, e.g. a pull-through cache on the operator's network.
	RegistryMirrors []RegistryMirrorConfig `json:"registryMirrors" rules:"component"`
	// Boot the nodes from Talos's signed Secure Boot image, with a TPM 2.0 that seals the LUKS2 keys of
	// STATE, EPHEMERAL and the data volume (docs/secure-boot.md). Platform proxmox only (its VMs run
	// OVMF); Talos v1.11 or newer. Turning it on or off replaces each VM as a new machine, one at a
	// time.
	SecureBoot bool `json:"secureBoot" default:"false" rules:"component"`
	// Encrypt STATE, EPHEMERAL and the data volume with LUKS2 where Secure Boot cannot be had: 'nodeID',
	// a key derived from each node's UUID (docs/secure-boot.md). Weaker than secureBoot: whoever holds a
	// disk and learns its machine's UUID (the hosting provider does) unlocks it. Platform vps only; Talos
	// v1.11 or newer. Set it when the cluster is made: a running node keeps the encryption it has.
	DiskEncryption string `json:"diskEncryption" rules:"component"`
	// Addresses for Services of type LoadBalancer: Cilium hands them out of these pools and answers
	// ARP for them on the node network (L2 announcements; docs/load-balancer.md). Platforms proxmox
	// and local; none when left out.
	LoadBalancer LoadBalancerConfig `json:"loadBalancer" rules:"component"`
}

// RegistryMirrorConfig is one registry's mirrors.
type RegistryMirrorConfig struct {
	// The registry whose pulls go to the mirrors, as images name it ('docker.io', 'ghcr.io',
	// 'registry.local:5000'), or '*' for every registry.
	Registry string `json:"registry" required:"true" rules:"component"`
	// The mirrors' URLs ('http://10.5.0.1:5000', 'https://...'), tried in order.
	Endpoints []string `json:"endpoints" required:"true" rules:"component"`
	// Pull nothing from the registry itself when no mirror has the image.
	SkipFallback bool `json:"skipFallback" default:"false" rules:"component"`
}

// KubeSpanConfig turns KubeSpan on.
type KubeSpanConfig struct {
	// Join the nodes in the KubeSpan mesh (and turn on the cluster discovery it needs); on a VPS the
	// firewall opens UDP 51820 to the cluster's nodes.
	Enabled bool `json:"enabled" default:"false"`
}

// LoadBalancerConfig is the LoadBalancer address pools and who announces
// them.
type LoadBalancerConfig struct {
	// The address pools (at least one with the section).
	Pools []LBPoolConfig `json:"pools" rules:"component"`
	// Node interfaces that announce the addresses, as regular expressions (e.g. '^ens[0-9]+': Talos
	// names a Proxmox VM's virtio NIC ens18); every interface Cilium manages when left out. A regular
	// expression that matches no NIC leaves the addresses unannounced.
	Interfaces []string `json:"interfaces" rules:"component"`
	// Names of the nodes that may announce the addresses (one at a time, by lease); every node when
	// left out.
	Nodes []string `json:"nodes" rules:"component"`
}

// Enabled reports whether the section says anything.
func (c LoadBalancerConfig) Enabled() bool {
	return len(c.Pools) > 0 || len(c.Interfaces) > 0 || len(c.Nodes) > 0
}

// LBPoolConfig is one pool of LoadBalancer addresses.
type LBPoolConfig struct {
	// The pool's name (its CiliumLoadBalancerIPPool's): a DNS label, unique.
	Name string `json:"name" required:"true" rules:"component"`
	// The pool's addresses: IPv4 CIDRs ('192.168.1.240/28') or first-last ranges
	// ('192.168.1.240-192.168.1.250'), inside the node network and clear of the nodes, the VIP, the
	// gateway, your DHCP server's range and the other pools.
	Blocks []string `json:"blocks" required:"true" rules:"component"`
	// Labels (name: value) a Service must have to get an address of this pool; every Service when left
	// out.
	ServiceSelector map[string]any `json:"serviceSelector"`
	// Your router sends the pool's addresses to the nodes (a static route): the blocks lie outside the
	// node network, where nobody asks for them by ARP (the announcement policy, which selects Services
	// and not pools, still covers their Services).
	Routed bool `json:"routed" default:"false" rules:"component"`
}

// DataVolumeConfig is what the workers' data disks become.
type DataVolumeConfig struct {
	// The volume's name: it is mounted at /var/mnt/<name>; letters, digits and '-', at most 34
	// characters.
	Name string `json:"name" default:"longhorn" rules:"component"`
	// 'longhorn': the volume and the kubelet's rshared mount of it that Longhorn needs (set Longhorn's
	// default data path to /var/mnt/<name>); 'plain': the volume alone.
	Layout string `json:"layout" default:"longhorn" enum:"longhorn,plain" rules:"component"`
}

// RolloutConfig shapes the rollout of a change to running nodes.
type RolloutConfig struct {
	// How many workers take a change (an upgrade, a config apply) at once.
	WorkerParallelism int `json:"workerParallelism" default:"1"`
}

// SchematicConfig selects the Talos Image Factory schematic.
type SchematicConfig struct {
	// An existing schematic id (64 hex digits); excludes 'extensions'.
	ID string `json:"id"`
	// Official system extensions to build a schematic from.
	Extensions []string `json:"extensions" default:"proxmox: siderolabs/qemu-guest-agent, siderolabs/iscsi-tools, siderolabs/util-linux-tools; vps: none"`
	// Extra kernel arguments the images boot with (the ISO, the disk image, the installed system), in
	// order, one per item, e.g. console=ttyS0; excludes 'id'.
	KernelArgs []string `json:"kernelArgs"`
}

// NodeSchematicConfig is a node's or pool's own schematic.
type NodeSchematicConfig struct {
	// An existing schematic id (64 hex digits): the whole schematic, nothing taken from the cluster's;
	// excludes 'extensions' and 'kernelArgs'.
	ID string `json:"id"`
	// Official system extensions; with a Proxmox VM's, keep siderolabs/qemu-guest-agent (its VM's
	// agent is on only with it), and Longhorn's on workers with data disks.
	Extensions []string `json:"extensions" default:"the cluster's"`
	// Extra kernel arguments, in order, one per item.
	KernelArgs []string `json:"kernelArgs" default:"the cluster's"`
}

// NetworkConfig is the node network.
type NetworkConfig struct {
	// IPv4 default gateway of the nodes (a VPS node may override it); on platform local, the Docker
	// network's gateway, this machine's address on it (default 10.5.0.1 when prefixLength is left out
	// too).
	Gateway string `json:"gateway" required:"true"`
	// Prefix length of the node network (a VPS node may override it).
	PrefixLength int `json:"prefixLength" default:"proxmox: 24; vps: 32; local: 24"`
	// DNS servers of the nodes.
	Nameservers []string `json:"nameservers" default:"proxmox: the gateway; vps: 1.1.1.1, 9.9.9.9; local: Docker's resolver (the host's)"`
}

// CiliumConfig pins the Cilium chart and adds values.
type CiliumConfig struct {
	// Cilium chart version, without a 'v' prefix.
	Version string `json:"version" default:"1.18.4" rules:"component"`
	// Extra Helm values, merged over the ones Talos needs.
	Values map[string]any `json:"values"`
}

// ApproverConfig pins the kubelet-csr-approver chart and adds values.
type ApproverConfig struct {
	// kubelet-csr-approver chart version, without a 'v' prefix.
	Version string `json:"version" default:"1.2.10" rules:"component"`
	// Extra Helm values, merged over the ones this project sets.
	Values map[string]any `json:"values"`
}

// PatchesConfig holds user patches per scope.
type PatchesConfig struct {
	// Patches for every node.
	All []Patch `json:"all"`
	// Patches for control-plane nodes.
	ControlPlane []Patch `json:"controlPlane"`
	// Patches for worker nodes.
	Worker []Patch `json:"worker"`
}

// Patch is one Talos strategic-merge patch, given in the stack file either as
// a YAML/JSON object or as a (possibly multi-document) YAML string.
type Patch struct {
	// YAML is the patch as YAML text, ready for Talos's configpatcher.
	YAML string
}

// NodesConfig lists the cluster's machines by role.
type NodesConfig struct {
	// Control-plane nodes (etcd members); an odd number is recommended.
	ControlPlanes []NodeConfig `json:"controlPlanes" required:"true"`
	// Worker nodes; none makes the control planes schedulable.
	Workers []NodeConfig `json:"workers"`
	// Worker pools: nodes alike, given once with a count (docs/day2.md#worker-pools). An entry takes a
	// worker's keys, with 'name' the pool's and 'ip' (and on Proxmox 'vmId') the first node's; its nodes
	// are <name>-0, <name>-1, ... at consecutive addresses (and VM ids). A lower count removes the
	// highest-numbered nodes, as removing them from 'workers' would. Not on rented servers.
	Pools []NodeConfig `json:"pools"`

	// pooled are the nodes of each pool (expandPools), in the order of
	// Pools.
	pooled [][]NodeConfig
}

// NodeConfig is one machine. A field tagged `platform` is only valid on
// that platform (rejectOtherPlatforms refuses it elsewhere).
type NodeConfig struct {
	// Node name: a DNS label, unique in the cluster; the VM name and hostname. In a pool, the pool's
	// name, which its nodes' names start with.
	Name string `json:"name" required:"true" rules:"component"`
	// pools only: how many nodes the pool has (0-100).
	Count *int `json:"count"`
	// The node's IPv4 address (a VPS's public IP).
	IP string `json:"ip" required:"true" rules:"component"`
	// Talos patches for this node only.
	Patches []Patch `json:"patches"`
	// Extra addresses (ip:port) the other nodes reach this node's KubeSpan at, announced through
	// discovery: a NAT's forwarded port to this node's 51820/udp, e.g. '198.51.100.7:51820'; only with
	// cluster.kubeSpan.enabled.
	KubeSpanEndpoints []string `json:"kubeSpanEndpoints" rules:"component"`
	// Kubernetes labels of this node, kept by Talos (machine.nodeLabels): one removed here is removed from
	// the Node, without a reboot. A worker may not set labels under kubernetes.io or k8s.io but the
	// kubelet's own (node.kubernetes.io/..., topology.kubernetes.io/zone, ...), e.g.
	// {example.com/tier: batch}.
	Labels map[string]string `json:"labels" rules:"component"`
	// Kubernetes taints of this node, key to 'Effect' or 'value:Effect' (NoSchedule, PreferNoSchedule,
	// NoExecute), e.g. {example.com/gpu: 'true:NoSchedule'}. A new node registers with them; a change
	// reaches the Node after the node's config apply, without a reboot; one removed here is removed from
	// the Node.
	Taints map[string]string `json:"taints" rules:"component"`
	// proxmox and vps: this node's (or pool's) own Image Factory schematic, e.g. a GPU pool's
	// extensions or kernel arguments; each key left out is the cluster's ('cluster.schematic'). Its
	// VMs boot its own ISO, and its nodes install and upgrade with its own installer.
	Schematic *NodeSchematicConfig `json:"schematic" rules:"component"`

	// Proxmox.

	// VM id, unique on the Proxmox cluster (100-999999999).
	VMID int `json:"vmId" required:"proxmox" platform:"proxmox" rules:"component"`
	// MAC address of the VM's NIC, in any spelling (52:54:00:12:34:56, 52-54-00-12-34-56,
	// 5254.0012.3456; handed on in the first), unicast and not all zero; default: derived from the
	// stack, cluster and node names (the same after a destroy and up).
	MAC string `json:"mac" platform:"proxmox"`
	// virtual CPU cores (1-256); local: the CPUs the container may use, a new value replaces
	// it (its state kept), left out a running container keeps its limit.
	Cores int `json:"cores" default:"2 (control plane), 4 (worker); local: 2" platform:"proxmox" rules:"component"`
	// memory in MiB (1024-4194304, i.e. at most 4 TiB); local: the container's limit, changed in
	// place, left out a running container keeps its limit.
	Memory int `json:"memory" default:"4096 (control plane), 8192 (worker); local: 2048" platform:"proxmox" rules:"component"`
	// boot disk size in GiB (10-131072, i.e. at most 128 TiB).
	DiskSize int `json:"diskSize" default:"20" platform:"proxmox" rules:"component"`
	// size in GiB of a second disk (e.g. for Longhorn) on workers (at most 131072); 0 means none.
	DataDiskSize int `json:"dataDiskSize" default:"0" platform:"proxmox" rules:"component"`
	// Proxmox node (host) that runs this VM; default: its host's 'node' ('proxmox.node').
	ProxmoxNode string `json:"proxmoxNode" platform:"proxmox"`
	// The entry of 'hosts' this VM runs on; default: the 'proxmox' host.
	Host string `json:"host" platform:"proxmox" rules:"component"`

	// VPS.

	// this node's gateway; default: 'cluster.network.gateway'.
	Gateway string `json:"gateway" platform:"vps" rules:"component"`
	// this node's prefix length; default: 'cluster.network.prefixLength'.
	PrefixLength int `json:"prefixLength" platform:"vps" rules:"component"`
	// disk to write Talos to; default: 'cluster.installDisk'.
	InstallDisk string `json:"installDisk" platform:"vps"`
	// SSH access to the provider's rescue system.
	Rescue RescueConfig `json:"rescue" platform:"vps"`
}

// RescueConfig is SSH access to a VPS's rescue system.
type RescueConfig struct {
	// Address of the rescue system; default: the node's IP.
	Host string `json:"host" rules:"component"`
	// SSH port of the rescue system.
	Port int `json:"port" default:"22" rules:"component"`
	// SSH user of the rescue system.
	User string `json:"user" default:"root" rules:"component"`
	// Rescue SSH password (secret): 'pulumi config set --secret --path
	// 'nodes.controlPlanes[0].rescue.password''.
	Password Secret `json:"password" required:"vps" secret:"true"`
	// The rescue system's SSH host key, checked by the install: its public key line as 'ssh-keyscan -t
	// ed25519 <host>' prints it (known_hosts host names in front are allowed), once its fingerprint
	// matches the one the provider shows. A whole ed25519 or ECDSA key: the command provider takes no
	// fingerprint, and offers only SHA-1 signatures for an RSA key. Taken when the install is created,
	// like the password. Empty: any key is accepted (warned).
	HostKey string `json:"hostKey"`
}

// HostConfig is one more Proxmox VE host of the cluster, or rented
// servers.
type HostConfig struct {
	// The host's name in nodes[].host and messages, and its nodes' topology.kubernetes.io/region: a
	// DNS label, not the 'proxmox' host's region.
	Name string `json:"name" required:"true" rules:"component"`
	// The host's Proxmox VE API and VM settings, with the keys and defaults of the top-level 'proxmox'
	// section; or vps.
	Proxmox ProxmoxConfig `json:"proxmox"`
	// Makes the entry rented servers installed from their provider's rescue system instead of a
	// Proxmox VE host, with the keys and defaults of the top-level 'vps' section (its 'network' gives
	// their default gateway and prefix length); its nodes give 'rescue' (and 'gateway',
	// 'prefixLength', 'installDisk') as on platform vps (docs/multi-host.md#rented-servers).
	VPS VPSConfig `json:"vps" rules:"component"`
	// The network of the host's VMs; default: 'cluster.network''s. On another network than the
	// 'proxmox' host's, the cluster needs 'cluster.kubeSpan.enabled' and no VIP.
	Network HostNetworkConfig `json:"network"`
	// The host is lost for good: nothing asks its API or SSH anything any more. Set it and run up,
	// then remove its nodes (their VMs, ISOs and reservations leave the stack without a call to it),
	// then the entry (docs/multi-host.md#a-host-lost-for-good).
	Gone bool `json:"gone" default:"false" rules:"component"`

	// servers: the stack gives the entry's vps section (Load sets it).
	servers bool
}

// Servers reports whether the entry is rented servers (it gives vps).
func (h HostConfig) Servers() bool { return h.servers }

// HostNetworkConfig is the network of a host's VMs.
type HostNetworkConfig struct {
	// IPv4 default gateway of the host's VMs; default: 'cluster.network.gateway'.
	Gateway string `json:"gateway" rules:"component"`
	// Prefix length of the host's VM network; default: 'cluster.network.prefixLength'.
	PrefixLength int `json:"prefixLength" rules:"component"`
}

// ProxmoxConfig is access to the Proxmox VE API and host.
type ProxmoxConfig struct {
	// Proxmox VE API URL, e.g. 'https://192.168.122.70:8006/'.
	Endpoint string `json:"endpoint" required:"proxmox"`
	// API token id, 'user@realm!tokenname'.
	APITokenID string `json:"apiTokenId" required:"proxmox" rules:"component"`
	// API token secret (a UUID, secret): 'pulumi config set --secret --path proxmox.apiTokenSecret'.
	APITokenSecret Secret `json:"apiTokenSecret" required:"proxmox" secret:"true"`
	// Skip TLS verification of the API (self-signed certificate). Off by default.
	Insecure bool `json:"insecure" default:"false"`
	// 'proxmox.endpoint' and 'proxmox.ssh.host' may be loopback addresses (127.0.0.1, ::1, localhost):
	// the local ends of SSH port forwards (ssh -L) to the Proxmox host. Off by default, since a
	// loopback address reaches this machine itself.
	LocalForward bool `json:"localForward" default:"false"`
	// Default Proxmox node (host) for VMs and the ISO.
	Node string `json:"node" default:"pve"`
	// Bridge the VM NICs attach to.
	Bridge string `json:"bridge" default:"vmbr0" rules:"component"`
	// VLAN tag of the VM NICs (1-4094); 0 means untagged.
	VLANID int `json:"vlanId" default:"0" rules:"component"`
	// Datastore for VM disks.
	DiskDatastore string `json:"diskDatastore" default:"local-lvm" rules:"component"`
	// Datastore (with ISO content) for the Talos ISO.
	ISODatastore string `json:"isoDatastore" default:"local" rules:"component"`
	// Leave the downloaded Talos ISO in the datastore on destroy (it is deleted by default).
	KeepISO bool `json:"keepIso" default:"false"`
	// QEMU CPU type; Talos needs 'host' or 'x86-64-v2-AES' or newer.
	CPUType string `json:"cpuType" default:"host" rules:"component"`
	// Firmware: 'seabios' or 'ovmf' (UEFI, adds an EFI disk; the default with cluster.secureBoot). A
	// change replaces the VMs (Talos boots only under the firmware it was installed under), one at a
	// time.
	BIOS string `json:"bios" default:"seabios" rules:"component"`
	// How VMs get their IPs: 'dhcp-reservation' (dnsmasq on the host) or 'static' (nocloud image +
	// cloud-init drive).
	Addressing string `json:"addressing" default:"dhcp-reservation" rules:"component"`
	// SSH access to the Proxmox host (for dnsmasq and the 'ssh-proxy' access).
	SSH SSHConfig `json:"ssh"`
	// DHCP reservations in dnsmasq on the Proxmox host.
	DNSMasq DNSMasqConfig `json:"dnsmasq"`
	// How this machine reaches the VM network (Talos and Kubernetes APIs): 'direct' (it routes there
	// itself, e.g. a route through the Proxmox host) or 'ssh-proxy' (make up / stackctl tunnel through
	// one SSH connection to the Proxmox host; with hosts entries, each host's VMs through its own
	// host's connection, a direct host's kept out of the tunnels).
	Access string `json:"access" default:"direct"`
	// The place this host stands (a house, an office, a data centre), a DNS label. Hosts at one site
	// share its power and uplink (the quorum warning counts sites); hosts whose VMs have the same
	// gateway and prefix length share one network only when they name the same site, and must both
	// name one.
	Site string `json:"site" default:"the host's name ('proxmox' for this section)" rules:"component"`
	// The API URL the Proxmox CSI plugin uses from inside the cluster. Its controller runs on the
	// control planes, which may not reach the address this machine uses (a LAN address of another
	// site, a local port forward's loopback). Default: 'endpoint'.
	CSIEndpoint string `json:"csiEndpoint" rules:"component"`
	// ssh-proxy: extra hosts that must bypass the proxy (NO_PROXY entries: names, .domains, IPs,
	// CIDRs), e.g. a private chart mirror; the Proxmox API, chart repositories, Image Factory and
	// Pulumi hosts are already in.
	NoProxy []string `json:"noProxy"`
}

// How the operator's machine reaches the VM network.
const (
	// AccessDirect: the machine routes to the VM network itself.
	AccessDirect = "direct"
	// AccessSSHProxy: a local CONNECT proxy carries the Talos and Kubernetes
	// traffic through one SSH connection to the Proxmox host.
	AccessSSHProxy = "ssh-proxy"
)

// SSHConfig is SSH access to the Proxmox host.
type SSHConfig struct {
	// SSH host; default: the host of 'proxmox.endpoint'.
	Host string `json:"host"`
	// SSH port.
	Port int `json:"port" default:"22"`
	// SSH user.
	User string `json:"user" default:"root"`
	// Private key (secret); default: the SSH agent ('SSH_AUTH_SOCK') or 'privateKeyFile'.
	PrivateKey Secret `json:"privateKey" secret:"true"`
	// Path of a private key file on the operator's machine; excludes 'privateKey'.
	PrivateKeyFile string `json:"privateKeyFile"`
	// The host's SSH host key, checked by every SSH connection to it (dnsmasq reservations, ssh-proxy
	// helper, 'make doctor'): its public key line as 'ssh-keyscan -t ed25519 <host>' prints it
	// (known_hosts host names in front are allowed); 'make doctor' prints it. A fingerprint
	// 'SHA256:...' only with the reservations off: the command provider that writes them takes only a
	// whole key, and no RSA key. Empty: any key is accepted (warned).
	HostKey string `json:"hostKey"`
}

// DNSMasqConfig controls the DHCP reservation file.
type DNSMasqConfig struct {
	// Write reservations; default: on with 'dhcp-reservation' addressing. Turn off if DHCP is managed
	// elsewhere.
	Enabled *bool `json:"enabled"`
	// Directory dnsmasq reads extra config from.
	ConfigDir string `json:"configDir" default:"/etc/dnsmasq.d" rules:"component"`
	// Shell command on the host that makes dnsmasq read the reservations (dnsmasq rereads dhcp-host
	// lines only on restart).
	Restart string `json:"restartCommand" default:"systemctl restart dnsmasq" rules:"component"`
	// dnsmasq's lease file on the host (its 'dhcp-leasefile'). 'up' and 'destroy' drop from it the
	// leases that would keep a node from its reserved address (the old MAC's lease after a MAC change,
	// a removed node's lease), also through 'dhcp_release' on 'proxmox.bridge' when dnsmasq-utils is
	// installed.
	LeaseFile string `json:"leaseFile" default:"/var/lib/misc/dnsmasq.leases" rules:"component"`
	// BridgeSpansHosts lifts the single-host check of validateDNSMasqPlacement.

	// The bridge carries one layer-2 network across the Proxmox nodes (e.g. an SDN VXLAN or VLAN
	// zone), so the reserving host's dnsmasq also serves VMs on other nodes. Without it, reservations
	// refuse VMs on a 'proxmoxNode' other than 'proxmox.node'.
	BridgeSpansHosts bool `json:"bridgeSpansHosts" default:"false"`
}

// What `pulumi destroy` does to VPS nodes. Servers are never deleted.
const (
	// OnDestroyForget drops the nodes from the stack and leaves Talos running.
	OnDestroyForget = "forget"
	// OnDestroyReset wipes Talos's state and reboots each node into
	// maintenance mode (the Talos install on disk stays).
	OnDestroyReset = "reset"
)

// LocalConfig holds the settings of a cluster in Docker containers.
type LocalConfig struct {
	// The Docker network the program makes for the nodes, on the node network (cluster.network);
	// default: the cluster's name.
	Network string `json:"network" rules:"component"`
	// The Talos container image; default: 'ghcr.io/siderolabs/talos:<cluster.talosVersion>'. Talos's
	// own image at another release is refused: change cluster.talosVersion. A new image replaces the
	// containers one at a time in the rollout's order, their volumes kept.
	Image string `json:"image" rules:"component"`
	// Port on 127.0.0.1 that reaches the first control plane's Kubernetes API. Left out: the default
	// where free at the first 'up', else a free port; later runs keep the port the cluster has.
	KubernetesPort int `json:"kubernetesPort" default:"6443" rules:"component"`
	// Port on 127.0.0.1 that reaches the first control plane's Talos API; left out, chosen as
	// kubernetesPort is.
	TalosPort int `json:"talosPort" default:"50000" rules:"component"`
	// How this machine reaches the nodes' APIs: 'bridge' at their IPs, through the Docker network's
	// bridge (Docker Engine on Linux); 'published' at ports each node publishes on 127.0.0.1 (its Talos
	// API, a control plane's Kubernetes API too; chosen free at the first 'up' and kept), for Docker
	// Desktop (macOS, Windows, Linux), whose bridge this machine cannot route to. A change re-applies
	// each node's config, with no reboot. 'make backup' and 'make restore' need 'bridge'.
	APIAccess string `json:"apiAccess" default:"bridge" rules:"component"`
	// Run the containers privileged, as Talos needs. Off only for a stand-in image that needs no
	// privileges (the project's tests).
	Privileged *bool `json:"privileged" default:"true"`
	// Leave IPv6 off in the containers, for a machine whose kernel has none ('make doctor' says so).
	// A change replaces the containers, their state kept.
	DisableIPv6 bool `json:"disableIPv6" default:"false" rules:"component"`
	// More ports of the first control plane published on this machine, e.g. an ingress controller's
	// 80 and 443. A change replaces that container, its state kept.
	Ports []LocalPortConfig `json:"ports" rules:"component"`
	// Folders of this machine mounted into every node's container. A change replaces the containers
	// one at a time, their state kept.
	Mounts []LocalMountConfig `json:"mounts" rules:"component"`
}

// LocalPortConfig is one published port of the first control plane.
type LocalPortConfig struct {
	// Port on this machine.
	HostPort int `json:"hostPort" required:"true" rules:"component"`
	// Port in the container.
	ContainerPort int `json:"containerPort" required:"true" rules:"component"`
	// 'tcp' or 'udp'.
	Protocol string `json:"protocol" default:"tcp" rules:"component"`
	// Address of this machine it is published on; '0.0.0.0' opens it to this machine's networks.
	HostIP string `json:"hostIp" default:"127.0.0.1" rules:"component"`
}

// LocalMountConfig is one folder of this machine in the nodes' containers.
type LocalMountConfig struct {
	// Absolute path on this machine.
	Source string `json:"source" required:"true" rules:"component"`
	// Absolute path in the containers, outside the paths Talos keeps (/var, /system, /run, ...).
	Target string `json:"target" required:"true" rules:"component"`
	// Mount it read-only.
	ReadOnly bool `json:"readOnly" default:"false" rules:"component"`
}

// VPSConfig holds VPS-wide settings.
type VPSConfig struct {
	// Operator networks allowed to reach the Talos API (50000) and Kubernetes API (6443); empty, or
	// entries that together cover every address (0.0.0.0/0), leave them open (warned).
	AllowedCIDRs []string `json:"allowedCidrs" rules:"component"`
	// TCP ports open to the whole internet, e.g. [80, 443] for an ingress controller; every other port
	// is closed to the internet by the Talos firewall.
	PublicTCPPorts []int `json:"publicTcpPorts" rules:"component"`
	// Raw disk image the install writes (.raw.zst, .raw.xz, .raw.gz or .raw); default: the Image
	// Factory's disk image of the schematic and Talos version (.raw.zst, or .raw.xz when the rescue
	// system has no zstd). A query string (a presigned object-store URL) is kept: the format is read
	// from the path before it, the URL is fetched as given (never switched to .xz), and output leaves
	// the query out.
	ImageURL string `json:"imageUrl" rules:"component"`
	// Refuse to install unless the server runs from RAM/network (a rescue system) or its host name
	// says rescue. Turn off only for a rescue system installed on a disk.
	RequireRescue *bool `json:"requireRescue" default:"true"`
	// Shell command run on the operator's machine after a node's install that switches its boot from
	// rescue to disk and reboots it (e.g. the provider's CLI); gets NODE_NAME, NODE_IP, RESCUE_HOST.
	// Empty: do it by hand while 'up' waits.
	RebootCommand string `json:"rebootCommand" rules:"component"`
	// How long 'up' waits, after a node's install, for its Talos API (port 50000) to answer; a
	// duration like '30m'. Run 'up' again after a timeout to go on waiting.
	TalosWaitTimeout string `json:"talosWaitTimeout" default:"30m" rules:"component"`
	// What 'pulumi destroy' does to the servers (never deleted): 'forget' leaves Talos running and
	// only empties the stack; 'reset' wipes each node's Talos state and reboots it into maintenance
	// mode.
	OnDestroy string `json:"onDestroy" default:"forget" rules:"component"`
}

// BackupConfig is where 'make backup' stores the cluster's backups and whom
// they are encrypted to.
type BackupConfig struct {
	// Where backups go, a URL: 'file:///abs/path' or
	// 's3://bucket/prefix?endpoint=https://s3.example:9000&region=us-east-1&use_path_style=true' for
	// an S3-compatible store (MinIO, Backblaze B2, Cloudflare R2, Ceph); the endpoint may be left out
	// for AWS.
	Target string `json:"target"`
	// Public keys every backup is encrypted to (age): 'age1...' keys or SSH public key lines
	// ('ssh-ed25519 AAAA...'); at least one. The matching private key (identity) is never in the
	// stack: 'make restore' reads it from a file.
	Recipients []string `json:"recipients"`
	// Which backups 'make backup' keeps at the target; the newest is never deleted.
	Keep BackupKeepConfig `json:"keep"`
	// Credentials of an s3:// target; default: the usual AWS environment (AWS_ACCESS_KEY_ID,
	// AWS_SECRET_ACCESS_KEY, AWS_PROFILE) and files.
	S3 BackupS3Config `json:"s3"`
	// Also take etcd snapshots inside the cluster on this cron schedule (UTC, e.g. '0 */6 * * *' or
	// '@daily'): a CronJob of Sidero's talos-backup puts them under
	// <target>/<stack>/in-cluster/<instance>/ (the cluster instance, named by its Talos CA). It needs
	// an s3:// target with an https endpoint (or AWS, with its region), backup.s3 credentials (the
	// nodes have no instance role) and exactly one age1... recipient; none when empty.
	Schedule string `json:"schedule" rules:"component"`
}

// BackupKeepConfig is the retention of backups.
type BackupKeepConfig struct {
	// The newest backups kept, whatever their age.
	Last int `json:"last" default:"7"`
	// Days back for which the newest backup of each day is kept too (0: none).
	Daily *int `json:"daily" default:"7"`
	// Weeks back (ISO weeks, UTC) for which the newest backup of each week is kept too (0: none).
	Weekly *int `json:"weekly" default:"4"`
}

// BackupS3Config are explicit credentials of an S3-compatible target.
type BackupS3Config struct {
	// Access key id of the target's credentials.
	AccessKeyID string `json:"accessKeyId"`
	// Secret access key (secret): 'pulumi config set --secret --path backup.s3.secretAccessKey'.
	SecretAccessKey Secret `json:"secretAccessKey" secret:"true"`
	// Path of a PEM file on the operator's machine with the CA that signed the endpoint's certificate
	// (a private CA, e.g. a home lab MinIO): make backup, make restore and the in-cluster snapshots
	// check the endpoint against it alone (the AWS SDK's custom bundle replaces the system's roots);
	// default: the system's roots.
	CAFile string `json:"caFile"`
}
