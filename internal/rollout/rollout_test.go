package rollout_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/kubeapi"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest"
	"github.com/fluodata/talos-pulumi/internal/rollout"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
)

func ops(t *testing.T, c *talosapitest.Cluster) rollout.Ops {
	t.Helper()
	crt, key := c.AdminCert()
	api, err := talosapi.New(talosapi.Credentials{CA: c.CA(), Cert: crt, Key: key}, talosapi.WithAddress(c.Address))
	require.NoError(t, err)
	t.Cleanup(func() { _ = api.Close() })
	return rollout.Ops{API: api, ControlPlanes: c.IPs(talosapitest.ControlPlane),
		Timing: rollout.Timing{Poll: 5 * time.Millisecond, Reboot: time.Second, Healthy: time.Second, RebootStart: 20 * time.Millisecond, Drain: time.Second, EvictRetry: 5 * time.Millisecond}}
}

func cp(ip, name string) rollout.Node {
	return rollout.Node{Name: name, IP: ip, Role: rollout.ControlPlane}
}

// The gate's policy by the number of control planes: one is only checked
// for health (nothing keeps a quorum without it), two never lose one,
// three lose one.
func TestGateByControlPlaneCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	one := talosapitest.Start(t, talosapitest.Topology(1, 0, "v1.12.0", 10*time.Millisecond)...)
	require.NoError(t, ops(t, one).Gate(ctx, cp("10.5.0.11", "cp-1")))

	two := talosapitest.Start(t, talosapitest.Topology(2, 0, "v1.12.0", 10*time.Millisecond)...)
	err := ops(t, two).Gate(ctx, cp("10.5.0.11", "cp-1"))
	require.ErrorIs(t, err, talosapi.ErrQuorum)
	assert.Contains(t, err.Error(), "unable to touch node cp-1 (10.5.0.11)")

	three := talosapitest.Start(t, talosapitest.Topology(3, 0, "v1.12.0", 10*time.Millisecond)...)
	require.NoError(t, ops(t, three).Gate(ctx, cp("10.5.0.12", "cp-2")))
	three.Node("10.5.0.13").SetEtcdHealthy(false)
	err = ops(t, three).Gate(ctx, cp("10.5.0.12", "cp-2"))
	require.ErrorIs(t, err, talosapi.ErrEtcdUnhealthy)
	assert.Contains(t, err.Error(), "member cp-3")
}

// The last etcd member is never removed; a member already gone is success.
func TestRemoveRefusesTheLastMemberAndToleratesAGoneOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	one := talosapitest.Start(t, talosapitest.Topology(1, 0, "v1.12.0", 10*time.Millisecond)...)
	err := ops(t, one).Remove(ctx, cp("10.5.0.11", "cp-1"))
	require.ErrorIs(t, err, talosapi.ErrQuorum)
	assert.Contains(t, err.Error(), "is the last one")
	assert.Empty(t, one.Events("EtcdLeaveCluster"))

	three := talosapitest.Start(t, talosapitest.Topology(3, 0, "v1.12.0", 10*time.Millisecond)...)
	o := ops(t, three)
	require.NoError(t, o.Remove(ctx, cp("10.5.0.13", "cp-3")))
	require.NoError(t, o.Remove(ctx, cp("10.5.0.13", "cp-3")), "a second removal (a resumed run) finds no member and succeeds")
	assert.Len(t, three.Events("EtcdLeaveCluster"), 1)
	assert.Equal(t, []string{"cp-1", "cp-2"}, three.Members())
}

