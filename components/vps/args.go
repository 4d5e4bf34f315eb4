package vps

import (
	"fmt"
	"net/netip"

	"github.com/fluodata/talos-pulumi/components/image"
	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/servers"
	"github.com/fluodata/talos-pulumi/components/talos"
)

// ComponentName is how errors name the component.
const ComponentName = "VpsCluster"

// ClusterArgs are the inputs of a VpsCluster: the cluster settings, the
// image, the settings shared by the servers and one rented server per node.
// Every value is taken as it is (the stack file's defaults are applied
// before, by the program); the few optional inputs have the defaults their
// comments give.
type ClusterArgs struct {
	// Cluster holds the cluster-wide Talos and Kubernetes settings.
	Cluster talos.ClusterSettings `pulumi:"cluster"`
	// Schematic selects the Image Factory schematic (an id, or extensions
	// to register one from; none registers the plain image's).
	Schematic *image.Schematic `pulumi:"schematic,optional"`
	// VPS holds the settings shared by the servers: firewall, image, the
	// install's safety check, reboot, wait and destroy behaviour.
	VPS servers.Settings `pulumi:"vps"`
	// Nodes are the servers, control planes first; the first is
	// bootstrapped.
	Nodes []servers.Node `pulumi:"nodes"`

	// Previous is the cluster as the last `up` left it (Go only, read by
	// the program from the stack's outputs): TalosCluster refuses changes
	// a rollout cannot make safely against it.
	Previous *talos.Previous
	// InputName names an input path of the TalosCluster in the caller's
	// terms (Go only: the program's stack keys), for the warnings it logs;
	// see talos.ClusterArgs.InputName.
	InputName func(path string) string
}

// Validate checks the inputs and returns one error naming every invalid one
// by its schema path (e.g. nodes[1].rescue.port), or nil. name is the
// resource name. Nothing is registered while any input is invalid.
func (a *ClusterArgs) Validate(name string) error {
	if a == nil {
		var p inputs.Problems
		p.Add("args", "are required")
		return p.Err(ComponentName, name)
	}
	// The inputs as the component uses them: with its defaults; the
	// TalosCluster's guard at the same paths (its nodes are ours, in
	// order, with their firewall patches).
	d := a.WithDefaults()
	return talos.ValidatePlatform(ComponentName, name, d.check, func() *talos.ClusterArgs { return d.TalosArgs(nil) }, netip.Prefix{})
}

// Problems are the invalid inputs of a (with its defaults), by input
// path, as NewCluster refuses them; the guard of the user's patches and
// Helm values aside (talos.ClusterArgs.CheckOverrides). A front-end (the
// stack file's) runs it before anything is registered and names the paths
// in its own terms.
func (a *ClusterArgs) Problems() []inputs.Problem {
	d := a.WithDefaults()
	var p inputs.Problems
	d.check(&p)
	return p.List()
}

// check records the problems of the inputs (with their defaults).
func (a *ClusterArgs) check(p *inputs.Problems) {
	a.Cluster.Check(p, "cluster.")
	if a.Cluster.SecureBoot {
		p.Add("cluster.secureBoot", "%s", servers.SecureBootRefusal)
	}
	if a.Cluster.LoadBalancer != nil {
		// Cilium's L2 announcements answer ARP on the node network; a
		// rented server's provider routes an additional address to one
		// server's MAC (or sells it as a failover IP moved by its API), and
		// answers no ARP from any other node.
		p.Add("cluster.loadBalancer", "is for nodes on a shared layer-2 network (platforms proxmox and local): a rented server's provider routes additional addresses to one server, not by ARP; "+
			"leave the section out and expose Services through the nodes' public IPs (a NodePort or hostPort behind the firewall) or the provider's load balancer")
	}
	a.schematic().Check(p, "schematic")
	a.VPS.Check(p, settingsPrefix)
	a.checkNetwork(p)
	a.checkNodes(p)
}

// settingsPrefix is where the servers' settings are among the inputs.
const settingsPrefix = "vps."

// checkNetwork records the problems of the nodes' default gateway and
// prefix length, each once.
func (a *ClusterArgs) checkNetwork(p *inputs.Problems) {
	servers.CheckDefaultNetwork(p, a.VPS, a.Nodes, settingsPrefix)
	if a.Cluster.VIP != "" {
		p.Add("cluster.vip", "a layer-2 VIP needs a shared network segment, which VPS nodes do not have; use cluster.endpoint (e.g. a DNS name) instead")
	}
}

func (a *ClusterArgs) checkNodes(p *inputs.Problems) {
	// Names, IPs and roles as the TalosCluster checks them (at least one
	// node, a control plane first, unique names and IPs), at the same paths.
	nodes := make([]talos.NodeSpec, len(a.Nodes))
	for i, n := range a.Nodes {
		nodes[i] = talos.NodeSpec{Name: n.Name, IP: n.IP, Role: n.Role}
	}
	(&talos.ClusterArgs{Cluster: a.Cluster, Nodes: nodes, Previous: a.Previous}).CheckNodes(p, "")
	servers.CheckNodes(p, a.VPS, a.Nodes, settingsPrefix, func(i int) string { return fmt.Sprintf("nodes[%d]", i) })
	for i, n := range a.Nodes {
		if n.Schematic != nil {
			n.Schematic.CheckOver(p, fmt.Sprintf("nodes[%d].schematic", i), a.schematic())
		}
	}
}

// schematic is the schematic input, empty when left out (a plain metal image).
func (a *ClusterArgs) schematic() image.Schematic {
	if a.Schematic == nil {
		return image.Schematic{}
	}
	return *a.Schematic
}
