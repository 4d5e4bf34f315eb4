// Package dockertest is the tests' kit for the real Docker daemon: the
// stand-in Talos image (its command is ./standin), and reads of what the
// daemon holds for a cluster.
package dockertest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Available skips the test, saying why, unless the docker CLI is on PATH
// and a daemon answers it.
func Available(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("SKIPPED: the docker CLI is not on PATH (make deps installs docker.io)")
	}
	if out, err := exec.Command("docker", "info").CombinedOutput(); err != nil {
		t.Skipf("SKIPPED: no Docker daemon answers (.ci/run starts dockerd): %s", out)
	}
}

// BuildStandin builds the stand-in (a static binary) and imports a root
// file system with it as entrypoint under each tag; the images are removed
// when the test ends.
func BuildStandin(t *testing.T, tags ...string) {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"var", "etc", "run", "system", "tmp", "opt"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d), 0o750))
	}
	_, here, _, _ := runtime.Caller(0)
	build := exec.Command("go", "build", "-o", filepath.Join(root, "standin"), ".") //nolint:gosec // the test's own folder
	build.Dir = filepath.Join(filepath.Dir(here), "standin")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, tag := range tags {
		imp := exec.Command("sh", "-c", `tar -C "$1" -c . | docker import --change 'ENTRYPOINT ["/standin"]' - "$2"`, "sh", root, tag) //nolint:gosec // the test's folder and tags, as arguments
		out, err := imp.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", append([]string{"rmi"}, tags...)...).Run() }) //nolint:gosec // the test's own tags
}

// Container is what the tests read of a container (docker inspect).
type Container struct {
	Image, Env, IP, Created string
	ReadOnly                bool
	SecurityOpt             string
	// Ports are the published ports as host-ip:host-port, sorted.
	Ports []string
}

// Inspect reads the container named name.
func Inspect(t *testing.T, name string) Container {
	t.Helper()
	const format = `{{.Config.Image}}|{{.HostConfig.ReadonlyRootfs}}|{{.HostConfig.SecurityOpt}}|{{.Config.Env}}|` +
		`{{range .NetworkSettings.Networks}}{{.IPAMConfig.IPv4Address}}{{end}}|` +
		`{{range $p, $b := .HostConfig.PortBindings}}{{range $b}}{{.HostIp}}:{{.HostPort}} {{end}}{{end}}|{{.Created}}`
	out, err := exec.Command("docker", "inspect", "--format", format, name).CombinedOutput()
	require.NoError(t, err, "%s", out)
	f := strings.Split(strings.TrimSpace(string(out)), "|")
	require.Len(t, f, 7, "%s", out)
	return Container{
		Image: f[0], ReadOnly: f[1] == "true", SecurityOpt: f[2], Env: f[3], IP: f[4],
		Ports: slices.Sorted(slices.Values(strings.Fields(f[5]))), Created: f[6],
	}
}

// Boots is the stand-in's boot count in the node's /var volume, once it
// is want (or after 10 s, the last count read): a container just started
// may not have counted its boot yet.
func Boots(t *testing.T, container, want string) string {
	t.Helper()
	var got string
	for deadline := time.Now().Add(10 * time.Second); ; {
		out, err := exec.Command("docker", "exec", container, "/standin", "-boots").CombinedOutput() //nolint:gosec // the test's own container
		got = strings.TrimSpace(string(out))
		if err == nil && got == want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Labelled are the IDs of the containers ("ps -a"), volumes ("volume
// ls") or networks ("network ls") labelled as the cluster's, sorted.
func Labelled(t *testing.T, cluster string, kind ...string) []string {
	t.Helper()
	out, err := exec.Command("docker", append(kind, "-q", "--filter", "label=talos.cluster.name="+cluster)...).CombinedOutput() //nolint:gosec // the test's own cluster
	require.NoError(t, err, "%s", out)
	return slices.Sorted(slices.Values(strings.Fields(string(out))))
}
