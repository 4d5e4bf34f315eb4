package talos

import (
	"strconv"
)

// KubeSpanPort is the UDP port KubeSpan's WireGuard listens on
// (constants.KubeSpanDefaultPort of Talos's machinery): a firewall lets
// the cluster's nodes reach it.
const KubeSpanPort = 51820

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
	kubeSpanDoc struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Enabled    bool   `yaml:"enabled"`
	}
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

// KubeSpanPatch turns KubeSpan on, as Talos's own generator does for the
// version (config/generate/network.go, machinery v1.13.9): a KubeSpanConfig
// document from Talos 1.13 (VersionContract.KubeSpanMultidocConfig),
// machine.network.kubespan before it. Cluster discovery, on by default,
// is set on too: Talos refuses KubeSpan without it
// (v1alpha1_validation.go).
func KubeSpanPatch(talosVersion string) string {
	var discovery kubeSpanV1Alpha1
	discovery.Cluster.Discovery.Enabled = true
	if kubeSpanMultidoc(talosVersion) {
		return render(kubeSpanDoc{APIVersion: "v1alpha1", Kind: "KubeSpanConfig", Enabled: true}) + "---\n" + render(struct {
			Cluster kubeSpanCluster `yaml:"cluster"`
		}{discovery.Cluster})
	}
	discovery.Machine.Network.KubeSpan.Enabled = true
	return render(discovery)
}

// kubeSpanMultidoc says the version takes KubeSpan as its own document:
// Talos 1.13 and later.
func kubeSpanMultidoc(talosVersion string) bool {
	m := contractRe.FindStringSubmatch(talosVersion)
	if m == nil {
		return true
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return major > 1 || minor >= 13
}
