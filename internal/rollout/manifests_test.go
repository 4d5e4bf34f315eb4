package rollout_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/kubeapi"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest"
	"github.com/fluodata/talos-pulumi/internal/rollout"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
)

// coreDNS is a CoreDNS manifest as Talos renders one: its ConfigMap,
// ClusterRole and Deployment, of an image.
func coreDNS(image string) talosapitest.Manifest {
	labels := map[string]any{"k8s-app": "kube-dns"}
	return talosapitest.Manifest{ID: "11-core-dns", Objects: []map[string]any{
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "coredns", "namespace": "kube-system"}, "data": map[string]any{"Corefile": ".:53 {\n}\n"}},
		{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "coredns", "namespace": "kube-system"},
			"spec": map[string]any{"replicas": 2.0, "selector": map[string]any{"matchLabels": labels}, "template": map[string]any{
				"metadata": map[string]any{"labels": labels},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "coredns", "image": image}}},
			}}},
		{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": map[string]any{"name": "system:coredns"}},
	}}
}

func extra(name string) talosapitest.Manifest {
	return talosapitest.Manifest{ID: "12-" + name, Objects: []map[string]any{
		{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": name, "namespace": "kube-system"}},
	}}
}

func image(s *kubeapitest.Server) string {
	d := s.Object("apps/v1", "Deployment", "kube-system", "coredns")
	if d == nil {
		return ""
	}
	return d["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["image"].(string)
}

func applies(s *kubeapitest.Server) []string {
	var out []string
	for _, e := range s.Events() {
		if e.Action == "apply" || e.Action == "delete" {
			out = append(out, e.Action+" "+e.Object)
		}
	}
	return out
}

// The sync applies what a control plane renders, cluster definitions
// first, marked as the inventory's and recorded in it; a second sync
// writes only what changed, prunes what is no longer rendered and
// leaves the inventory with what is.
func TestSyncManifests(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(1, 1, "v1.12.0", 10*time.Millisecond)...)
	s := kubeapitest.Start(t)
	o := ops(t, c)
	o.Kube = kubeOf(t, s)
	var mu sync.Mutex
	var said []string
	o.Log = func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		said = append(said, fmt.Sprintf(format, args...))
	}
	c.SetManifests(coreDNS("registry.k8s.io/coredns/coredns:v1.12.1"), extra("old"))
	require.NoError(t, o.SyncManifests(t.Context()))
	assert.Equal(t, []string{
		"apply rbac.authorization.k8s.io/v1/clusterroles//system:coredns",
		"apply v1/configmaps/kube-system/coredns",
		"apply apps/v1/deployments/kube-system/coredns",
		"apply v1/serviceaccounts/kube-system/old",
	}, applies(s))
	cm := s.Object("v1", "ConfigMap", "kube-system", "coredns")
	assert.Equal(t, rollout.InventoryName, cm["metadata"].(map[string]any)["annotations"].(map[string]any)["config.k8s.io/owning-inventory"])
	assert.Equal(t, "talos", cm["metadata"].(map[string]any)["managedFields"].([]any)[0].(map[string]any)["manager"])
	assert.Equal(t, []string{
		"_system__coredns_rbac.authorization.k8s.io_ClusterRole",
		"kube-system_coredns__ConfigMap",
		"kube-system_coredns_apps_Deployment",
		"kube-system_old__ServiceAccount",
	}, s.InventoryKeys(rollout.InventoryNamespace, rollout.InventoryName))

	before := len(applies(s))
	c.SetManifests(coreDNS("registry.k8s.io/coredns/coredns:v1.12.4"))
	require.NoError(t, o.SyncManifests(t.Context()))
	assert.Equal(t, []string{
		"apply apps/v1/deployments/kube-system/coredns",
		"delete v1/serviceaccounts/kube-system/old",
	}, applies(s)[before:], "only the changed object written; the one no longer rendered pruned")
	assert.Equal(t, "registry.k8s.io/coredns/coredns:v1.12.4", image(s))
	assert.Len(t, s.InventoryKeys(rollout.InventoryNamespace, rollout.InventoryName), 3)
	assert.Contains(t, said, "  Deployment.apps kube-system/coredns configured")
	assert.Contains(t, said, "  ConfigMap kube-system/coredns unchanged")
	assert.Contains(t, said, "  ServiceAccount kube-system/old deleted (no longer rendered)")
}

// An object of another inventory is neither changed nor pruned; a control
// plane that renders nothing is refused, so that nothing is pruned.
func TestSyncManifestsRefusals(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(1, 0, "v1.12.0", 10*time.Millisecond)...)
	s := kubeapitest.Start(t)
	o := ops(t, c)
	o.Kube = kubeOf(t, s)

	c.SetManifests()
	err := o.SyncManifests(t.Context())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unable to read the bootstrap manifests from a control plane: control plane 10.5.0.11 renders no bootstrap manifests")

	k, err := o.Kube(t.Context(), "")
	require.NoError(t, err)
	_, err = k.ApplyObject(t.Context(), map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "coredns", "namespace": "kube-system", "annotations": map[string]any{"config.k8s.io/owning-inventory": "flux"}}},
		kubeapi.ApplyOptions{FieldManager: "flux"})
	require.NoError(t, err)
	c.SetManifests(coreDNS("registry.k8s.io/coredns/coredns:v1.12.1"))
	err = o.SyncManifests(t.Context())
	require.ErrorIs(t, err, rollout.ErrInventory)
	assert.Contains(t, err.Error(), "unable to apply ConfigMap kube-system/coredns: it belongs to inventory flux")
}

// The wait for a changed workload to roll out reports what it waits for
// and stops at once when the run is cancelled.
func TestSyncManifestsWaitsForTheRollout(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(1, 0, "v1.12.0", 10*time.Millisecond)...)
	s := kubeapitest.Start(t)
	s.HoldRollouts(true)
	o := ops(t, c)
	o.Kube = kubeOf(t, s)
	o.Timing.Healthy, o.Timing.ProgressEvery = time.Minute, 20*time.Millisecond
	reports := make(chan string, 100)
	o.Status = func(m string) {
		select {
		case reports <- m:
		default:
		}
	}
	c.SetManifests(coreDNS("registry.k8s.io/coredns/coredns:v1.12.1"))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- o.SyncManifests(ctx) }()
	var r string
	select {
	case r = <-reports:
	case <-time.After(10 * time.Second):
		t.Fatal("no progress report")
	}
	assert.True(t, strings.HasPrefix(r, "waiting for Deployment kube-system/coredns to roll out"), r)
	assert.Contains(t, r, "last seen: its controller has not seen the new spec yet")
	cancel()
	select {
	case err := <-done:
		require.Error(t, err)
		assert.Contains(t, err.Error(), "cancel")
	case <-time.After(2 * time.Second):
		t.Fatal("the wait did not stop on cancel")
	}
}
