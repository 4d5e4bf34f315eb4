//go:build integration

package docker_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/docker"
	"github.com/fluodata/talos-pulumi/components/talos"
)

// TestIntegrationContainersLiveTheirLifeInDocker runs the DockerCluster's
// containers (NewContainers: the network, the state volumes, the
// containers) with the real pulumi CLI, the real Docker provider plugin
// (4.11.0, built by ../shared/harness) and the real Docker daemon, on the
// stand-in image (testdata/standin). What differs from the real image: the
// stand-in runs unprivileged (this machine refuses privileged containers),
// serves neither API, and no TalosCluster applies a config (that part runs
// on the Talos API fake in the other tests).
//
// It walks: first up; a preview with no change; a new image (every
// container replaced, deleted first, the control plane before the worker,
// the volumes kept: the boot count in /var goes on); a worker removed (its
// container and volumes go, nothing else); destroy (no container, volume
// or network of the stack left).
func TestIntegrationContainersLiveTheirLifeInDocker(t *testing.T) {
	for _, tool := range []string{"pulumi", "docker"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("SKIPPED: %s is not on PATH", tool)
		}
	}
	if out, err := exec.Command("docker", "info").CombinedOutput(); err != nil {
		t.Skipf("SKIPPED: no Docker daemon answers (make deps installs docker.io; start dockerd): %s", out)
	}
	if out, _ := exec.Command("pulumi", "plugin", "ls").CombinedOutput(); !bytes.Contains(out, []byte(docker.PluginVersion)) {
		t.Skipf("SKIPPED: no docker plugin %s (../shared/harness; scripts/harness-docker-plugin.sh builds it):\n%s", docker.PluginVersion, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := t.TempDir()
	t.Setenv("PULUMI_CONFIG_PASSPHRASE", "integration-test")
	t.Setenv("PULUMI_BACKEND_URL", "file://"+dir)

	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	cluster := "it" + hex.EncodeToString(suffix)
	repo := "standin-" + cluster
	v1, v2 := repo+":v1", repo+":v2"
	buildStandin(t, v1, v2)

	nodes := []docker.Node{{Name: "cp1", Role: talos.RoleControlPlane, IP: "10.213.7.2"}, {Name: "w1", Role: talos.RoleWorker, IP: "10.213.7.3"}}
	image := v1
	off := false
	prog := func(ctx *pulumi.Context) error {
		args := (&docker.ClusterArgs{
			Cluster: talos.ClusterSettings{Name: cluster, TalosVersion: "v1.13.9"},
			Docker: docker.Settings{
				Subnet: "10.213.7.0/24", Image: image, Privileged: &off,
				KubernetesPort: 46443, TalosPort: 45000,
			},
			Nodes: nodes,
		}).WithDefaults()
		if problems := args.Problems(); len(problems) > 0 {
			t.Errorf("invalid args: %v", problems)
		}
		_, err := docker.NewContainers(ctx, cluster, &args, nil)
		return err
	}
	s, err := auto.UpsertStackInlineSource(ctx, "it", "docker-it", prog)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = s.Destroy(context.Background())
		_ = exec.Command("docker", "rmi", v1, v2).Run()
	})
	var log strings.Builder
	stream := optup.ProgressStreams(&log)

	up, err := s.Up(ctx, stream)
	require.NoError(t, err, log.String())
	assert.Equal(t, map[string]int{"create": 16}, *up.Summary.ResourceChanges, "the stack, the default docker provider, the network, 12 volumes, 2 containers")
	cp := inspect(t, cluster+"-cp1")
	assert.Equal(t, "true", cp["readonly"])
	assert.Equal(t, "10.213.7.2", cp["ip"])
	assert.Equal(t, "[seccomp=unconfined]", cp["securityopt"])
	assert.Contains(t, cp["env"], "PLATFORM=container")
	assert.NotContains(t, cp["env"], "USERDATA")
	assert.Equal(t, "127.0.0.1:45000 127.0.0.1:46443", cp["ports"])
	assert.Equal(t, "", inspect(t, cluster+"-w1")["ports"], "only the first control plane is published")
	assert.Equal(t, "1", boots(t, cluster+"-cp1"))

	log.Reset()
	pre, err := s.Preview(ctx, optpreview.ProgressStreams(&log), optpreview.ExpectNoChanges())
	require.NoError(t, err, "a second preview changes nothing:\n%s", log.String())
	assert.Zero(t, pre.ChangeSummary["update"]+pre.ChangeSummary["replace"]+pre.ChangeSummary["create"]+pre.ChangeSummary["delete"])

	volumesBefore := volumes(t, cluster)
	image = v2
	log.Reset()
	up, err = s.Up(ctx, stream)
	require.NoError(t, err, log.String())
	assert.Equal(t, 2, (*up.Summary.ResourceChanges)["replace"], "both containers, nothing else:\n%s", log.String())
	cpNew, wNew := inspect(t, cluster+"-cp1"), inspect(t, cluster+"-w1")
	assert.Equal(t, v2, cpNew["image"])
	assert.Less(t, cpNew["created"], wNew["created"], "the control plane's new container before the worker's")
	assert.Equal(t, volumesBefore, volumes(t, cluster), "the volumes are kept")
	assert.Equal(t, "2", boots(t, cluster+"-cp1"), "the new container found the node's /var")

	nodes = nodes[:1]
	log.Reset()
	up, err = s.Up(ctx, stream)
	require.NoError(t, err, log.String())
	assert.Equal(t, 7, (*up.Summary.ResourceChanges)["delete"], "the worker's container and its 6 volumes")
	assert.Len(t, volumes(t, cluster), 6)

	_, err = s.Destroy(ctx)
	require.NoError(t, err)
	for _, kind := range [][]string{{"ps", "-a"}, {"volume", "ls"}, {"network", "ls"}} {
		out, err := exec.Command("docker", append(kind, "-q", "--filter", "label=talos.cluster.name="+cluster)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		assert.Empty(t, strings.TrimSpace(string(out)), "docker %s: nothing of the stack is left", kind[0])
	}
}

