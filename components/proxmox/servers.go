package proxmox

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/image"
	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/servers"
	"github.com/fluodata/talos-pulumi/components/talos"
)

// A hosts entry with vps settings is rented servers, installed from their
// provider's rescue system by the VpsCluster's own steps (servers.NewServers),
// their Talos configs with its firewall (servers.ServerSpec): a cluster whose
// control planes sit at home and on a rented server.

// anywhere is the source of a rule open to every address.
const anywhere = "0.0.0.0/0"

// serverSettings are the vps settings of the host a node names, nil when
// it is a Proxmox VE host.
func (a *ClusterArgs) serverSettings(host string) *servers.Settings {
	for _, h := range a.Hosts {
		if h.Name == host && host != "" {
			return h.VPS
		}
	}
	return nil
}

// onServer says the node is a rented server of a hosts entry.
func (a *ClusterArgs) onServer(n Node) bool { return a.serverSettings(n.Host) != nil }

// serverNode is a node as vps takes a server, with the VpsCluster's
// defaults (the rescue port and user).
func serverNode(n Node) servers.Node {
	s := servers.Node{
		Name: n.Name, Role: n.Role, IP: n.IP, InstallDisk: n.InstallDisk, Patches: n.Patches, KubeSpanEndpoints: n.KubeSpanEndpoints, Labels: n.Labels, Taints: n.Taints,
		Schematic: n.Schematic,
	}
	if n.Server != nil {
		s.Rescue, s.Gateway, s.PrefixLength = n.Server.Rescue, n.Server.Gateway, n.Server.PrefixLength
	}
	return s.WithDefaults()
}

// serverSpec is a rented server as the TalosCluster takes it: its static
// address and firewall as on a VpsCluster, and its failure domain (region
// its host, zone the server itself) when the nodes spread.
func (a *ClusterArgs) serverSpec(s servers.Settings, n Node, spread bool) talos.NodeSpec {
	spec := servers.ServerSpec(a.serverFirewall(s, n.Host), s, serverNode(n))
	// A rented server is a site of its own: the stack does not know
	// where the provider put it.
	spec.Host = placementOf(n.Host, n.Name)
	spec.Site = spec.Host
	if spread {
		spec.PlatformPatches = append(spec.PlatformPatches, TopologyPatch(n.Host, Node{ProxmoxNode: n.Name}))
	}
	return spec
}

// serverFirewall is the firewall of host's servers: the cluster's every
// node may reach them, as on a VpsCluster. KubeSpan's port is open to the
// nodes and to the addresses their kubeSpanEndpoints give (a NAT's public
// address: what a VM at home sends from), so to the cluster's nodes only;
// to any address when a node elsewhere gives none, as its packets then
// come from an address the stack does not know (kubeSpanWarnings says
// so). WireGuard answers no packet it cannot authenticate either way.
func (a *ClusterArgs) serverFirewall(s servers.Settings, host string) servers.Firewall {
	f := servers.Firewall{
		OperatorCIDRs: s.AllowedCIDRs, PublicTCPPorts: s.PublicTCPPorts, PodCIDR: servers.DefaultPodCIDR,
		KubeSpan: a.Cluster.KubeSpan != nil && a.Cluster.KubeSpan.Enabled,
	}
	sources, unknown := a.kubeSpanPeers(host)
	for _, n := range a.Nodes {
		f.NodeIPs = append(f.NodeIPs, n.IP)
		if n.Role == talos.RoleControlPlane {
			f.ControlPlaneIPs = append(f.ControlPlaneIPs, n.IP)
		}
	}
	switch {
	case len(unknown) > 0:
		f.KubeSpanSources = []string{anywhere}
	case len(sources) > 0:
		for _, ip := range append(slices.Clone(f.NodeIPs), sources...) {
			// One address each: a /128 for an IPv6 endpoint, not a /32.
			if prefix, ok := talos.HostPrefix(ip); ok {
				f.KubeSpanSources = append(f.KubeSpanSources, prefix)
			}
		}
	}
	return f
}

// kubeSpanPeers are, for host's servers, the public addresses the nodes
// elsewhere announce (their kubeSpanEndpoints' IPs), and the names of the
// nodes elsewhere that announce none: VMs whose own IP is not what a
// server sees.
func (a *ClusterArgs) kubeSpanPeers(host string) (sources, unknown []string) {
	for _, n := range a.Nodes {
		if n.Host == host {
			continue
		}
		if len(n.KubeSpanEndpoints) == 0 {
			if !a.onServer(n) { // another server's own IP is public
				unknown = append(unknown, n.Name)
			}
			continue
		}
		for _, e := range n.KubeSpanEndpoints {
			if ap, err := netip.ParseAddrPort(e); err == nil && !slices.Contains(sources, ap.Addr().String()) {
				sources = append(sources, ap.Addr().String())
			}
		}
	}
	return sources, unknown
}

