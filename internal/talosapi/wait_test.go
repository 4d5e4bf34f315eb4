package talosapi_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
)

// settle is the timeout of a wait that is to fail: long enough for a first
// answer on a loaded machine.
const settle = 300 * time.Millisecond

func TestWaitVersionNodeNeverComesBack(t *testing.T) {
	t.Parallel()
	specs := talosapitest.Topology(0, 2, oldVersion, reboot)
	specs[0].NeverReturns = true
	c := talosapitest.Start(t, specs...)
	cl := newClient(t, c, adminCreds(c))
	ctx := ctxT(t)

	require.NoError(t, cl.Upgrade(ctx, "10.5.0.21", newImage, talosapi.UpgradeOptions{}))
	start := time.Now()
	err := talosapi.WaitVersion(ctx, cl, "10.5.0.21", newVersion, poll, 300*time.Millisecond)
	require.Error(t, err)
	took := time.Since(start)
	assert.GreaterOrEqual(t, took, 300*time.Millisecond)
	assert.Less(t, took, 2*time.Second, "bounded")
	assert.ErrorIs(t, err, talosapi.ErrTimeout)
	assert.ErrorIs(t, err, talosapi.ErrUnreachable, "its last answer")
	assert.Contains(t, err.Error(), "unable to wait for node 10.5.0.21 to run Talos v1.12.1: timed out after 300ms, last: unable to get the Talos version of node 10.5.0.21: node does not answer")

	// A node that answers with the old version: the error says so.
	err = talosapi.WaitVersion(ctx, cl, "10.5.0.22", newVersion, poll, settle)
	require.Error(t, err)
	assert.NotErrorIs(t, err, talosapi.ErrUnreachable)
	assert.Contains(t, err.Error(), "timed out after 300ms, last: node 10.5.0.22 runs Talos v1.12.0")

	// The caller's cancellation ends the wait at once, as itself.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err = talosapi.WaitVersion(cctx, cl, "10.5.0.22", newVersion, poll, time.Minute)
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, talosapi.ErrTimeout)
}

func TestWaitRebootedSameVersion(t *testing.T) {
	t.Parallel()
	specs := talosapitest.Topology(0, 1, oldVersion, reboot)
	specs[0].ShutdownDelay = 100 * time.Millisecond // the node answers a while after taking the reboot
	c := talosapitest.Start(t, specs...)
	cl := newClient(t, c, adminCreds(c))
	ctx := ctxT(t)
	const node = "10.5.0.21"

	booted, err := cl.BootTime(ctx, node)
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, cl.Reboot(ctx, node))
	// The version does not tell a reboot: it passes before the node went
	// down.
	require.NoError(t, talosapi.WaitVersion(ctx, cl, node, oldVersion, poll, time.Second))
	assert.Empty(t, c.Events("down"))
	// The boot time does.
	rebooted, err := talosapi.WaitRebooted(ctx, cl, node, booted, poll, time.Second)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond+reboot)
	assert.True(t, rebooted.After(booted))
	assert.Equal(t, 1, c.Node(node).Boots())

	// No reboot: the wait says when the node booted.
	_, err = talosapi.WaitRebooted(ctx, cl, node, rebooted, poll, settle)
	require.Error(t, err)
	assert.ErrorIs(t, err, talosapi.ErrTimeout)
	assert.Contains(t, err.Error(), "unable to wait for node 10.5.0.21 to reboot: timed out after 300ms, last: node 10.5.0.21 has not rebooted (booted at ")
}

func TestWaitHealthy(t *testing.T) {
	t.Parallel()
	specs := talosapitest.Topology(3, 0, oldVersion, reboot)
	specs[0].ServiceDelay = 60 * time.Millisecond
	c := talosapitest.Start(t, specs...)
	cl := newClient(t, c, adminCreds(c))
	ctx := ctxT(t)
	const node = "10.5.0.11"
	services := []string{"etcd", "kubelet", "apid"}

	require.NoError(t, talosapi.WaitHealthy(ctx, cl, node, services, poll, time.Second))

	// Through a reboot: down, then back with services starting.
	require.NoError(t, cl.Reboot(ctx, node))
	start := time.Now()
	require.NoError(t, talosapi.WaitHealthy(ctx, cl, node, services, poll, 2*time.Second))
	assert.GreaterOrEqual(t, time.Since(start), reboot+60*time.Millisecond, "the services' start counts")
	assert.Equal(t, 1, c.Node(node).Boots())

	c.Node(node).SetServiceHealth("kubelet", false, "Get \"http://127.0.0.1:10248/healthz\": connection refused")
	err := talosapi.WaitHealthy(ctx, cl, node, services, poll, settle)
	require.Error(t, err)
	assert.ErrorIs(t, err, talosapi.ErrTimeout)
	assert.Contains(t, err.Error(), "unable to wait for services etcd, kubelet, apid of node 10.5.0.11 to be healthy: timed out after 300ms, last: service kubelet of node 10.5.0.11 runs, unhealthy: Get ")
	c.Node(node).SetServiceHealth("kubelet", true, "")

	for name, tc := range map[string]struct {
		services []string
		want     string
	}{
		"no health check": {[]string{"machined"}, "service machined of node 10.5.0.11 runs, health not known yet"},
		"no such service": {[]string{"etcd", "kube-proxy"}, "node 10.5.0.11 has no service kube-proxy"},
	} {
		err := talosapi.WaitHealthy(ctx, cl, node, tc.services, poll, settle)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), tc.want, name)
	}

	// etcd's health follows its member's: unhealthy without a quorum.
	c.Node("10.5.0.12").SetEtcdHealthy(false)
	c.Node("10.5.0.13").SetEtcdHealthy(false)
	err = talosapi.WaitHealthy(ctx, cl, node, []string{"etcd"}, poll, settle)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "service etcd of node 10.5.0.11 runs, unhealthy: context deadline exceeded")
}

