// Package talos holds the TalosCluster component: machine secrets, per-node
// machine configuration, apply, bootstrap, kubeconfig and talosconfig, and
// Cilium and the kubelet serving-certificate approver as Helm releases. It
// knows nothing about Proxmox or VPS: platforms describe nodes with NodeSpec.
//
// This file renders the generated Talos patches. They are plain YAML strings
// handed to each node's ConfigurationApply as configPatches, so `pulumi
// preview` shows them in its diff; only the role's base config (with the
// cluster's key material) is a secret.
package talos

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/fluodata/talos-pulumi/internal/rollout"
)

// Role is a node's Talos machine type: the one Role type of the project,
// defined by the rollout core (which needs it and imports no component).
type Role = rollout.Role

// Machine types as Talos spells them.
const (
	RoleControlPlane = rollout.ControlPlane
	RoleWorker       = rollout.Worker
)

// KubePrismPort is the local API load balancer Talos runs on every node;
// Cilium reaches the API through it, so it works before any VIP does.
const KubePrismPort = 7445

// NodeNetwork is a node's network as the platform wants it. The interface is
// chosen with deviceSelector physical, which matches the single NIC of a QEMU
// VM as well as bare metal.
type NodeNetwork struct {
	// DHCP takes the address from a DHCP server (a reservation by MAC).
	DHCP bool `pulumi:"dhcp,optional"`
	// Addresses are static CIDRs, e.g. 203.0.113.10/32.
	Addresses []string `pulumi:"addresses,optional"`
	// Routes are static routes in order; a route without gateway is on-link.
	Routes []Route `pulumi:"routes,optional"`
}

// Route is one static route.
type Route struct {
	// Network is the destination CIDR, e.g. 0.0.0.0/0.
	Network string `pulumi:"network"`
	// Gateway is the next hop; empty for an on-link route.
	Gateway string `pulumi:"gateway,optional"`
}

// NodeSpec describes one node to the TalosCluster.
type NodeSpec struct {
	// Name names the node's resources (<cluster>-apply-<name>) and is the
	// Kubernetes node name the serving-certificate approver accepts.
	Name string `pulumi:"name"`
	// IP is the node's IPv4 address: where the Talos API is reached and the
	// address its kubelet serving certificate is approved for.
	IP string `pulumi:"ip" package:"input"`
	// Role is the node's machine type: controlplane or worker.
	Role Role `pulumi:"role"`
	// InstallDisk is the disk Talos installs itself to (default /dev/sda).
	InstallDisk string `pulumi:"installDisk,optional"`
	// Hostname is set through Talos config when non-empty. Leave it empty when
	// DHCP hands out the hostname: Talos rejects a config hostname that
	// conflicts with the one DHCP set.
	Hostname string `pulumi:"hostname,optional"`
	// Network is the node's interface: DHCP or static addresses and routes.
	Network NodeNetwork `pulumi:"network"`
	// DataDiskSize is the size in GiB of the node's second disk, which
	// becomes a user volume (cluster.dataVolume); 0: none. Shrinking or
	// removing it is refused (its data would be lost).
	DataDiskSize int `pulumi:"dataDiskSize,optional" package:"input"`
	// PlatformPatches come after the generated ones (e.g. a VPS firewall).
	// Set by the platform components, not an input of the package.
	PlatformPatches []string
	// UserPatches are the node's own patches (YAML machine-config patches),
	// applied last.
	UserPatches []string `pulumi:"patches,optional" package:"input,secret"`
	// KubeSpanEndpoints are the extra addresses (ip:port) the other nodes
	// reach this node's KubeSpan at (a NAT's forwarded port), announced
	// through discovery; only with cluster.kubeSpan.
	KubeSpanEndpoints []string `pulumi:"kubeSpanEndpoints,optional"`
	// Labels are the node's Kubernetes labels, set and kept by Talos
	// (machine.nodeLabels); one removed here is removed from the Node. A
	// worker may not set labels under kubernetes.io or k8s.io but the
	// kubelet's own (the API server's NodeRestriction).
	Labels map[string]string `pulumi:"labels,optional"`
	// Taints are the node's Kubernetes taints, key to "Effect" or
	// "value:Effect" (NoSchedule, PreferNoSchedule, NoExecute), as
	// machine.nodeTaints spells them; one removed here is removed from the
	// Node. A worker's Node registers with them, and a change is made by
	// the cluster's admin after the node's apply.
	Taints map[string]string `pulumi:"taints,optional"`
	// Host is the physical machine the node runs on (a Proxmox node), set
	// by the platform: the control planes' spread over the hosts is
	// checked against etcd's quorum. Empty: not known.
	Host string
	// Site is the place of the node's host (a Proxmox VE host with its
	// nodes, a set of rented servers), set by the platform: a site cut off
	// or without power takes all its hosts. Empty: one site, or not known.
	Site string
	// PinAddress says the machine may hold addresses besides IP (a rented
	// server's second NIC, a private network), set by the platform: the
	// kubelet and etcd are pinned to IP, as with KubeSpan.
	PinAddress bool
	// Machine names what of the node's machine cannot change without a new
	// machine (e.g. a VM's id and host); a platform sets it. A change from
	// the last run is a replacement of the machine: at most one control
	// plane's per `up`. Empty: not compared.
	Machine string
}

