//go:build e2e

package rollout_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/kubeapi"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest/realapiserver"
	"github.com/fluodata/talos-pulumi/internal/rollout"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
	"github.com/fluodata/talos-pulumi/internal/testkit/pkitest"
)

// The sync against the real kube-apiserver, the manifests read through
// upstream's COSI server: created objects carry the inventory's annotation
// and Talos's field manager, the inventory names them in cli-utils's form
// (which the API server takes as ConfigMap keys, colons transcoded), a
// second sync writes nothing, and a later one changes only what changed
// and prunes what is no longer rendered. No workload is in the manifests:
// the real server runs no controller to roll one out.
func TestSyncManifestsOnTheRealAPIServer(t *testing.T) {
	ctx := t.Context()
	k8sCA := pkitest.TalosBundle(t).Certs.K8s
	apiserver := realapiserver.Start(ctx, t, realapiserver.CA{Cert: k8sCA.Crt, Key: k8sCA.Key})
	c := talosapitest.Start(t, talosapitest.Topology(1, 0, "v1.12.0", 10*time.Millisecond)...)
	kube, err := kubeapi.New(apiserver.Kubeconfig(), kubeapi.WithTimeout(10*time.Second))
	require.NoError(t, err)
	t.Cleanup(kube.Close)
	o := ops(t, c)
	o.Kube = func(context.Context, string) (rollout.Kube, error) { return kube, nil }

	corefile := func(body string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "coredns", "namespace": "kube-system"}, "data": map[string]any{"Corefile": body}}
	}
	role := map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": map[string]any{"name": "system:coredns"},
		"rules": []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"endpoints"}, "verbs": []any{"list", "watch"}}}}
	old := map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "old", "namespace": "kube-system"}}
	rv := func(apiVersion, kind, ns, name string) string {
		obj, err := kube.GetObject(ctx, apiVersion, kind, ns, name)
		require.NoError(t, err)
		return obj["metadata"].(map[string]any)["resourceVersion"].(string)
	}

	c.SetManifests(talosapitest.Manifest{ID: "11-core-dns", Objects: []map[string]any{corefile(".:53 {\n}\n"), role, old}})
	require.NoError(t, o.SyncManifests(ctx))
	cm, err := kube.GetObject(ctx, "v1", "ConfigMap", "kube-system", "coredns")
	require.NoError(t, err)
	meta := cm["metadata"].(map[string]any)
	assert.Equal(t, map[string]any{"config.k8s.io/owning-inventory": "talos-bootstrap-manifests-inventory"}, meta["annotations"])
	fields := meta["managedFields"].([]any)[0].(map[string]any)
	assert.Equal(t, []any{"talos", "Apply"}, []any{fields["manager"], fields["operation"]})
	keys, err := kube.Inventory(ctx, rollout.InventoryNamespace, rollout.InventoryName)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"_system__coredns_rbac.authorization.k8s.io_ClusterRole",
		"kube-system_coredns__ConfigMap",
		"kube-system_old__ServiceAccount",
	}, keys)

	before := []string{rv("v1", "ConfigMap", "kube-system", "coredns"), rv("rbac.authorization.k8s.io/v1", "ClusterRole", "", "system:coredns")}
	require.NoError(t, o.SyncManifests(ctx))
	assert.Equal(t, before, []string{rv("v1", "ConfigMap", "kube-system", "coredns"), rv("rbac.authorization.k8s.io/v1", "ClusterRole", "", "system:coredns")}, "nothing written again")

	c.SetManifests(talosapitest.Manifest{ID: "11-core-dns", Objects: []map[string]any{corefile(".:53 {\n  errors\n}\n"), role}})
	require.NoError(t, o.SyncManifests(ctx))
	assert.NotEqual(t, before[0], rv("v1", "ConfigMap", "kube-system", "coredns"), "the changed ConfigMap written")
	assert.Equal(t, before[1], rv("rbac.authorization.k8s.io/v1", "ClusterRole", "", "system:coredns"))
	_, err = kube.GetObject(ctx, "v1", "ServiceAccount", "kube-system", "old")
	require.ErrorIs(t, err, kubeapi.ErrNotFound, "pruned")
	keys, err = kube.Inventory(ctx, rollout.InventoryNamespace, rollout.InventoryName)
	require.NoError(t, err)
	assert.Len(t, keys, 2)
}
