package talos

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/stacks"
)

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

// Machines is what only the platform knows about the cluster: the
// installer image, the nodes, their options and the resource the whole
// cluster is deleted with.
type Machines struct {
	InstallerImage pulumi.StringInput
	Nodes          []NodeSpec
	NodeOptions    map[string]NodeOptions
	DeletedWith    pulumi.Resource
}

// ClusterArgsFromConfig fills the cluster arguments from a validated stack
// config and the platform's machines.
func ClusterArgsFromConfig(cfg *stacks.Config, m Machines) ClusterArgs {
	c := cfg.Cluster
	return ClusterArgs{
		InstallerImage:    m.InstallerImage,
		Nodes:             m.Nodes,
		NodeOptions:       m.NodeOptions,
		DeletedWith:       m.DeletedWith,
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