// PatchSpec holds the cluster-wide inputs of the generated patches.
type PatchSpec struct {
	TalosVersion string
	Nameservers  []string
	// VIP is the shared layer-2 address of the control planes ("" for none).
	VIP string
	// SchedulableControlPlanes lets workloads run on control planes, which a
	// cluster without workers needs.
	SchedulableControlPlanes bool
	// DataVolume is what a node's data disk becomes (DataVolumePatches).
	DataVolume DataVolumeSettings
	// TalosAPIAccess lets the etcd backup's pods reach the Talos API
	// (APIAccessPatch, on control planes).
	TalosAPIAccess bool
	// KubeSpan turns on Talos's WireGuard mesh between the nodes
	// (KubeSpanPatch).
	KubeSpan bool
	// RegistryMirrors send image pulls to mirrors (RegistryMirrorPatches).
	RegistryMirrors []RegistryMirror
	// Encryption encrypts every volume (EncryptionPatches,
	// DataVolumePatches).
	Encryption Encryption
	// User patches from the stack config, after the generated ones.
	AllPatches, ControlPlanePatches, WorkerPatches []string
}

// The structs below mirror the parts of the v1alpha1 machine config we set;
// yaml.v3 keeps their field order, so rendered patches are stable.
type (
	patchDoc struct {
		Machine *machinePatch `yaml:"machine,omitempty"`
		Cluster *clusterPatch `yaml:"cluster,omitempty"`
	}
	machinePatch struct {
		Install    *installPatch    `yaml:"install,omitempty"`
		Kubelet    *kubeletPatch    `yaml:"kubelet,omitempty"`
		Network    *networkPatch    `yaml:"network,omitempty"`
		Features   *featuresPatch   `yaml:"features,omitempty"`
		Registries *registriesPatch `yaml:"registries,omitempty"`
	}
	installPatch struct {
		Disk  string `yaml:"disk"`
		Image string `yaml:"image"`
	}
	kubeletPatch struct {
		ExtraArgs   map[string]string `yaml:"extraArgs,omitempty"`
		ExtraMounts []extraMount      `yaml:"extraMounts,omitempty"`
		NodeIP      *nodeIPPatch      `yaml:"nodeIP,omitempty"`
	}
	nodeIPPatch struct {
		ValidSubnets []string `yaml:"validSubnets"`
	}
	networkPatch struct {
		Hostname    string           `yaml:"hostname,omitempty"`
		Nameservers []string         `yaml:"nameservers,omitempty"`
		Interfaces  []interfacePatch `yaml:"interfaces,omitempty"`
	}
	interfacePatch struct {
		DeviceSelector map[string]bool `yaml:"deviceSelector"`
		DHCP           bool            `yaml:"dhcp"`
		Addresses      []string        `yaml:"addresses,omitempty"`
		Routes         []routePatch    `yaml:"routes,omitempty"`
		VIP            *vipPatch       `yaml:"vip,omitempty"`
	}
	routePatch struct {
		Network string `yaml:"network"`
		Gateway string `yaml:"gateway,omitempty"`
	}
	vipPatch struct {
		IP string `yaml:"ip"`
	}
	featuresPatch struct {
		KubePrism                *kubePrismPatch      `yaml:"kubePrism,omitempty"`
		KubernetesTalosAPIAccess *talosAPIAccessPatch `yaml:"kubernetesTalosAPIAccess,omitempty"`
	}
	talosAPIAccessPatch struct {
		Enabled                     bool     `yaml:"enabled"`
		AllowedRoles                []string `yaml:"allowedRoles"`
		AllowedKubernetesNamespaces []string `yaml:"allowedKubernetesNamespaces"`
	}
	kubePrismPatch struct {
		Enabled bool `yaml:"enabled"`
		Port    int  `yaml:"port"`
	}
	clusterPatch struct {
		Etcd                           *etcdPatch  `yaml:"etcd,omitempty"`
		AllowSchedulingOnControlPlanes bool        `yaml:"allowSchedulingOnControlPlanes,omitempty"`
		Network                        *clusterNet `yaml:"network,omitempty"`
		Proxy                          *proxyPatch `yaml:"proxy,omitempty"`
	}
	etcdPatch struct {
		AdvertisedSubnets []string `yaml:"advertisedSubnets"`
	}
	clusterNet struct {
		CNI cniPatch `yaml:"cni"`
	}
	cniPatch struct {
		Name string `yaml:"name"`
	}
	proxyPatch struct {
		Disabled bool `yaml:"disabled"`
	}
	hostnameDoc struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Auto       string `yaml:"auto"`
		Hostname   string `yaml:"hostname"`
	}
)

