package kubeapi_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/kubeapi"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest"
)

// Drains poll every few milliseconds; pods terminate in tens of them.
const (
	poll      = 2 * time.Millisecond
	terminate = 20 * time.Millisecond
)

// drainCluster is a fake with a control plane and two workers, each
// running a DaemonSet's pod and a static pod.
func drainCluster(t *testing.T) *kubeapitest.Server {
	t.Helper()
	s := kubeapitest.Start(t)
	for _, n := range []string{"cp-1", "worker-1", "worker-2"} {
		s.AddNode(kubeapitest.NodeSpec{Name: n})
		s.AddPod(kubeapitest.PodSpec{Namespace: "kube-system", Name: "cilium-" + n, Node: n, OwnerKind: "DaemonSet"})
		s.AddPod(kubeapitest.PodSpec{Namespace: "kube-system", Name: "static-" + n, Node: n, Mirror: true})
	}
	return s
}

func TestDrainEvictsOnlyMovablePods(t *testing.T) {
	t.Parallel()
	s := drainCluster(t)
	s.AddPod(kubeapitest.PodSpec{Name: "web-a", Node: "worker-1", OwnerKind: "ReplicaSet", TerminationDelay: terminate})
	s.AddPod(kubeapitest.PodSpec{Name: "bare", Node: "worker-1"})
	s.AddPod(kubeapitest.PodSpec{Namespace: "db", Name: "pg-0", Node: "worker-1", OwnerKind: "StatefulSet", TerminationDelay: terminate, Recreate: true})
	s.AddPod(kubeapitest.PodSpec{Name: "job-done", Node: "worker-1", OwnerKind: "Job", Phase: "Succeeded"})
	s.AddPod(kubeapitest.PodSpec{Name: "job-failed", Node: "worker-1", OwnerKind: "Job", Phase: "Failed"})
	s.AddPod(kubeapitest.PodSpec{Name: "web-b", Node: "worker-2", OwnerKind: "ReplicaSet"})

	start := time.Now()
	require.NoError(t, newClient(t, s).Drain(ctxT(t), "worker-1", kubeapi.DrainOptions{Timeout: 5 * time.Second, Poll: poll}))
	assert.GreaterOrEqual(t, time.Since(start), terminate, "Drain waits for the terminating pods")

	n, _ := s.Node("worker-1")
	assert.True(t, n.Unschedulable)
	assert.Equal(t, []string{
		"cordon worker-1 200",
		"evict db/pg-0 201",
		"evict default/bare 201",
		"evict default/web-a 201",
	}, events(s), "the cordon first, then the evictions; no DaemonSet, mirror or finished pod")
	assert.Equal(t, []string{
		"db/pg-0", // its replacement, with another UID, not scheduled yet
		"default/job-done", "default/job-failed", "default/web-b",
		"kube-system/cilium-cp-1", "kube-system/cilium-worker-1", "kube-system/cilium-worker-2",
		"kube-system/static-cp-1", "kube-system/static-worker-1", "kube-system/static-worker-2",
	}, s.Pods())
}

func TestDrainOfAnEmptyNode(t *testing.T) {
	t.Parallel()
	s := drainCluster(t)
	require.NoError(t, newClient(t, s).Drain(ctxT(t), "worker-2", kubeapi.DrainOptions{Poll: poll}))
	assert.Equal(t, []string{"cordon worker-2 200"}, events(s))

	err := newClient(t, s).Drain(ctxT(t), "worker-9", kubeapi.DrainOptions{Poll: poll})
	require.ErrorIs(t, err, kubeapi.ErrNotFound)
	assert.ErrorContains(t, err, `unable to drain node "worker-9": unable to cordon node "worker-9": `)
}

