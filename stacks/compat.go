package stacks

import (
	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/internal/talosversion"
)

// validateKubernetesSupport refuses a kubernetesVersion the stack's Talos
// release does not run, by Talos's own compatibility data: here every
// command (`make adopt` among them) stops before anything runs, rather
// than a control plane that does not come up. An empty kubernetesVersion
// is the release's own default (see talosversion.DefaultKubernetes), so
// always runs. Versions of the wrong form are the format checks'.
func validateKubernetesSupport(d *Diagnostics, c *ClusterConfig) {
	if c.KubernetesVersion == "" || !inputs.IsKubernetesVersion(c.KubernetesVersion) || !inputs.IsReleaseVersion(c.TalosVersion) {
		return
	}
	if err := talosversion.CheckKubernetes(c.TalosVersion, c.KubernetesVersion); err != nil {
		d.errorf("cluster.kubernetesVersion", "%v", err)
	}
}
