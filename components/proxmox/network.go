package proxmox

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"

	"github.com/fluodata/talos-pulumi/components/inputs"
)

// MaxPrefixLength is the longest prefix of the VMs' network: a /31 or /32
// holds no gateway beside a node.
const MaxPrefixLength = 30

// checkNetwork records the problems of each host's node network (gateway
// and prefix length, which static addressing needs) and of where the node
// IPs sit in it, and of the VIP in the proxmox host's. With DHCP
// reservations both are optional; given, they are checked as well, as the
// VMs get their addresses on that network. What follows from an address
// that is already refused (a node outside a loopback gateway's network) is
// not reported again.
func (a *ClusterArgs) checkNetwork(p *inputs.Problems) {
	for _, h := range a.hostViews() {
		if h.VPS == nil { // a server's network is checked as on a VpsCluster
			h.checkNetwork(p, a.Nodes)
		}
	}
	subnet := a.nodeNetwork()
	if !subnet.IsValid() {
		return
	}
	if vip, ok := inputs.MachineIPv4(a.Cluster.VIP); ok {
		gw, _ := inputs.MachineIPv4(a.Proxmox.Gateway)
		checkInNetwork(p, "cluster.vip", vip, gw, subnet)
	}
}

// checkNetwork records the problems of the host's network and of its
// nodes' IPs in it (all is the cluster's nodes, whose index names them).
func (h hostView) checkNetwork(p *inputs.Problems, all []Node) {
	px := h.Settings
	static := px.Addressing == AddressingStatic
	if px.PrefixLength != 0 || static {
		if msg := inputs.RangeProblem(px.PrefixLength, inputs.MinNodePrefix, MaxPrefixLength); msg != "" {
			p.Add(h.Path+"prefixLength", "%s", msg)
		}
	}
	if px.Gateway != "" || static {
		if p.Required(h.Path+"gateway", px.Gateway) {
			p.MachineIPv4(h.Path+"gateway", px.Gateway)
		}
	}
	subnet := px.network()
	// No nodes: a name's nodes are its first host's (hostViews), not those
	// of an entry that repeats the name or has none (checkHosts refuses
	// it), which n.Host alone would not tell.
	if !subnet.IsValid() || len(h.Nodes) == 0 {
		return
	}
	gw, _ := inputs.MachineIPv4(px.Gateway)
	for i, n := range all {
		if n.Host != h.Name {
			continue
		}
		if ip, ok := inputs.MachineIPv4(n.IP); ok { // else the TalosCluster's rules say why
			checkInNetwork(p, fmt.Sprintf("nodes[%d].ip", i), ip, gw, subnet)
		}
	}
}

// checkInNetwork records a problem unless ip is a host address of the node
// network subnet of gateway gw.
func checkInNetwork(p *inputs.Problems, path string, ip, gw netip.Addr, subnet netip.Prefix) {
	if msg := inputs.HostAddressProblem(ip, gw, subnet); msg != "" {
		p.Add(path, "%s", msg)
	} else if !subnet.Contains(ip) {
		p.Add(path, "%s is outside the node network %s of gateway %s", ip, subnet, gw)
	}
}

// nodeNetwork is the proxmox host's VMs' network (where the VIP sits).
func (a *ClusterArgs) nodeNetwork() netip.Prefix { return a.Proxmox.network() }

// network is the host's VMs' network, the gateway's with the prefix
// length, or the zero prefix when either is not given or refused.
func (px HostSettings) network() netip.Prefix {
	gw, ok := inputs.MachineIPv4(px.Gateway)
	if !ok || px.PrefixLength < inputs.MinNodePrefix || px.PrefixLength > MaxPrefixLength {
		return netip.Prefix{}
	}
	return netip.PrefixFrom(gw, px.PrefixLength).Masked()
}

// nodeGateway is the nodes' gateway, when it is a machine's address.
func (a *ClusterArgs) nodeGateway() netip.Addr {
	gw, _ := inputs.MachineIPv4(a.Proxmox.Gateway)
	return gw
}

// Check records the problems of SSH settings under prefix (the stack
// file's SSH settings serve its access proxy as well as the DHCP
// reservations, so it checks them with this too). A host left out is the
// caller's to require or default.
func (s SSHSettings) Check(p *inputs.Problems, prefix string) {
	if s.Host != "" {
		p.Host(prefix+"host", s.Host)
	}
	if msg := inputs.PortProblem(s.Port); msg != "" {
		p.Add(prefix+"port", "%s", msg)
	}
	p.Required(prefix+"user", s.User)
}

// EndpointProblem says what is wrong with the Proxmox API's URL, or "". Its
// host may be a loopback address: the local end of an SSH port forward to
// the host.
func EndpointProblem(endpoint string) string {
	u, err := url.Parse(endpoint)
	switch {
	case endpoint == "":
		return "is required, e.g. https://192.168.122.70:8006/"
	case err != nil || u.Host == "":
		return fmt.Sprintf("%q is not a URL like https://192.168.122.70:8006/", endpoint)
	case u.Scheme != "https":
		return fmt.Sprintf("%q must use https (the Proxmox API only listens on TLS)", endpoint)
	case u.User != nil:
		return "must not carry credentials; use proxmox.apiTokenId and proxmox.apiTokenSecret"
	case strings.Contains(u.Path, "api2"):
		return fmt.Sprintf("%q: give the base URL without /api2/json", endpoint)
	case !inputs.IsHost(u.Hostname()):
		return fmt.Sprintf("%q has no valid host", endpoint)
	}
	return inputs.URLPortProblem(u)
}
