// Package docker holds the DockerCluster component: Talos in Docker
// containers on the operator's machine, one container per node, set up as
// Talos's own Docker provisioner sets them up (talosctl cluster create).
package docker

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/talos"
)

// ComponentName is how errors name the component.
const ComponentName = "DockerCluster"

// Defaults of the optional inputs.
const (
	// DefaultImageRepository is where Talos publishes its container
	// image, tagged with the release (ghcr.io/siderolabs/talos:v1.13.9).
	DefaultImageRepository = "ghcr.io/siderolabs/talos"
	// DefaultKubernetesPort and DefaultTalosPort are the ports on
	// 127.0.0.1 that reach the first control plane's APIs.
	DefaultKubernetesPort = constants.DefaultControlPlanePort
	DefaultTalosPort      = constants.ApidPort
	// DefaultCores and DefaultMemory (MiB) are a new container's limits,
	// talosctl cluster create's for both roles (talos v1.13.9,
	// cmd/talosctl/cmd/mgmt/cluster/create/clusterops/options.go,
	// GetCommon: CPU "2.0", Memory 2.0GiB).
	DefaultCores  = 2
	DefaultMemory = 2048
	// MinMemory (MiB) is the least a node gets: Talos's minimum for a
	// worker.
	MinMemory = 1024
)

// How this machine reaches the nodes' APIs (Settings.APIAccess).
const (
	// AccessBridge: at the nodes' IPs, through the Docker network's bridge
	// (Docker Engine on Linux).
	AccessBridge = "bridge"
	// AccessPublished: at ports each node publishes on 127.0.0.1, where the
	// bridge is not routed to this machine (Docker Desktop).
	AccessPublished = "published"
)

// ClusterArgs are the inputs of a DockerCluster: the cluster settings, the
// Docker settings and one container per node.
type ClusterArgs struct {
	// Cluster holds the cluster-wide Talos and Kubernetes settings.
	Cluster talos.ClusterSettings `pulumi:"cluster"`
	// Docker holds the containers' and their network's settings.
	Docker Settings `pulumi:"docker"`
	// Nodes are the containers, control planes first; the first is
	// bootstrapped and its APIs published on 127.0.0.1.
	Nodes []Node `pulumi:"nodes"`
	// Pools are the groups of alike workers, each Count containers named
	// <name>-<n>, after the nodes; a lower Count removes the
	// highest-numbered ones, as removing them from Nodes would.
	Pools []Pool `pulumi:"pools,optional"`

	// Previous is the cluster as the last `up` left it (Go only, read by
	// the program from the stack's outputs).
	Previous *talos.Previous
	// InputName names an input path of the TalosCluster in the caller's
	// terms (Go only); see talos.ClusterArgs.InputName.
	InputName func(path string) string

	// listed is how many of Nodes were given as nodes, the pools' nodes
	// after them (WithDefaults), poolCounts how many each pool has.
	listed     int
	poolCounts []int
}

// Settings are the Docker-wide settings.
type Settings struct {
	// Subnet is the Docker network's IPv4 network, e.g. 10.5.0.0/24: the
	// nodes' IPs lie in it. This machine reaches them through the
	// network's bridge (Linux).
	Subnet string `pulumi:"subnet"`
	// Gateway is the network's gateway, this machine's address on the
	// bridge (default: the subnet's first address).
	Gateway string `pulumi:"gateway,optional"`
	// Network is the Docker network's name (default: the cluster's name).
	Network string `pulumi:"network,optional"`
	// Image is the Talos container image the nodes run (default:
	// ghcr.io/siderolabs/talos:<cluster.talosVersion>). A new image
	// replaces the containers one at a time, their state kept.
	Image string `pulumi:"image,optional"`
	// KubernetesPort is the port on 127.0.0.1 that reaches the first
	// control plane's Kubernetes API (default 6443).
	KubernetesPort int `pulumi:"kubernetesPort,optional"`
	// TalosPort is the port on 127.0.0.1 that reaches the first control
	// plane's Talos API (default 50000).
	TalosPort int `pulumi:"talosPort,optional"`
	// Privileged runs the containers privileged, as Talos needs (default
	// true). Off only for a stand-in image that needs no privileges.
	Privileged *bool `pulumi:"privileged,optional"`
	// DisableIPv6 leaves IPv6 off in the containers, for a Docker host
	// whose kernel has none (talosctl cluster create's --disable-ipv6);
	// a change replaces the containers, their state kept.
	DisableIPv6 bool `pulumi:"disableIpv6,optional"`
	// Ports are more ports of the first control plane published on this
	// machine, e.g. an ingress controller's (talosctl cluster create's
	// --exposed-ports). A change replaces that container, its state kept.
	Ports []PublishedPort `pulumi:"ports,optional"`
	// APIAccess is how this machine reaches the nodes' APIs: bridge (the
	// default) at their IPs, through the Docker network's bridge, as on
	// Docker Engine for Linux; published at ports each node publishes on
	// 127.0.0.1 (its Talos API, and a control plane's Kubernetes API), for
	// Docker Desktop, whose bridge this machine cannot route to. A change
	// re-applies each node's config, with no reboot.
	APIAccess string `pulumi:"apiAccess,optional"`
	// Mounts are folders of this machine mounted into every node's
	// container (talosctl cluster create's --mount). A change replaces the
	// containers one at a time, their state kept.
	Mounts []Mount `pulumi:"mounts,optional"`
}

