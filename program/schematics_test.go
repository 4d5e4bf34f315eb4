package program_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// A node's or pool's own schematic reaches the component with each key
// left out taken from the cluster's.
func TestANodesSchematicTakesTheClustersKeysItLeavesOut(t *testing.T) {
	t.Parallel()
	pool := gpuPool(2)
	pool["schematic"] = map[string]any{"kernelArgs": []any{"console=ttyS0", "console=tty0"}}
	src := stackstest.EditSection(t, withPool(t, pool), "nodes", func(n map[string]any) {
		n["workers"].([]any)[1].(map[string]any)["schematic"] = map[string]any{"extensions": []any{"siderolabs/qemu-guest-agent", "siderolabs/nvidia-open-gpu-kernel-modules-production"}}
	})
	cfg, d := program.Validate(src)
	require.NoError(t, d.Err())
	args := program.ProxmoxArgs(cfg).WithDefaults()
	got := map[string][]string{}
	for _, n := range args.Nodes {
		if n.Schematic != nil {
			s := n.Schematic.Over(args.Schematic)
			got[n.Name] = append(append([]string{}, s.Extensions...), s.KernelArgs...)
		}
	}
	clusterExts := args.Schematic.Extensions
	assert.Equal(t, map[string][]string{
		"worker-1": {"siderolabs/qemu-guest-agent", "siderolabs/nvidia-open-gpu-kernel-modules-production"},
		"gpu-0":    append(append([]string{}, clusterExts...), "console=ttyS0", "console=tty0"),
		"gpu-1":    append(append([]string{}, clusterExts...), "console=ttyS0", "console=tty0"),
	}, got, "kernel arguments keep their order and may repeat a key")
}

// A schematic's problems are named by the stack key that has them, a
// pool's once; platform local refuses a node's schematic.
func TestSchematicProblemsAreNamedByKey(t *testing.T) {
	t.Parallel()
	pool := gpuPool(3)
	pool["schematic"] = map[string]any{"kernelArgs": []any{"console=ttyS0 quiet"}}
	src := stackstest.EditSection(t, withPool(t, pool), "nodes", func(n map[string]any) {
		n["workers"].([]any)[0].(map[string]any)["schematic"] = map[string]any{"id": "not-an-id", "extensions": []any{"siderolabs/iscsi-tools"}}
		n["workers"].([]any)[1].(map[string]any)["schematic"] = map[string]any{"kernelArgs": []any{""}}
	})
	got := errorsByPath(t, src)
	assert.Contains(t, got["nodes.pools[0].schematic.kernelArgs[0]"], "holds a blank")
	assert.Contains(t, got["nodes.workers[0].schematic"], "set either id or extensions")
	assert.Contains(t, got["nodes.workers[0].schematic.id"], "is not a schematic id")
	assert.Contains(t, got["nodes.workers[1].schematic.kernelArgs[0]"], "is required")

	const id = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515"
	overID := stackstest.EditSection(t, stackstest.Example(t, stackstest.ProxmoxExample), "cluster", func(c map[string]any) {
		c["schematic"] = map[string]any{"id": id, "kernelArgs": []any{"console=ttyS0"}}
	})
	overID = stackstest.EditSection(t, overID, "nodes", func(n map[string]any) {
		n["workers"].([]any)[0].(map[string]any)["schematic"] = map[string]any{"kernelArgs": []any{"console=ttyS0"}}
	})
	got = errorsByPath(t, overID)
	assert.Contains(t, got["cluster.schematic"], "set either id or kernelArgs")
	assert.Contains(t, got["nodes.workers[0].schematic.kernelArgs"], "cannot be added to the cluster's schematic id")

	local := stackstest.EditSection(t, stackstest.Example(t, stackstest.LocalExample), "nodes", func(n map[string]any) {
		n["workers"].([]any)[0].(map[string]any)["schematic"] = map[string]any{"kernelArgs": []any{"console=ttyS0"}}
		n["pools"] = []any{map[string]any{"name": "batch", "count": 2, "ip": "10.5.0.10", "schematic": map[string]any{"extensions": []any{"siderolabs/iscsi-tools"}}}}
	})
	got = errorsByPath(t, local)
	assert.Contains(t, got["nodes.workers[0].schematic"], "not valid for platform local")
	assert.Contains(t, got["nodes.pools[0].schematic"], "not valid for platform local")
}

// errorsByPath validates src and returns its errors by key, each key
// reported once.
func errorsByPath(t *testing.T, src stacks.Source) map[string]string {
	t.Helper()
	_, d := program.Validate(src)
	got := map[string]string{}
	for _, p := range d.Errors {
		_, twice := got[p.Path]
		assert.False(t, twice, "%s reported twice: %v", p.Path, d.Errors)
		got[p.Path] = p.Message
	}
	return got
}
