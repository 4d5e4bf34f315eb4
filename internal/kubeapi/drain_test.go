package kubeapi_test

import (
	"context"
	"slices"
	"strings"
	"sync"
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

// A drain that waits says, at least every ProgressEvery, which pods are
// left and why (issue 23, item 14).
func TestDrainReportsProgress(t *testing.T) {
	t.Parallel()
	s := drainCluster(t)
	s.AddPod(kubeapitest.PodSpec{Name: "web-a", Node: "worker-1", OwnerKind: "ReplicaSet", PDBBlocks: kubeapitest.Forever})
	const every, timeout = 100 * time.Millisecond, time.Second
	var mu sync.Mutex
	var at []time.Duration
	var msgs []string
	c := newClient(t, s)
	start := time.Now()
	err := c.Drain(ctxT(t), "worker-1", kubeapi.DrainOptions{Timeout: timeout, Poll: poll, ProgressEvery: every,
		Progress: func(m string) {
			mu.Lock()
			defer mu.Unlock()
			at, msgs = append(at, time.Since(start)), append(msgs, m)
		}})
	end := time.Since(start)
	require.ErrorIs(t, err, kubeapi.ErrDrainTimeout)
	mu.Lock()
	defer mu.Unlock()
	longest, prev := time.Duration(0), time.Duration(0)
	for _, a := range append(at, end) {
		longest, prev = max(longest, a-prev), a
	}
	t.Logf("%d reports in %s, longest silence %s", len(msgs), end.Round(time.Millisecond), longest.Round(time.Millisecond))
	assert.GreaterOrEqual(t, len(msgs), int(timeout/every)/2)
	// Loose: a ticker's report comes late, or not at all, while a loaded
	// machine (two shared slow cores, the race detector) does not run its
	// goroutine; before, the whole drain was silent.
	assert.LessOrEqual(t, longest, timeout/2)
	for _, m := range msgs {
		assert.True(t, strings.HasPrefix(m, `waiting for the pods of node "worker-1" to be evicted (`), m)
		// Before the pods are listed, the drain knows of none.
		if !strings.Contains(m, "): last seen: no answer yet") {
			assert.Contains(t, m, "): last seen: 1 pod(s) left: default/web-a (blocked by a PodDisruptionBudget: ")
		}
	}
}

// A cancelled run ends the drain within a poll interval; the error says so
// and names the pods left.
func TestDrainStopsWhenTheRunIsCancelled(t *testing.T) {
	t.Parallel()
	s := drainCluster(t)
	s.AddPod(kubeapitest.PodSpec{Name: "web-a", Node: "worker-1", OwnerKind: "ReplicaSet", PDBBlocks: kubeapitest.Forever})
	const slowPoll = 300 * time.Millisecond
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var mu sync.Mutex
	var cancelled time.Time
	// Cancelled once the drain says it waits for the pod.
	stop := func() {
		mu.Lock()
		defer mu.Unlock()
		if cancelled.IsZero() {
			cancelled = time.Now()
			cancel()
		}
	}
	report := func(m string) {
		if strings.Contains(m, "default/web-a (blocked by") {
			stop()
		}
	}
	time.AfterFunc(2*time.Second, stop) // a drain that never reports
	err := newClient(t, s).Drain(ctx, "worker-1", kubeapi.DrainOptions{Timeout: time.Minute, Poll: slowPoll, Progress: report, ProgressEvery: 10 * time.Millisecond})
	returned := time.Now()
	mu.Lock()
	defer mu.Unlock()
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, kubeapi.ErrDrainTimeout)
	assert.Less(t, returned.Sub(cancelled), slowPoll, "within a poll interval")
	assert.Contains(t, err.Error(), `unable to drain node "worker-1": the run was cancelled after `)
	assert.Contains(t, err.Error(), "1 pod(s) had not moved: default/web-a (blocked by a PodDisruptionBudget: ")
}

// The pods evicted from a node whose kubelet is gone stay terminating: no
// kubelet confirms their end. A drain that waits for them times out; with
// SkipWaitForDelete it evicts them and does not wait (issue 23, item 4).
func TestDrainOfANodeWhoseKubeletIsGone(t *testing.T) {
	t.Parallel()
	s := drainCluster(t)
	s.AddPod(kubeapitest.PodSpec{Name: "web-a", Node: "worker-1", OwnerKind: "ReplicaSet", TerminationDelay: terminate})
	s.AddPod(kubeapitest.PodSpec{Namespace: "db", Name: "pg-0", Node: "worker-1", OwnerKind: "StatefulSet", PDBBlocks: kubeapitest.Forever})
	s.SetNodeReady("worker-1", false)

	err := newClient(t, s).Drain(ctxT(t), "worker-1", kubeapi.DrainOptions{Timeout: 200 * time.Millisecond, Poll: poll})
	require.ErrorIs(t, err, kubeapi.ErrDrainTimeout)
	assert.Contains(t, err.Error(), "default/web-a (still terminating)")

	// The eviction the timeout cut short may still reach the server and be
	// logged after Drain returned: the drain below is read from its cordon.
	s.Settle()

	start := time.Now()
	res, err := newClient(t, s).DrainWithResult(ctxT(t), "worker-1", kubeapi.DrainOptions{Timeout: 5 * time.Second, Poll: poll, SkipWaitForDelete: true})
	require.NoError(t, err)
	assert.Less(t, time.Since(start), time.Second, "no wait")
	assert.Equal(t, []string{
		"db/pg-0 (not evicted: blocked by a PodDisruptionBudget: Cannot evict pod as it would violate the pod's disruption budget. " +
			"The disruption budget pg-0-pdb needs 1 healthy pods and has 1 currently)",
		"default/web-a (evicted, still terminating)",
	}, res.Skipped)
	assert.Contains(t, s.Pods(), "default/web-a", "still terminating")
	log := events(s)
	second := 0
	for i, e := range log {
		if e == "cordon worker-1 200" {
			second = i
		}
	}
	assert.Equal(t, []string{"cordon worker-1 200", "evict db/pg-0 429", "evict default/web-a 201"}, log[second:],
		"each eviction asked once, a refused one too")

	// Once the Node is gone, the pod garbage collector deletes its pods.
	require.NoError(t, newClient(t, s).DeleteNode(ctxT(t), "worker-1"))
	assert.NotContains(t, s.Pods(), "default/web-a")
	assert.NotContains(t, s.Pods(), "db/pg-0")
}
