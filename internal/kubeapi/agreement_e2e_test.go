//go:build e2e

package kubeapi_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/kubeapi"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest/realapiserver"
	"github.com/fluodata/talos-pulumi/internal/testkit/pkitest"
)

// scene is what a test sets up in an API server: kubeapitest's fake and
// realapiserver's real kube-apiserver take the same descriptions.
type scene interface {
	AddNode(kubeapitest.NodeSpec)
	SetNodeReady(name string, ready bool)
	AddPod(kubeapitest.PodSpec)
	SetPersistentVolumes(...kubeapitest.PersistentVolume)
	AddObject(r kubeapi.APIResource, namespace, name string)
	URL() string
	CA() []byte
	Kubeconfig() []byte
	KubeconfigFor(user string, groups ...string) []byte
}

var (
	_ scene = (*kubeapitest.Server)(nil)
	_ scene = (*realapiserver.Server)(nil)
)

// answer is what a call of the client gave, comparable between servers:
// its value, or its error with what a caller may read of it (errors.Is,
// the *APIError's fields), the server's address taken out.
type answer struct {
	Value any
	Err   string
	// NotFound, Unauthorized and DrainTimeout are errors.Is of the
	// package's sentinels.
	NotFound, Unauthorized, DrainTimeout bool
	API                                  *kubeapi.APIError
}

func answerOf(server string, v any, err error) answer {
	if err == nil {
		return answer{Value: v}
	}
	a := answer{
		Err:          strings.ReplaceAll(err.Error(), server, "<server>"),
		NotFound:     errors.Is(err, kubeapi.ErrNotFound),
		Unauthorized: errors.Is(err, kubeapi.ErrUnauthorized),
		DrainTimeout: errors.Is(err, kubeapi.ErrDrainTimeout),
	}
	_ = errors.As(err, &a.API)
	return a
}