// The upgrade of a node whose Talos pulls the installer image longer than
// the Talos client's cap of a change (60 s by default; 100 ms here, against
// a pull of 300 ms) goes through: the pull counts against the rollout's
// own bound of an upgrade, Timing.Reboot (issue 23, item 7).
func TestUpgradeTalosWaitsForASlowImagePull(t *testing.T) {
	t.Parallel()
	specs := talosapitest.Topology(1, 1, "v1.12.0", 20*time.Millisecond)
	specs[1].UpgradeDelay = 300 * time.Millisecond
	c := talosapitest.Start(t, specs...)
	o := ops(t, c)
	crt, key := c.AdminCert()
	api, err := talosapi.New(talosapi.Credentials{CA: c.CA(), Cert: crt, Key: key}, talosapi.WithAddress(c.Address), talosapi.WithTimeouts(time.Second, 100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = api.Close() })
	o.API = api
	o.Timing.Reboot = 3 * time.Second

	w := rollout.Node{Name: "worker-1", IP: "10.5.0.21", Role: rollout.Worker}
	require.NoError(t, o.UpgradeTalos(context.Background(), w, "ghcr.io/siderolabs/installer:v1.12.1", "v1.12.1", false))
	assert.Equal(t, "v1.12.1", c.Node("10.5.0.21").Version())
}

// logged is what Ops.Log says, with the time of each line.
type logged struct {
	mu    sync.Mutex
	start time.Time
	at    []time.Duration
	lines []string
}

func newLogged() *logged { return &logged{start: time.Now()} }

func (l *logged) log(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.at = append(l.at, time.Since(l.start))
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

// matching returns the lines that start with prefix.
func (l *logged) matching(prefix string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.HasPrefix(line, prefix) {
			out = append(out, line)
		}
	}
	return out
}

// longestGap is the longest stretch between two lines that start with
// prefix: the silence of one wait.
func (l *logged) longestGap(prefix string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	longest, prev := time.Duration(0), time.Duration(-1)
	for i, line := range l.lines {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		if prev >= 0 {
			longest = max(longest, l.at[i]-prev)
		}
		prev = l.at[i]
	}
	return longest
}

// longestSilence is the longest stretch without a line between the start
// and end.
func (l *logged) longestSilence(end time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	longest, prev := time.Duration(0), time.Duration(0)
	for _, at := range append(slices.Clone(l.at), end) {
		longest, prev = max(longest, at-prev), at
	}
	return longest
}

// assertLastSeen checks that the reports say what the wait saw last: the
// reason given, or, before the first answer, that there is none yet.
func assertLastSeen(t *testing.T, reports []string, last string) {
	t.Helper()
	if !assert.NotEmpty(t, reports) {
		return
	}
	for _, m := range reports {
		if !strings.Contains(m, "): last seen: no answer yet") {
			assert.Contains(t, m, "): "+last)
		}
	}
	assert.Contains(t, reports[len(reports)-1], "): "+last)
}

// kubeOf connects every server to the fake API server s.
func kubeOf(t *testing.T, s *kubeapitest.Server) rollout.KubeConnector {
	t.Helper()
	return func(context.Context, string) (rollout.Kube, error) {
		c, err := kubeapi.New(s.Kubeconfig(), kubeapi.WithTimeout(time.Second))
		if err == nil {
			t.Cleanup(c.Close)
		}
		return c, err
	}
}

// kubeFor is a fake API server with a Node for each node of c, and the
// static pods of the control planes on kubeapitest.DefaultVersion.
func kubeFor(t *testing.T, c *talosapitest.Cluster) *kubeapitest.Server {
	t.Helper()
	s := kubeapitest.Start(t)
	for _, n := range c.Nodes() {
		s.AddNode(kubeapitest.NodeSpec{Name: n.Hostname(), InternalIP: n.IP()})
		if n.Role() == talosapitest.ControlPlane {
			for _, comp := range rollout.ControlPlaneComponents {
				s.AddPod(kubeapitest.PodSpec{Namespace: "kube-system", Name: comp + "-" + n.Hostname(), Node: n.Hostname(),
					Mirror: true, Image: "registry.k8s.io/" + comp + ":" + kubeapitest.DefaultVersion})
			}
		}
	}
	return s
}