// PublishedPort is one port of the first control plane published on this
// machine.
type PublishedPort struct {
	// HostPort is the port on this machine.
	HostPort int `pulumi:"hostPort"`
	// ContainerPort is the port in the container.
	ContainerPort int `pulumi:"containerPort"`
	// Protocol is tcp (the default) or udp.
	Protocol string `pulumi:"protocol,optional"`
	// HostIP is the address of this machine it is published on (default
	// 127.0.0.1: this machine only; 0.0.0.0 opens it to its networks).
	HostIP string `pulumi:"hostIp,optional"`
}

// Mount is a folder of this machine mounted into the nodes' containers.
type Mount struct {
	// Source is the folder on this machine: an absolute path.
	Source string `pulumi:"source"`
	// Target is where the containers see it: an absolute path outside
	// the ones Talos keeps (its state volumes and tmpfs mounts).
	Target string `pulumi:"target"`
	// ReadOnly mounts it read-only.
	ReadOnly bool `pulumi:"readOnly,optional"`
}

// Node is one container.
type Node struct {
	// Name is the node's hostname and Kubernetes node name: a DNS label.
	Name string `pulumi:"name"`
	// Role is the node's machine type: controlplane or worker.
	Role talos.Role `pulumi:"role"`
	// IP is the container's IPv4 address in docker.subnet.
	IP string `pulumi:"ip"`
	// Patches are this node's own machine-config patches (YAML), applied
	// last.
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
	// Cores are the CPUs the container may use (default 2, as talosctl
	// cluster create). A new value replaces the container, its state kept.
	// Left out, a running container keeps the limit it was created with.
	Cores int `pulumi:"cores,optional"`
	// TalosPort is the port on 127.0.0.1 that reaches this node's Talos
	// API, with docker.apiAccess published only (default: docker.talosPort
	// for the first node, plus the node's index for the others).
	TalosPort int `pulumi:"talosPort,optional"`
	// KubernetesPort is the port on 127.0.0.1 that reaches this control
	// plane's Kubernetes API, with docker.apiAccess published only
	// (default: docker.kubernetesPort for the first node, plus the node's
	// index for the others).
	KubernetesPort int `pulumi:"kubernetesPort,optional"`
	// Memory is the container's memory limit in MiB (at least 1024;
	// default 2048, as talosctl cluster create), changed in place. Left
	// out, a running container keeps the limit it was created with.
	Memory int `pulumi:"memory,optional"`
}

// Pool is a group of alike worker containers (a node group): the n-th
// (from 0) is node <Name>-<n> at IP plus n, each with the pool's limits,
// labels, taints and patches.
type Pool struct {
	// Name names the pool's nodes (<name>-<n>): a DNS label.
	Name string `pulumi:"name"`
	// Count is how many nodes the pool has (0-100).
	Count int `pulumi:"count"`
	// IP is the first node's IPv4 address in docker.subnet; the others
	// follow it.
	IP string `pulumi:"ip"`
	// Patches are Talos patches of each of the pool's nodes.
	Patches []string `pulumi:"patches,optional" package:"input,secret"`
	// Labels are each node's Kubernetes labels, as a node's are.
	Labels map[string]string `pulumi:"labels,optional"`
	// Taints are each node's Kubernetes taints, as a node's are.
	Taints map[string]string `pulumi:"taints,optional"`
	// Cores are the CPUs each container may use (default 2).
	Cores int `pulumi:"cores,optional"`
	// Memory is each container's memory limit in MiB (default 2048).
	Memory int `pulumi:"memory,optional"`
}

