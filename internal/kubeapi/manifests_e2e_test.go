//go:build e2e

package kubeapi_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/kubeapi"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest/realapiserver"
	"github.com/fluodata/talos-pulumi/internal/testkit/pkitest"
)

// applyView is what the manifest sync reads of an applied object, the same
// on both servers: its ID, annotations and data, its managers, whether the
// apply wrote it (a new resourceVersion) and whether it rolled out.
type applyView struct {
	ID          kubeapi.ObjectID
	Annotations any
	Data        any
	Managers    []string
	Written     bool
	Rolled      bool
}

func viewOf(obj map[string]any, before string) applyView {
	meta, _ := obj["metadata"].(map[string]any)
	v := applyView{ID: kubeapi.IDOf(obj), Annotations: meta["annotations"], Data: obj["data"], Written: meta["resourceVersion"] != before}
	mf, _ := meta["managedFields"].([]any)
	for _, f := range mf {
		f := f.(map[string]any)
		v.Managers = append(v.Managers, f["manager"].(string)+" "+f["operation"].(string))
	}
	slices.Sort(v.Managers)
	v.Rolled, _ = kubeapi.Rollout(obj)
	return v
}

func resourceVersion(obj map[string]any) string {
	meta, _ := obj["metadata"].(map[string]any)
	s, _ := meta["resourceVersion"].(string)
	return s
}