const installer = "ghcr.io/siderolabs/installer:v1.12.1"

// Every wait of a rollout that lasts says, at least every ProgressEvery,
// what it waits for and what it saw last, as the shell waits do: the
// settle wait once printed nothing for over 10 minutes while an API server
// answered another version than its config says (issue 23, item 14).
func TestEveryWaitReportsProgress(t *testing.T) {
	t.Parallel()
	const every, wait = 100 * time.Millisecond, time.Second
	worker := rollout.Node{Name: "worker-1", IP: "10.5.0.21", Role: rollout.Worker}
	for name, tc := range map[string]struct {
		run        func(t *testing.T, o rollout.Ops, c *talosapitest.Cluster) error
		what, last string
		fails      bool
	}{
		"api server": {
			run: func(t *testing.T, o rollout.Ops, c *talosapitest.Cluster) error {
				o.Kube = kubeOf(t, kubeFor(t, c))
				return o.Settle(t.Context(), cp("10.5.0.11", "cp-1"), o.BootTime(t.Context(), cp("10.5.0.11", "cp-1")), "1.35.0")
			},
			what: "waiting for the API server of node cp-1 (10.5.0.11) to run Kubernetes v1.35.0 (", last: "last seen: it answers v1.34.1", fails: true,
		},
		"etcd": {
			run: func(t *testing.T, o rollout.Ops, c *talosapitest.Cluster) error {
				c.Node("10.5.0.13").SetEtcdHealthy(false)
				return o.Settle(t.Context(), cp("10.5.0.11", "cp-1"), o.BootTime(t.Context(), cp("10.5.0.11", "cp-1")), "")
			},
			what: "waiting for every etcd member to be healthy (", last: "last seen: ", fails: true,
		},
		"reboot": {
			run: func(t *testing.T, o rollout.Ops, c *talosapitest.Cluster) error {
				c.Node("10.5.0.21").SetNeverReturns(true)
				return o.UpgradeTalos(t.Context(), worker, installer, "v1.12.1", false)
			},
			what: "waiting for node 10.5.0.21 to reboot (", last: "last seen: unable to get the boot time of node 10.5.0.21: node does not answer", fails: true,
		},
		"image pull": {
			run: func(t *testing.T, o rollout.Ops, c *talosapitest.Cluster) error {
				o.Timing.Reboot = 5 * wait // the pull counts against it
				return o.UpgradeTalos(t.Context(), rollout.Node{Name: "worker-2", IP: "10.5.0.22", Role: rollout.Worker}, installer, "v1.12.1", false)
			},
			what: "waiting for node worker-2 (10.5.0.22) to take the upgrade to " + installer + " (Talos pulls the image first) (", last: "last seen: no answer yet",
		},
		"reboot watch": {
			run: func(t *testing.T, o rollout.Ops, c *talosapitest.Cluster) error {
				o.Timing.RebootStart = wait
				return o.Settle(t.Context(), worker, o.BootTime(t.Context(), worker), "")
			},
			what: "waiting for node worker-1 (10.5.0.21) to start a reboot for its new config (", last: "last seen: it has not rebooted (booted at ",
		},
		"drain": {
			run: func(t *testing.T, o rollout.Ops, c *talosapitest.Cluster) error {
				s := kubeFor(t, c)
				s.AddPod(kubeapitest.PodSpec{Name: "web", Node: "worker-1", OwnerKind: "ReplicaSet", PDBBlocks: kubeapitest.Forever})
				o.Kube = kubeOf(t, s)
				return o.Remove(t.Context(), worker)
			},
			what: `waiting for the pods of node "worker-1" to be evicted (`, last: "last seen: 1 pod(s) left: default/web (blocked by a PodDisruptionBudget: ", fails: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			specs := talosapitest.Topology(3, 2, "v1.12.0", 20*time.Millisecond)
			specs[4].UpgradeDelay = wait
			c := talosapitest.Start(t, specs...)
			o := ops(t, c)
			o.Timing = rollout.Timing{Poll: 5 * time.Millisecond, Reboot: wait, Healthy: wait, RebootStart: 20 * time.Millisecond, Drain: wait, EvictRetry: 5 * time.Millisecond, ProgressEvery: every}
			l := newLogged()
			o.Log = l.log
			err := tc.run(t, o, c)
			end := time.Since(l.start)
			if tc.fails {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
			reports := l.matching(tc.what)
			gap, silence := l.longestGap(tc.what), l.longestSilence(end)
			// The run's silence is a figure, not a bound: each wait
			// starts its own clock, and the calls between waits (a
			// first TLS handshake, slow under the race detector) are no
			// wait.
			t.Logf("%d reports in %s, longest gap between two %s, longest silence of the run %s; last: %q",
				len(reports), end.Round(time.Millisecond), gap.Round(time.Millisecond), silence.Round(time.Millisecond), reports[max(0, len(reports)-1):])
			assert.GreaterOrEqual(t, len(reports), int(wait/every)/2, "a report every %s", every)
			// A ticker's report comes late, or not at all, while a
			// loaded machine (two shared slow cores, the race detector)
			// does not run its goroutine: the bound is loose, and far
			// below the whole wait's silence of before.
			assert.LessOrEqual(t, gap, wait/2, "a report every %s", every)
			assertLastSeen(t, reports, tc.last)
		})
	}
}

