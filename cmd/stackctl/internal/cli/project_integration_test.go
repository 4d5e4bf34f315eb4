//go:build integration

package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// testProject is a Pulumi project in a temporary folder whose program is a
// binary of this repository, built once, on a file backend of its own.
type testProject struct {
	dir, project string
	pulumi       string
	// env is the environment every command of the project runs with.
	env []string
}

// newTestProject builds the program package pkg (a path from the
// repository's root) and writes a project named name that runs it.
func newTestProject(t *testing.T, pulumiPath, name, pkg string) *testProject {
	t.Helper()
	p := &testProject{dir: t.TempDir(), pulumi: pulumiPath}
	p.project = filepath.Join(p.dir, "project")
	binary := p.build(t, name, pkg)
	require.NoError(t, os.MkdirAll(filepath.Join(p.dir, "state"), 0o700))
	require.NoError(t, os.MkdirAll(p.project, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(p.project, "Pulumi.yaml"),
		[]byte("name: "+name+"\nruntime:\n  name: go\n  options:\n    binary: "+binary+"\n"), 0o600))
	p.env = append(os.Environ(), "PULUMI_CONFIG_PASSPHRASE=integration-test", "PULUMI_BACKEND_URL=file://"+filepath.Join(p.dir, "state"))
	return p
}

// build builds the package pkg of the repository into the project's folder.
func (p *testProject) build(t *testing.T, out, pkg string) string {
	t.Helper()
	path := filepath.Join(p.dir, out)
	cmd := exec.Command("go", "build", "-o", path, pkg)
	cmd.Dir = stackstest.RepoRoot(t)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, string(b))
	return path
}

// run runs pulumi with args in the project, with extra environment.
func (p *testProject) run(extraEnv []string, args ...string) (string, error) {
	cmd := exec.Command(p.pulumi, args...)
	cmd.Dir, cmd.Env = p.project, append(append([]string{}, p.env...), extraEnv...)
	b, err := cmd.CombinedOutput()
	return string(b), err
}
