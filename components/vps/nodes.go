// Package vps holds the VpsCluster component: Talos on rented servers,
// installed from the provider's rescue system.
package vps

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/servers"
	"github.com/fluodata/talos-pulumi/components/talos"
)

// TalosArgs are the TalosCluster's arguments for these servers (see
// TalosNodes) with the given installer image. The platform's node options
// and DeletedWith are the caller's.
func (a *ClusterArgs) TalosArgs(installer pulumi.StringInput) *talos.ClusterArgs {
	return &talos.ClusterArgs{Cluster: a.Cluster, InstallerImage: installer, Nodes: TalosNodes(a), Previous: a.Previous, InputName: a.InputName}
}

// FirewallOf is the cluster's ingress firewall.
func FirewallOf(args *ClusterArgs) servers.Firewall {
	f := servers.Firewall{
		OperatorCIDRs:  args.VPS.AllowedCIDRs,
		PublicTCPPorts: args.VPS.PublicTCPPorts,
		PodCIDR:        servers.DefaultPodCIDR,
		KubeSpan:       args.Cluster.KubeSpan != nil && args.Cluster.KubeSpan.Enabled,
	}
	for _, n := range args.Nodes {
		f.NodeIPs = append(f.NodeIPs, n.IP)
		if n.Role == talos.RoleControlPlane {
			f.ControlPlaneIPs = append(f.ControlPlaneIPs, n.IP)
		}
	}
	return f
}

// TalosNodes describes the servers to the TalosCluster: static addresses,
// the node name as hostname (there is no DHCP to hand one out), for a /32
// address an on-link route to the gateway before the default route through
// it (the gateway lies outside the node's own network), and the ingress
// firewall of the node's role.
func TalosNodes(args *ClusterArgs) []talos.NodeSpec {
	fw := FirewallOf(args)
	out := make([]talos.NodeSpec, 0, len(args.Nodes))
	for _, n := range args.Nodes {
		out = append(out, servers.ServerSpec(fw, args.VPS, n))
	}
	return out
}
