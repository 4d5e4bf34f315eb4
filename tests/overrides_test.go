package tests

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// A patch or Helm value that would break the cluster stops the program
// before anything is registered, like any other invalid config, and the
// error names the patch and the value.
func TestInvalidOverridesRegisterNothing(t *testing.T) {
	t.Parallel()
	for _, file := range []string{stackstest.ProxmoxExample, stackstest.VPSExample} {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			src := stackstest.EditSection(t, stackstest.Example(t, file), "cluster", func(c map[string]any) {
				c["patches"] = map[string]any{"controlPlane": []any{"machine:\n  type: worker\n"}}
				c["cilium"].(map[string]any)["values"] = map[string]any{"kubeProxyReplacement": false}
			})

			registered, err := run(t, src)
			var invalid *stacks.InvalidConfigError
			require.ErrorAs(t, err, &invalid)
			assert.Contains(t, err.Error(), "cluster.patches.controlPlane[0]: sets machine.type: worker on control planes")
			assert.Contains(t, err.Error(), "cluster.cilium.values.kubeProxyReplacement: false turns Cilium's kube-proxy replacement off")
			assert.Len(t, invalid.Problems, 2)
			assert.Empty(t, registered)
		})
	}
}

// What only weakens the cluster is a warning: the program goes on.
func TestProgramRunsWithWeakeningOverrides(t *testing.T) {
	t.Parallel()
	src := stackstest.EditSection(t, stackstest.Example(t, stackstest.ProxmoxExample), "cluster", func(c map[string]any) {
		c["certApprover"].(map[string]any)["values"] = map[string]any{"providerRegex": ".*"}
		c["cilium"].(map[string]any)["values"] = map[string]any{"operator": map[string]any{"replicas": 5}}
	})
	_, d := program.Validate(src)
	require.NoError(t, d.Err())
	require.Len(t, d.Warnings, 2)
	assert.Equal(t, "cluster.cilium.values.operator.replicas", d.Warnings[0].Path)
	assert.Equal(t, "cluster.certApprover.values.providerRegex", d.Warnings[1].Path)

	e, _ := deploy(t, src)
	assert.Len(t, e.ByType("talos-cluster:index:TalosCluster"), 1)
}
