package talos

import (
	"fmt"
	"net/netip"

	"github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/fluodata/talos-pulumi/components/inputs"
)

// KubeSpanPort is the UDP port KubeSpan's WireGuard listens on
// (constants.KubeSpanDefaultPort of Talos's machinery): a firewall lets
// the cluster's nodes reach it.
const KubeSpanPort = constants.KubeSpanDefaultPort

// KubeSpanSettings turn on Talos's KubeSpan: a WireGuard mesh between the
// nodes, whose peers find each other through Talos's discovery service
// (discovery.talos.dev; the cluster's id and secret, from its machine
// secrets, keep the data end-to-end encrypted). For nodes on networks that
// do not reach each other in the clear (several hosts, rented servers at
// different providers).
type KubeSpanSettings struct {
	// Enabled turns KubeSpan (and cluster discovery, which it needs) on.
	Enabled bool `pulumi:"enabled"`
}

// kubeSpanOn says whether the settings turn KubeSpan on.
func (c ClusterSettings) kubeSpanOn() bool { return c.KubeSpan != nil && c.KubeSpan.Enabled }

type (
	kubeSpanV1Alpha1 struct {
		Machine kubeSpanMachine `yaml:"machine"`
		Cluster kubeSpanCluster `yaml:"cluster"`
	}
	kubeSpanMachine struct {
		Network struct {
			KubeSpan struct {
				Enabled bool `yaml:"enabled"`
			} `yaml:"kubespan"`
		} `yaml:"network"`
	}
	kubeSpanCluster struct {
		Discovery struct {
			Enabled bool `yaml:"enabled"`
		} `yaml:"discovery"`
	}
)

// KubeSpanPatch turns KubeSpan on in machine.network.kubespan, with
// cluster discovery, which Talos refuses KubeSpan without
// (v1alpha1_validation.go). Not the KubeSpanConfig document Talos's own
// generator writes from 1.13 (config/generate/network.go, machinery
// v1.13.9): the talos provider (pulumi-talos v0.7.1) patches with machinery
// v1.12.0, which does not know that kind and would refuse the patch, while
// Talos 1.13 still reads the v1alpha1 field (config/container
// NetworkKubeSpanConfig falls back to it).
func KubeSpanPatch() string {
	var p kubeSpanV1Alpha1
	p.Cluster.Discovery.Enabled = true
	p.Machine.Network.KubeSpan.Enabled = true
	return render(p)
}

// kubeSpanEndpointsDoc is Talos's KubeSpanEndpointsConfig document
// (config/types/network/kubespan_endpoints.go, known to the provider's
// machinery v1.12.0 and to Talos 1.13 alike).
type kubeSpanEndpointsDoc struct {
	APIVersion string   `yaml:"apiVersion"`
	Kind       string   `yaml:"kind"`
	Endpoints  []string `yaml:"extraAnnouncedEndpoints"`
}

// KubeSpanEndpointsPatch announces extra KubeSpan endpoints of a node.
func KubeSpanEndpointsPatch(endpoints []string) string {
	return render(kubeSpanEndpointsDoc{APIVersion: "v1alpha1", Kind: "KubeSpanEndpointsConfig", Endpoints: endpoints})
}

// checkKubeSpanEndpoints records the problems of a node's endpoints at
// path: each an address and port (IPv6 in brackets), and KubeSpan on.
func (a *ClusterArgs) checkKubeSpanEndpoints(p *inputs.Problems, path string, endpoints []string) {
	if len(endpoints) > 0 && !a.Cluster.kubeSpanOn() {
		p.Add(path, "needs KubeSpan: set cluster.kubeSpan.enabled, or leave the endpoints out")
	}
	for i, e := range endpoints {
		ap, err := netip.ParseAddrPort(e)
		if err != nil || ap.Port() == 0 || ap.Addr().Zone() != "" {
			p.Add(fmt.Sprintf("%s[%d]", path, i), "%q is not an address and port like 198.51.100.7:51820 ([2001:db8::7]:51820 for IPv6)", e)
		}
	}
}
