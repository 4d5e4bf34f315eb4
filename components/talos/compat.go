package talos

import (
	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/internal/talosversion"
)

// DefaultKubernetesVersion is the Kubernetes version an empty
// kubernetesVersion means with Talos release talosVersion: that release's
// default according to Talos's compatibility data, not the pinned
// machinery's (Talos v1.9 does not run the 1.35.0 of machinery v1.12).
func DefaultKubernetesVersion(talosVersion string) string {
	return talosversion.DefaultKubernetes(talosVersion)
}

// checkKubernetesSupport records a Kubernetes version the Talos release
// does not run: the nodes would install, and the control plane would not
// come up (or not after the next upgrade).
func (c *ClusterSettings) checkKubernetesSupport(p *inputs.Problems, prefix string) {
	// Only a valid pair: a version refused on its own is not also refused
	// against the other.
	if c.KubernetesVersion == "" || !inputs.IsKubernetesVersion(c.KubernetesVersion) || talosVersionProblem(c.TalosVersion) != "" {
		return
	}
	if err := talosversion.CheckKubernetes(c.TalosVersion, c.KubernetesVersion); err != nil {
		p.Add(prefix+"kubernetesVersion", "%v", err)
	}
}

// checkTalosUpgrade records a Talos upgrade from the release the nodes ran
// that Talos does not make in one step: the installer of the new release
// refuses the node, and the rollout would stop at the first one.
// Downgrades are checkIdentity's.
func (a *ClusterArgs) checkTalosUpgrade(p *inputs.Problems, prefix string) {
	if err := talosversion.CheckUpgrade(a.Previous.TalosVersion, a.Cluster.TalosVersion); err != nil {
		p.Add(prefix+"cluster.talosVersion", "%v", err)
	}
}
