// Package vps holds the VpsCluster component: Talos on rented servers,
// installed from the provider's rescue system.
package vps

import (
	"fmt"

	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/stacks"
)

// FirewallOf is the stack's ingress firewall.
func FirewallOf(cfg *stacks.Config) Firewall {
	f := Firewall{
		OperatorCIDRs:  cfg.VPS.AllowedCIDRs,
		PublicTCPPorts: cfg.VPS.PublicTCPPorts,
		PodCIDR:        DefaultPodCIDR,
	}
	for _, ref := range cfg.Nodes.Refs() {
		f.NodeIPs = append(f.NodeIPs, ref.IP)
		if ref.Role == stacks.RoleControlPlane {
			f.ControlPlaneIPs = append(f.ControlPlaneIPs, ref.IP)
		}
	}
	return f
}

// TalosNodes describes the stack's servers to the TalosCluster: static
// addresses, the node name as hostname (there is no DHCP to hand one out),
// for a /32 address an on-link route to the gateway before the default
// route through it (the gateway lies outside the node's own network), and
// the ingress firewall of the node's role.
func TalosNodes(cfg *stacks.Config) []talos.NodeSpec {
	fw := FirewallOf(cfg)
	var out []talos.NodeSpec
	for _, ref := range cfg.Nodes.Refs() {
		var routes []talos.Route
		if ref.PrefixLength == 32 {
			routes = append(routes, talos.Route{Network: ref.Gateway + "/32"})
		}
		routes = append(routes, talos.Route{Network: "0.0.0.0/0", Gateway: ref.Gateway})
		out = append(out, talos.NodeSpec{
			Name:        ref.Name,
			IP:          ref.IP,
			Role:        talos.RoleOf(ref.Role),
			InstallDisk: ref.InstallDisk,
			Hostname:    ref.Name,
			UserPatches: talos.PatchTexts(ref.Patches),
			// The firewall comes before the user's patches, so they can
			// add rules (a NetworkRuleConfig of their own) or replace ours.
			PlatformPatches: []string{fw.Patch(talos.RoleOf(ref.Role))},
			Network: talos.NodeNetwork{
				Addresses: []string{fmt.Sprintf("%s/%d", ref.IP, ref.PrefixLength)},
				Routes:    routes,
			},
		})
	}
	return out
}
