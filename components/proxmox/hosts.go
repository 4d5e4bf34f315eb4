package proxmox

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/servers"
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
	// Gone: the host is lost for good (Host.Gone).
	Gone bool
	// VPS: the entry is rented servers (Host.VPS), not a Proxmox VE host.
	VPS *servers.Settings
}

// goneOptions keep a lost host's resources from any call to it: retained on
// delete, so their deletes only drop them from the state, and the inputs named
// by ignore left as they are. Any other change to a gone host's VM is the
// operator's to avoid. Nothing for a host that is not gone
// (docs/decisions/0004-upstream-behaviours.md#the-resources-of-a-lost-host).
func (h hostView) goneOptions(ignore ...string) []pulumi.ResourceOption {
	if !h.Gone {
		return nil
	}
	opts := []pulumi.ResourceOption{pulumi.RetainOnDelete(true)}
	if len(ignore) > 0 {
		opts = append(opts, pulumi.IgnoreChanges(ignore))
	}
	return opts
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
		views = append(views, hostView{Name: h.Name, Path: fmt.Sprintf("hosts[%d].proxmox.", i), Settings: h.settings(), Gone: h.Gone, VPS: h.VPS})
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
			return h.settings()
		}
	}
	return a.Proxmox
}

// settings are the entry's Proxmox settings (none for rented servers).
func (h Host) settings() HostSettings {
	if h.Proxmox == nil {
		return HostSettings{}
	}
	return *h.Proxmox
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
func placement(n Node) string { return placementOf(n.Host, n.ProxmoxNode) }

// siteOf is the site of a node's host ("" for the proxmox input's), as the
// quorum warning names it: the host's Site, else the hosts entry's name,
// or proxmox. The Proxmox nodes of one host share its site (power,
// network).
func (a *ClusterArgs) siteOf(host string) string {
	if s := a.settingsOf(host).Site; s != "" {
		return s
	}
	if host == "" {
		return "proxmox"
	}
	return host
}

// placementOf is a machine's failure domain: where, on host ("" for the
// proxmox input's), it runs (a Proxmox node; a rented server itself).
func placementOf(host, where string) string {
	if host == "" {
		return where
	}
	return host + "/" + where
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
		// An entry of neither kind is checkServers' to refuse.
		if holdsNodes && h.VPS == nil && h.Proxmox != nil && h.Proxmox.Addressing != a.Proxmox.Addressing {
			p.Add(at+"proxmox.addressing", "%q differs from proxmox.addressing %q: the nodes of one cluster boot one image (nocloud for static, metal for DHCP); use the same addressing on every host",
				h.Proxmox.Addressing, a.Proxmox.Addressing)
		}
	}
	for i, n := range a.Nodes {
		at := fmt.Sprintf("nodes[%d].host", i)
		j := slices.IndexFunc(a.Hosts, func(h Host) bool { return h.Name == n.Host })
		switch {
		case n.Host == "":
		case j < 0:
			p.Add(at, "%q is no entry of hosts (%s); leave it empty for the proxmox host", n.Host, strings.Join(a.hostNames(), ", "))
		case a.Hosts[j].Gone && a.PreviousVMs != nil:
			if _, had := a.PreviousVMs[n.Name]; !had {
				p.Add(at, "%q is gone (hosts[%d].gone): no new VM can be made there; put %s on another host", n.Host, j, n.Name)
			}
		}
	}
	if len(a.Hosts) == 0 {
		return
	}
	if a.CSI != nil {
		switch {
		case slices.ContainsFunc(a.Nodes, a.onServer):
			p.Add("csi", "the Proxmox CSI plugin makes Proxmox VE disks, which rented servers (hosts entries with vps) cannot attach; use Longhorn volumes (cluster.dataVolume), which follow the nodes' zones, or keep the plugin to a cluster of Proxmox VE hosts")
		case a.CSI.TokenSecret != nil && slices.ContainsFunc(a.Nodes, func(n Node) bool { return n.Host != "" }):
			p.Add("csi.tokenId", "a token of yours serves one Proxmox VE API, and nodes run on hosts entries with APIs of their own: leave tokenId and tokenSecret out, so that the plugin gets a token with its privileges on each host")
		}
	}
	a.checkNetworks(p)
}

