package talos_test

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/talos"
)

// An empty kubernetesVersion is the default of the configured Talos
// release, not the pinned machinery's: Talos v1.9 cannot run the 1.35.0 of
// machinery v1.12. The defaults of v1.8-v1.11 are their .0 release's,
// v1.12's the one machinery v1.12.0 gave while it was pinned.
func TestDefaultKubernetesVersionFollowsTalos(t *testing.T) {
	t.Parallel()
	for talosVersion, want := range map[string]string{
		"v1.8.0":  "1.31.1",
		"v1.8.4":  "1.31.1",
		"v1.9.0":  "1.32.0",
		"v1.9.6":  "1.32.0",
		"v1.10.3": "1.33.0",
		"v1.11.5": "1.34.0",
		"v1.12.0": "1.35.0",
		"v1.12.4": "1.35.0",
		"v1.13.0": constants.DefaultKubernetesVersion,
		"v1.13.9": constants.DefaultKubernetesVersion,
		// Newer than the compatibility data: the pinned machinery's
		// default is the best it knows.
		"v1.14.0": constants.DefaultKubernetesVersion,
	} {
		t.Run(talosVersion, func(t *testing.T) {
			t.Parallel()
			args := clusterArgs(talosVersion, nodes(1, 0))
			args.Cluster.KubernetesVersion = ""
			got := args.WithDefaults().Cluster.KubernetesVersion
			assert.Equal(t, want, got)
			args.Cluster.KubernetesVersion = got
			require.NoError(t, args.Validate("lab"), "the default is a version the release supports")
		})
	}
}

// A Kubernetes version the configured Talos release does not run is
// refused before anything runs, with the range it does run.
func TestKubernetesVersionsTalosDoesNotSupportAreRefused(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		talos, kube, message string
	}{
		"too new for v1.9":  {"v1.9.0", "1.35.0", `1.35.0 is not supported by Talos v1.9.0, which runs Kubernetes 1.27 to 1.32 (its default: 1.32.0)`},
		"too new for v1.8":  {"v1.8.4", "v1.32.0", `v1.32.0 is not supported by Talos v1.8.4, which runs Kubernetes 1.26 to 1.31 (its default: 1.31.1)`},
		"too old for v1.12": {"v1.12.0", "1.29.9", `1.29.9 is not supported by Talos v1.12.0, which runs Kubernetes 1.30 to 1.35`},
		"too new for v1.12": {"v1.12.4", "1.36.3", `1.36.3 is not supported by Talos v1.12.4, which runs Kubernetes 1.30 to 1.35 (its default: 1.35.0)`},
		"too old for v1.13": {"v1.13.9", "1.30.9", `1.30.9 is not supported by Talos v1.13.9, which runs Kubernetes 1.31 to 1.36 (its default: 1.36.3)`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			args := clusterArgs(tc.talos, nodes(1, 0))
			args.Cluster.KubernetesVersion = tc.kube
			err := args.Validate("lab")
			var ie *inputs.Error
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, []string{"cluster.kubernetesVersion"}, ie.Paths())
			assert.ErrorContains(t, err, tc.message)
		})
	}
	for name, tc := range map[string]struct{ talos, kube string }{
		"newest for v1.9":              {"v1.9.0", "1.32.4"},
		"oldest for v1.12":             {"v1.12.0", "1.30.0"},
		"newest for v1.13":             {"v1.13.9", "1.36.3"},
		"a release the data lacks":     {"v1.14.0", "1.37.0"},
		"newest for v1.11, v prefixed": {"v1.11.2", "v1.34.1"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			args := clusterArgs(tc.talos, nodes(1, 0))
			args.Cluster.KubernetesVersion = tc.kube
			require.NoError(t, args.Validate("lab"))
		})
	}
}

// A Talos upgrade Talos itself does not make in one step is refused, with
// the release to go through first; the upgrades it makes pass.
func TestTalosUpgradesTalosDoesNotMakeInOneStepAreRefused(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		running, wanted, message string
	}{
		"v1.8 to v1.11": {"v1.8.4", "v1.11.0", "v1.11.0 is not an upgrade Talos makes in one step from the running v1.8.4 (Talos: host version 1.8.4 is too old to upgrade to Talos 1.11.0): set talosVersion to the latest v1.10 patch release first, one `up`, then to v1.11.0"},
		"v1.8 to v1.12": {"v1.8.4", "v1.12.0", "upgrade Talos makes in one step from the running v1.8.4 (Talos: host version 1.8.4 is too old to upgrade to Talos 1.12.0): set talosVersion to the latest v1.10 patch release first, one `up`, then to v1.12.0"},
		"v1.9 to v1.12": {"v1.9.6", "v1.12.4", "set talosVersion to the latest v1.11 patch release first, one `up`, then to v1.12.4"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			args := clusterArgs(tc.wanted, nodes(1, 0))
			args.Previous = &talos.Previous{TalosVersion: tc.running}
			err := args.Validate("lab")
			var ie *inputs.Error
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, []string{"cluster.talosVersion"}, ie.Paths())
			assert.ErrorContains(t, err, tc.message)
		})
	}
	for name, tc := range map[string]struct{ running, wanted string }{
		"two minors Talos supports": {"v1.10.9", "v1.12.0"},
		"one minor":                 {"v1.11.5", "v1.12.4"},
		"a patch":                   {"v1.12.0", "v1.12.4"},
		"the same release":          {"v1.12.4", "v1.12.4"},
		"v1.12 to v1.13":            {"v1.12.4", "v1.13.9"},
		"a release the data lacks":  {"v1.13.9", "v1.14.0"},
		"an unknown running":        {"", "v1.12.4"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			args := clusterArgs(tc.wanted, nodes(1, 0))
			args.Previous = &talos.Previous{TalosVersion: tc.running}
			require.NoError(t, args.Validate("lab"))
		})
	}
}

// The check of a Kubernetes version change compares the running version
// with the default of the configured release, not the machinery's.
func TestKubernetesChangeUsesTheReleaseDefault(t *testing.T) {
	t.Parallel()
	args := clusterArgs("v1.9.6", nodes(1, 0))
	args.Cluster.KubernetesVersion = ""
	args.Previous = &talos.Previous{KubernetesVersion: "1.31.4", TalosVersion: "v1.9.6"}
	require.NoError(t, args.Validate("lab"), "1.32.0 is one minor up from 1.31.4")
	args.Previous.KubernetesVersion = "1.30.2"
	assert.ErrorContains(t, args.Validate("lab"), "1.32.0 skips a minor version: the cluster runs 1.30.2; upgrade to 1.31 first")
}

// A Talos release older than the oldest this project supports is refused
// by the component itself, not only by the stack file's front-end.
func TestTalosOlderThanTheOldestSupportedIsRefused(t *testing.T) {
	t.Parallel()
	args := clusterArgs("v1.7.7", nodes(1, 0))
	args.Cluster.KubernetesVersion = "1.30.0"
	err := args.Validate("lab")
	var ie *inputs.Error
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, []string{"cluster.talosVersion"}, ie.Paths())
	assert.ErrorContains(t, err, `"v1.7.7" is not supported; use v1.8 or newer`)
	args = clusterArgs("v1.8.0", nodes(1, 0))
	args.Cluster.KubernetesVersion = "1.31.1"
	require.NoError(t, args.Validate("lab"))
}
