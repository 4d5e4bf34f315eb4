// Package proxmox holds the ProxmoxCluster component: Talos VMs on Proxmox VE.
package proxmox

import (
	"fmt"

	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/stacks"
)

// TalosNodes describes the stack's VMs to the TalosCluster. Every node's
// hostname is pinned to its name in the machine config, whatever the
// addressing: a DHCP server that sends no hostname (another router than
// our dnsmasq) would leave the node a generated talos-xxx-yyy name, which
// the serving-certificate approver's name pattern never matches. Talos 1.12
// takes it as a HostnameConfig document, which does not clash with a name
// from DHCP. With static addressing the nocloud image reads the address
// from the cloud-init drive, and the machine config repeats it so that the
// installed system keeps it.
func TalosNodes(cfg *stacks.Config) []talos.NodeSpec {
	static := cfg.Proxmox.Addressing == stacks.AddressingStatic
	var out []talos.NodeSpec
	for _, ref := range cfg.Nodes.Refs() {
		n := talos.NodeSpec{
			Name:        ref.Name,
			IP:          ref.IP,
			Role:        talos.RoleOf(ref.Role),
			InstallDisk: cfg.Cluster.InstallDisk,
			UserPatches: talos.PatchTexts(ref.Patches),
			Network:     talos.NodeNetwork{DHCP: !static},
			Hostname:    ref.Name,
		}
		if static {
			n.Network.Addresses = []string{fmt.Sprintf("%s/%d", ref.IP, cfg.Cluster.Network.PrefixLength)}
			n.Network.Routes = []talos.Route{{Network: "0.0.0.0/0", Gateway: cfg.Cluster.Network.Gateway}}
		}
		out = append(out, n)
	}
	return out
}