// looks is how the host's VM network looks from its settings: its prefix
// and gateway ("" when they are not valid).
func (px HostSettings) looks() string {
	prefix := px.network()
	if !prefix.IsValid() {
		return ""
	}
	return fmt.Sprintf("%s via %s", prefix, px.Gateway)
}

// networkKey tells the hosts' VM networks apart: the same for two hosts on
// one network. An entry of rented servers is a network of its own; a
// Proxmox VE host's is its prefix and gateway at its site.
func (h hostView) networkKey() string {
	if h.VPS != nil {
		return "servers of " + h.Name
	}
	return h.Settings.looks() + " at " + h.Settings.Site
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
		host string
		// key tells networks apart: a Proxmox VE host's prefix, or the
		// public addresses of an entry of rented servers.
		key string
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
	lookAlike := map[string]hostView{} // the first host on each prefix and gateway
	for _, h := range used {
		if h.VPS != nil {
			nets = append(nets, network{host: h.label(), key: "servers of " + h.Name})
			continue
		}
		prefix := h.Settings.network()
		if !prefix.IsValid() {
			// Refused where it is given; required here.
			if h.Settings.Gateway == "" {
				p.Add(h.Path+"gateway", "is required when the cluster spans several hosts: it tells which hosts share a network (a VIP, no tunnel) and which do not (KubeSpan)")
			}
			known = false
			continue
		}
		// Two sites may both use 192.168.1.0/24 behind 192.168.1.1: the
		// same prefix and gateway are one network only at one site, which
		// the stack says (Site), since nothing here can tell.
		looks := h.Settings.looks()
		if first, ok := lookAlike[looks]; ok && (first.Settings.Site == "" || h.Settings.Site == "") {
			p.Add(h.Path+"site", "%s and %s both put their VMs on %s: give both a site (proxmox.site, hosts[].proxmox.site), the same one when they share that network (a VIP then works, KubeSpan is optional), different ones when they are two networks that look alike (KubeSpan, no VIP)",
				first.label(), h.label(), looks)
			known = false
			continue
		}
		lookAlike[looks] = h
		key := h.networkKey()
		if !slices.ContainsFunc(nets, func(n network) bool { return n.key == key }) {
			nets = append(nets, network{host: h.label(), key: key})
		}
	}
	if !known || len(nets) < 2 {
		return
	}
	var spans []string
	for _, n := range nets {
		if strings.HasPrefix(n.key, "servers of ") {
			spans = append(spans, n.host+" (rented servers)")
			continue
		}
		spans = append(spans, fmt.Sprintf("%s on %s", n.host, strings.TrimSuffix(n.key, " at ")))
	}
	where := strings.Join(spans, ", ")
	if a.Cluster.KubeSpan == nil || !a.Cluster.KubeSpan.Enabled {
		p.Add("cluster.kubeSpan.enabled", "the nodes sit on different networks (%s): set it to true, so that they reach each other over Talos's WireGuard mesh (UDP %d between the hosts, see docs/multi-host.md)",
			where, talos.KubeSpanPort)
	}
	if a.Cluster.VIP != "" {
		p.Add("cluster.vip", "a layer-2 VIP cannot span hosts on different networks (%s): leave it empty and point the endpoint (cluster.endpoint) at a DNS name that resolves to every control plane's address this machine and the nodes reach, or at a TCP load balancer outside the cluster that reaches them directly (not over KubeSpan, which it cannot join; inside the cluster KubePrism already balances)",
			where)
	}
}

// goneWarnings say, for each host marked gone that still holds nodes, what
// to do next: remove those nodes (their VMs, ISOs and reservations then
// leave the state without a call to the host), then the entry.
func (a *ClusterArgs) goneWarnings(name func(string) string) []string {
	var out []string
	for i, h := range a.Hosts {
		if !h.Gone {
			continue
		}
		var nodes []string
		for _, n := range a.Nodes {
			if n.Host == h.Name {
				nodes = append(nodes, n.Name)
			}
		}
		if len(nodes) == 0 {
			continue
		}
		out = append(out, fmt.Sprintf("%s: host %s is gone for good: nothing asks it anything now; remove its nodes (%s) from the stack and run up (a control plane at a time: its etcd member is taken out through the others), then remove its entry: its VMs, ISOs and reservations leave the stack without a call to it",
			name(fmt.Sprintf("hosts[%d].gone", i)), h.Name, strings.Join(nodes, ", ")))
	}
	return out
}