// nodes are the pool's workers (inputs.PoolMembers).
func (pl Pool) nodes() []Node {
	var out []Node
	for _, m := range inputs.PoolMembers(pl.Name, pl.Count, pl.IP) {
		out = append(out, Node{
			Name: m.Name, Role: talos.RoleWorker, IP: m.IP,
			Patches: pl.Patches, Labels: pl.Labels, Taints: pl.Taints, Cores: pl.Cores, Memory: pl.Memory,
		})
	}
	return out
}

// Deps are what the component talks to besides the engine: seams for
// tests and for the program. The zero value is the real thing.
type Deps struct {
	// Talos are the TalosCluster's seams (its hooks and day-2 operations).
	Talos talos.Deps
}

// WithDefaults returns the arguments with every optional input that is
// empty set to its default; nothing in a is changed.
func (a ClusterArgs) WithDefaults() ClusterArgs {
	s := &a.Docker
	if s.Gateway == "" {
		if p, err := netip.ParsePrefix(s.Subnet); err == nil && p.Addr().Is4() {
			s.Gateway = p.Masked().Addr().Next().String()
		}
	}
	if s.Network == "" {
		s.Network = a.Cluster.Name
	}
	if s.Image == "" && a.Cluster.TalosVersion != "" {
		s.Image = DefaultImageRepository + ":" + a.Cluster.TalosVersion
	}
	if s.KubernetesPort == 0 {
		s.KubernetesPort = DefaultKubernetesPort
	}
	if s.TalosPort == 0 {
		s.TalosPort = DefaultTalosPort
	}
	if s.Privileged == nil {
		on := true
		s.Privileged = &on
	}
	if s.APIAccess == "" {
		s.APIAccess = AccessBridge
	}
	a.Nodes = slices.Clone(a.Nodes)
	if a.poolCounts == nil {
		// The pools' nodes after the listed ones, once.
		a.listed, a.poolCounts = len(a.Nodes), make([]int, len(a.Pools))
		for i, pl := range a.Pools {
			pooled := pl.nodes()
			a.poolCounts[i] = len(pooled)
			a.Nodes = append(a.Nodes, pooled...)
		}
	}
	if s.APIAccess == AccessPublished {
		for i := range a.Nodes {
			n := &a.Nodes[i]
			if n.TalosPort == 0 {
				n.TalosPort = s.TalosPort + i
			}
			if n.KubernetesPort == 0 && n.Role == talos.RoleControlPlane {
				n.KubernetesPort = s.KubernetesPort + i
			}
		}
	}
	// No nameservers unless given: Talos's container platform takes the
	// container's resolv.conf, Docker's resolver, which asks the host's (as
	// talosctl's clusters do), so internal or filtered DNS works.
	a.Cluster.Nameservers = slices.Clone(a.Cluster.Nameservers)
	return a
}

// Validate checks the inputs and returns one error naming every invalid
// one by its input path, or nil. Nothing is registered while any input is
// invalid.
func (a *ClusterArgs) Validate(name string) error {
	if a == nil {
		var p inputs.Problems
		p.Add("args", "are required")
		return p.Err(ComponentName, name)
	}
	d := a.WithDefaults()
	return talos.ValidatePlatform(ComponentName, name, d.check, d.TalosArgs, d.subnet())
}

// Problems are the invalid inputs of a (with its defaults), by input
// path, as NewCluster refuses them (the guard of the user's patches and
// Helm values aside).
func (a *ClusterArgs) Problems() []inputs.Problem {
	d := a.WithDefaults()
	var p inputs.Problems
	d.check(&p)
	return p.List()
}