// buildStandin imports the stand-in's root file system under both tags.
func buildStandin(t *testing.T, tags ...string) {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"var", "etc", "run", "system", "tmp", "opt"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	build := exec.Command("go", "build", "-o", filepath.Join(root, "standin"), "./testdata/standin")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, tag := range tags {
		imp := exec.Command("sh", "-c", `tar -C "$1" -c . | docker import --change 'ENTRYPOINT ["/standin"]' - "$2"`, "sh", root, tag)
		out, err := imp.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
}

// inspect is what the tests read of a container.
func inspect(t *testing.T, name string) map[string]string {
	t.Helper()
	const format = `{{.Config.Image}}|{{.HostConfig.ReadonlyRootfs}}|{{.HostConfig.SecurityOpt}}|{{.Config.Env}}|` +
		`{{range .NetworkSettings.Networks}}{{.IPAMConfig.IPv4Address}}{{end}}|` +
		`{{range $p, $b := .HostConfig.PortBindings}}{{range $b}}{{.HostIp}}:{{.HostPort}} {{end}}{{end}}|{{.Created}}`
	out, err := exec.Command("docker", "inspect", "--format", format, name).CombinedOutput()
	require.NoError(t, err, "%s", out)
	f := strings.Split(strings.TrimSpace(string(out)), "|")
	require.Len(t, f, 7, "%s", out)
	ports := strings.Fields(f[5])
	return map[string]string{
		"image": f[0], "readonly": f[1], "securityopt": f[2], "env": f[3], "ip": f[4],
		"ports": strings.Join(sorted(ports), " "), "created": f[6],
	}
}

func sorted(xs []string) []string {
	out := append([]string{}, xs...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// boots is the stand-in's boot count in the node's /var volume.
func boots(t *testing.T, container string) string {
	t.Helper()
	var out []byte
	var err error
	for range 50 {
		out, err = exec.Command("docker", "exec", container, "/standin", "-boots").CombinedOutput()
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, err, "%s", out)
	return strings.TrimSpace(string(out))
}

// volumes are the IDs of the stack's volumes.
func volumes(t *testing.T, cluster string) []string {
	t.Helper()
	out, err := exec.Command("docker", "volume", "ls", "-q", "--filter", "label=talos.cluster.name="+cluster).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return sorted(strings.Fields(string(out)))
}
