// Package vps holds the VpsCluster component: Talos on rented servers,
// installed from the provider's rescue system.
package vps

import (
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/talos"
)

// TalosArgs are the TalosCluster's arguments for these servers (see
// TalosNodes) with the given installer image. The platform's node options
// and DeletedWith are the caller's.
func (a *ClusterArgs) TalosArgs(installer pulumi.StringInput) *talos.ClusterArgs {
	return &talos.ClusterArgs{Cluster: a.Cluster, InstallerImage: installer, Nodes: TalosNodes(a), Previous: a.Previous, InputName: a.InputName}
}

// FirewallOf is the cluster's ingress firewall.
func FirewallOf(args *ClusterArgs) Firewall {
	f := Firewall{
		OperatorCIDRs:  args.VPS.AllowedCIDRs,
		PublicTCPPorts: args.VPS.PublicTCPPorts,
		PodCIDR:        DefaultPodCIDR,
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
		out = append(out, ServerSpec(fw, args.VPS, n))
	}
	return out
}

// ServerSpec is one server as the TalosCluster takes it (see TalosNodes),
// behind the firewall fw, with settings' defaults.
func ServerSpec(fw Firewall, settings Settings, n Node) talos.NodeSpec {
	gateway, prefix := n.gateway(settings), n.prefixLength(settings)
	var routes []talos.Route
	if prefix == 32 {
		routes = append(routes, talos.Route{Network: gateway + "/32"})
	}
	routes = append(routes, talos.Route{Network: "0.0.0.0/0", Gateway: gateway})
	return talos.NodeSpec{
		Name:        n.Name,
		IP:          n.IP,
		Role:        n.Role,
		InstallDisk: n.installDisk(),
		Hostname:    n.Name,
		UserPatches: n.Patches,
		// KubeSpan's extra endpoints, announced through discovery.
		KubeSpanEndpoints: n.KubeSpanEndpoints,
		// The firewall comes before the user's patches, so they can
		// add rules (a NetworkRuleConfig of their own) or replace ours.
		PlatformPatches: []string{fw.Patch(n.Role)},
		// A rented server may have a private network's NIC besides its
		// public one: the kubelet and etcd keep to IP.
		PinAddress: true,
		Network: talos.NodeNetwork{
			Addresses: []string{fmt.Sprintf("%s/%d", n.IP, prefix)},
			Routes:    routes,
		},
	}
}