// A cancelled run stops every wait within a poll interval; the error says
// what it waited for and that the run was cancelled, and for a node in its
// reboot, that it may finish on its own. Each run is cancelled once the
// wait says it waits (its first report), not at a time: the calls before
// it take their time on a loaded machine.
func TestWaitsStopWhenTheRunIsCancelled(t *testing.T) {
	t.Parallel()
	const slowPoll = 300 * time.Millisecond
	worker := rollout.Node{Name: "worker-1", IP: "10.5.0.21", Role: rollout.Worker}
	for name, tc := range map[string]struct {
		run    func(ctx context.Context, t *testing.T, o rollout.Ops, c *talosapitest.Cluster) error
		during string
		want   []string
	}{
		"upgrade reboot": {
			run: func(ctx context.Context, t *testing.T, o rollout.Ops, c *talosapitest.Cluster) error {
				c.Node("10.5.0.21").SetNeverReturns(true)
				return o.UpgradeTalos(ctx, worker, installer, "v1.12.1", false)
			},
			during: "waiting for node 10.5.0.21 to reboot (",
			want:   []string{"unable to wait for node 10.5.0.21 to reboot: the run was cancelled after ", "may finish rebooting on its own", "the next `pulumi up` resumes"},
		},
		"api server": {
			run: func(ctx context.Context, t *testing.T, o rollout.Ops, c *talosapitest.Cluster) error {
				o.Kube = kubeOf(t, kubeFor(t, c))
				return o.Settle(ctx, cp("10.5.0.11", "cp-1"), o.BootTime(ctx, cp("10.5.0.11", "cp-1")), "1.35.0")
			},
			during: "waiting for the API server of node cp-1 (10.5.0.11)",
			want:   []string{"unable to wait for the API server of node cp-1 (10.5.0.11) to run Kubernetes v1.35.0: the run was cancelled after ", "last seen: it answers v1.34.1"},
		},
		"reboot watch": {
			run: func(ctx context.Context, t *testing.T, o rollout.Ops, c *talosapitest.Cluster) error {
				o.Timing.RebootStart = time.Minute
				return o.Settle(ctx, worker, o.BootTime(ctx, worker), "")
			},
			during: "waiting for node worker-1 (10.5.0.21) to start a reboot",
			want:   []string{"unable to wait for node worker-1 (10.5.0.21) to start a reboot for its new config: the run was cancelled after ", "may still reboot for it"},
		},
		"drain": {
			run: func(ctx context.Context, t *testing.T, o rollout.Ops, c *talosapitest.Cluster) error {
				s := kubeFor(t, c)
				s.AddPod(kubeapitest.PodSpec{Name: "web", Node: "worker-1", OwnerKind: "ReplicaSet", PDBBlocks: kubeapitest.Forever})
				o.Kube = kubeOf(t, s)
				return o.Remove(ctx, worker)
			},
			during: `waiting for the pods of node "worker-1" to be evicted (`,
			want:   []string{`unable to drain node "worker-1": the run was cancelled after `, "default/web (blocked by a PodDisruptionBudget"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := talosapitest.Start(t, talosapitest.Topology(1, 1, "v1.12.0", 20*time.Millisecond)...)
			o := ops(t, c)
			o.Timing = rollout.Timing{Poll: slowPoll, Reboot: time.Minute, Healthy: time.Minute, RebootStart: 20 * time.Millisecond, Drain: time.Minute, EvictRetry: slowPoll, ProgressEvery: 20 * time.Millisecond}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var mu sync.Mutex
			var cancelled time.Time
			stop := func() {
				mu.Lock()
				defer mu.Unlock()
				if cancelled.IsZero() {
					cancelled = time.Now()
					cancel()
				}
			}
			// Once the wait says what it saw: the first check may take
			// longer than a report's period under the race detector.
			o.Log = func(format string, args ...any) {
				line := fmt.Sprintf(format, args...)
				if strings.HasPrefix(line, tc.during) && !strings.Contains(line, "last seen: no answer yet") {
					stop()
				}
			}
			time.AfterFunc(2*time.Second, stop) // a wait that never reports
			err := tc.run(ctx, t, o, c)
			returned := time.Now()
			require.ErrorIs(t, err, context.Canceled)
			mu.Lock()
			after := returned.Sub(cancelled)
			mu.Unlock()
			t.Logf("returned %s after the cancellation: %v", after, err)
			assert.Less(t, after, slowPoll, "within a poll interval")
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// A dead worker (its machine off: its Talos API does not answer, its Node
// is NotReady) is removed: its pods are evicted, but not waited for, since
// its kubelet is gone and would never confirm their end; its Node is
// deleted (the pod garbage collector then deletes its pods), with a warning
// that names what was not waited for. Before, the drain waited for pods
// that stay terminating, timed out, and every `up` kept the machine
// (issue 23, item 4).
func TestRemoveADeadWorker(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(1, 2, "v1.12.0", 20*time.Millisecond)...)
	s := kubeFor(t, c)
	s.AddPod(kubeapitest.PodSpec{Name: "web", Node: "worker-1", OwnerKind: "ReplicaSet", TerminationDelay: 10 * time.Millisecond})
	s.AddPod(kubeapitest.PodSpec{Namespace: "db", Name: "db-0", Node: "worker-1", OwnerKind: "StatefulSet", TerminationDelay: 10 * time.Millisecond, Recreate: true})
	s.AddPod(kubeapitest.PodSpec{Namespace: "kube-system", Name: "cilium-worker-1", Node: "worker-1", OwnerKind: "DaemonSet"})
	c.Node("10.5.0.21").PowerOff()
	s.SetNodeReady("worker-1", false)
	o := ops(t, c)
	o.Kube = kubeOf(t, s)
	o.Timing.Drain = 3 * time.Second
	logs, warnings := newLogged(), newLogged()
	o.Log, o.Warn = logs.log, warnings.log

	start := time.Now()
	require.NoError(t, o.Remove(t.Context(), rollout.Node{Name: "worker-1", IP: "10.5.0.21", Role: rollout.Worker}))
	assert.Less(t, time.Since(start), o.Timing.Drain, "the drain does not wait for the pods of a dead node")

	_, ok := s.Node("worker-1")
	assert.False(t, ok, "its Node is deleted")
	var events []string
	for _, e := range s.Events() {
		events = append(events, e.String())
	}
	assert.Equal(t, []string{"cordon worker-1 200", "evict db/db-0 201", "evict default/web 201", "delete-node worker-1 200"}, events)
	assert.NotContains(t, s.Pods(), "default/web", "collected with its Node")
	w := warnings.matching("")
	require.Len(t, w, 1)
	t.Log(w[0])
	assert.Contains(t, w[0], "node worker-1 (10.5.0.21) does not answer (its Talos API does not answer; ")
	assert.Contains(t, w[0], "its Kubernetes Node worker-1 is NotReady")
	assert.Contains(t, w[0], "did not wait for 2 pod(s) to end: db/db-0 (evicted, still terminating), default/web (evicted, still terminating)")
}

// A dead control plane leaves etcd through another control plane, and its
// Node is deleted through another control plane's API server: the
// cluster's endpoint may be the dead one's (the first control plane's IP
// is the default), and a control plane out of etcd serves no API anyway.
func TestRemoveADeadControlPlane(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(3, 0, "v1.12.0", 20*time.Millisecond)...)
	s := kubeFor(t, c)
	c.Node("10.5.0.11").PowerOff()
	s.SetNodeReady("cp-1", false)
	o := ops(t, c)
	var servers []string
	var mu sync.Mutex
	o.Kube = func(_ context.Context, server string) (rollout.Kube, error) {
		mu.Lock()
		servers = append(servers, server)
		mu.Unlock()
		opts := []kubeapi.Option{kubeapi.WithTimeout(time.Second)}
		if server == "" || server == "https://10.5.0.11:6443" {
			// The endpoint is the dead control plane: nothing listens.
			opts = append(opts, kubeapi.WithServer("https://127.0.0.1:1"))
		}
		k, err := kubeapi.New(s.Kubeconfig(), opts...)
		if err == nil {
			t.Cleanup(k.Close)
		}
		return k, err
	}

	require.NoError(t, o.Remove(t.Context(), cp("10.5.0.11", "cp-1")))
	assert.Equal(t, []string{"cp-2", "cp-3"}, c.Members())
	_, ok := s.Node("cp-1")
	assert.False(t, ok, "its Node is deleted")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"https://10.5.0.12:6443"}, servers, "through the next control plane's API server")
}

