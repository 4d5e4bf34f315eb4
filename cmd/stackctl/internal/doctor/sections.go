package doctor

import (
	"cmp"
	"context"

	"github.com/fluodata/talos-pulumi/stacks"
)

// section is one Proxmox section of a stack (proxmox, or a hosts entry's)
// as the Proxmox checks see it: each check runs once per section, with the
// section's API, token, datastores, SSH, network and nodes, and names the
// section's keys.
type section struct {
	stacks.ProxmoxSection
	// view is the stack as the section alone: its settings as proxmox,
	// its network as cluster.network, its nodes (the stack itself when it
	// has no hosts entries). The Env's seams and the ssh-proxy helper get
	// it.
	view *stacks.Config
	// refs are the section's nodes at their keys in the stack file.
	refs []stacks.NodeRef
	// several: the stack has hosts entries, so each result names its
	// section.
	several bool
}

// sectionsOf are the stack's Proxmox sections, proxmox first.
func sectionsOf(cfg *stacks.Config) []section {
	all := cfg.ProxmoxSections()
	out := make([]section, 0, len(all))
	for _, s := range all {
		sec := section{ProxmoxSection: s, view: cfg, several: len(all) > 1, refs: cfg.SectionRefs(s)}
		if sec.several {
			sec.view = sectionView(cfg, s)
		}
		out = append(out, sec)
	}
	return out
}

// sectionView is cfg as its section s alone: s's settings as proxmox, its
// network as cluster.network, its nodes only (their host left out), no
// hosts entries; a hosts entry has no VIP (the proxmox host's network's).
func sectionView(cfg *stacks.Config, s stacks.ProxmoxSection) *stacks.Config {
	v := *cfg
	v.Proxmox = *s.ProxmoxConfig
	v.Hosts = nil
	v.Nodes = stacks.NodesConfig{}
	for _, ref := range cfg.SectionRefs(s) {
		n := *ref.NodeConfig
		n.Host = ""
		if ref.Role == stacks.RoleControlPlane {
			v.Nodes.ControlPlanes = append(v.Nodes.ControlPlanes, n)
		} else {
			v.Nodes.Workers = append(v.Nodes.Workers, n)
		}
	}
	if s.Host != "" {
		v.Cluster.VIP = ""
		for _, h := range cfg.Hosts {
			if h.Name == s.Host {
				v.Cluster.Network.Gateway = cmp.Or(h.Network.Gateway, cfg.Cluster.Network.Gateway)
				v.Cluster.Network.PrefixLength = cmp.Or(h.Network.PrefixLength, cfg.Cluster.Network.PrefixLength)
				break
			}
		}
	}
	return &v
}

// key is the section's key k, e.g. proxmox.isoDatastore or
// hosts[0].proxmox.isoDatastore.
func (s section) key(k string) string { return s.Path + "." + k }

// named is rs with the section named in front of each message, in a stack
// with several sections.
func (s section) named(rs ...Result) []Result {
	if !s.several {
		return rs
	}
	out := make([]Result, len(rs))
	for i, r := range rs {
		r.Message = s.Label() + ": " + r.Message
		out[i] = r
	}
	return out
}

// sectionKey carries, in a context, the key of the section a seam of Env
// is called for.
type sectionKey struct{}

// forSection is ctx for the Env seams called for s, whose defaults name
// s's keys in their errors.
func forSection(ctx context.Context, s section) context.Context {
	return context.WithValue(ctx, sectionKey{}, s.Path)
}

// sectionPath is the key of the section ctx is for: proxmox by default.
func sectionPath(ctx context.Context) string {
	if p, ok := ctx.Value(sectionKey{}).(string); ok {
		return p
	}
	return "proxmox"
}
