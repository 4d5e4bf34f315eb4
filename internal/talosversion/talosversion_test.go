package talosversion

import (
	"fmt"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The table of defaults agrees with the compatibility data: every release
// the data knows has a default that it runs and that is of the newest
// Kubernetes minor it runs. A machinery bump that adds a release (or
// changes a range) fails here until the table follows, with the value of
// constants.DefaultKubernetesVersion of the machinery pinned before.
func TestDefaultsAgreeWithTheCompatibilityData(t *testing.T) {
	t.Parallel()
	require.Equal(t, [2]int{1, 13}, pinned, "machinery v1.13.9 is pinned in go.mod")
	knownMinors := 0
	for minor := range pinned[1] + 2 {
		talos := fmt.Sprintf("v1.%d.0", minor)
		tv, ok := known(talos)
		_, inTable := releaseDefaults[[2]int{1, minor}]
		if !ok {
			assert.False(t, inTable, "%s: a default for a release the data does not know", talos)
			continue
		}
		knownMinors++
		assert.True(t, inTable || minor == pinned[1], "%s: the data knows it; the table has no default", talos)
		def := DefaultKubernetes(talos)
		require.NoError(t, CheckKubernetes(talos, def), talos)
		_, hi, _ := kubernetesMinors(tv)
		v, _ := parse(def)
		assert.Equal(t, hi, v[1], "%s: %s is not of the newest minor it runs", talos, def)
	}
	assert.Equal(t, len(releaseDefaults)+1, knownMinors, "every release of the table and the pinned one")
	assert.Equal(t, constants.DefaultKubernetesVersion, DefaultKubernetes(fmt.Sprintf("v1.%d.3", pinned[1])))
}

func TestDefaultKubernetes(t *testing.T) {
	t.Parallel()
	for talos, want := range map[string]string{
		"v1.8.0": "1.31.1", "v1.8.4": "1.31.1", "v1.9.6": "1.32.0", "v1.10.0": "1.33.0",
		"v1.11.5": "1.34.0", "v1.12.4": "1.35.0", "v1.13.9": constants.DefaultKubernetesVersion,
		"v1.11.0-beta.0": "1.34.0",
		"v1.14.0":        constants.DefaultKubernetesVersion, // newer than the data
		"":               constants.DefaultKubernetesVersion,
		"latest":         constants.DefaultKubernetesVersion,
	} {
		assert.Equal(t, want, DefaultKubernetes(talos), talos)
	}
}

func TestCheckKubernetes(t *testing.T) {
	t.Parallel()
	assert.EqualError(t, CheckKubernetes("v1.9.0", "1.35.0"), "1.35.0 is not supported by Talos v1.9.0, which runs Kubernetes 1.27 to 1.32 (its default: 1.32.0)")
	assert.EqualError(t, CheckKubernetes("v1.12.0", "1.29.9"), "1.29.9 is not supported by Talos v1.12.0, which runs Kubernetes 1.30 to 1.35 (its default: 1.35.0)")
	for _, ok := range [][2]string{
		{"v1.9.0", "1.32.4"}, {"v1.9.0", "1.27.0"}, {"v1.12.0", "v1.35.2"},
		{"v1.13.0", "1.36.3"}, {"v1.13.9", "1.31.0"},
		{"v1.14.0", "1.40.0"},                                   // a release the data does not know
		{"v1.9.0", "latest"}, {"1.9", "1.35.0"}, {"", "1.35.0"}, // the format checks' to report
	} {
		assert.NoError(t, CheckKubernetes(ok[0], ok[1]), "%v", ok)
	}
}

func TestCheckUpgrade(t *testing.T) {
	t.Parallel()
	assert.EqualError(t, CheckUpgrade("v1.8.4", "v1.11.0"),
		"v1.11.0 is not an upgrade Talos makes in one step from the running v1.8.4 (Talos: host version 1.8.4 is too old to upgrade to Talos 1.11.0): set talosVersion to the latest v1.10 patch release first, one `up`, then to v1.11.0")
	assert.EqualError(t, CheckUpgrade("v1.5.2", "v1.12.0"),
		"v1.12.0 is not an upgrade Talos makes in one step from the running v1.5.2 (Talos: host version 1.5.2 is too old to upgrade to Talos 1.12.0): set talosVersion to the latest v1.8 patch release first, one `up`, then on towards v1.12.0 the same way")
	assert.ErrorContains(t, CheckUpgrade("v1.9.6", "v1.12.4"), "set talosVersion to the latest v1.11 patch release first, one `up`, then to v1.12.4")
	for _, ok := range [][2]string{
		{"v1.10.0", "v1.12.0"}, {"v1.11.5", "v1.12.4"}, {"v1.12.0", "v1.12.4"}, {"v1.12.4", "v1.12.4"},
		{"v1.12.4", "v1.9.0"}, // a downgrade: refused elsewhere
		{"v1.12.4", "v1.13.9"}, {"v1.11.5", "v1.13.0"},
		{"v1.13.9", "v1.14.0"}, {"v1.13.9", "v1.14.0-alpha.1"}, // releases the data does not know
		{"", "v1.12.4"}, {"unknown", "v1.12.4"},
	} {
		assert.NoError(t, CheckUpgrade(ok[0], ok[1]), "%v", ok)
	}
}

// The oldest supported release is one Talos's compatibility data knows, and
// so is every release from it to the pinned one.
func TestTheOldestSupportedReleaseIsInTheCompatibilityData(t *testing.T) {
	t.Parallel()
	major, minor := Pinned()
	require.Equal(t, 1, major)
	for m := OldestMinor; m <= minor; m++ {
		_, ok := known(fmt.Sprintf("v1.%d.0", m))
		assert.True(t, ok, "v1.%d", m)
	}
}
