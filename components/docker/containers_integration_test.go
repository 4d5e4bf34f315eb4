//go:build integration

package docker_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os/exec"
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
	"github.com/fluodata/talos-pulumi/internal/testkit/clitest"
	"github.com/fluodata/talos-pulumi/internal/testkit/dockertest"
)

// TestIntegrationContainersLiveTheirLifeInDocker runs the DockerCluster's
// containers (NewContainers: the network, the state volumes, the
// containers) with the real pulumi CLI, the real Docker provider plugin
// (4.11.0, built by ../shared/harness) and the real Docker daemon, on the
// stand-in image (internal/testkit/dockertest/standin). What differs from the real image: the
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
	clitest.Backend(t, "the containers' life was not run with the real docker plugin")
	dockertest.Available(t)
	if out, _ := exec.Command("pulumi", "plugin", "ls").CombinedOutput(); !bytes.Contains(out, []byte(docker.PluginVersion)) {
		t.Skipf("SKIPPED: no docker plugin %s (../shared/harness; scripts/harness-docker-plugin.sh builds it):\n%s", docker.PluginVersion, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	cluster := "it" + hex.EncodeToString(suffix)
	repo := "standin-" + cluster
	v1, v2 := repo+":v1", repo+":v2"
	dockertest.BuildStandin(t, v1, v2)

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
	t.Cleanup(func() { _, _ = s.Destroy(context.Background()) })
	var log strings.Builder
	stream := optup.ProgressStreams(&log)

	up, err := s.Up(ctx, stream)
	require.NoError(t, err, log.String())
	assert.Equal(t, map[string]int{"create": 16}, *up.Summary.ResourceChanges, "the stack, the default docker provider, the network, 12 volumes, 2 containers")
	cp := dockertest.Inspect(t, cluster+"-cp1")
	assert.True(t, cp.ReadOnly)
	assert.Equal(t, "10.213.7.2", cp.IP)
	assert.Equal(t, "[seccomp=unconfined]", cp.SecurityOpt)
	assert.Contains(t, cp.Env, "PLATFORM=container")
	assert.NotContains(t, cp.Env, "USERDATA")
	assert.Equal(t, []string{"127.0.0.1:45000", "127.0.0.1:46443"}, cp.Ports)
	assert.Empty(t, dockertest.Inspect(t, cluster+"-w1").Ports, "only the first control plane is published")
	assert.Equal(t, "1", dockertest.Boots(t, cluster+"-cp1", "1"))

	log.Reset()
	pre, err := s.Preview(ctx, optpreview.ProgressStreams(&log), optpreview.ExpectNoChanges())
	require.NoError(t, err, "a second preview changes nothing:\n%s", log.String())
	assert.Zero(t, pre.ChangeSummary["update"]+pre.ChangeSummary["replace"]+pre.ChangeSummary["create"]+pre.ChangeSummary["delete"])

	volumesBefore := dockertest.Labelled(t, cluster, "volume", "ls")
	image = v2
	log.Reset()
	up, err = s.Up(ctx, stream)
	require.NoError(t, err, log.String())
	assert.Equal(t, 2, (*up.Summary.ResourceChanges)["replace"], "both containers, nothing else:\n%s", log.String())
	cpNew, wNew := dockertest.Inspect(t, cluster+"-cp1"), dockertest.Inspect(t, cluster+"-w1")
	assert.Equal(t, v2, cpNew.Image)
	assert.Less(t, cpNew.Created, wNew.Created, "the control plane's new container before the worker's")
	assert.Equal(t, volumesBefore, dockertest.Labelled(t, cluster, "volume", "ls"), "the volumes are kept")
	assert.Equal(t, "2", dockertest.Boots(t, cluster+"-cp1", "2"), "the new container found the node's /var")

	nodes = nodes[:1]
	log.Reset()
	up, err = s.Up(ctx, stream)
	require.NoError(t, err, log.String())
	assert.Equal(t, 7, (*up.Summary.ResourceChanges)["delete"], "the worker's container and its 6 volumes")
	assert.Len(t, dockertest.Labelled(t, cluster, "volume", "ls"), 6)

	_, err = s.Destroy(ctx)
	require.NoError(t, err)
	for _, kind := range [][]string{{"ps", "-a"}, {"volume", "ls"}, {"network", "ls"}} {
		assert.Empty(t, dockertest.Labelled(t, cluster, kind...), "docker %s: nothing of the stack is left", kind[0])
	}
}