// check records the problems of the inputs (with their defaults).
func (a *ClusterArgs) check(p *inputs.Problems) {
	a.Cluster.Check(p, "cluster.")
	a.checkPortsAndMounts(p)
	if a.Cluster.SecureBoot {
		// A container boots no firmware and has no TPM to seal keys to.
		p.Add("cluster.secureBoot", "a DockerCluster's nodes are containers: they boot no firmware and have no TPM to seal disk keys to; leave it out (Secure Boot is for Proxmox VMs)")
	}
	if a.Cluster.DiskEncryption != "" {
		// Talos in a container has no partitions: STATE and EPHEMERAL
		// are folders of the host's.
		p.Add("cluster.diskEncryption", "a DockerCluster's nodes are containers, whose STATE and EPHEMERAL are folders on this machine, not partitions Talos could encrypt; leave it out")
	}
	if a.Cluster.VIP != "" {
		p.Add("cluster.vip", "a DockerCluster publishes the first control plane's Kubernetes API on 127.0.0.1:%d instead of a VIP; leave it out", a.Docker.KubernetesPort)
	}
	s := a.Docker
	subnet, err := netip.ParsePrefix(s.Subnet)
	switch {
	case s.Subnet == "":
		p.Add("docker.subnet", "is required, e.g. 10.5.0.0/24")
	case err != nil || !subnet.Addr().Is4():
		p.Add("docker.subnet", "%q is not an IPv4 network like 10.5.0.0/24", s.Subnet)
	case inputs.HostBitsProblem(s.Subnet, subnet) != "":
		p.Add("docker.subnet", "%s", inputs.HostBitsProblem(s.Subnet, subnet))
	case subnet.Bits() < inputs.MinNodePrefix || subnet.Bits() > 29:
		p.Add("docker.subnet", "%q: its length must be %d-29", s.Subnet, inputs.MinNodePrefix)
	}
	p.MachineIPv4("docker.gateway", s.Gateway)
	gw, gwErr := netip.ParseAddr(s.Gateway)
	if gwErr == nil && gw.Is4() && err == nil && subnet.Addr().Is4() && !subnet.Contains(gw) {
		p.Add("docker.gateway", "%s is outside the nodes' network %s", gw, subnet)
	}
	if !inputs.IsDNSLabel(s.Network) {
		p.Add("docker.network", "%q is not a Docker network name this component makes: a DNS label", s.Network)
	}
	if tag, ok := talosImageTag(s.Image); ok && a.Cluster.TalosVersion != "" && tag != a.Cluster.TalosVersion {
		p.Add("docker.image", "%q is Talos %s, not cluster.talosVersion %s: change cluster.talosVersion instead, whose change is checked and rolled out, and leave docker.image out",
			s.Image, tag, a.Cluster.TalosVersion)
	}
	if s.Image == "" {
		p.Add("docker.image", "is required when cluster.talosVersion is empty")
	}
	for path, port := range map[string]int{"docker.kubernetesPort": s.KubernetesPort, "docker.talosPort": s.TalosPort} {
		if msg := inputs.PortProblem(port); msg != "" {
			p.Add(path, "%s", msg)
		}
	}
	if s.KubernetesPort == s.TalosPort {
		p.Add("docker.talosPort", "%d is the Kubernetes API's port too; give each API its own port", s.TalosPort)
	}
	if s.APIAccess != AccessBridge && s.APIAccess != AccessPublished {
		p.Add("docker.apiAccess", "%q is not %s or %s", s.APIAccess, AccessBridge, AccessPublished)
	}
	a.checkNodes(p, subnet, gw)
	a.checkNodePorts(p)
	for i, pl := range a.Pools {
		p.CheckPool(fmt.Sprintf("pools[%d]", i), pl.Name, pl.Count, pl.IP)
	}
	p.NamePoolNodes(a.listed, a.poolCounts)
}

// checkNodes records the problems of the nodes: names, IPs and roles as
// the TalosCluster checks them, and each IP inside the subnet.
func (a *ClusterArgs) checkNodes(p *inputs.Problems, subnet netip.Prefix, gw netip.Addr) {
	(&talos.ClusterArgs{
		Cluster: a.Cluster, Nodes: a.talosNodes(), Previous: a.Previous, Machines: talos.Machines{NodeNetwork: a.subnet(), NodeGateway: a.gateway()},
	}).CheckNodes(p, "")
	if !subnet.IsValid() || !subnet.Addr().Is4() || !gw.IsValid() {
		return
	}
	for i, n := range a.Nodes {
		if n.Cores < 0 {
			p.Add(fmt.Sprintf("nodes[%d].cores", i), "%d: give at least 1, or leave it out for %d", n.Cores, DefaultCores)
		}
		if n.Memory != 0 && n.Memory < MinMemory {
			p.Add(fmt.Sprintf("nodes[%d].memory", i), "%d MiB is below the %d MiB a Talos node needs", n.Memory, MinMemory)
		}
		ip, err := netip.ParseAddr(n.IP)
		if err != nil || !ip.Is4() {
			continue // CheckNodes named it
		}
		at := fmt.Sprintf("nodes[%d].ip", i)
		if !subnet.Contains(ip) {
			p.Add(at, "%s is outside the nodes' network %s", ip, subnet)
		} else if msg := inputs.HostAddressProblem(ip, gw, subnet); msg != "" {
			p.Add(at, "%s", msg)
		}
	}
}

