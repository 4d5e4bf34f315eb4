package program

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fluodata/talos-pulumi/components/talos"
)

// The Talos release the nodes ran comes from the talosVersion output, for
// the check of a Talos upgrade Talos does not make in one step; "unknown"
// (no node answered) is no version.
func TestPreviousTalosVersionFromTheStackOutputs(t *testing.T) {
	t.Parallel()
	prev := talos.PreviousFromOutputs(map[string]any{"talosVersion": "v1.11.5", "nodes": map[string]any{}})
	assert.Equal(t, "v1.11.5", prev.TalosVersion)
	prev = talos.PreviousFromOutputs(map[string]any{"talosVersion": talos.Unknown, "nodes": map[string]any{}})
	assert.Empty(t, prev.TalosVersion)
}
