package talosapi_test

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
)

// The bootstrap manifests are read with the machinery client's COSI state
// from the fake's upstream COSI server: a control plane's objects in the
// order of their resources' IDs, none on a worker, readable with os:reader.
func TestManifestsAreAControlPlanesManifestResources(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(1, 1, oldVersion, reboot)...)
	sa := map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "coredns", "namespace": "kube-system"}}
	cm := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "coredns", "namespace": "kube-system"}, "data": map[string]any{"Corefile": ".:53 {\n}\n"}}
	crb := map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": map[string]any{"name": "system:talos-nodes"}}
	c.SetManifests(
		talosapitest.Manifest{ID: "11-core-dns", Objects: []map[string]any{sa, cm}},
		talosapitest.Manifest{ID: "01-csr-node-bootstrap", Objects: []map[string]any{crb}},
	)
	cp, worker := c.IPs(talosapitest.ControlPlane)[0], c.IPs(talosapitest.Worker)[0]

	cl := newClient(t, c, adminCreds(c))
	got, err := cl.Manifests(ctxT(t), cp)
	require.NoError(t, err)
	assert.Equal(t, []map[string]any{crb, sa, cm}, got)

	got, err = cl.Manifests(ctxT(t), worker)
	require.NoError(t, err)
	assert.Empty(t, got, "a worker renders no manifests")

	crt, key := c.ClientCert(role.Reader)
	reader := newClient(t, c, talosapi.Credentials{CA: c.CA(), Cert: crt, Key: key})
	got, err = reader.Manifests(ctxT(t), cp)
	require.NoError(t, err)
	assert.Len(t, got, 3)

	assert.NotEmpty(t, c.Events("List"), "the reads are COSI List calls")
}
