package program_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// The example stacks' patches and values pass the override check without
// a word: Validate says what stacks.Load says.
func TestValidateExamples(t *testing.T) {
	t.Parallel()
	for _, file := range []string{stackstest.ProxmoxExample, stackstest.VPSExample} {
		src := stackstest.Example(t, file)
		_, loaded := stacks.Load(src)
		_, d := program.Validate(src)
		require.NoError(t, d.Err(), file)
		assert.Equal(t, loaded.Warnings, d.Warnings, file)
	}
}

// The overrides are checked after the config loads, and only then: a
// config with errors gets stacks.Load's errors alone.
func TestValidateOrder(t *testing.T) {
	t.Parallel()
	src := stackstest.EditSection(t, stackstest.Example(t, stackstest.ProxmoxExample), "cluster", func(c map[string]any) {
		c["patches"] = map[string]any{"worker": []any{"cluster:\n  proxy:\n    disabled: false\n"}}
	})
	_, d := program.Validate(src)
	require.Len(t, d.Errors, 1)
	assert.Equal(t, "cluster.patches.worker[0]", d.Errors[0].Path)
	assert.Contains(t, d.Errors[0].Message, "enables kube-proxy on workers")

	broken := stackstest.EditSection(t, src, "cluster", func(c map[string]any) { c["talosVersion"] = "1.12.4" })
	_, d = program.Validate(broken)
	require.Len(t, d.Errors, 1)
	assert.Equal(t, "cluster.talosVersion", d.Errors[0].Path)
}
