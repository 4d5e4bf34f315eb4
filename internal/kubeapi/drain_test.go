package kubeapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
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
		"evict default/job-done 201",
		"evict default/job-failed 201",
		"evict default/web-a 201",
	}, events(s), "the cordon first, then the evictions; no DaemonSet or mirror pod, finished pods too, as kubectl drain")
	assert.Equal(t, []string{
		"db/pg-0", // its replacement, with another UID, not scheduled yet
		"default/web-b",
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

// The pods a drain evicts are those `kubectl drain --ignore-daemonsets
// --delete-emptydir-data --force` evicts (k8s.io/kubectl v0.37.2
// pkg/drain/filters.go; tools/drainparity holds the two to each other on
// the real kube-apiserver): a DaemonSet's pod stays only while it runs
// and its DaemonSet, its controller, exists; a mirror pod stays, even
// finished; every other pod goes, finished ones too (issue 51, item 2).
func TestDrainSelectsThePodsKubectlDrainEvicts(t *testing.T) {
	t.Parallel()
	s := kubeapitest.Start(t)
	s.AddNode(kubeapitest.NodeSpec{Name: "worker-1"})
	s.AddNode(kubeapitest.NodeSpec{Name: "worker-2"})
	for _, p := range []kubeapitest.PodSpec{
		{Name: "bare"},
		{Name: "web", OwnerKind: "ReplicaSet"},
		{Name: "scratch", OwnerKind: "ReplicaSet", EmptyDir: true},
		{Name: "job-done", OwnerKind: "Job", Phase: "Succeeded"},
		{Name: "job-failed", OwnerKind: "Job", Phase: "Failed"},
		{Namespace: "kube-system", Name: "cilium", OwnerKind: "DaemonSet"},
		{Namespace: "kube-system", Name: "cilium-done", OwnerKind: "DaemonSet", Phase: "Succeeded"},
		{Namespace: "kube-system", Name: "orphan", OwnerKind: "DaemonSet", OwnerGone: true},
		{Namespace: "kube-system", Name: "adopted", OwnerKind: "DaemonSet", OwnerNotController: true},
		{Namespace: "kube-system", Name: "static", Mirror: true},
		{Namespace: "kube-system", Name: "static-done", Mirror: true, Phase: "Succeeded"},
	} {
		p.Node = "worker-1"
		s.AddPod(p)
	}
	s.AddPod(kubeapitest.PodSpec{Name: "elsewhere", Node: "worker-2", OwnerKind: "ReplicaSet"})

	want := []string{
		"default/bare", "default/job-done", "default/job-failed", "default/scratch", "default/web",
		"kube-system/adopted", "kube-system/cilium-done", "kube-system/orphan",
	}
	c := newClient(t, s)
	got, err := c.PodsToEvict(ctxT(t), "worker-1")
	require.NoError(t, err)
	assert.Equal(t, want, got)

	require.NoError(t, c.Drain(ctxT(t), "worker-1", kubeapi.DrainOptions{Timeout: 5 * time.Second, Poll: poll}))
	var evicted []string
	for _, e := range events(s) {
		if pod, ok := strings.CutPrefix(e, "evict "); ok {
			evicted = append(evicted, strings.TrimSuffix(pod, " 201"))
		}
	}
	assert.Equal(t, want, evicted)
	assert.Equal(t, []string{"default/elsewhere", "kube-system/cilium", "kube-system/static", "kube-system/static-done"}, s.Pods())
}

// drainServer is an API server for one drain of node worker-1, played by
// handle: the cordon is answered, the rest is handle's; the eviction
// bodies are kept.
type drainServer struct {
	mu     sync.Mutex
	bodies []string
	calls  []string
}

func (d *drainServer) serve(t *testing.T, handle func(w http.ResponseWriter, r *http.Request) bool) *kubeapi.Client {
	t.Helper()
	kubeconfig := kubeapitest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		d.mu.Lock()
		d.calls = append(d.calls, r.Method+" "+r.URL.Path)
		if strings.HasSuffix(r.URL.Path, "/eviction") {
			d.bodies = append(d.bodies, string(body))
		}
		d.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPatch && r.URL.Path == "/api/v1/nodes/worker-1" {
			_, _ = io.WriteString(w, `{"kind":"Node","metadata":{"name":"worker-1"}}`)
			return
		}
		if !handle(w, r) {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"kind":"Status","status":"Failure","reason":"NotFound","code":404,"message":"not found"}`)
		}
	}))
	c, err := kubeapi.New(kubeconfig, kubeapi.WithTimeout(2*time.Second))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func (d *drainServer) count(call string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return count(d.calls, call)
}

const podListOfAB = `{"kind":"PodList","items":[
	{"metadata":{"name":"a","namespace":"default","uid":"u-a"},"status":{"phase":"Running"}},
	{"metadata":{"name":"b","namespace":"default","uid":"u-b"},"status":{"phase":"Running"}}]}`

// A DaemonSet that cannot be read fails the drain before any eviction, as
// kubectl's GetPodsForDeletion does (filters.go:195-201).
func TestDrainStopsWhenADaemonSetCannotBeRead(t *testing.T) {
	t.Parallel()
	var d drainServer
	c := d.serve(t, func(w http.ResponseWriter, r *http.Request) bool {
		switch r.URL.Path {
		case "/api/v1/pods":
			_, _ = io.WriteString(w, `{"kind":"PodList","items":[
				{"metadata":{"name":"bare","namespace":"default","uid":"u-1"},"status":{"phase":"Running"}},
				{"metadata":{"name":"cilium-x","namespace":"kube-system","uid":"u-2","ownerReferences":[
					{"apiVersion":"apps/v1","kind":"DaemonSet","name":"cilium","uid":"u-ds","controller":true}]},"status":{"phase":"Running"}}]}`)
		case "/apis/apps/v1/namespaces/kube-system/daemonsets/cilium":
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, `{"kind":"Status","status":"Failure","reason":"InternalError","code":500,"message":"etcd is unhappy"}`)
		default:
			return false
		}
		return true
	})
	err := c.Drain(ctxT(t), "worker-1", kubeapi.DrainOptions{Timeout: 5 * time.Second, Poll: poll})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unable to drain node "worker-1": unable to tell whether pod kube-system/cilium-x is a DaemonSet's: `)
	assert.Contains(t, err.Error(), "500 etcd is unhappy")
	assert.Zero(t, d.count("POST /api/v1/namespaces/default/pods/bare/eviction"), "no eviction")
}

// An eviction refused otherwise than for now (here a 500) fails the drain,
// once the other pods are evicted and gone: kubectl evicts each pod on its
// own (pkg/drain/drain.go:297-389). The Eviction carries kubectl's
// DeleteOptions for --grace-period=-1: none set.
func TestDrainFailsOnARefusalOnceTheOtherPodsAreGone(t *testing.T) {
	t.Parallel()
	var d drainServer
	var mu sync.Mutex
	bEvicted := false
	c := d.serve(t, func(w http.ResponseWriter, r *http.Request) bool {
		mu.Lock()
		defer mu.Unlock()
		switch r.Method + " " + r.URL.Path {
		case "GET /api/v1/pods":
			_, _ = io.WriteString(w, podListOfAB)
		case "POST /api/v1/namespaces/default/pods/a/eviction":
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, `{"kind":"Status","status":"Failure","reason":"InternalError","code":500,"message":"etcd is unhappy"}`)
		case "POST /api/v1/namespaces/default/pods/b/eviction":
			bEvicted = true
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"kind":"Status","status":"Success","code":201}`)
		case "GET /api/v1/namespaces/default/pods/b":
			if bEvicted {
				return false // gone
			}
			_, _ = io.WriteString(w, `{"metadata":{"name":"b","namespace":"default","uid":"u-b"}}`)
		default:
			return false
		}
		return true
	})
	err := c.Drain(ctxT(t), "worker-1", kubeapi.DrainOptions{Timeout: 5 * time.Second, Poll: poll})
	require.Error(t, err)
	assert.NotErrorIs(t, err, kubeapi.ErrDrainTimeout)
	assert.Contains(t, err.Error(), `unable to drain node "worker-1": unable to evict pod default/a: `)
	assert.Equal(t, 1, d.count("POST /api/v1/namespaces/default/pods/a/eviction"), "not asked again")
	assert.Equal(t, 1, d.count("POST /api/v1/namespaces/default/pods/b/eviction"))
	assert.Positive(t, d.count("GET /api/v1/namespaces/default/pods/b"), "b waited for")
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, b := range d.bodies {
		assert.JSONEq(t, `{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"`+map[bool]string{true: "a", false: "b"}[strings.Contains(b, `"name":"a"`)]+`","namespace":"default"},"deleteOptions":{}}`, b)
	}
}

// In a namespace being deleted, the API refuses evictions (403, cause
// NamespaceTerminating): as kubectl (pkg/drain/drain.go:330-340), the
// drain asks again every EvictRetry, reading the pod before, and waits
// for a pod already being deleted.
func TestDrainInANamespaceBeingDeleted(t *testing.T) {
	t.Parallel()
	var d drainServer
	var mu sync.Mutex
	refusals := 0
	const nsForbidden = `{"kind":"Status","status":"Failure","reason":"Forbidden","code":403,
		"message":"pods \"%s\" is forbidden: unable to create new content in namespace default because it is being terminated",
		"details":{"name":"%s","kind":"pods","causes":[{"reason":"NamespaceTerminating","message":"namespace default is being terminated","field":"metadata.namespace"}]}}`
	c := d.serve(t, func(w http.ResponseWriter, r *http.Request) bool {
		mu.Lock()
		defer mu.Unlock()
		switch r.Method + " " + r.URL.Path {
		case "GET /api/v1/pods":
			_, _ = io.WriteString(w, `{"kind":"PodList","items":[
				{"metadata":{"name":"a","namespace":"default","uid":"u-a"},"status":{"phase":"Running"}},
				{"metadata":{"name":"b","namespace":"default","uid":"u-b","deletionTimestamp":"2026-01-01T00:00:00Z"},"status":{"phase":"Running"}}]}`)
		case "POST /api/v1/namespaces/default/pods/a/eviction", "POST /api/v1/namespaces/default/pods/b/eviction":
			name := strings.Split(r.URL.Path, "/")[6]
			if name == "a" {
				refusals++
			}
			w.WriteHeader(http.StatusForbidden)
			_, _ = fmt.Fprintf(w, nsForbidden, name, name)
		case "GET /api/v1/namespaces/default/pods/a":
			// The namespace's deletion deletes it after the second
			// refusal; it is gone after the third.
			switch {
			case refusals < 2:
				_, _ = io.WriteString(w, `{"metadata":{"name":"a","namespace":"default","uid":"u-a"}}`)
			case refusals == 2:
				_, _ = io.WriteString(w, `{"metadata":{"name":"a","namespace":"default","uid":"u-a","deletionTimestamp":"2026-01-01T00:00:00Z"}}`)
			default:
				return false
			}
		default:
			return false // b is gone when read
		}
		return true
	})
	const retry = 60 * time.Millisecond
	start := time.Now()
	err := c.Drain(ctxT(t), "worker-1", kubeapi.DrainOptions{Timeout: 5 * time.Second, Poll: poll, EvictRetry: retry})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 2*retry, "asked again after EvictRetry, twice")
	assert.Equal(t, 3, d.count("POST /api/v1/namespaces/default/pods/a/eviction"))
	assert.Equal(t, 1, d.count("POST /api/v1/namespaces/default/pods/b/eviction"), "being deleted: waited for")

	// Without waiting, it is named as not evicted.
	mu.Lock()
	refusals = 0
	mu.Unlock()
	res, err := c.DrainWithResult(ctxT(t), "worker-1", kubeapi.DrainOptions{Timeout: 5 * time.Second, Poll: poll, SkipWaitForDelete: true})
	require.NoError(t, err)
	assert.Equal(t, []string{"default/a (not evicted: eviction refused for now: namespace default is being deleted)"}, res.Skipped)
}

// A budget's refusal is asked again after EvictRetry, not every Poll:
// kubectl waits 5 s (pkg/cmd/drain/drain.go:155), which DefaultEvictRetry
// is.
func TestDrainAsksARefusedEvictionAgainAfterEvictRetry(t *testing.T) {
	t.Parallel()
	assert.Equal(t, 5*time.Second, kubeapi.DefaultEvictRetry)
	assert.Equal(t, time.Second, kubeapi.DefaultDrainPoll)
	s := drainCluster(t)
	s.AddPod(kubeapitest.PodSpec{Name: "web-a", Node: "worker-1", OwnerKind: "ReplicaSet", PDBBlocks: 2})
	const retry = 80 * time.Millisecond
	start := time.Now()
	require.NoError(t, newClient(t, s).Drain(ctxT(t), "worker-1", kubeapi.DrainOptions{Timeout: 5 * time.Second, Poll: poll, EvictRetry: retry}))
	assert.GreaterOrEqual(t, time.Since(start), 2*retry)
	assert.Equal(t, []string{"cordon worker-1 200", "evict default/web-a 429", "evict default/web-a 429", "evict default/web-a 201"}, events(s),
		"three evictions, not one every Poll")
}
