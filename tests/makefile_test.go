package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/stacktest"
)

// fakePulumi logs its arguments and backend, and answers `stack output` with
// a fixed document unless FAKE_FAIL names the output.
const fakePulumi = `#!/bin/bash
echo "$* | backend=$PULUMI_BACKEND_URL" >> "$FAKE_LOG"
if [ "$1 $2" = "stack output" ]; then
  if [ "$3" = "$FAKE_FAIL" ]; then echo "error: no output $3" >&2; exit 1; fi
  echo "# $3 of the stack"
fi
`

// makeIn runs the repository's Makefile in a scratch project directory with
// a fake pulumi, so nothing touches the repository or a real backend.
func makeIn(t *testing.T, env []string, args ...string) (dir, log, out string, err error) {
	t.Helper()
	if _, lookErr := exec.LookPath("make"); lookErr != nil {
		t.Skip("make is not installed")
	}
	dir = t.TempDir()
	mk, readErr := os.ReadFile(filepath.Join(stacktest.RepoRoot(t), "Makefile"))
	require.NoError(t, readErr)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Makefile"), mk, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.test.yaml"), []byte("config: {}\n"), 0o600))
	fake := filepath.Join(dir, "fake-pulumi")
	require.NoError(t, os.WriteFile(fake, []byte(fakePulumi), 0o700)) //nolint:gosec // an executable test double
	log = filepath.Join(dir, "pulumi.log")

	cmd := exec.Command("make", append([]string{"--no-print-directory", "PULUMI=" + fake}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), append([]string{"FAKE_LOG=" + log}, env...)...)
	b, err := cmd.CombinedOutput()
	return dir, log, string(b), err
}

// cleanEnv drops what an outer `make test` or the user's shell exports
// (PULUMI_BACKEND_URL among them, MAKEFLAGS), so the scratch make sees only
// what the test sets.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		key, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(key, "PULUMI_") || strings.HasPrefix(key, "MAKE") || key == "MFLAGS" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func readLog(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

func TestMakeOutputsWritesPrivateAccessFiles(t *testing.T) {
	t.Parallel()
	dir, log, out, err := makeIn(t, nil, "outputs", "STACK=test")
	require.NoError(t, err, out)

	for _, name := range []string{"kubeconfig", "talosconfig"} {
		path := filepath.Join(dir, ".access", "test", name)
		info, statErr := os.Stat(path)
		require.NoError(t, statErr)
		assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), name)
		assert.Equal(t, "# "+name+" of the stack\n", string(must(os.ReadFile(path))))
		assert.Contains(t, readLog(t, log), "stack output "+name+" --show-secrets --stack test")
	}
	for _, d := range []string{".access", ".access/test"} {
		info, statErr := os.Stat(filepath.Join(dir, d))
		require.NoError(t, statErr)
		assert.Equal(t, os.FileMode(0o700), info.Mode().Perm(), d)
	}
	assert.Contains(t, out, "export KUBECONFIG=")
}

func TestMakeOutputsKeepsThePreviousFileOnFailure(t *testing.T) {
	t.Parallel()
	dir, _, out, err := makeIn(t, []string{"FAKE_FAIL=talosconfig"}, "outputs", "STACK=test")
	require.Error(t, err)
	assert.Contains(t, out, "talosconfig is unchanged")
	entries, readErr := os.ReadDir(filepath.Join(dir, ".access", "test"))
	require.NoError(t, readErr)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{"kubeconfig"}, names, "no half-written or temporary file is left")
}

func TestMakeDestroyRunsTheProgramOnTheLocalBackend(t *testing.T) {
	t.Parallel()
	dir, log, out, err := makeIn(t, nil, "destroy", "STACK=test")
	require.NoError(t, err, out)
	line := strings.TrimSpace(readLog(t, log))
	assert.Equal(t, "destroy --run-program --stack test | backend=file://"+dir+"/.pulumi-state", line)
	assert.DirExists(t, filepath.Join(dir, ".pulumi-state"))
}

func TestMakeHonoursABackendURL(t *testing.T) {
	t.Parallel()
	dir, log, out, err := makeIn(t, []string{"PULUMI_BACKEND_URL=s3://bucket/state"}, "up", "STACK=test")
	require.NoError(t, err, out)
	assert.Equal(t, "up --stack test | backend=s3://bucket/state", strings.TrimSpace(readLog(t, log)))
	assert.NoDirExists(t, filepath.Join(dir, ".pulumi-state"))
}

func TestMakeRefusesAMissingStack(t *testing.T) {
	t.Parallel()
	_, _, out, err := makeIn(t, nil, "up")
	require.Error(t, err)
	assert.Contains(t, out, "STACK is required")

	_, _, out, err = makeIn(t, nil, "up", "STACK=nope")
	require.Error(t, err)
	assert.Contains(t, out, "Pulumi.nope.yaml does not exist")
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