func render(v any) string {
	out, err := yaml.Marshal(v)
	if err != nil {
		// Only plain structs above are marshalled; failure is a bug.
		panic(fmt.Sprintf("talos: render patch: %v", err))
	}
	return string(out)
}

// ClusterPatch is the patch every node gets: Cilium replaces the CNI and
// kube-proxy, kubelets request serving certificates (approved in-cluster),
// KubePrism is on for Cilium.
func ClusterPatch(spec PatchSpec) string {
	return render(patchDoc{
		Machine: &machinePatch{
			Kubelet:  &kubeletPatch{ExtraArgs: map[string]string{"rotate-server-certificates": "true"}},
			Network:  networkOrNil(&networkPatch{Nameservers: spec.Nameservers}),
			Features: &featuresPatch{KubePrism: &kubePrismPatch{Enabled: true, Port: KubePrismPort}},
		},
		Cluster: &clusterPatch{
			AllowSchedulingOnControlPlanes: spec.SchedulableControlPlanes,
			Network:                        &clusterNet{CNI: cniPatch{Name: "none"}},
			Proxy:                          &proxyPatch{Disabled: true},
		},
	})
}

func networkOrNil(n *networkPatch) *networkPatch {
	if len(n.Nameservers) == 0 && len(n.Interfaces) == 0 && n.Hostname == "" {
		return nil
	}
	return n
}

// clusterPatches are the generated patches every node gets alike.
func clusterPatches(spec PatchSpec) []string {
	out := []string{ClusterPatch(spec)}
	if spec.KubeSpan {
		out = append(out, KubeSpanPatch())
	}
	out = append(out, RegistryMirrorPatches(spec.RegistryMirrors, spec.TalosVersion)...)
	return append(out, EncryptionPatches(spec.Encryption)...)
}

// InstallPatch pins the install disk and the installer image. The image must
// always be set: the provider's generator defaults it to its own Talos
// version, whatever talosVersion says.
func InstallPatch(disk, image string) string {
	return render(patchDoc{Machine: &machinePatch{Install: &installPatch{Disk: disk, Image: image}}})
}

// NetworkPatch configures the node's interface; vip is added on control planes.
func NetworkPatch(n NodeSpec, vip string) string {
	iface := interfacePatch{
		DeviceSelector: map[string]bool{"physical": true},
		DHCP:           n.Network.DHCP,
		Addresses:      n.Network.Addresses,
	}
	for _, r := range n.Network.Routes {
		iface.Routes = append(iface.Routes, routePatch(r))
	}
	if vip != "" && n.Role == RoleControlPlane {
		iface.VIP = &vipPatch{IP: vip}
	}
	return render(patchDoc{Machine: &machinePatch{Network: &networkPatch{Interfaces: []interfacePatch{iface}}}})
}

