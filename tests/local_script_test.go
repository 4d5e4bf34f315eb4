package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluodata/talos-pulumi/internal/testkit/scripttest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// localScript copies scripts/local.sh and the local example into a folder
// of their own, with the given tools on PATH as small scripts (name:
// body), and runs it there with HOME in the folder.
func localScript(t *testing.T, tools map[string]string, env ...string) (dir, out string, err error) {
	t.Helper()
	dir = t.TempDir()
	bin := filepath.Join(dir, "bin")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "scripts"), 0o700))
	require.NoError(t, os.MkdirAll(bin, 0o700))
	for _, f := range []string{"scripts/local.sh", "Pulumi.local.yaml.example"} {
		b, err := os.ReadFile(filepath.Join("..", f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o600))
	}
	// The shell's own tools, and the ones the test gives.
	for _, tool := range []string{"bash", "cat", "cp", "head", "od", "tr", "mkdir", "tail", "printf", "dirname", "date"} {
		if p, err := exec.LookPath(tool); err == nil {
			require.NoError(t, os.Symlink(p, filepath.Join(bin, tool)))
		}
	}
	for name, body := range tools {
		scripttest.Write(t, filepath.Join(bin, name), "#!"+bashPath(t)+"\n"+body+"\n")
	}
	cmd := exec.Command(bashPath(t), filepath.Join(dir, "scripts/local.sh"))
	cmd.Env = append([]string{"PATH=" + bin, "HOME=" + filepath.Join(dir, "home"), "MAKE=" + filepath.Join(bin, "make")}, env...)
	b, err := cmd.CombinedOutput()
	return dir, string(b), err
}

func bashPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("bash")
	require.NoError(t, err)
	return p
}

// On a fresh machine without what it needs, make local says exactly what
// is missing and how to get it, and does nothing else.
func TestMakeLocalNamesWhatIsMissing(t *testing.T) {
	t.Parallel()
	dir, out, err := localScript(t, map[string]string{
		"uname":  "echo Linux",
		"docker": `echo "permission denied while trying to connect to the Docker daemon socket" >&2; exit 1`,
		"make":   "echo make must not run; exit 1",
	})
	require.Error(t, err)
	assert.Contains(t, out, "make local needs:")
	assert.Contains(t, out, "the Pulumi CLI 3.259 or newer")
	assert.Contains(t, out, "Go 1.26.6 or newer")
	assert.Contains(t, out, "sudo usermod -aG docker $USER")
	assert.NotContains(t, out, "make must not run")
	assert.NoFileExists(t, filepath.Join(dir, "Pulumi.local.yaml"))

	_, out, err = localScript(t, map[string]string{"uname": "echo Darwin", "pulumi": "", "go": "", "docker": "exit 0"})
	require.Error(t, err)
	assert.Contains(t, out, "Docker Desktop's VM does not route to")
}

// With everything there, it writes the stack file from its example, a
// passphrase only this user reads, and runs init, doctor, up without a
// prompt and outputs, in that order.
func TestMakeLocalBringsTheClusterUp(t *testing.T) {
	t.Parallel()
	dir, out, err := localScript(t, map[string]string{
		"uname": "echo Linux", "pulumi": "", "go": "", "docker": "exit 0",
		"make": `echo "$*" >> "$HOME/../make.log"; [ -f "$PULUMI_CONFIG_PASSPHRASE_FILE" ]`,
	})
	require.NoError(t, err, out)
	example, err := os.ReadFile(filepath.Join(dir, "Pulumi.local.yaml.example"))
	require.NoError(t, err)
	stack, err := os.ReadFile(filepath.Join(dir, "Pulumi.local.yaml"))
	require.NoError(t, err)
	assert.Equal(t, string(example), string(stack))
	log, err := os.ReadFile(filepath.Join(dir, "make.log"))
	require.NoError(t, err)
	assert.Equal(t, []string{
		"--no-print-directory init STACK=local", "--no-print-directory doctor STACK=local",
		"--no-print-directory up STACK=local YES=1", "--no-print-directory outputs STACK=local",
	}, strings.Split(strings.TrimSpace(string(log)), "\n"))
	pass := filepath.Join(dir, "home/.config/talos-cluster/local-passphrase")
	info, err := os.Stat(pass)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	assert.Contains(t, out, "kubectl get nodes")
	assert.Regexp(t, `the local cluster is up \(\d+m\d+s\)`, out, "the first run's time")
	assert.Contains(t, out, "remove it: make destroy STACK=local")
}
