package talos_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/talos"
)

// Registry mirrors reach Talos as it reads them, before and after its
// RegistryMirrorConfig document (1.12): read back through Talos's own
// config interface from configs its machinery validates.
func TestRegistryMirrorsValidate(t *testing.T) {
	t.Parallel()
	mirrors := []talos.RegistryMirror{
		{Registry: "docker.io", Endpoints: []string{"http://10.5.0.1:5000", "https://mirror.gcr.io"}},
		{Registry: "*", Endpoints: []string{"https://cache.lan"}, SkipFallback: true},
	}
	n := talos.NodeSpec{Name: "cp-0", IP: "10.0.0.10", Role: talos.RoleControlPlane, InstallDisk: "/dev/sda", Network: talos.NodeNetwork{DHCP: true}}
	for _, version := range []string{"v1.11.6", "v1.12.4", "v1.13.9"} {
		final, err := finalConfig(t, "lab", "https://10.0.0.10:6443", version, n.Role,
			talos.NodePatches(talos.PatchSpec{TalosVersion: version, RegistryMirrors: mirrors}, n, installer))
		require.NoError(t, err, version)
		require.NoError(t, validateFor(t, final, metal), version)
		got := final.RegistryMirrorConfigs()
		require.Contains(t, got, "docker.io", version)
		var endpoints []string
		for _, e := range got["docker.io"].Endpoints() {
			endpoints = append(endpoints, e.Endpoint())
		}
		assert.Equal(t, []string{"http://10.5.0.1:5000", "https://mirror.gcr.io"}, endpoints, version)
		assert.False(t, got["docker.io"].SkipFallback(), version)
		require.Contains(t, got, "*", version)
		assert.True(t, got["*"].SkipFallback(), version)
		_, doc := docs(t, final)["RegistryMirrorConfig"]
		assert.Equal(t, version != "v1.11.6", doc, "%s: the document from 1.12 on", version)
	}
}

// Every problem of the mirrors by its path.
func TestRegistryMirrorsAreChecked(t *testing.T) {
	t.Parallel()
	c := talos.ClusterSettings{Name: "lab", TalosVersion: "v1.13.9", RegistryMirrors: []talos.RegistryMirror{
		{Registry: "docker.io", Endpoints: []string{"ftp://x"}},
		{Registry: "docker.io", Endpoints: []string{"http://a"}},
		{Registry: "not a host"},
		{Registry: "registry.local:99999", Endpoints: []string{"http://b"}},
	}}
	var p inputs.Problems
	c.Check(&p, "cluster.")
	var got []string
	for _, pr := range p.List() {
		got = append(got, pr.Path+": "+pr.Message)
	}
	assert.ElementsMatch(t, []string{
		`cluster.registryMirrors[0].endpoints[0]: "ftp://x" is not an http:// or https:// URL`,
		"cluster.registryMirrors[1].registry: docker.io has mirrors above already: list all of its endpoints in one entry",
		`cluster.registryMirrors[2].registry: "not a host" is not a registry's host[:port] as images name it (docker.io, registry.local:5000)`,
		"cluster.registryMirrors[2].endpoints: is required: the mirrors' URLs, e.g. http://10.5.0.1:5000",
		`cluster.registryMirrors[3].registry: "registry.local:99999" is not a registry's host[:port] as images name it (docker.io, registry.local:5000)`,
	}, got)
}
