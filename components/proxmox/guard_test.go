package proxmox_test

import (
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// A ProxmoxCluster refuses a node patch that breaks the cluster before it
// registers anything (its VMs, the ISO), at the node's own path.
func TestProxmoxClusterRefusesABreakingPatchBeforeAnything(t *testing.T) {
	t.Parallel()
	cfg, d := stacks.Load(stackstest.Example(t, stackstest.ProxmoxExample))
	require.NoError(t, d.Err())
	args := program.ProxmoxArgs(cfg)
	args.Nodes[1].Patches = []string{"cluster:\n  proxy:\n    disabled: false\n"}
	e := &componentstest.Engine{}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		_, err := proxmox.NewClusterWithDeps(ctx, "homelab", args, proxmox.Deps{Hooks: &componentstest.Hooks{}, API: blockingAPI{},
			Talos: talos.Deps{Hooks: &componentstest.Hooks{}}})
		return err
	}, pulumi.WithMocks("talos-cluster", "test", e))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ProxmoxCluster")
	assert.Contains(t, err.Error(), "nodes[1].patches[0]: enables kube-proxy on this worker")
	assert.Empty(t, e.All(), "nothing is registered")
}