// The calls of the bootstrap-manifest sync answer the same from the fake
// as from the real kube-apiserver: the inventory ConfigMap created, read
// and written; server-side applies with Talos's field manager, forced,
// that write only a change; discovery of kinds and groups; gets and
// deletes. A Deployment does not roll out on the real server (no
// controller runs): the fake plays its controller unless held.
func TestTheFakeAppliesManifestsAsTheRealAPIServer(t *testing.T) {
	ctx := t.Context()
	start := time.Now()
	k8sCA := pkitest.TalosBundle(t).Certs.K8s
	apiserver := realapiserver.Start(ctx, t, realapiserver.CA{Cert: k8sCA.Crt, Key: k8sCA.Key})
	t.Logf("kube-apiserver ready after %s", time.Since(start).Round(time.Millisecond))
	fake := kubeapitest.Start(t)
	fake.HoldRollouts(true)
	servers := []struct {
		name string
		s    scene
	}{{"kube-apiserver", apiserver}, {"kubeapitest", fake}}
	clients := make([]*kubeapi.Client, len(servers))
	for i, srv := range servers {
		c, err := kubeapi.New(srv.s.Kubeconfig(), kubeapi.WithTimeout(10*time.Second))
		require.NoError(t, err)
		t.Cleanup(c.Close)
		clients[i] = c
	}
	ask := func(what string, call func(c *kubeapi.Client) (any, error)) answer {
		t.Helper()
		var answers []answer
		for i, srv := range servers {
			v, err := call(clients[i])
			a := answerOf(srv.s.URL(), v, err)
			if a.API != nil {
				a.API = &kubeapi.APIError{Code: a.API.Code, Reason: a.API.Reason}
				a.Err = "" // the messages of a 404 differ by the handler: the code and reason are what the sync reads
			}
			answers = append(answers, a)
		}
		assert.Equal(t, answers[0], answers[1], "%s: kubeapitest (actual) answers otherwise than %s (expected)", what, servers[0].name)
		return answers[0]
	}
	const invNS, invName = "kube-system", "talos-bootstrap-manifests-inventory"
	talos := kubeapi.ApplyOptions{FieldManager: "talos", Force: true}
	owned := map[string]any{"config.k8s.io/owning-inventory": invName}
	cm := func(corefile string) map[string]any {
		return map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "coredns", "namespace": "kube-system", "annotations": owned},
			"data":     map[string]any{"Corefile": corefile},
		}
	}
	cr := map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
		"metadata": map[string]any{"name": "system:coredns", "annotations": owned},
		"rules":    []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"endpoints"}, "verbs": []any{"list", "watch"}}},
	}
	deploy := func(image string) map[string]any {
		labels := map[string]any{"k8s-app": "kube-dns"}
		return map[string]any{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": "coredns", "namespace": "kube-system", "annotations": owned},
			"spec": map[string]any{
				"replicas": 2, "selector": map[string]any{"matchLabels": labels},
				"template": map[string]any{
					"metadata": map[string]any{"labels": labels},
					"spec":     map[string]any{"containers": []any{map[string]any{"name": "coredns", "image": image}}},
				},
			},
		}
	}

	// The inventory: created empty, then written and read back.
	got := ask("Inventory (new)", func(c *kubeapi.Client) (any, error) { return c.Inventory(ctx, invNS, invName) })
	assert.Empty(t, got.Value)
	ask("Inventory (again)", func(c *kubeapi.Client) (any, error) { return c.Inventory(ctx, invNS, invName) })

	// Applies: created, the same again (nothing written), changed; a
	// cluster-scoped object whose name has a colon; a Deployment.
	apply := func(what string, obj map[string]any) answer {
		t.Helper()
		return ask(what, func(c *kubeapi.Client) (any, error) {
			before := ""
			id := kubeapi.IDOf(obj)
			if cur, err := c.GetObject(ctx, obj["apiVersion"].(string), id.Kind, id.Namespace, id.Name); err == nil {
				before = resourceVersion(cur)
			}
			out, err := c.ApplyObject(ctx, obj, talos)
			if err != nil {
				return nil, err
			}
			return viewOf(out, before), nil
		})
	}
	got = apply("apply ConfigMap (create)", cm(".:53 {\n}\n"))
	require.Empty(t, got.Err)
	assert.Equal(t, []string{"talos Apply"}, got.Value.(applyView).Managers)
	assert.True(t, got.Value.(applyView).Written)
	got = apply("apply ConfigMap (same)", cm(".:53 {\n}\n"))
	assert.False(t, got.Value.(applyView).Written, "a no-op apply writes nothing")
	got = apply("apply ConfigMap (changed)", cm(".:53 {\n  errors\n}\n"))
	assert.True(t, got.Value.(applyView).Written)
	apply("apply ClusterRole", cr)
	got = apply("apply Deployment", deploy("registry.k8s.io/coredns/coredns:v1.12.1"))
	assert.False(t, got.Value.(applyView).Rolled, "no controller rolled it out")
	apply("apply Deployment (new image)", deploy("registry.k8s.io/coredns/coredns:v1.12.4"))
	ask("dry-run apply", func(c *kubeapi.Client) (any, error) {
		out, err := c.ApplyObject(ctx, deploy("registry.k8s.io/coredns/coredns:v1.13.0"), kubeapi.ApplyOptions{FieldManager: "talos", Force: true, DryRun: true})
		if err != nil {
			return nil, err
		}
		cur, err := c.GetObject(ctx, "apps/v1", "Deployment", "kube-system", "coredns")
		return []bool{resourceVersion(out) == resourceVersion(cur)}, err
	})

	// Unknown kinds and groups.
	for _, obj := range []map[string]any{
		{"apiVersion": "v1", "kind": "Frobnicator", "metadata": map[string]any{"name": "x"}},
		{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "x"}},
	} {
		got = ask("apply "+obj["kind"].(string), func(c *kubeapi.Client) (any, error) { return c.ApplyObject(ctx, obj, talos) })
		assert.True(t, got.NotFound)
	}
	ask("PreferredVersion rbac", func(c *kubeapi.Client) (any, error) { return c.PreferredVersion(ctx, "rbac.authorization.k8s.io") })
	ask("PreferredVersion apps", func(c *kubeapi.Client) (any, error) { return c.PreferredVersion(ctx, "apps") })
	ask("PreferredVersion unknown", func(c *kubeapi.Client) (any, error) { return c.PreferredVersion(ctx, "example.com") })

	// Get and delete.
	ask("GetObject missing", func(c *kubeapi.Client) (any, error) {
		return c.GetObject(ctx, "v1", "ConfigMap", "kube-system", "nothing")
	})
	ask("DeleteObject", func(c *kubeapi.Client) (any, error) {
		return nil, c.DeleteObject(ctx, "rbac.authorization.k8s.io/v1", "ClusterRole", "", "system:coredns")
	})
	ask("DeleteObject (gone)", func(c *kubeapi.Client) (any, error) {
		return nil, c.DeleteObject(ctx, "rbac.authorization.k8s.io/v1", "ClusterRole", "", "system:coredns")
	})
	got = ask("GetObject deleted", func(c *kubeapi.Client) (any, error) {
		return c.GetObject(ctx, "rbac.authorization.k8s.io/v1", "ClusterRole", "", "system:coredns")
	})
	assert.True(t, got.NotFound)

	// The inventory written with cli-utils's keys, read back.
	keys := []string{
		kubeapi.ObjectID{Kind: "ConfigMap", Namespace: "kube-system", Name: "coredns"}.String(),
		kubeapi.ObjectID{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:coredns"}.String(),
	}
	assert.Equal(t, "_system__coredns_rbac.authorization.k8s.io_ClusterRole", keys[1])
	ask("WriteInventory", func(c *kubeapi.Client) (any, error) { return nil, c.WriteInventory(ctx, invNS, invName, keys) })
	got = ask("Inventory (written)", func(c *kubeapi.Client) (any, error) { return c.Inventory(ctx, invNS, invName) })
	assert.Equal(t, slices.Sorted(slices.Values(keys)), got.Value)
	for _, k := range keys {
		id, err := kubeapi.ParseObjectID(k)
		require.NoError(t, err)
		assert.Equal(t, k, id.String())
	}
}
