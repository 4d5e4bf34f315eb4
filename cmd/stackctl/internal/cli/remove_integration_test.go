//go:build integration

package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIntegrationRemovingAClusterFromAProgram walks, with the real CLI, what
// docs/component-package.md tells a user who removes a cluster from a
// program: Pulumi finds a deleted resource's delete hooks by the names in
// its state, so a program that no longer declares the cluster fails
// (`hook "lab-node-remove" was not registered`) and changes nothing more;
// with the declaration back, `pulumi destroy --run-program --target <the
// component> --target-dependents` deletes the cluster with its hooks run;
// then the declaration goes, and `up` has nothing to do. No `pulumi state`
// command is needed on the way.
func TestIntegrationRemovingAClusterFromAProgram(t *testing.T) {
	pulumiPath, err := exec.LookPath("pulumi")
	if err != nil {
		t.Skip("SKIPPED: the pulumi CLI is not on PATH, so the removal of a cluster was not walked")
	}
	p := newTestProject(t, pulumiPath, "removeit", "./cmd/stackctl/internal/cli/testdata/removeprogram")
	hookLog := filepath.Join(p.dir, "hook.log")
	run := func(remove bool, args ...string) (string, error) {
		env := []string{"HOOK_LOG=" + hookLog}
		if remove {
			env = append(env, "REMOVE_LAB=1")
		}
		return p.run(env, args...)
	}
	_, err = run(false, "stack", "init", "it")
	require.NoError(t, err)
	out2, err := run(false, "up", "--yes", "--stack", "it")
	require.NoError(t, err, out2)

	out2, err = run(true, "up", "--yes", "--stack", "it")
	require.Error(t, err, out2)
	assert.Contains(t, out2, `hook "lab-node-remove" was not registered`)
	state, err := run(false, "stack", "export", "--stack", "it")
	require.NoError(t, err)
	assert.Contains(t, state, "lab-member-cp-0", "the failed up deleted nothing that needs the hook")

	out2, err = run(false, "destroy", "--yes", "--stack", "it", "--run-program",
		"--target", "urn:pulumi:it::removeit::test:index:Lab::lab", "--target-dependents")
	require.NoError(t, err, out2)
	logged, err := os.ReadFile(hookLog) //nolint:gosec // the test's own file
	require.NoError(t, err)
	assert.Equal(t, "before delete lab-member-cp-0\n", string(logged), "the hook ran for the delete")

	out2, err = run(true, "preview", "--expect-no-changes", "--stack", "it")
	require.NoError(t, err, "the cluster is gone; the program without it has nothing to do: %s", out2)
}