func TestDrainRetriesWhileABudgetBlocks(t *testing.T) {
	t.Parallel()
	s := drainCluster(t)
	s.AddPod(kubeapitest.PodSpec{Name: "web-a", Node: "worker-1", OwnerKind: "ReplicaSet", PDBBlocks: 2})
	s.AddPod(kubeapitest.PodSpec{Name: "web-b", Node: "worker-1", OwnerKind: "ReplicaSet", TerminationDelay: terminate})
	require.NoError(t, newClient(t, s).Drain(ctxT(t), "worker-1", kubeapi.DrainOptions{Timeout: 5 * time.Second, Poll: poll}))

	evictions := slices.DeleteFunc(events(s), func(e string) bool { return !strings.HasPrefix(e, "evict default/web-a") })
	assert.Equal(t, []string{"evict default/web-a 429", "evict default/web-a 429", "evict default/web-a 201"}, evictions)
	assert.NotContains(t, s.Pods(), "default/web-a")
	assert.NotContains(t, s.Pods(), "default/web-b")
}

func TestDrainTimesOutNamingThePodsThatStay(t *testing.T) {
	t.Parallel()
	s := drainCluster(t)
	s.AddPod(kubeapitest.PodSpec{Namespace: "db", Name: "pg-0", Node: "worker-1", OwnerKind: "StatefulSet", PDBBlocks: kubeapitest.Forever})
	s.AddPod(kubeapitest.PodSpec{Name: "slow", Node: "worker-1", OwnerKind: "ReplicaSet", TerminationDelay: time.Hour})
	s.AddPod(kubeapitest.PodSpec{Name: "quick", Node: "worker-1", OwnerKind: "ReplicaSet"})

	timeout := 100 * time.Millisecond
	start := time.Now()
	err := newClient(t, s).Drain(ctxT(t), "worker-1", kubeapi.DrainOptions{Timeout: timeout, Poll: poll})
	took := time.Since(start)
	require.ErrorIs(t, err, kubeapi.ErrDrainTimeout)
	assert.Equal(t, `unable to drain node "worker-1": drain timed out after 100ms, 2 pod(s) did not move: `+
		`db/pg-0 (blocked by a PodDisruptionBudget: Cannot evict pod as it would violate the pod's disruption budget. `+
		`The disruption budget pg-0-pdb needs 1 healthy pods and has 1 currently), `+
		`default/slow (still terminating)`, err.Error())
	assert.GreaterOrEqual(t, took, timeout)
	assert.Less(t, took, timeout+time.Second)

	n, _ := s.Node("worker-1")
	assert.True(t, n.Unschedulable, "the node stays cordoned")
	assert.NotContains(t, s.Pods(), "default/quick")
	assert.Contains(t, s.Pods(), "db/pg-0")
	assert.Contains(t, s.Pods(), "default/slow")
	ev := events(s)
	assert.Greater(t, slices.Index(ev, "evict db/pg-0 429"), 0)
	assert.Equal(t, 1, count(ev, "evict default/slow 201"), "an evicted pod is evicted once")
}

func TestDrainStopsOnARefusal(t *testing.T) {
	t.Parallel()
	s := drainCluster(t)
	s.AddPod(kubeapitest.PodSpec{Name: "web-a", Node: "worker-1", OwnerKind: "ReplicaSet"})
	c, err := kubeapi.New(s.KubeconfigFor("viewer", "developers"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	err = c.Drain(ctxT(t), "worker-1", kubeapi.DrainOptions{Timeout: time.Minute, Poll: poll})
	require.ErrorIs(t, err, kubeapi.ErrUnauthorized)
	assert.NotErrorIs(t, err, kubeapi.ErrDrainTimeout)
}

func TestDrainCanceled(t *testing.T) {
	t.Parallel()
	s := drainCluster(t)
	s.AddPod(kubeapitest.PodSpec{Name: "web-a", Node: "worker-1", OwnerKind: "ReplicaSet", PDBBlocks: kubeapitest.Forever})
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	err := newClient(t, s).Drain(ctx, "worker-1", kubeapi.DrainOptions{Timeout: time.Minute, Poll: poll})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NotErrorIs(t, err, kubeapi.ErrDrainTimeout, "the caller's deadline is not the drain's")
	assert.ErrorContains(t, err, `unable to drain node "worker-1": `)
}

func count(list []string, s string) int {
	n := 0
	for _, e := range list {
		if e == s {
			n++
		}
	}
	return n
}