// kubeSpanWarnings say which servers' firewall opens KubeSpan's port to
// every address, and what gives them the nodes' addresses instead.
func (a *ClusterArgs) kubeSpanWarnings(name func(string) string) []string {
	var out []string
	for i, h := range a.Hosts {
		if h.VPS == nil || !slices.ContainsFunc(a.Nodes, func(n Node) bool { return n.Host == h.Name }) {
			continue
		}
		if _, unknown := a.kubeSpanPeers(h.Name); len(unknown) > 0 {
			out = append(out, fmt.Sprintf("%s: the servers' firewall opens KubeSpan's UDP %d to every address, as %s give no kubeSpanEndpoints: the servers cannot know what address their packets come from (their network's router's); give each its forwarded public address:port to open it to the cluster's nodes only",
				name(fmt.Sprintf("hosts[%d].vps", i)), talos.KubeSpanPort, strings.Join(unknown, ", ")))
		}
	}
	return out
}

// checkServers records the problems of the hosts entries of rented
// servers and their nodes: an entry is one kind, is never marked gone
// (removing a server's node makes no call to it anyway), and its servers
// boot the metal image the VMs must boot too; each server's own settings
// are the VpsCluster's checks, at this component's paths.
func (a *ClusterArgs) checkServers(p *inputs.Problems) {
	for i, h := range a.Hosts {
		at := fmt.Sprintf("hosts[%d].", i)
		if h.VPS == nil {
			if h.Proxmox == nil {
				p.Add(at+"proxmox", "is required: a Proxmox VE host's API and settings, or vps for rented servers")
			}
			continue
		}
		if h.Proxmox != nil {
			p.Add(at+"vps", "and proxmox exclude each other: an entry is a Proxmox VE host or rented servers")
		}
		if h.Gone {
			p.Add(at+"gone", "is for Proxmox VE hosts: remove a rented server's node from the stack instead (vps.onDestroy forget makes no call to it)")
		}
		var nodes []servers.Node
		var index []int
		for j, n := range a.Nodes {
			if n.Host != h.Name || h.Name == "" {
				continue
			}
			if n.Server == nil {
				p.Add(fmt.Sprintf("nodes[%d].server.rescue", j), "is required for a node on %s (rented servers): the rescue system its install runs in", hostLabel(h.Name))
			}
			nodes = append(nodes, serverNode(n))
			index = append(index, j)
		}
		if len(nodes) == 0 {
			continue
		}
		if a.Proxmox.Addressing == AddressingStatic {
			p.Add(at+"vps", "rented servers boot Talos's metal image, and proxmox.addressing %s the nocloud one: the nodes of one cluster share one installer; use addressing %s with rented servers",
				AddressingStatic, AddressingDHCPReservation)
		}
		// A server's own keys are under the node's server input here.
		var found inputs.Problems
		servers.CheckServers(&found, *h.VPS, nodes, at+"vps.", func(k int) string { return fmt.Sprintf("nodes[%d]", index[k]) })
		for _, f := range found.List() {
			p.Add(serverKeyRe.ReplaceAllString(f.Path, "$1.server.$2"), "%s", f.Message)
		}
	}
}

// serverKeyRe matches the path of a server's own key as vps names it
// (nodes[4].rescue.password), which is under server here.
var serverKeyRe = regexp.MustCompile(`^(nodes\[\d+\])\.(rescue|gateway|prefixLength)\b`)

// refuseServerKeys records the keys of a rented server given to a VM.
func (a *ClusterArgs) refuseServerKeys(p *inputs.Problems, at string, n Node) {
	if n.Server != nil {
		p.Add(at+"server", "is for a node on a hosts entry of rented servers (vps); %s is a VM on %s", n.Name, hostLabel(n.Host))
	}
}

// newServers registers the installs of host's rented servers and returns
// their TalosCluster options. They write the factory's disk image of the
// node's schematic and the version, or the entry's own vps.imageUrl (a
// presigned one as a secret), as on a VpsCluster (servers.ImageURLs).
func (c *Cluster) newServers(ctx *pulumi.Context, name string, host hostView, images *image.Images, deps Deps, parent pulumi.ResourceOption) (map[string]talos.NodeOptions, error) {
	installURL := func(node string) pulumi.StringOutput {
		url, _ := servers.ImageURLs(images.Of(node).DiskImageURL, *host.VPS)
		return url
	}
	nodes := make([]servers.Node, 0, len(host.Nodes))
	for _, n := range host.Nodes {
		nodes = append(nodes, serverNode(n))
	}
	servers, err := servers.NewServers(ctx, name, *host.VPS, nodes, installURL, servers.Deps{Probe: deps.Probe, Talos: deps.Talos}, parent)
	if err != nil {
		return nil, fmt.Errorf("unable to install the servers of %s: %w", host.label(), err)
	}
	c.Servers[host.Name] = servers
	return servers.NodeOptions, nil
}