// A lost host with two of five control planes (issue 48, item 8): each dead
// member is removed through a live control plane while the other is still
// a voter that is down, as etcd allows (3 healthy of the 4 left, then of
// 3). Before, the other dead member blocked each removal for good.
func TestRemoveTheTwoDeadControlPlanesOfALostHost(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(5, 0, "v1.12.0", 20*time.Millisecond)...)
	s := kubeFor(t, c)
	for _, n := range []string{"10.5.0.14", "10.5.0.15"} {
		c.Node(n).PowerOff()
	}
	s.SetNodeReady("cp-4", false)
	s.SetNodeReady("cp-5", false)
	o := ops(t, c)
	logs := newLogged()
	o.Log = logs.log

	require.NoError(t, o.Remove(t.Context(), cp("10.5.0.14", "cp-4")))
	assert.Equal(t, []string{"cp-1", "cp-2", "cp-3", "cp-5"}, c.Members())
	o.ControlPlanes = []string{"10.5.0.11", "10.5.0.12", "10.5.0.13", "10.5.0.15"}
	require.NoError(t, o.Remove(t.Context(), cp("10.5.0.15", "cp-5")))
	assert.Equal(t, []string{"cp-1", "cp-2", "cp-3"}, c.Members())
	tried := 0
	for _, l := range logs.matching("") {
		if strings.Contains(l, "removing its etcd member") {
			tried++
			assert.Regexp(t, `through 10\.5\.0\.1[123]$`, l, "through a live control plane first")
		}
	}
	assert.Equal(t, 2, tried, "one try for each")
}