// progressLog records a wait's progress reports with their times; it is
// safe for the reporter's goroutine.
type progressLog struct {
	mu    sync.Mutex
	start time.Time
	at    []time.Duration
	msgs  []string
}

func newProgressLog() *progressLog { return &progressLog{start: time.Now()} }

func (l *progressLog) report(m string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.at = append(l.at, time.Since(l.start))
	l.msgs = append(l.msgs, m)
}

func (l *progressLog) messages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.msgs)
}

// longestSilence is the longest stretch without a report between the
// start and end (the wait's return).
func (l *progressLog) longestSilence(end time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	longest, prev := time.Duration(0), time.Duration(0)
	for _, at := range append(slices.Clone(l.at), end) {
		longest = max(longest, at-prev)
		prev = at
	}
	return longest
}

// A wait that never ends well says, at least every ProgressEvery, what it
// waits for and what it saw last; without that a wait of minutes prints
// nothing (issue 23, item 14).
func TestWaitsReportProgress(t *testing.T) {
	t.Parallel()
	specs := talosapitest.Topology(1, 1, oldVersion, reboot)
	c := talosapitest.Start(t, specs...)
	cl := newClient(t, c, adminCreds(c))
	ctx := ctxT(t)
	c.Node("10.5.0.11").SetServiceHealth("kubelet", false, "connection refused")
	booted, err := cl.BootTime(ctx, "10.5.0.21")
	require.NoError(t, err)

	const every, wait = 100 * time.Millisecond, time.Second
	for name, tc := range map[string]struct {
		run        func(ctx context.Context, opt talosapi.WaitOption) error
		what, last string
	}{
		"version": {
			func(ctx context.Context, opt talosapi.WaitOption) error {
				return talosapi.WaitVersion(ctx, cl, "10.5.0.21", newVersion, poll, wait, opt)
			},
			"waiting for node 10.5.0.21 to run Talos v1.12.1 (", "last seen: node 10.5.0.21 runs Talos v1.12.0",
		},
		"reboot": {
			func(ctx context.Context, opt talosapi.WaitOption) error {
				_, err := talosapi.WaitRebooted(ctx, cl, "10.5.0.21", booted, poll, wait, opt)
				return err
			},
			"waiting for node 10.5.0.21 to reboot (", "last seen: node 10.5.0.21 has not rebooted (booted at ",
		},
		"services": {
			func(ctx context.Context, opt talosapi.WaitOption) error {
				return talosapi.WaitHealthy(ctx, cl, "10.5.0.11", []string{"etcd", "kubelet"}, poll, wait, opt)
			},
			"waiting for services etcd, kubelet of node 10.5.0.11 to be healthy (", "last seen: service kubelet of node 10.5.0.11 runs, unhealthy: connection refused",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := newProgressLog()
			// A deadline of its own: the parallel subtests start once the
			// parent's body has returned, which on a loaded machine (the
			// race detector, two cores) took the parent's whole deadline.
			err := tc.run(ctxT(t), talosapi.WithProgress(l.report, every))
			end := time.Since(l.start)
			require.ErrorIs(t, err, talosapi.ErrTimeout)
			msgs := l.messages()
			silence := l.longestSilence(end)
			t.Logf("%d reports in %s, longest silence %s", len(msgs), end.Round(time.Millisecond), silence.Round(time.Millisecond))
			assert.GreaterOrEqual(t, len(msgs), int(wait/every)/2, "a report every %s", every)
			// Loose: a ticker's report comes late, or not at all, while
			// a loaded machine (two shared slow cores, the race
			// detector) does not run its goroutine; before, the whole
			// wait was silent.
			assert.LessOrEqual(t, silence, wait/2)
			for _, m := range msgs {
				assert.True(t, strings.HasPrefix(m, tc.what), m)
				// Before the first answer (a first TLS handshake is
				// slow under the race detector), the wait has seen
				// nothing yet.
				if !strings.Contains(m, "): last seen: no answer yet") {
					assert.Contains(t, m, "): "+tc.last)
				}
			}
			if assert.NotEmpty(t, msgs) {
				assert.Contains(t, msgs[len(msgs)-1], "): "+tc.last)
			}
		})
	}
}

// A cancelled run ends a wait at once, whatever its poll interval, and the
// error says what it waited for, that the run was cancelled and what it
// saw last. The run is cancelled once the wait has said what it saw.
func TestWaitsStopWhenTheRunIsCancelled(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(0, 1, oldVersion, reboot)...)
	cl := newClient(t, c, adminCreds(c))
	const slowPoll = 300 * time.Millisecond

	ctx, cancel := context.WithCancel(ctxT(t))
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
	report := func(m string) {
		if !strings.Contains(m, "no answer yet") {
			stop()
		}
	}
	time.AfterFunc(2*time.Second, stop) // a wait that never reports
	err := talosapi.WaitVersion(ctx, cl, "10.5.0.21", newVersion, slowPoll, time.Minute, talosapi.WithProgress(report, 10*time.Millisecond))
	returned := time.Now()
	mu.Lock()
	defer mu.Unlock()
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, talosapi.ErrTimeout)
	assert.Less(t, returned.Sub(cancelled), slowPoll, "within a poll interval")
	assert.Contains(t, err.Error(), "unable to wait for node 10.5.0.21 to run Talos v1.12.1: the run was cancelled after ")
	assert.Contains(t, err.Error(), "last seen: node 10.5.0.21 runs Talos v1.12.0")
}