// pinnedVersion is the Kubernetes version tools/kube-apiserver/go.mod pins,
// which `make kube-apiserver` stamps into the binary.
func pinnedVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "tools", "kube-apiserver", "go.mod"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^(?:require)?\s*k8s\.io/kubernetes (v\S+)`).FindSubmatch(b)
	require.NotNil(t, m, "tools/kube-apiserver/go.mod requires no k8s.io/kubernetes")
	return string(m[1])
}

// The fake answers every call of this package as the real kube-apiserver
// does, set up as Talos sets it up, for the same objects: the client's
// own rule for its fake (written from the real one's source, and a test
// against the real one says it agrees). Each step runs the same calls on
// both servers and compares what the client returns: values, errors and
// the API's status (code, reason, message, causes).
func TestTheFakeAnswersAsTheRealAPIServer(t *testing.T) {
	ctx := t.Context()
	start := time.Now()
	// The cluster's Kubernetes CA as Talos makes it, so that the real
	// server takes what a Talos secrets bundle holds.
	k8sCA := pkitest.TalosBundle(t).Certs.K8s
	apiserver := realapiserver.Start(ctx, t, realapiserver.CA{Cert: k8sCA.Crt, Key: k8sCA.Key})
	t.Logf("kube-apiserver ready at %s after %s", apiserver.URL(), time.Since(start).Round(time.Millisecond))
	fake := kubeapitest.Start(t)
	version := pinnedVersion(t)
	fake.SetVersion(version)
	servers := []struct {
		name string
		s    scene
	}{{"kube-apiserver " + version, apiserver}, {"kubeapitest", fake}}

	// each does the same to both servers.
	each := func(f func(s scene)) {
		for _, srv := range servers {
			f(srv.s)
		}
	}
	// ask makes the same call with a client of kubeconfig(server) on both
	// and asserts the same answer.
	ask := func(what string, kubeconfig func(scene) []byte, call func(c *kubeapi.Client) (any, error)) answer {
		t.Helper()
		var answers []answer
		for _, srv := range servers {
			c, err := kubeapi.New(kubeconfig(srv.s), kubeapi.WithTimeout(10*time.Second))
			require.NoError(t, err)
			v, err := call(c)
			c.Close()
			answers = append(answers, answerOf(srv.s.URL(), v, err))
		}
		assert.Equal(t, answers[0], answers[1], "%s: kubeapitest (actual) answers otherwise than %s (expected)", what, servers[0].name)
		return answers[0]
	}
	admin := func(s scene) []byte { return s.Kubeconfig() }

	// The version: the one pinned, stamped into the binary by the Makefile.
	got := ask("ServerVersion", admin, func(c *kubeapi.Client) (any, error) { return c.ServerVersion(ctx) })
	assert.Equal(t, version, got.Value, "the real server's version")

	// Readiness.
	ask("Readyz", admin, func(c *kubeapi.Client) (any, error) { return nil, c.Readyz(ctx) })
	ask("WaitReady", admin, func(c *kubeapi.Client) (any, error) {
		return nil, c.WaitReady(ctx, 3, kubeapi.Wait{Interval: 10 * time.Millisecond, Timeout: 10 * time.Second})
	})

	// Nodes, added out of order: listed by name.
	each(func(s scene) {
		s.AddNode(kubeapitest.NodeSpec{Name: "worker-2", InternalIP: "10.5.0.22", KubeletVersion: "v1.34.1", NotReady: true})
		s.AddNode(kubeapitest.NodeSpec{Name: "cp-1", InternalIP: "10.5.0.11", KubeletVersion: version})
		s.AddNode(kubeapitest.NodeSpec{Name: "worker-1", Unschedulable: true})
	})
	got = ask("Nodes", admin, func(c *kubeapi.Client) (any, error) { return c.Nodes(ctx) })
	assert.Len(t, got.Value, 3)
	ask("WaitNodesReady 2", admin, func(c *kubeapi.Client) (any, error) {
		return nil, c.WaitNodesReady(ctx, 2, kubeapi.Wait{Interval: 10 * time.Millisecond, Timeout: 10 * time.Second})
	})
	got = ask("WaitNodesReady 3", admin, func(c *kubeapi.Client) (any, error) {
		return nil, c.WaitNodesReady(ctx, 3, kubeapi.Wait{Interval: 10 * time.Millisecond, Timeout: 300 * time.Millisecond})
	})
	assert.Contains(t, got.Err, "not Ready: worker-2")

	// Cordons: twice is fine, a missing node is not found.
	ask("Cordon", admin, func(c *kubeapi.Client) (any, error) { return nil, c.Cordon(ctx, "worker-2") })
	ask("Cordon again", admin, func(c *kubeapi.Client) (any, error) { return nil, c.Cordon(ctx, "worker-2") })
	got = ask("Cordon of a missing node", admin, func(c *kubeapi.Client) (any, error) { return nil, c.Cordon(ctx, "worker-9") })
	assert.True(t, got.NotFound, got.Err)
	ask("Nodes after the cordon", admin, func(c *kubeapi.Client) (any, error) { return c.Nodes(ctx) })

	// Taints: another owner's kept (a NoExecute one whole), a key of want
	// replaced in place, a dropped key gone, nothing written when they are
	// so already, all of them removed, a missing node not found.
	each(func(s scene) {
		s.AddNode(kubeapitest.NodeSpec{Name: "worker-5", Taints: []kubeapi.Taint{
			{Key: "example.com/other", Effect: "NoExecute"},
			{Key: "example.com/pool", Value: "old", Effect: "NoSchedule"},
			{Key: "example.com/gone", Effect: "PreferNoSchedule"},
		}})
	})
	want := []kubeapi.Taint{{Key: "example.com/pool", Value: "gpu", Effect: "NoSchedule"}, {Key: "example.com/new", Effect: "NoExecute"}}
	ask("SetTaints", admin, func(c *kubeapi.Client) (any, error) {
		return nil, c.SetTaints(ctx, "worker-5", want, []string{"example.com/gone"})
	})
	ask("SetTaints again", admin, func(c *kubeapi.Client) (any, error) {
		return nil, c.SetTaints(ctx, "worker-5", want, []string{"example.com/gone"})
	})
	got = ask("Nodes after SetTaints", admin, func(c *kubeapi.Client) (any, error) { return taintsOf(ctx, c, "worker-5") })
	assert.Equal(t, []kubeapi.Taint{{Key: "example.com/other", Effect: "NoExecute"}, want[0], kubeapitest.NotReadyTaint, want[1]}, got.Value,
		"the API server adds the not-ready taint to a Node it creates")
	ask("SetTaints removing all", admin, func(c *kubeapi.Client) (any, error) {
		return nil, c.SetTaints(ctx, "worker-5", nil, []string{"example.com/other", "example.com/pool", "example.com/new", kubeapitest.NotReadyTaint.Key})
	})
	got = ask("Nodes after removing all", admin, func(c *kubeapi.Client) (any, error) { return taintsOf(ctx, c, "worker-5") })
	assert.Empty(t, got.Value)
	got = ask("SetTaints of a missing node", admin, func(c *kubeapi.Client) (any, error) { return nil, c.SetTaints(ctx, "worker-9", want, nil) })
	assert.True(t, got.NotFound, got.Err)

	// Static pods: the mirror pods of the node, not its other pods, nor
	// another node's.
	each(func(s scene) {
		s.AddPod(kubeapitest.PodSpec{Namespace: "kube-system", Name: "kube-apiserver-cp-1", Node: "cp-1", Mirror: true, Image: "registry.k8s.io/kube-apiserver:" + version})
		s.AddPod(kubeapitest.PodSpec{Namespace: "kube-system", Name: "kube-scheduler-cp-1", Node: "cp-1", Mirror: true, NotReady: true})
		s.AddPod(kubeapitest.PodSpec{Namespace: "kube-system", Name: "cilium-abc", Node: "cp-1", OwnerKind: "DaemonSet"})
		s.AddPod(kubeapitest.PodSpec{Namespace: "kube-system", Name: "kube-apiserver-cp-2", Node: "cp-2", Mirror: true})
		s.AddPod(kubeapitest.PodSpec{Name: "web-z", Node: "cp-1", OwnerKind: "ReplicaSet"})
	})
	got = ask("StaticPods", admin, func(c *kubeapi.Client) (any, error) { return c.StaticPods(ctx, "cp-1") })
	assert.Len(t, got.Value, 2)
	ask("StaticPods of a node without any", admin, func(c *kubeapi.Client) (any, error) { return c.StaticPods(ctx, "nobody") })

	// Persistent volumes, given out of order: bound, released, available,
	// one whose phase no controller wrote yet, one that is no CSI volume.
	each(func(s scene) {
		s.SetPersistentVolumes(
			kubeapitest.PersistentVolume{Name: "pvc-b", Phase: "Bound", Driver: "csi.proxmox.sinextra.dev", VolumeHandle: "pve/pve-1/local-zfs/vm-9999-pvc-b", Claim: "db/data-db-0"},
			kubeapitest.PersistentVolume{Name: "pvc-a", Phase: "Released", Driver: "csi.proxmox.sinextra.dev", VolumeHandle: "pve/pve-1/local-zfs/vm-9999-pvc-a", Claim: "db/data-db-1"},
			kubeapitest.PersistentVolume{Name: "pvc-c", Phase: "Available", Driver: "csi.proxmox.sinextra.dev", VolumeHandle: "pve/pve-1/local-zfs/vm-9999-pvc-c"},
			kubeapitest.PersistentVolume{Name: "pvc-d", Driver: "csi.proxmox.sinextra.dev", VolumeHandle: "pve/pve-1/local-zfs/vm-9999-pvc-d"},
			kubeapitest.PersistentVolume{Name: "local-1", Phase: "Available"},
		)
	})
	ask("PersistentVolumes", admin, func(c *kubeapi.Client) (any, error) { return c.PersistentVolumes(ctx) })

	// A drain of a node whose kubelet is gone, not waiting: no kubelet
	// confirms a deletion there (none runs beside the real server), so
	// the evicted pods stay terminating; a budget refuses the eviction of
	// a healthy pod, not of one that is not Ready while the budget is met,
	// nor of one not Running yet.
	each(func(s scene) {
		s.AddNode(kubeapitest.NodeSpec{Name: "worker-3", NotReady: true})
		s.AddPod(kubeapitest.PodSpec{Name: "web-a", Node: "worker-3", OwnerKind: "ReplicaSet"})
		s.AddPod(kubeapitest.PodSpec{Namespace: "db", Name: "pg-0", Node: "worker-3", OwnerKind: "StatefulSet", PDBBlocks: kubeapitest.Forever})
		s.AddPod(kubeapitest.PodSpec{Name: "sick-0", Node: "worker-3", OwnerKind: "StatefulSet", PDBBlocks: kubeapitest.Forever, NotReady: true})
		s.AddPod(kubeapitest.PodSpec{Name: "pending-0", Node: "worker-3", OwnerKind: "StatefulSet", PDBBlocks: kubeapitest.Forever, Phase: "Pending", NotReady: true})
		s.AddPod(kubeapitest.PodSpec{Namespace: "kube-system", Name: "cilium-w3", Node: "worker-3", OwnerKind: "DaemonSet"})
		s.AddPod(kubeapitest.PodSpec{Namespace: "kube-system", Name: "static-worker-3", Node: "worker-3", Mirror: true})
		s.AddPod(kubeapitest.PodSpec{Name: "job-done", Node: "worker-3", OwnerKind: "Job", Phase: "Succeeded"})
	})
	got = ask("DrainWithResult SkipWaitForDelete", admin, func(c *kubeapi.Client) (any, error) {
		return c.DrainWithResult(ctx, "worker-3", kubeapi.DrainOptions{SkipWaitForDelete: true, Timeout: 10 * time.Second, Poll: 20 * time.Millisecond})
	})
	assert.NotEmpty(t, got.Value)

	// A drain that waits, of a node whose kubelet is gone: it times out
	// naming the pod still terminating and the one its budget holds.
	each(func(s scene) {
		s.AddNode(kubeapitest.NodeSpec{Name: "worker-4", NotReady: true})
		s.AddPod(kubeapitest.PodSpec{Name: "web-b", Node: "worker-4", OwnerKind: "ReplicaSet"})
		s.AddPod(kubeapitest.PodSpec{Name: "web-c", Node: "worker-4", OwnerKind: "ReplicaSet", PDBBlocks: kubeapitest.Forever})
	})
	got = ask("Drain until the timeout", admin, func(c *kubeapi.Client) (any, error) {
		return nil, c.Drain(ctx, "worker-4", kubeapi.DrainOptions{Timeout: time.Second, Poll: 50 * time.Millisecond})
	})
	assert.True(t, got.DrainTimeout, got.Err)
	ask("Drain of an empty node", admin, func(c *kubeapi.Client) (any, error) {
		return nil, c.Drain(ctx, "worker-1", kubeapi.DrainOptions{Timeout: 5 * time.Second, Poll: 20 * time.Millisecond})
	})
	ask("Drain of a missing node", admin, func(c *kubeapi.Client) (any, error) {
		return nil, c.Drain(ctx, "worker-9", kubeapi.DrainOptions{Timeout: 5 * time.Second, Poll: 20 * time.Millisecond})
	})
	ask("Nodes after the drains", admin, func(c *kubeapi.Client) (any, error) { return c.Nodes(ctx) })

	// Objects of a resource: listed across namespaces up to the limit;
	// a resource the server does not serve (one Kubernetes removed, as
	// 1.29 removed ClusterCIDR) is not found.
	widgets := kubeapi.APIResource("widgets.v1beta1.e2e.example.com")
	each(func(s scene) {
		s.AddObject(widgets, "team-b", "two")
		s.AddObject(widgets, "team-a", "one")
		s.AddObject(widgets, "team-a", "three")
	})
	got = ask("Objects", admin, func(c *kubeapi.Client) (any, error) { return c.Objects(ctx, widgets, 10) })
	assert.Equal(t, []kubeapi.ObjectRef{{Namespace: "team-a", Name: "one"}, {Namespace: "team-a", Name: "three"}, {Namespace: "team-b", Name: "two"}}, got.Value)
	ask("Objects up to a limit", admin, func(c *kubeapi.Client) (any, error) { return c.Objects(ctx, widgets, 2) })
	got = ask("Objects of a resource not served", admin, func(c *kubeapi.Client) (any, error) {
		return c.Objects(ctx, "clustercidrs.v1alpha1.networking.k8s.io", 10)
	})
	assert.True(t, got.NotFound, got.Err)

	// A user outside system:masters, bound to no role: RBAC lets it read
	// the version and readiness, nothing else.
	viewer := func(s scene) []byte { return s.KubeconfigFor("viewer", "developers") }
	ask("ServerVersion as a viewer", viewer, func(c *kubeapi.Client) (any, error) { return c.ServerVersion(ctx) })
	ask("Readyz as a viewer", viewer, func(c *kubeapi.Client) (any, error) { return nil, c.Readyz(ctx) })
	got = ask("Nodes as a viewer", viewer, func(c *kubeapi.Client) (any, error) { return c.Nodes(ctx) })
	assert.True(t, got.Unauthorized, got.Err)
	ask("SetTaints as a viewer", viewer, func(c *kubeapi.Client) (any, error) { return nil, c.SetTaints(ctx, "worker-1", nil, []string{"x"}) })
	ask("Cordon as a viewer", viewer, func(c *kubeapi.Client) (any, error) { return nil, c.Cordon(ctx, "worker-1") })
	ask("DeleteNode as a viewer", viewer, func(c *kubeapi.Client) (any, error) { return nil, c.DeleteNode(ctx, "worker-1") })
	ask("StaticPods as a viewer", viewer, func(c *kubeapi.Client) (any, error) { return c.StaticPods(ctx, "cp-1") })
	ask("PersistentVolumes as a viewer", viewer, func(c *kubeapi.Client) (any, error) { return c.PersistentVolumes(ctx) })

	// A client certificate of another CA (a kubeconfig of the cluster
	// before its CA was rotated): refused as unauthenticated.
	otherCA := realapiserver.NewCA(t)
	cert, key := otherCA.ClientCert(t, "admin", "system:masters")
	stranger := func(s scene) []byte { return kubeapitest.Kubeconfig(s.URL(), s.CA(), cert, key) }
	got = ask("ServerVersion with another CA's certificate", stranger, func(c *kubeapi.Client) (any, error) { return c.ServerVersion(ctx) })
	assert.True(t, got.Unauthorized, got.Err)
	ask("Readyz with another CA's certificate", stranger, func(c *kubeapi.Client) (any, error) { return nil, c.Readyz(ctx) })
	ask("Nodes with another CA's certificate", stranger, func(c *kubeapi.Client) (any, error) { return c.Nodes(ctx) })
	ask("Cordon with another CA's certificate", stranger, func(c *kubeapi.Client) (any, error) { return nil, c.Cordon(ctx, "worker-1") })

	// Deletions: a node, again (already gone is success), a node never
	// there.
	ask("DeleteNode", admin, func(c *kubeapi.Client) (any, error) { return nil, c.DeleteNode(ctx, "worker-1") })
	ask("DeleteNode again", admin, func(c *kubeapi.Client) (any, error) { return nil, c.DeleteNode(ctx, "worker-1") })
	ask("DeleteNode of a missing node", admin, func(c *kubeapi.Client) (any, error) { return nil, c.DeleteNode(ctx, "worker-9") })
	got = ask("Nodes after the deletion", admin, func(c *kubeapi.Client) (any, error) { return c.Nodes(ctx) })
	assert.Len(t, got.Value, 5)
}

// taintsOf is the taints of the Node of that name, nil when it has none.
func taintsOf(ctx context.Context, c *kubeapi.Client, name string) ([]kubeapi.Taint, error) {
	nodes, err := c.Nodes(ctx)
	for _, n := range nodes {
		if n.Name == name {
			return n.Taints, err
		}
	}
	return nil, err
}
