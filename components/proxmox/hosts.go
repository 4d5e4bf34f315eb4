package proxmox

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/talos"
)

// HostTagPrefix starts the tag that names the host of a VM on one of the
// hosts entries (host-<name>); the proxmox input's VMs carry none, as
// before hosts existed. The fast-stop hook reads it from the VM's state to
// find the API the VM lives behind.
const HostTagPrefix = "host-"

// HostTag is the tag of the VMs of the hosts entry named host ("" for the
// proxmox input's host, whose VMs carry none).
func HostTag(host string) string {
	if host == "" {
		return ""
	}
	return HostTagPrefix + tagCharRe.ReplaceAllString(strings.ToLower(host), "-")
}

// hostView is one host of the cluster as the resources see it: its name
// ("" for the proxmox input's), where its inputs are, its settings and its
// nodes in the cluster's order.
type hostView struct {
	Name     string
	Path     string // input path of its settings, with the trailing dot
	Settings HostSettings
	Nodes    []Node
}

// label is the host as messages name it.
func (h hostView) label() string { return hostLabel(h.Name) }

// hostLabel names a host ("" for the proxmox input's) in messages.
func hostLabel(host string) string {
	if host == "" {
		return "the proxmox host"
	}
	return "host " + host
}

// suffix tells the host's resources from the proxmox input's, whose names
// are those from before hosts existed.
func (h hostView) suffix() string {
	if h.Name == "" {
		return ""
	}
	return "-" + h.Name
}

// hostViews are the proxmox input's host, then each hosts entry, each with
// its nodes; a node naming no entry stays with none (check says why).
func (a *ClusterArgs) hostViews() []hostView {
	views := []hostView{{Path: "proxmox.", Settings: a.Proxmox}}
	for i, h := range a.Hosts {
		views = append(views, hostView{Name: h.Name, Path: fmt.Sprintf("hosts[%d].proxmox.", i), Settings: h.Proxmox})
	}
	for _, n := range a.Nodes {
		if i := slices.IndexFunc(views, func(v hostView) bool { return v.Name == n.Host }); i >= 0 {
			views[i].Nodes = append(views[i].Nodes, n)
		}
	}
	return views
}

// settingsOf are the settings of the host a node names (the proxmox
// input's for "" or an unknown name, which check refuses).
func (a *ClusterArgs) settingsOf(host string) HostSettings {
	for _, h := range a.Hosts {
		if h.Name == host && host != "" {
			return h.Proxmox
		}
	}
	return a.Proxmox
}

// regionOf is the topology.kubernetes.io/region of a host's nodes: the
// CSI plugin's region (its Proxmox cluster) for the proxmox input's host,
// the entry's name for the others.
func (a *ClusterArgs) regionOf(host string) string {
	if host != "" {
		return host
	}
	if a.CSI != nil {
		return a.CSI.withDefaults().Region
	}
	return DefaultCSIRegion
}

// placement is a node's failure domain as the quorum warning names it: its
// Proxmox node, on its host when that is a hosts entry.
func placement(n Node) string {
	if n.Host == "" {
		return n.ProxmoxNode
	}
	return n.Host + "/" + n.ProxmoxNode
}

// checkHosts records the problems of the hosts entries and of the nodes'
// placement on them: names, each host's settings and network, one image
// for all, and what hosts on different networks need (KubeSpan, no VIP).
func (a *ClusterArgs) checkHosts(p *inputs.Problems) {
	names := map[string]string{a.regionOf(""): "the proxmox host's region"}
	for i, h := range a.Hosts {
		at := fmt.Sprintf("hosts[%d].", i)
		switch first, dup := names[h.Name]; {
		case !p.Required(at+"name", h.Name):
		case !inputs.IsDNSLabel(h.Name):
			p.Add(at+"name", "%q is not a DNS label (lowercase letters, digits and '-'): it is the region label of the host's nodes", h.Name)
		case dup:
			p.Add(at+"name", "%q is already %s: every host needs a name of its own", h.Name, first)
		default:
			names[h.Name] = at + "name"
		}
		holdsNodes := slices.ContainsFunc(a.Nodes, func(n Node) bool { return n.Host == h.Name && h.Name != "" })
		if holdsNodes && h.Proxmox.Addressing != a.Proxmox.Addressing {
			p.Add(at+"proxmox.addressing", "%q differs from proxmox.addressing %q: the nodes of one cluster boot one image (nocloud for static, metal for DHCP); use the same addressing on every host",
				h.Proxmox.Addressing, a.Proxmox.Addressing)
		}
	}
	for i, n := range a.Nodes {
		if n.Host != "" && !slices.ContainsFunc(a.Hosts, func(h Host) bool { return h.Name == n.Host }) {
			p.Add(fmt.Sprintf("nodes[%d].host", i), "%q is no entry of hosts (%s); leave it empty for the proxmox host", n.Host, strings.Join(a.hostNames(), ", "))
		}
	}
	if len(a.Hosts) == 0 {
		return
	}
	if a.CSI != nil && slices.ContainsFunc(a.Nodes, func(n Node) bool { return n.Host != "" }) {
		p.Add("csi", "the Proxmox CSI plugin serves the proxmox host only so far, and nodes run on hosts entries with other Proxmox VE APIs; use Longhorn volumes (cluster.dataVolume), which follow the nodes' zones, or keep every node on the proxmox host")
	}
	a.checkNetworks(p)
}

// hostNames are the names of the hosts entries.
func (a *ClusterArgs) hostNames() []string {
	out := make([]string, 0, len(a.Hosts))
	for _, h := range a.Hosts {
		out = append(out, h.Name)
	}
	return out
}

// checkNetworks records what the hosts' networks require: each host's
// gateway (it says which hosts share a network) and, when they do not all
// share one, KubeSpan between the nodes and no layer-2 VIP.
func (a *ClusterArgs) checkNetworks(p *inputs.Problems) {
	type network struct {
		host   string
		prefix netip.Prefix
	}
	var used []hostView
	for _, h := range a.hostViews() {
		if len(h.Nodes) > 0 {
			used = append(used, h)
		}
	}
	if len(used) < 2 {
		// One host holds every node: one network.
		return
	}
	var nets []network
	known := true
	for _, h := range used {
		prefix := h.Settings.network()
		if !prefix.IsValid() {
			// Refused where it is given; required here.
			if h.Settings.Gateway == "" {
				p.Add(h.Path+"gateway", "is required when the cluster spans several hosts: it tells which hosts share a network (a VIP, no tunnel) and which do not (KubeSpan)")
			}
			known = false
			continue
		}
		if !slices.ContainsFunc(nets, func(n network) bool { return n.prefix == prefix }) {
			nets = append(nets, network{host: h.label(), prefix: prefix})
		}
	}
	if !known || len(nets) < 2 {
		return
	}
	var spans []string
	for _, n := range nets {
		spans = append(spans, fmt.Sprintf("%s on %s", n.host, n.prefix))
	}
	where := strings.Join(spans, ", ")
	if a.Cluster.KubeSpan == nil || !a.Cluster.KubeSpan.Enabled {
		p.Add("cluster.kubeSpan.enabled", "the nodes sit on different networks (%s): set it to true, so that they reach each other over Talos's WireGuard mesh (UDP %d between the hosts, see docs/multi-host.md)",
			where, talos.KubeSpanPort)
	}
	if a.Cluster.VIP != "" {
		p.Add("cluster.vip", "a layer-2 VIP cannot span hosts on different networks (%s): leave it empty and point the endpoint (cluster.endpoint) at a DNS name that resolves to every control plane's address, or at a load balancer in front of them reached over KubeSpan",
			where)
	}
}
