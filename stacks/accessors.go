package stacks

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/fluodata/talos-pulumi/internal/rollout"
)

// Role is a node's Talos machine type (the rollout core's Role, the one
// Role type of the project).
type Role = rollout.Role

// Roles, spelled as Talos spells machine types.
const (
	RoleControlPlane = rollout.ControlPlane
	RoleWorker       = rollout.Worker
)

// NodeRef is a node together with its role and key path.
type NodeRef struct {
	*NodeConfig
	Role Role
	// Path is the node's key path, e.g. `nodes.workers[1]`.
	Path string
}

// All returns pointers to every node, control planes first, in file order,
// a pool's nodes (expandPools) after the workers.
func (n *NodesConfig) All() []*NodeConfig {
	out := make([]*NodeConfig, 0, len(n.ControlPlanes)+len(n.Workers))
	for i := range n.ControlPlanes {
		out = append(out, &n.ControlPlanes[i])
	}
	for i := range n.Workers {
		out = append(out, &n.Workers[i])
	}
	for i := range n.pooled {
		for j := range n.pooled[i] {
			out = append(out, &n.pooled[i][j])
		}
	}
	return out
}

// Refs returns every node with its role and key path, control planes first,
// then the workers and the pools' nodes.
func (n *NodesConfig) Refs() []NodeRef {
	out := make([]NodeRef, 0, len(n.ControlPlanes)+len(n.Workers))
	for i := range n.ControlPlanes {
		out = append(out, NodeRef{&n.ControlPlanes[i], RoleControlPlane, fmt.Sprintf("nodes.controlPlanes[%d]", i)})
	}
	for i := range n.Workers {
		out = append(out, NodeRef{&n.Workers[i], RoleWorker, fmt.Sprintf("nodes.workers[%d]", i)})
	}
	// A pool's nodes are named by the pool's keys: what is wrong with one
	// is wrong with the pool's entry.
	for i := range n.pooled {
		for j := range n.pooled[i] {
			out = append(out, NodeRef{&n.pooled[i][j], RoleWorker, fmt.Sprintf("nodes.pools[%d]", i)})
		}
	}
	return out
}

// EndpointHost is the host of the Kubernetes API URL: the explicit endpoint,
// else the VIP, else the first control plane's IP.
func (c *Config) EndpointHost() string {
	switch {
	case c.Cluster.Endpoint != "":
		return c.Cluster.Endpoint
	case c.Cluster.VIP != "":
		return c.Cluster.VIP
	case len(c.Nodes.ControlPlanes) > 0:
		return c.Nodes.ControlPlanes[0].IP
	default:
		return ""
	}
}

// NodeNetwork is the nodes' shared subnet (gateway/prefixLength), as on
// Proxmox; false when the gateway is not an IPv4 address.
func (c *Config) NodeNetwork() (netip.Prefix, bool) { return nodeNetwork(c) }

// KubernetesEndpoint is the cluster endpoint URL Talos configs carry.
func (c *Config) KubernetesEndpoint() string {
	return "https://" + net.JoinHostPort(c.EndpointHost(), strconv.Itoa(constants.DefaultControlPlanePort))
}

// ProxmoxSection is one Proxmox section of the stack file: proxmox, or a
// hosts entry's.
type ProxmoxSection struct {
	// Path is its key: proxmox or hosts[i].proxmox.
	Path string
	// Host is the hosts entry's name, "" for proxmox.
	Host string
	// Gone: the hosts entry is lost for good (hosts[i].gone); nothing of
	// it may be contacted.
	Gone bool
	*ProxmoxConfig
}

// ProxmoxSections are the stack file's Proxmox sections, proxmox first.
func (c *Config) ProxmoxSections() []ProxmoxSection {
	out := []ProxmoxSection{{Path: "proxmox", ProxmoxConfig: &c.Proxmox}}
	for i := range c.Hosts {
		if c.Hosts[i].servers {
			continue // rented servers: no Proxmox VE API
		}
		out = append(out, ProxmoxSection{Path: fmt.Sprintf("hosts[%d].proxmox", i), Host: c.Hosts[i].Name, Gone: c.Hosts[i].Gone, ProxmoxConfig: &c.Hosts[i].Proxmox})
	}
	return out
}

// SectionNetwork is the node network of a Proxmox section's VMs: the
// cluster's, or a hosts entry's own gateway and prefix length where it
// gives them (each defaulting to cluster.network's), if valid.
func (c *Config) SectionNetwork(s ProxmoxSection) (netip.Prefix, bool) {
	if s.Host == "" {
		return nodeNetwork(c)
	}
	v := *c
	for _, h := range c.Hosts {
		if h.Name == s.Host {
			v.Cluster.Network.Gateway = cmp.Or(h.Network.Gateway, v.Cluster.Network.Gateway)
			v.Cluster.Network.PrefixLength = cmp.Or(h.Network.PrefixLength, v.Cluster.Network.PrefixLength)
			break
		}
	}
	return nodeNetwork(&v)
}

// SectionRefs are the nodes on a Proxmox section's host, in the file's
// order, with their paths in the whole file.
func (c *Config) SectionRefs(s ProxmoxSection) []NodeRef {
	var out []NodeRef
	for _, ref := range c.Nodes.Refs() {
		if !c.OnServers(ref.Host) && c.SectionOf(ref.Host).Path == s.Path {
			out = append(out, ref)
		}
	}
	return out
}

// Label names the section's host in messages: "proxmox" or "host <name>".
func (s ProxmoxSection) Label() string {
	if s.Host == "" {
		return "proxmox"
	}
	return "host " + s.Host
}

// OnServers reports whether a node runs on a hosts entry of rented
// servers.
func (c *Config) OnServers(host string) bool {
	for _, h := range c.Hosts {
		if h.Name == host && host != "" {
			return h.servers
		}
	}
	return false
}

// SectionOf is the Proxmox section of the host a node names (proxmox for
// none, or for a name no entry has).
func (c *Config) SectionOf(host string) ProxmoxSection {
	for _, s := range c.ProxmoxSections() {
		if s.Host == host {
			return s
		}
	}
	return c.ProxmoxSections()[0]
}

// EndpointHost is the host name of the Proxmox API URL ("" if unparsable).
func (p *ProxmoxConfig) EndpointHost() string {
	u, err := url.Parse(p.Endpoint)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// DNSMasqEnabled reports whether DHCP reservations are written.
func (p *ProxmoxConfig) DNSMasqEnabled() bool { return p.DNSMasq.Enabled != nil && *p.DNSMasq.Enabled }

// KeyFilePath is privateKeyFile with a leading ~/ expanded, as a shell would.
func (s *SSHConfig) KeyFilePath() string { return homePath(s.PrivateKeyFile) }

// CAFilePath is backup.s3.caFile with a leading ~/ expanded; "" when unset.
func (c *BackupS3Config) CAFilePath() string { return homePath(c.CAFile) }

// homePath expands a leading ~/ to the user's home directory.
func homePath(p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, rest)
		}
	}
	return p
}
