package stacks_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/program"
)

// A stack whose kubernetesVersion its talosVersion does not run is refused
// by the stack front-end (the TalosCluster's rule), naming the stack key and the range the release runs: `make
// adopt` and every command stop there, before anything runs.
func TestKubernetesVersionTalosDoesNotRunIsRefused(t *testing.T) {
	t.Parallel()
	k := proxmoxKeys()
	at(k, "cluster")["talosVersion"] = "v1.9.0"
	at(k, "cluster")["kubernetesVersion"] = "1.35.0"
	_, d := program.Validate(proxmoxSource(k))
	require.Error(t, d.Err())
	assert.ErrorContains(t, d.Err(), "cluster.kubernetesVersion: 1.35.0 is not supported by Talos v1.9.0, which runs Kubernetes 1.27 to 1.32 (its default: 1.32.0)")
	for _, p := range d.Errors {
		assert.Equal(t, "cluster.kubernetesVersion", p.Path)
	}
}

// An empty kubernetesVersion is always the release's own default, and a
// supported version of an older release passes.
func TestKubernetesVersionsTalosRunsPass(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ talos, kube string }{
		{"v1.9.0", ""},
		{"v1.9.0", "1.32.4"},
		{"v1.11.5", "v1.34.1"},
		{"v1.12.4", "1.30.0"},
	} {
		k := proxmoxKeys()
		at(k, "cluster")["talosVersion"] = tc.talos
		if tc.kube != "" {
			at(k, "cluster")["kubernetesVersion"] = tc.kube
		}
		_, d := program.Validate(proxmoxSource(k))
		require.NoError(t, d.Err(), "%s with %q", tc.talos, tc.kube)
	}
}
