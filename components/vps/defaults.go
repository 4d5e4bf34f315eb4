package vps

import (
	"slices"

	"github.com/fluodata/talos-pulumi/components/servers"
	"github.com/fluodata/talos-pulumi/components/talos"
)

// WithDefaults returns the arguments with every optional input that is
// empty set to its default. The nodes and settings are copied; nothing in a
// is changed.
func (a ClusterArgs) WithDefaults() ClusterArgs {
	a.VPS = a.VPS.WithDefaults()
	if a.Cluster.Nameservers == nil {
		a.Cluster.Nameservers = talos.PublicNameservers() // a rented server has no local DNS server
	} else {
		a.Cluster.Nameservers = slices.Clone(a.Cluster.Nameservers)
	}
	nodes := make([]servers.Node, len(a.Nodes))
	for i, n := range a.Nodes {
		nodes[i] = n.WithDefaults()
	}
	a.Nodes = nodes
	return a
}
