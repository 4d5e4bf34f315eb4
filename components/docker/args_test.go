package docker_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/docker"
	"github.com/fluodata/talos-pulumi/components/talos"
)

func minimal() docker.ClusterArgs {
	return docker.ClusterArgs{
		Cluster: talos.ClusterSettings{Name: "lab", TalosVersion: "v1.13.9"},
		Docker:  docker.Settings{Subnet: "10.5.0.0/24"},
		Nodes:   []docker.Node{{Name: "cp1", Role: talos.RoleControlPlane, IP: "10.5.0.2"}},
	}
}

// The optional inputs' defaults: the subnet's first address as gateway,
// the cluster's name as network, the release's image, the ports of
// talosctl cluster create, privileged, no nameservers; the input itself is
// not changed.
func TestDefaults(t *testing.T) {
	t.Parallel()
	in := minimal()
	d := in.WithDefaults()
	assert.Equal(t, "10.5.0.1", d.Docker.Gateway)
	assert.Equal(t, "lab", d.Docker.Network)
	assert.Equal(t, "ghcr.io/siderolabs/talos:v1.13.9", d.Docker.Image)
	assert.Equal(t, 6443, d.Docker.KubernetesPort)
	assert.Equal(t, 50000, d.Docker.TalosPort)
	require.NotNil(t, d.Docker.Privileged)
	assert.True(t, *d.Docker.Privileged)
	// Docker's resolver, as talosctl's clusters: Talos's container platform
	// reads the container's resolv.conf (talos v1.13.9,
	// internal/app/machined/pkg/runtime/v1alpha1/platform/container/container.go).
	assert.Nil(t, d.Cluster.Nameservers, "no nameservers of ours")
	assert.Empty(t, in.Docker.Gateway, "the input is left alone")
	require.NoError(t, in.Validate("lab"))
}

// Every problem at once, each by its input path, and nothing without
// arguments.
func TestValidateNamesEveryProblem(t *testing.T) {
	t.Parallel()
	var none *docker.ClusterArgs
	require.ErrorContains(t, none.Validate("lab"), "args: are required")

	in := minimal()
	in.Docker.Subnet = "10.5.0.7/24"
	in.Docker.Gateway = "10.6.0.1"
	in.Docker.Network = "Not_A_Label"
	in.Docker.TalosPort = 6443
	in.Nodes = append(in.Nodes, docker.Node{Name: "w1", Role: talos.RoleWorker, IP: "10.5.0.2"})
	err := in.Validate("lab")
	require.Error(t, err)
	for _, want := range []string{
		`docker.subnet: "10.5.0.7/24" has host bits set; did you mean 10.5.0.0/24?`,
		`docker.network: "Not_A_Label" is not a Docker network name`,
		"docker.talosPort: 6443 is the Kubernetes API's port too",
		"nodes[1].ip",
	} {
		assert.Contains(t, err.Error(), want)
	}
}

// Talos's own image at another release than cluster.talosVersion is
// refused by key: the version check and the rollout read talosVersion, so
// the image would bypass them. Other images (a stand-in, a digest) pass.
func TestTheImageCannotBypassTheTalosVersion(t *testing.T) {
	t.Parallel()
	for image, refused := range map[string]bool{
		"ghcr.io/siderolabs/talos:v1.12.4":        true,
		"ghcr.io/siderolabs/talos:v1.13.9":        false,
		"ghcr.io/siderolabs/talos@sha256:0123abc": false,
		"ghcr.io/siderolabs/talos":                false,
		"talos":                                   false,
		"registry.local:5000/talos:v1.12.4":       false,
		"localhost/stand-in:latest":               false,
	} {
		in := minimal()
		in.Docker.Image = image
		err := in.Validate("lab")
		if !refused {
			assert.NoError(t, err, image)
			continue
		}
		require.Error(t, err, image)
		assert.Contains(t, err.Error(), `docker.image: "`+image+`" is Talos v1.12.4, not cluster.talosVersion v1.13.9: change cluster.talosVersion instead`)
	}
}

// apiAccess published: each node's own ports default to the first node's
// plus its index; ports refused by key where they cannot work.
func TestPublishedAPIPorts(t *testing.T) {
	t.Parallel()
	in := minimal()
	in.Docker.APIAccess = docker.AccessPublished
	in.Nodes = append(in.Nodes,
		docker.Node{Name: "cp2", Role: talos.RoleControlPlane, IP: "10.5.0.3"},
		docker.Node{Name: "w1", Role: talos.RoleWorker, IP: "10.5.0.4"})
	d := in.WithDefaults()
	var got [][2]int
	for _, n := range d.Nodes {
		got = append(got, [2]int{n.TalosPort, n.KubernetesPort})
	}
	assert.Equal(t, [][2]int{{50000, 6443}, {50001, 6444}, {50002, 0}}, got)
	require.NoError(t, in.Validate("lab"))

	bad := in
	bad.Docker.APIAccess = "tunnel"
	assert.ErrorContains(t, bad.Validate("lab"), `docker.apiAccess: "tunnel" is not bridge or published`)

	bad = in
	bad.Nodes = []docker.Node{in.Nodes[0], in.Nodes[1], in.Nodes[2]}
	bad.Nodes[0].TalosPort = 50100
	bad.Nodes[1].TalosPort = 6443
	bad.Nodes[2].KubernetesPort = 6500
	err := bad.Validate("lab")
	require.Error(t, err)
	for _, want := range []string{
		"nodes[0].talosPort: the first node publishes docker.talosPort (50000); set that instead",
		"nodes[1].talosPort: 6443 is published by nodes[0].kubernetesPort already",
		"nodes[2].kubernetesPort: a worker serves no Kubernetes API; leave it out",
	} {
		assert.Contains(t, err.Error(), want)
	}

	bridge := minimal()
	bridge.Nodes[0].TalosPort = 50000
	assert.ErrorContains(t, bridge.Validate("lab"), "nodes[0].talosPort: is used with docker.apiAccess published only; leave it out")
}

// A pool's containers are workers after the listed nodes, <pool>-<n> at
// consecutive addresses; a pool's problems are named by the pool's
// inputs, once.
func TestPools(t *testing.T) {
	t.Parallel()
	in := minimal()
	in.Pools = []docker.Pool{{Name: "batch", Count: 2, IP: "10.5.0.10", Memory: 4096, Taints: map[string]string{"example.com/batch": "NoSchedule"}}}
	require.NoError(t, in.Validate("lab"))
	d := in.WithDefaults()
	var nodes []string
	for _, n := range d.Nodes {
		nodes = append(nodes, n.Name+"@"+n.IP)
	}
	assert.Equal(t, []string{"cp1@10.5.0.2", "batch-0@10.5.0.10", "batch-1@10.5.0.11"}, nodes)
	assert.Equal(t, talos.RoleWorker, d.Nodes[2].Role)
	assert.Equal(t, 4096, d.Nodes[2].Memory)
	assert.Len(t, in.Nodes, 1, "the input is left alone")
	assert.Equal(t, d.Nodes, d.WithDefaults().Nodes, "expanded once")

	in.Pools = append(in.Pools, docker.Pool{Name: "edge", Count: 3, IP: "10.5.0.254", Memory: 512})
	err := in.Validate("lab")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "pools[1].ip: 10.5.1.0 is outside the nodes' network 10.5.0.0/24", "its third node")
	assert.Contains(t, err.Error(), "pools[1].memory")
	assert.Equal(t, 1, strings.Count(err.Error(), "pools[1].memory"), "once for the pool's 3 nodes")
}
