package vps

import (
	"slices"

	"github.com/fluodata/talos-pulumi/components/talos"
)

// Defaults of the optional inputs of a VpsCluster (the stack file's are
// these).
const (
	// DefaultRescuePort and DefaultRescueUser are how rescue systems take
	// SSH logins.
	DefaultRescuePort = 22
	DefaultRescueUser = "root"
	// DefaultPrefixLength is a rented server's usual point-to-point /32,
	// its gateway outside it.
	DefaultPrefixLength = 32
)

// WithDefaults returns the arguments with every optional input that is
// empty set to its default. The nodes and settings are copied; nothing in a
// is changed.
func (a ClusterArgs) WithDefaults() ClusterArgs {
	if a.VPS.TalosWaitTimeout == "" {
		a.VPS.TalosWaitTimeout = DefaultTalosWaitTimeout
	}
	if a.VPS.OnDestroy == "" {
		a.VPS.OnDestroy = OnDestroyForget
	}
	if a.Cluster.Nameservers == nil {
		a.Cluster.Nameservers = talos.PublicNameservers() // a rented server has no local DNS server
	} else {
		a.Cluster.Nameservers = slices.Clone(a.Cluster.Nameservers)
	}
	if a.VPS.PrefixLength == 0 {
		a.VPS.PrefixLength = DefaultPrefixLength
	}
	nodes := make([]Node, len(a.Nodes))
	for i, n := range a.Nodes {
		if n.Rescue.Port == 0 {
			n.Rescue.Port = DefaultRescuePort
		}
		if n.Rescue.User == "" {
			n.Rescue.User = DefaultRescueUser
		}
		nodes[i] = n
	}
	a.Nodes = nodes
	return a
}