// checkNodePorts records the problems of the nodes' own published
// ports: only with apiAccess published, the first node's the APIs' ports,
// a Kubernetes port on control planes only, each host port once.
func (a *ClusterArgs) checkNodePorts(p *inputs.Problems) {
	s := a.Docker
	used := map[int]string{}
	for _, pp := range s.Ports {
		if cmp.Or(pp.Protocol, "tcp") == "tcp" {
			used[pp.HostPort] = "docker.ports"
		}
	}
	for i, n := range a.Nodes {
		for _, port := range []struct {
			key     string
			value   int
			setting int
		}{{"talosPort", n.TalosPort, s.TalosPort}, {"kubernetesPort", n.KubernetesPort, s.KubernetesPort}} {
			at := fmt.Sprintf("nodes[%d].%s", i, port.key)
			switch {
			case port.value == 0:
				continue
			case s.APIAccess != AccessPublished:
				p.Add(at, "is used with docker.apiAccess %s only; leave it out", AccessPublished)
				continue
			case port.key == "kubernetesPort" && n.Role != talos.RoleControlPlane:
				p.Add(at, "a worker serves no Kubernetes API; leave it out")
				continue
			case i == 0 && port.value != port.setting:
				p.Add(at, "the first node publishes docker.%s (%d); set that instead", port.key, port.setting)
				continue
			}
			if msg := inputs.PortProblem(port.value); msg != "" {
				p.Add(at, "%s", msg)
				continue
			}
			if other, ok := used[port.value]; ok {
				p.Add(at, "%d is published by %s already: give another port", port.value, other)
			}
			used[port.value] = fmt.Sprintf("nodes[%d].%s", i, port.key)
		}
	}
}

// checkPortsAndMounts records the problems of the extra published ports
// and mounts: ports in range, each host port once and not the APIs', tcp
// or udp, an address; mounts of absolute paths outside Talos's own.
func (a *ClusterArgs) checkPortsAndMounts(p *inputs.Problems) {
	s := a.Docker
	used := map[string]string{
		fmt.Sprintf("%d/tcp", s.KubernetesPort): "the Kubernetes API",
		fmt.Sprintf("%d/tcp", s.TalosPort):      "the Talos API",
	}
	for i, pp := range s.Ports {
		at := fmt.Sprintf("docker.ports[%d]", i)
		for _, port := range []struct {
			key   string
			value int
		}{{"hostPort", pp.HostPort}, {"containerPort", pp.ContainerPort}} {
			if port.value < 1 || port.value > 65535 {
				p.Add(at+"."+port.key, "%d is not a port (1-65535)", port.value)
			}
		}
		proto := cmp.Or(pp.Protocol, "tcp")
		if proto != "tcp" && proto != "udp" {
			p.Add(at+".protocol", "%q is not tcp or udp", pp.Protocol)
		}
		if pp.HostIP != "" {
			if ip, err := netip.ParseAddr(pp.HostIP); err != nil || !ip.Is4() {
				p.Add(at+".hostIp", "%q is not an IPv4 address of this machine (127.0.0.1, 0.0.0.0, ...)", pp.HostIP)
			}
		}
		key := fmt.Sprintf("%d/%s", pp.HostPort, proto)
		if other, ok := used[key]; ok {
			p.Add(at+".hostPort", "%s is published by %s already: give another host port", key, other)
		}
		used[key] = "an entry before"
	}
	talosOwn := slices.Concat(StateMounts, TmpfsMounts)
	for i, m := range s.Mounts {
		at := fmt.Sprintf("docker.mounts[%d]", i)
		if !path.IsAbs(m.Source) {
			p.Add(at+".source", "%q is not an absolute path of this machine", m.Source)
		}
		target := path.Clean(m.Target)
		switch {
		case !path.IsAbs(m.Target):
			p.Add(at+".target", "%q is not an absolute path", m.Target)
		case target == "/" || slices.ContainsFunc(talosOwn, func(own string) bool {
			return target == own || strings.HasPrefix(target, own+"/") || strings.HasPrefix(own, target+"/")
		}):
			p.Add(at+".target", "%s is on a path Talos keeps for itself (%s): mount it elsewhere, e.g. /mnt/...", m.Target, strings.Join(talosOwn, ", "))
		}
	}
}

