package program

import (
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/stacks"
)

// ClusterSettings are the stack file's cluster block as the components take
// it: every default already applied by stacks.Load, the endpoint resolved.
func ClusterSettings(cfg *stacks.Config) talos.ClusterSettings {
	c := cfg.Cluster
	return talos.ClusterSettings{
		Name:              c.Name,
		Endpoint:          cfg.KubernetesEndpoint(),
		TalosVersion:      c.TalosVersion,
		KubernetesVersion: c.KubernetesVersion,
		Nameservers:       c.Network.Nameservers,
		VIP:               c.VIP,
		Patches: &talos.ClusterPatches{
			All:          PatchTexts(c.Patches.All),
			ControlPlane: PatchTexts(c.Patches.ControlPlane),
			Worker:       PatchTexts(c.Patches.Worker),
		},
		Cilium:       &talos.ChartSettings{Version: c.Cilium.Version, Values: c.Cilium.Values},
		CertApprover: &talos.ChartSettings{Version: c.CertApprover.Version, Values: c.CertApprover.Values},
		Rollout:      &talos.RolloutSettings{WorkerParallelism: c.Rollout.WorkerParallelism},
	}
}

// PatchTexts returns the YAML of config patches.
func PatchTexts(ps []stacks.Patch) []string {
	if len(ps) == 0 {
		return nil
	}
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.YAML)
	}
	return out
}

// RoleOf maps a stack node role to a Talos machine type.
func RoleOf(r stacks.Role) talos.Role {
	if r == stacks.RoleControlPlane {
		return talos.RoleControlPlane
	}
	return talos.RoleWorker
}
