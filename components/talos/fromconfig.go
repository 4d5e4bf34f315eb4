package talos

import "github.com/fluodata/talos-pulumi/stacks"

// PatchSpecFromConfig takes the cluster-wide patch inputs from a validated
// stack config.
func PatchSpecFromConfig(cfg *stacks.Config) PatchSpec {
	c := cfg.Cluster
	return PatchSpec{
		TalosVersion:             c.TalosVersion,
		Nameservers:              c.Network.Nameservers,
		VIP:                      c.VIP,
		SchedulableControlPlanes: len(cfg.Nodes.Workers) == 0,
		AllPatches:               PatchTexts(c.Patches.All),
		ControlPlanePatches:      PatchTexts(c.Patches.ControlPlane),
		WorkerPatches:            PatchTexts(c.Patches.Worker),
	}
}

// ClusterArgsFromConfig fills the cluster arguments a validated stack config
// decides. The platform adds what only it knows: the installer image, the
// nodes, their options and the resource the whole cluster is deleted with.
func ClusterArgsFromConfig(cfg *stacks.Config) ClusterArgs {
	c := cfg.Cluster
	return ClusterArgs{
		ClusterName:       c.Name,
		Endpoint:          cfg.KubernetesEndpoint(),
		TalosVersion:      c.TalosVersion,
		KubernetesVersion: c.KubernetesVersion,
		Patches:           PatchSpecFromConfig(cfg),
		Cilium:            ChartSettings{Version: c.Cilium.Version, Values: c.Cilium.Values},
		CertApprover:      ChartSettings{Version: c.CertApprover.Version, Values: c.CertApprover.Values},
	}
}

// PatchTexts returns the YAML of config patches.
func PatchTexts(ps []stacks.Patch) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.YAML)
	}
	return out
}

// RoleOf maps a stack node role to a Talos machine type.
func RoleOf(r stacks.Role) Role {
	if r == stacks.RoleControlPlane {
		return RoleControlPlane
	}
	return RoleWorker
}
