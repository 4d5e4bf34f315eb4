//go:build integration

package cli_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIntegrationRemovingAClusterFromAProgram walks, with the real CLI, the
// life of a cluster's memberships and roster (testdata/removeprogram, the
// graph of a TalosCluster): a stack of an earlier version, whose
// memberships name the before-delete hook "lab-node-remove" in their state;
// its first `up` with this version, which drops that name from the state
// of every membership it registers again; a node removed, taken out by the
// roster's before-update hook before its membership's delete, which runs
// no hook; then the whole cluster removed from the program: `up` deletes
// it like any other resources (Pulumi finds a deleted resource's hooks by
// the names in its state, and the program registers none), and a preview
// then has nothing to do. On the way: a second `up` with no change, and a
// plain `pulumi destroy` then `up` again. No `pulumi state` command, no `--target`.
func TestIntegrationRemovingAClusterFromAProgram(t *testing.T) {
	pulumiPath, err := exec.LookPath("pulumi")
	if err != nil {
		t.Skip("SKIPPED: the pulumi CLI is not on PATH, so the removal of a cluster was not walked")
	}
	p := newTestProject(t, pulumiPath, "removeit", "./cmd/stackctl/internal/cli/testdata/removeprogram")
	hookLog := filepath.Join(p.dir, "hook.log")
	run := func(env []string, args ...string) string {
		t.Helper()
		out, err := p.run(append(env, "HOOK_LOG="+hookLog), args...)
		require.NoError(t, err, out)
		return out
	}
	logged := func() string {
		b, err := os.ReadFile(hookLog) //nolint:gosec // the test's own file
		if os.IsNotExist(err) {
			return ""
		}
		require.NoError(t, err)
		return string(b)
	}
	// hooked says which resources' state names a before-delete hook.
	hooked := func() []string {
		var state struct {
			Deployment struct {
				Resources []struct {
					URN   string              `json:"urn"`
					Hooks map[string][]string `json:"resourceHooks"`
				} `json:"resources"`
			} `json:"deployment"`
		}
		require.NoError(t, json.Unmarshal([]byte(run(nil, "stack", "export", "--stack", "it")), &state))
		var out []string
		for _, r := range state.Deployment.Resources {
			if len(r.Hooks["BeforeDelete"]) > 0 {
				out = append(out, r.URN[strings.LastIndex(r.URN, "::")+2:])
			}
		}
		return out
	}

	run(nil, "stack", "init", "it")
	run([]string{"LEGACY=1"}, "up", "--yes", "--stack", "it")
	assert.ElementsMatch(t, []string{"lab-member-cp-0", "lab-member-w-0"}, hooked(), "the earlier versions' state")

	run(nil, "up", "--yes", "--stack", "it")
	assert.Empty(t, hooked(), "an up of this version drops the hook from the state of the memberships it registers")
	assert.Empty(t, logged(), "nothing left: no hook ran")

	run([]string{"NODES=cp-0"}, "up", "--yes", "--stack", "it")
	assert.Equal(t, "depart w-0\ndeleted w-0\n", logged(), "the roster's hook took the node out before its membership's delete, which ran no hook")

	run([]string{"NODES=cp-0"}, "preview", "--expect-no-changes", "--stack", "it")

	// A plain destroy (no --run-program: nothing names a hook), then the
	// same program again: creates, no hook runs.
	run([]string{"NODES=cp-0"}, "destroy", "--yes", "--stack", "it")
	run([]string{"NODES=cp-0"}, "up", "--yes", "--stack", "it")
	assert.Equal(t, "depart w-0\ndeleted w-0\ndeleted cp-0\n", logged(), "the destroy deleted the membership, the up ran no hook")
	run([]string{"NODES=cp-0"}, "preview", "--expect-no-changes", "--stack", "it")

	out := run([]string{"REMOVE_LAB=1"}, "up", "--yes", "--stack", "it")
	assert.Contains(t, out, "deleted")
	assert.Equal(t, "depart w-0\ndeleted w-0\ndeleted cp-0\ndeleted cp-0\n", logged(), "removing the cluster runs no hook")
	state := run(nil, "stack", "export", "--stack", "it")
	assert.NotContains(t, state, "lab-", "the whole cluster is deleted")

	run([]string{"REMOVE_LAB=1"}, "preview", "--expect-no-changes", "--stack", "it")
}
