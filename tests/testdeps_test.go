package tests

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluodata/talos-pulumi/internal/testkit/scripttest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// runTestDeps runs scripts/test-deps.sh with only the given fake commands
// on PATH (plus env), and returns its exit code, stderr and the calls the
// fakes recorded.
func runTestDeps(t *testing.T, mode string, fakes map[string]string) (int, string, string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	require.NoError(t, os.Mkdir(bin, 0o755))
	calls := filepath.Join(dir, "calls")
	envBin, err := exec.LookPath("env")
	require.NoError(t, err)
	require.NoError(t, os.Symlink(envBin, filepath.Join(bin, "env")))
	for name, body := range fakes {
		script := "#!/bin/sh\necho \"" + name + " $*\" >> " + calls + "\n" + body + "\n"
		scripttest.Write(t, filepath.Join(bin, name), script)
	}
	bash, err := exec.LookPath("bash")
	require.NoError(t, err)
	cmd := exec.Command(bash, filepath.Join(stackstest.RepoRoot(t), "scripts", "test-deps.sh"), mode)
	cmd.Env = []string{"PATH=" + bin, "SBIN=" + filepath.Join(dir, "sbin")}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err = cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	recorded, _ := os.ReadFile(calls) //nolint:gosec // the test's own file
	return code, stderr.String(), string(recorded)
}

var allTools = map[string]string{"dnsmasq": "", "curl": "", "zstd": "", "xz": "", "gzip": ""}

// make test says in one line what is missing and how to get it (issue
// 25: the README's test command on a fresh machine), and says nothing when
// all is there.
func TestMakeTestNamesTheMissingTools(t *testing.T) {
	t.Parallel()
	code, stderr, _ := runTestDeps(t, "check", allTools)
	assert.Equal(t, 0, code, stderr)
	assert.Empty(t, stderr)

	code, stderr, _ = runTestDeps(t, "check", map[string]string{"curl": "", "gzip": ""})
	assert.Equal(t, 1, code)
	assert.Equal(t, "make test needs dnsmasq zstd xz: run `make deps` (Debian/Ubuntu: apt-get install dnsmasq-base zstd xz-utils), or install them yourself\n", stderr)
}

// make deps installs what is missing with apt-get, through sudo for a
// user who is not root, and says what to do where it cannot.
func TestMakeDepsInstallsWhatIsMissing(t *testing.T) {
	t.Parallel()
	user := map[string]string{"id": "echo 1000", "sudo": `exec "$@"`, "apt-get": "", "gzip": ""}
	code, stderr, calls := runTestDeps(t, "install", user)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "id -u\nsudo apt-get update -qq\napt-get update -qq\n"+
		"sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends dnsmasq-base curl ca-certificates zstd xz-utils docker.io\n"+
		"apt-get install -y -qq --no-install-recommends dnsmasq-base curl ca-certificates zstd xz-utils docker.io\n", calls)

	root := map[string]string{"id": "echo 0", "apt-get": "", "dnsmasq": "", "curl": "", "zstd": "", "gzip": ""}
	code, stderr, calls = runTestDeps(t, "install", root)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "id -u\napt-get update -qq\napt-get install -y -qq --no-install-recommends xz-utils docker.io\n", calls)

	code, stderr, _ = runTestDeps(t, "install", map[string]string{"id": "echo 1000", "apt-get": ""})
	assert.Equal(t, 1, code)
	assert.Equal(t, "make deps: not root and no sudo; as root: apt-get install dnsmasq-base curl ca-certificates zstd xz-utils gzip docker.io\n", stderr)

	code, stderr, _ = runTestDeps(t, "install", map[string]string{"id": "echo 0"})
	assert.Equal(t, 1, code)
	assert.Equal(t, "make deps: no apt-get here; install dnsmasq curl zstd xz gzip yourself (Debian package names: dnsmasq-base curl ca-certificates zstd xz-utils gzip)\n", stderr)

	code, stderr, calls = runTestDeps(t, "install", allTools)
	assert.Equal(t, 0, code, stderr)
	assert.Empty(t, calls, "without apt-get, Docker is not required: nothing to install, nothing run")

	withDocker := map[string]string{"apt-get": "", "dockerd": ""}
	for tool := range allTools {
		withDocker[tool] = ""
	}
	code, stderr, calls = runTestDeps(t, "install", withDocker)
	assert.Equal(t, 0, code, stderr)
	assert.Empty(t, calls, "nothing to install, nothing run")

	// A Docker CLI alone runs no container: the daemon is installed.
	cliOnly := map[string]string{"apt-get": "", "docker": ""}
	for tool := range allTools {
		cliOnly[tool] = ""
	}
	code, stderr, calls = runTestDeps(t, "install", cliOnly)
	assert.Equal(t, 0, code, stderr)
	assert.Contains(t, calls, "apt-get install -y -qq --no-install-recommends docker.io\n", "a docker CLI without dockerd")
}
