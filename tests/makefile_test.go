package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/pkitest"
	"github.com/fluodata/talos-pulumi/internal/sshtest"
	"github.com/fluodata/talos-pulumi/internal/stacktest"
	"github.com/fluodata/talos-pulumi/stacks"
)

// fakePulumi answers `config --json` with FAKE_CONFIG (or fails: no such
// stack), logs other commands with their backend, records the proxy it was
// given and fetches FAKE_CURL as a provider would, and answers `stack
// output` with a fixed document unless FAKE_FAIL names the output.
const fakePulumi = `#!/bin/bash
if [ "$1" = "config" ]; then
  if [ -n "$FAKE_CONFIG" ]; then cat "$FAKE_CONFIG"; exit 0; fi
  echo "error: no stack named '$4'" >&2; exit 255
fi
echo "$* | backend=$PULUMI_BACKEND_URL" >> "$FAKE_LOG"
if [ -n "$HTTPS_PROXY" ]; then echo "proxy=$HTTPS_PROXY" >> "$FAKE_LOG.access"; fi
if [ -n "$FAKE_CURL" ]; then curl -sSk --fail --max-time 10 "$FAKE_CURL" >> "$FAKE_LOG.access" 2>&1; fi
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

	cmd := exec.Command("make", append([]string{"--no-print-directory", "PULUMI=" + fake, "STACKCTL=" + stackctl(t)}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), append([]string{"FAKE_LOG=" + log}, env...)...)
	b, err := cmd.CombinedOutput()
	return dir, log, string(b), err
}

// stackctlBuild builds cmd/stackctl once for the Makefile tests (the
// Makefile's default, go run, needs the repository as working directory).
var stackctlBuild = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "stackctl-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "stackctl")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/fluodata/talos-pulumi/cmd/stackctl").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %w: %s", err, out)
	}
	return bin, nil
})

func stackctl(t *testing.T) string {
	t.Helper()
	bin, err := stackctlBuild()
	require.NoError(t, err)
	return bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bin, err := stackctlBuild(); err == nil && strings.Contains(bin, "stackctl-") {
		_ = os.RemoveAll(filepath.Dir(bin))
	}
	os.Exit(code)
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

func TestMakeUpStartsTheSSHProxyWhenTheStackSaysSo(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed (installed by .ci/run)")
	}
	// The Proxmox host: it alone reaches the VIP's API server.
	_, pub, pemKey := sshtest.Key(t)
	host := sshtest.New(t, sshtest.Options{AuthorizedKey: pub, Routes: map[string]string{"10.10.0.5:6443": sshtest.APIServer(t)}})
	scratch := t.TempDir()
	keyFile := filepath.Join(scratch, "id_ed25519")
	require.NoError(t, os.WriteFile(keyFile, pemKey, 0o600))
	src := stacktest.EditSection(t, stacktest.Example(t, stacktest.ProxmoxExample), "proxmox", func(px map[string]any) {
		px["ssh"] = map[string]any{"host": host.Host, "port": host.Port, "user": "root", "privateKeyFile": keyFile}
	})
	configFile := filepath.Join(scratch, "config.json")
	require.NoError(t, os.WriteFile(configFile, stacktest.ConfigJSON(t, src), 0o600))

	_, log, out, err := makeIn(t, []string{"FAKE_CONFIG=" + configFile, "FAKE_CURL=https://10.10.0.5:6443/version"}, "up", "STACK=test")
	require.NoError(t, err, out)
	assert.Contains(t, out, "ssh-proxy: Talos and Kubernetes traffic goes through root@127.0.0.1:")
	access := readLog(t, log+".access")
	assert.Regexp(t, `proxy=http://127\.0\.0\.1:\d+`, access)
	assert.Contains(t, access, "kube-apiserver /version", "pulumi's children reach the VIP through the host")
	assert.Equal(t, 1, host.Forwarded())

	// A direct stack: pulumi runs as it is.
	direct := stacktest.EditSection(t, src, "proxmox", func(px map[string]any) { px["access"] = stacks.AccessDirect })
	require.NoError(t, os.WriteFile(configFile, stacktest.ConfigJSON(t, direct), 0o600))
	_, log, out, err = makeIn(t, []string{"FAKE_CONFIG=" + configFile}, "preview", "STACK=test")
	require.NoError(t, err, out)
	assert.Contains(t, readLog(t, log), "preview --diff --stack test")
	assert.NoFileExists(t, log+".access")
}

// make adopt checks the environment folder's secrets.yaml and hands the
// import to pulumi; without SECRETS it says what is missing.
func TestMakeAdoptImportsTheSecretsFile(t *testing.T) {
	t.Parallel()
	scratch := t.TempDir()
	configFile := filepath.Join(scratch, "config.json")
	require.NoError(t, os.WriteFile(configFile, stacktest.ConfigJSON(t, stacktest.Example(t, stacktest.ProxmoxExample)), 0o600))
	env := filepath.Join(scratch, "environments", "proxmox-homelab")
	require.NoError(t, os.MkdirAll(env, 0o700))
	secretsFile := pkitest.WriteTalosSecrets(t, pkitest.TalosBundle(t), env)

	_, log, out, err := makeIn(t, []string{"FAKE_CONFIG=" + configFile}, "adopt", "STACK=test", "SECRETS="+secretsFile, "ADOPT_FLAGS=--yes")
	require.NoError(t, err, out)
	assert.Regexp(t, `^import --stack test --file \S+/import\.json --protect=false --generate-code=false --yes \| backend=file://`, readLog(t, log))
	assert.Contains(t, out, "Imported. Next: make preview STACK=test")

	_, _, out, err = makeIn(t, []string{"FAKE_CONFIG=" + configFile}, "adopt", "STACK=test")
	require.Error(t, err)
	assert.Contains(t, out, "SECRETS (or, after the first up, RELEASES) is required")

	// The second step, after the first up: the releases (on a stack that
	// reaches the VMs directly; the helper's part is tested in stackctl).
	direct := stacktest.EditSection(t, stacktest.Example(t, stacktest.ProxmoxExample), "proxmox", func(px map[string]any) {
		px["access"] = stacks.AccessDirect
	})
	require.NoError(t, os.WriteFile(configFile, stacktest.ConfigJSON(t, direct), 0o600))
	_, log, out, err = makeIn(t, []string{"FAKE_CONFIG=" + configFile}, "adopt", "STACK=test", "RELEASES=cilium kubelet-csr-approver", "ADOPT_FLAGS=--yes")
	require.NoError(t, err, out)
	assert.Contains(t, readLog(t, log), "import --stack test --file ")
	assert.Contains(t, out, "helm upgrade")
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