// talosImageTag is the tag of Talos's own image (DefaultImageRepository),
// which names the Talos release it runs; ok is false for any other image.
func talosImageTag(image string) (tag string, ok bool) {
	if strings.Contains(image, "@") {
		return "", false // pinned by digest: no release in the name
	}
	repo, tag := talos.SplitImage(image)
	return tag, repo == DefaultImageRepository && tag != ""
}

// subnet is the Docker network, valid after check.
func (a *ClusterArgs) subnet() netip.Prefix {
	p, _ := netip.ParsePrefix(a.Docker.Subnet)
	return p
}

// gateway is the Docker network's gateway, valid after check.
func (a *ClusterArgs) gateway() netip.Addr {
	gw, _ := netip.ParseAddr(a.Docker.Gateway)
	return gw
}

// privileged is Settings.Privileged, its default when left out.
func (s Settings) privileged() bool { return s.Privileged == nil || *s.Privileged }

// TalosArgs are the TalosCluster's arguments for these containers. There
// is no installer image: a container does not install Talos, a new image
// replaces it (see NewCluster).
func (a *ClusterArgs) TalosArgs() *talos.ClusterArgs {
	return &talos.ClusterArgs{
		Cluster: a.Cluster, InstallerImage: pulumi.String(""), Nodes: a.talosNodes(),
		Previous: a.Previous, InputName: a.InputName, Machines: talos.Machines{
			NodeNetwork: a.subnet(), NodeGateway: a.gateway(), InContainer: true, APIAddresses: a.apiAddresses(),
		},
	}
}

// apiAddresses are where this machine reaches each node's APIs with
// apiAccess published (nil: at their IPs): the ports the node publishes
// on 127.0.0.1. Talos puts 127.0.0.1 in the certificates of both APIs
// (talos v1.13.9 internal/app/machined/pkg/controllers/secrets,
// api_cert_sans.go and kubernetes_cert_sans.go).
func (a *ClusterArgs) apiAddresses() map[string]talos.APIAddress {
	if a.Docker.APIAccess != AccessPublished {
		return nil
	}
	out := map[string]talos.APIAddress{}
	for _, n := range a.Nodes {
		addr := talos.APIAddress{Talos: net.JoinHostPort(localhost, strconv.Itoa(n.TalosPort))}
		if n.KubernetesPort != 0 {
			addr.Kubernetes = "https://" + net.JoinHostPort(localhost, strconv.Itoa(n.KubernetesPort))
		}
		out[n.IP] = addr
	}
	return out
}

// apiPorts are the APIs a node's container publishes, as host port and
// container port, the Talos API's first: every node's with apiAccess
// published, else the first control plane's (first) only.
func (a *ClusterArgs) apiPorts(n Node, first bool) [][2]int {
	s := a.Docker
	if s.APIAccess != AccessPublished {
		if !first {
			return nil
		}
		return [][2]int{{s.TalosPort, talosAPIPort}, {s.KubernetesPort, kubernetesAPIPort}}
	}
	out := [][2]int{{n.TalosPort, talosAPIPort}}
	if n.KubernetesPort != 0 {
		out = append(out, [2]int{n.KubernetesPort, kubernetesAPIPort})
	}
	return out
}

// localhost is where the nodes' ports are published: this machine only.
const localhost = "127.0.0.1"

// talosNodes describes the containers to the TalosCluster: Docker gives
// each its address, hostname and routes, so the generated network patch
// configures no address (its physical-link selector matches no veth).
func (a *ClusterArgs) talosNodes() []talos.NodeSpec {
	out := make([]talos.NodeSpec, 0, len(a.Nodes))
	for _, n := range a.Nodes {
		out = append(out, talos.NodeSpec{Name: n.Name, IP: n.IP, Role: n.Role, UserPatches: n.Patches, KubeSpanEndpoints: n.KubeSpanEndpoints, Labels: n.Labels, Taints: n.Taints})
	}
	return out
}
