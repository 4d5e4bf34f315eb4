package talosprovider_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/pkg/v3/resource/plugin"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/provider/talosprovider"
)

// `make release` builds only a release: a development VERSION (this
// commit's, between releases) is refused before anything is built, saying
// what to do. (The release itself, on a tagged commit, is made and
// installed with the real CLI in TestIntegrationTheReleaseInstallsAndRuns.)
func TestReleaseRefusesADevelopmentVersion(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("SKIPPED: make is not on PATH")
	}
	t.Parallel()
	version := strings.TrimSpace(talosprovider.VersionFile)
	require.True(t, strings.HasSuffix(version, talosprovider.DevSuffix), "between releases, VERSION is the next one's with -dev: %s", version)
	out := t.TempDir()
	cmd := exec.CommandContext(t.Context(), "make", "--no-print-directory", "-C", filepath.Join("..", ".."), "release", "RELEASE_DIR="+out, "RELEASE_TAG=v"+version)
	msg, err := cmd.CombinedOutput()
	require.Error(t, err, "%s", msg)
	assert.Contains(t, string(msg), "make release: VERSION is '"+version+"', a development version: set provider/talosprovider/VERSION to the release's version")
	entries, err := os.ReadDir(out)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing built")
}

// The CLI refuses to run the plugin from source (pulumi package add of
// this folder or a git reference) with a CLI older than the components
// need, as its plugin loader reads PulumiPlugin.yaml (pkg/v3
// resource/plugin: LoadPluginProject, then ValidatePulumiVersionRange).
func TestPulumiPluginYAMLRequiresTheCLITheComponentsNeed(t *testing.T) {
	t.Parallel()
	proj, err := workspace.LoadPluginProject("../PulumiPlugin.yaml")
	require.NoError(t, err)
	assert.Equal(t, "go", proj.Runtime.Name())
	require.NoError(t, plugin.ValidatePulumiVersionRange(proj.RequiredPulumiVersion, "3.259.0"))
	require.NoError(t, plugin.ValidatePulumiVersionRange(proj.RequiredPulumiVersion, "3.260.1"))
	assert.Error(t, plugin.ValidatePulumiVersionRange(proj.RequiredPulumiVersion, "3.258.0"), "an older CLI is refused")
}
