// Package vps holds the VpsCluster component: Talos on rented servers,
// installed from the provider's rescue system.
package vps

import (
	"fmt"

	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/stacks"
)

// TalosNodes describes the stack's servers to the TalosCluster: static
// addresses, the node name as hostname (there is no DHCP to hand one out),
// and for a /32 address an on-link route to the gateway before the default
// route through it (the gateway lies outside the node's own network).
func TalosNodes(cfg *stacks.Config) []talos.NodeSpec {
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
			Network: talos.NodeNetwork{
				Addresses: []string{fmt.Sprintf("%s/%d", ref.IP, ref.PrefixLength)},
				Routes:    routes,
			},
		})
	}
	return out
}