var contractRe = regexp.MustCompile(`^v(\d+)\.(\d+)`)

// HostnamePatch sets a fixed hostname. From Talos 1.12 the generated config
// carries a HostnameConfig document (auto: stable) and a v1alpha1 hostname
// next to it fails validation, so the document itself is patched, with auto
// off as the two are exclusive.
func HostnamePatch(hostname, talosVersion string) string {
	if atLeast1x(talosVersion, 12) {
		return render(hostnameDoc{APIVersion: "v1alpha1", Kind: "HostnameConfig", Auto: "off", Hostname: hostname})
	}
	return render(patchDoc{Machine: &machinePatch{Network: &networkPatch{Hostname: hostname}}})
}

// atLeast1x tells whether a Talos version is 1.<minor> or later (false
// for one that does not read as a version: validation refuses it).
func atLeast1x(talosVersion string, minor int) bool {
	m := contractRe.FindStringSubmatch(talosVersion)
	if m == nil {
		return false
	}
	major, _ := strconv.Atoi(m[1])
	got, _ := strconv.Atoi(m[2])
	return major > 1 || got >= minor
}

// AddressPatch pins the kubelet's node IP and, on a control plane, etcd's
// advertised address to the node's IP. Left to Talos, either may pick
// another address of the machine (a second NIC), while the API, the etcd
// health gate and the other members use IP, and a peer at another site
// reaches only IP (KubeSpan routes the nodes' own addresses). None for an
// IP that is no address (validation refuses it).
func AddressPatch(n NodeSpec) string {
	prefix, ok := HostPrefix(n.IP)
	if !ok {
		return ""
	}
	only := []string{prefix}
	doc := patchDoc{Machine: &machinePatch{Kubelet: &kubeletPatch{NodeIP: &nodeIPPatch{ValidSubnets: only}}}}
	if n.Role == RoleControlPlane {
		doc.Cluster = &clusterPatch{Etcd: &etcdPatch{AdvertisedSubnets: only}}
	}
	return render(doc)
}

// HostPrefix is the prefix of the one address ip (a /32, or an IPv6 /128),
// if ip is an address.
func HostPrefix(ip string) (string, bool) {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return "", false
	}
	return netip.PrefixFrom(addr, addr.BitLen()).String(), true
}

// NodePatches is every patch of one node, in the order they apply: generated
// (cluster, install, network, hostname), the platform's, then the user's
// (all nodes, the node's role, the node).
func NodePatches(spec PatchSpec, n NodeSpec, installerImage string) []string {
	patches := append(clusterPatches(spec),
		InstallPatch(n.InstallDisk, installerImage),
		NetworkPatch(n, spec.VIP),
	)
	if n.Hostname != "" {
		patches = append(patches, HostnamePatch(n.Hostname, spec.TalosVersion))
	}
	if len(n.KubeSpanEndpoints) > 0 {
		patches = append(patches, KubeSpanEndpointsPatch(n.KubeSpanEndpoints))
	}
	if len(n.Labels) > 0 {
		patches = append(patches, LabelsPatch(n.Labels))
	}
	if len(n.Taints) > 0 {
		patches = append(patches, TaintsPatch(n.Role, n.Taints))
	}
	if pin := AddressPatch(n); pin != "" && (spec.KubeSpan || n.PinAddress) {
		patches = append(patches, pin)
	}
	patches = append(patches, DataVolumePatches(spec.DataVolume, n, spec.Encryption)...)
	if spec.TalosAPIAccess && n.Role == RoleControlPlane {
		patches = append(patches, APIAccessPatch())
	}
	patches = append(patches, n.PlatformPatches...)
	patches = append(patches, spec.AllPatches...)
	if n.Role == RoleControlPlane {
		patches = append(patches, spec.ControlPlanePatches...)
	} else {
		patches = append(patches, spec.WorkerPatches...)
	}
	return append(patches, n.UserPatches...)
}
