package restore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/backup"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/restore"
	"github.com/fluodata/talos-pulumi/internal/backupstore"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest/realetcd"
	"github.com/fluodata/talos-pulumi/internal/testkit/pkitest"
)

// etcdKeys are cluster A's etcd contents, which the backup carries.
var etcdKeys = map[string]string{
	"/registry/namespaces/default":          `{"kind":"Namespace"}`,
	"/registry/secrets/default/db-password": "hunter2",
	"/registry/configmaps/default/settings": "a: b",
}

// fakeStack is the stack in memory: its state export and its outputs.
type fakeStack struct {
	mu       sync.Mutex
	state    []byte
	outputs  auto.OutputMap
	exports  int
	imports  int
	imported []byte
}

func (s *fakeStack) Export(context.Context) (apitype.UntypedDeployment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exports++
	var d apitype.UntypedDeployment
	err := json.Unmarshal(s.state, &d)
	return d, err
}

func (s *fakeStack) Import(_ context.Context, d apitype.UntypedDeployment) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	s.imports++
	s.state, s.imported = b, b
	return nil
}

func (s *fakeStack) Outputs(context.Context) (auto.OutputMap, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.outputs), nil
}

// add puts r into the state unless a resource of its URN is there.
func (s *fakeStack) add(t *testing.T, r map[string]any) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var top map[string]any
	require.NoError(t, json.Unmarshal(s.state, &top))
	dep := top["deployment"].(map[string]any)
	rs, _ := dep["resources"].([]any)
	for _, x := range rs {
		if x.(map[string]any)["urn"] == r["urn"] {
			return
		}
	}
	dep["resources"] = append(rs, r)
	b, err := json.Marshal(top)
	require.NoError(t, err)
	s.state = b
}

func (s *fakeStack) setOutput(k, v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.outputs == nil {
		s.outputs = auto.OutputMap{}
	}
	s.outputs[k] = auto.OutputValue{Value: v, Secret: true}
}

func (s *fakeStack) counts() (exports, imports int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exports, s.imports
}

// fakeUp is the program's `up`: an up that excludes the bootstrap makes
// the machines (a VM in the state) and sets the talosconfig output; a
// whole one changes nothing here. It records each call's exclude list,
// and whether the fresh cluster's etcd was bootstrapped when it ran.
type fakeUp struct {
	t           *testing.T
	stack       *fakeStack
	vm          map[string]any
	talosconfig string
	fresh       *talosapitest.Cluster
	// during runs first in each call (n from 1); an error ends the call.
	during func(ctx context.Context, n int) error

	mu           sync.Mutex
	calls        [][]string
	bootstrapped []bool
}

func (u *fakeUp) up(ctx context.Context, exclude []string) error {
	u.mu.Lock()
	u.calls = append(u.calls, slices.Clone(exclude))
	u.bootstrapped = append(u.bootstrapped, u.fresh.Bootstrapped())
	n := len(u.calls)
	u.mu.Unlock()
	if u.during != nil {
		if err := u.during(ctx, n); err != nil {
			return err
		}
	}
	if len(exclude) > 0 {
		u.stack.add(u.t, u.vm)
		u.stack.setOutput("talosconfig", u.talosconfig)
	}
	return nil
}

func (u *fakeUp) record() (calls [][]string, bootstrapped []bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.calls), slices.Clone(u.bootstrapped)
}

// syncBuffer is the restore's log: a recovery reports its wait from
// another goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// world is a restore's setting: a backup of cluster A (the fixture's state
// and A's etcd), a fresh cluster of the same topology the stack's machines
// come up as, the stack (empty) and its `up`.
type world struct {
	f     *fixture
	a     *talosapitest.Cluster
	fresh *talosapitest.Cluster
	x     backup.Extracted
	req   restore.Request
	stack *fakeStack
	up    *fakeUp
	log   *syncBuffer

	mu          sync.Mutex
	talosOpened int
}

func newWorld(t *testing.T) *world {
	t.Helper()
	return newWorldOn(t, talosapitest.Start, talosapitest.StartFresh)
}

// startCluster starts a cluster of the Talos fake: talosapitest's Start or
// StartFresh, or realetcd's, with a real etcd.
type startCluster func(testing.TB, ...talosapitest.NodeSpec) *talosapitest.Cluster

// newWorldOn is newWorld with clusters A and the fresh one started by
// start and startFresh.
func newWorldOn(t *testing.T, start, startFresh startCluster) *world {
	t.Helper()
	ctx := t.Context()
	w := &world{f: newFixture(testStack), log: &syncBuffer{}}
	w.a = start(t, talosapitest.Topology(3, 0, talosapitest.DefaultVersion, 40*time.Millisecond)...)
	w.a.SetEtcdKeys(etcdKeys)
	ca, err := backup.TalosCAFingerprint(w.a.Talosconfig())
	require.NoError(t, err)

	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	store, err := backupstore.Open(ctx, "file://"+filepath.Join(t.TempDir(), "backups"), backupstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	crt, key := w.a.AdminCert()
	cl, err := talosapi.New(talosapi.Credentials{CA: w.a.CA(), Cert: crt, Key: key},
		talosapi.WithAddress(w.a.Address), talosapi.WithTimeouts(time.Second, 2*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	taken, err := backup.Take(ctx, backup.Source{
		Stack: testStack, Cluster: testCluster, TalosVersion: talosapitest.DefaultVersion, KubernetesVersion: "1.35.0",
		ControlPlanes: w.a.IPs(talosapitest.ControlPlane),
		StackFile:     []byte("config:\n  talos-cluster:cluster:\n    name: homelab\n"), StackFileName: "Pulumi.prod.yaml",
		State: w.f.Export(t), TalosCA: ca,
	}, cl, store, backup.Options{Recipients: []age.Recipient{id.Recipient()}, Log: w.log})
	require.NoError(t, err, w.log.String())
	w.x, err = backup.Extract(ctx, store, taken.Name, []age.Identity{id}, t.TempDir())
	require.NoError(t, err)

	w.fresh = startFresh(t, talosapitest.Topology(3, 0, talosapitest.DefaultVersion, 40*time.Millisecond)...)
	w.req = restore.Request{
		Stack: testStack, Backup: w.x,
		Target: backup.Target{Cluster: testCluster, TalosVersion: talosapitest.DefaultVersion, ControlPlanes: w.fresh.IPs(talosapitest.ControlPlane)},
	}
	w.stack = &fakeStack{state: emptyExport(t)}
	var vm map[string]any
	for _, r := range w.f.Resources {
		if r["urn"] == w.f.VM {
			vm = r
		}
	}
	// The stack's secrets are the backup's: its talosconfig has A's CA.
	w.up = &fakeUp{t: t, stack: w.stack, vm: vm, talosconfig: w.a.Talosconfig(), fresh: w.fresh}
	return w
}

// env is the restore's Env: the Talos API of the fresh cluster, reached
// with the stack's talosconfig.
func (w *world) env() restore.Env {
	return restore.Env{
		Stack: w.stack, Up: w.up.up,
		Talos: func(talosconfig string) (restore.API, func(), error) {
			cl, err := talosapi.NewFromTalosconfig(talosconfig,
				talosapi.WithAddress(w.fresh.Address), talosapi.WithTimeouts(time.Second, 2*time.Second))
			if err != nil {
				return nil, nil, err
			}
			w.mu.Lock()
			w.talosOpened++
			w.mu.Unlock()
			return cl, func() { _ = cl.Close() }, nil
		},
		Log: w.log, ProgressEvery: 100 * time.Millisecond,
	}
}

func (w *world) opened() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.talosOpened
}

// nothingRecovered checks that no snapshot reached the fresh cluster and
// that its etcd was not bootstrapped.
func (w *world) nothingRecovered(t *testing.T) {
	t.Helper()
	require.False(t, w.fresh.Bootstrapped(), "the fresh cluster was bootstrapped")
	for _, n := range w.fresh.Nodes() {
		require.False(t, n.HasRecoverySnapshot(), "%s holds a snapshot", n.IP())
	}
	require.Empty(t, w.fresh.Events("EtcdRecover", "Bootstrap"), "nothing was sent")
	require.Empty(t, w.fresh.EtcdKeys())
}

// A whole restore into an empty stack: the state is seeded once from the
// backup's, the first `up` leaves the bootstrap (and what needs etcd) out
// and runs before etcd exists, etcd is recovered from the snapshot on the
// fresh control planes, and the second, whole `up` runs once etcd holds
// A's contents with a member per control plane. The clusters run a real
// etcd (realetcd): the backup holds A's etcd snapshot, as etcdutl reads
// it, and the fresh cluster's etcd, restored from it by etcdutl, serves
// A's keys at A's revision to etcd's own client.
func TestRunRestoresTheClusterFromTheBackup(t *testing.T) {
	t.Parallel()
	w := newWorldOn(t, realetcd.Start, realetcd.StartFresh)
	_, revision := realetcd.Read(t, w.a.EtcdEndpoint())
	st := realetcd.SnapshotStatus(t, w.x.SnapshotPath)
	require.Equal(t, revision, st.Revision, "the backup holds A's etcd snapshot")
	require.Equal(t, len(etcdKeys), st.TotalKey)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	start := time.Now()
	res, err := restore.Run(ctx, w.req, w.env())
	require.NoError(t, err, w.log.String())
	t.Logf("restore on the fakes with a real etcd in %s", time.Since(start).Round(time.Millisecond))

	_, imports := w.stack.counts()
	require.Equal(t, 1, imports, "the state is seeded once")
	imported := parse(t, w.stack.imported)
	require.Equal(t, w.f.kept(), imported.urns(), "the seeded state is imported")
	require.NotContains(t, slices.Collect(maps.Keys(imported.Fields)), "pending_operations")
	require.NotNil(t, res.Seeded)
	require.Equal(t, w.f.Bootstrap, res.Seeded.Bootstrap)
	require.Equal(t, w.f.kept(), res.Seeded.Kept)

	calls, bootstrapped := w.up.record()
	require.Equal(t, [][]string{{w.f.Bootstrap}, nil}, calls, "an up without the bootstrap, then a whole one")
	require.Equal(t, []bool{false, true}, bootstrapped, "etcd is recovered between the two ups")

	restored, restoredRevision := realetcd.Read(t, w.fresh.EtcdEndpoint())
	require.Equal(t, etcdKeys, restored, "the fresh cluster's etcd serves A's")
	require.Equal(t, revision, restoredRevision, "at A's revision")
	require.Equal(t, etcdKeys, w.fresh.EtcdKeys())
	boot := w.fresh.Events("etcd-bootstrap")
	require.Len(t, boot, 1)
	require.Contains(t, boot[0].Args, fmt.Sprintf("revision=%d hash=%08x total-keys=%d", st.Revision, st.Hash, st.TotalKey),
		"restored from the backup's snapshot by etcdutl")
	require.Len(t, w.fresh.Members(), 3)
	require.Equal(t, []string{"cp-1", "cp-2", "cp-3"}, res.Recovered.Members)
	require.Empty(t, res.Running)
	require.Len(t, w.fresh.Events("EtcdRecover"), 1)
	require.Len(t, w.fresh.Events("Bootstrap"), 1)
	require.Equal(t, w.fresh.IPs(talosapitest.ControlPlane)[0], w.fresh.Events("EtcdRecover")[0].Node, "the snapshot goes to the first control plane")
}

// A restore run again on its result (the stack holds the bootstrap, etcd
// runs) seeds nothing and recovers nothing: no Import, no second
// EtcdRecover or Bootstrap; it runs the two ups again and reports the
// running members.
func TestRunAgainNeitherSeedsNorRecovers(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err := restore.Run(ctx, w.req, w.env())
	require.NoError(t, err, w.log.String())

	res, err := restore.Run(ctx, w.req, w.env())
	require.NoError(t, err, w.log.String())
	exports, imports := w.stack.counts()
	require.Equal(t, 2, exports)
	require.Equal(t, 1, imports, "no second import")
	require.Nil(t, res.Seeded)
	require.Equal(t, w.fresh.IPs(talosapitest.ControlPlane), res.Running)
	require.Empty(t, res.Recovered.Members)
	require.Len(t, w.fresh.Events("EtcdRecover"), 1, "no second recovery")
	require.Len(t, w.fresh.Events("Bootstrap"), 1, "no second bootstrap")
	require.Equal(t, etcdKeys, w.fresh.EtcdKeys())
	calls, _ := w.up.record()
	require.Equal(t, [][]string{{w.f.Bootstrap}, nil, {w.f.Bootstrap}, nil}, calls)
	require.Contains(t, w.log.String(), "its state is not seeded again")
	require.Contains(t, w.log.String(), "nothing is recovered")
}

// A restore run again on a cluster whose etcd has lost its quorum (two of
// three members unhealthy: the member list answers "no leader") still sees
// that etcd runs on the first control plane and recovers nothing over it;
// one run while a control plane does not answer waits for it, and, stopped,
// recovers nothing.
func TestRunNeverRecoversBesideARunningEtcd(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err := restore.Run(ctx, w.req, w.env())
	require.NoError(t, err, w.log.String())
	cps := w.fresh.IPs(talosapitest.ControlPlane)
	w.fresh.Node(cps[1]).SetEtcdHealthy(false)
	w.fresh.Node(cps[2]).SetEtcdHealthy(false)

	res, err := restore.Run(ctx, w.req, w.env())
	require.NoError(t, err, w.log.String())
	require.Contains(t, res.Running, cps[0])
	require.Len(t, w.fresh.Events("EtcdRecover"), 1, "no second recovery")
	require.Len(t, w.fresh.Events("Bootstrap"), 1, "no second bootstrap")

	w.fresh.Node(cps[2]).PowerOff()
	short, stop := context.WithTimeout(ctx, 3*time.Second)
	defer stop()
	_, err = restore.Run(short, w.req, w.env())
	require.ErrorContains(t, err, "unable to tell whether etcd runs, nothing was recovered")
	require.Contains(t, w.log.String(), "to say whether its etcd runs")
	require.Len(t, w.fresh.Events("EtcdRecover"), 1, "no second recovery")
}

// A stack whose machines came up with other secrets (its talosconfig has
// another Talos CA than the backup's) is refused after the first `up`,
// before the Talos API is even opened: no snapshot is uploaded, nothing
// is bootstrapped, and the whole `up` does not run.
func TestRunRefusesAStackWithAnotherTalosCA(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	other := pkitest.WriteTalosconfig(t, pkitest.TalosBundle(t), t.TempDir(), testCluster, w.fresh.IPs(talosapitest.ControlPlane)...)
	tc, err := os.ReadFile(other) //nolint:gosec // the test's own file
	require.NoError(t, err)
	w.up.talosconfig = string(tc)

	_, err = restore.Run(t.Context(), w.req, w.env())
	require.Error(t, err)
	require.ErrorContains(t, err, "Talos CA")
	require.ErrorContains(t, err, w.x.Manifest.TalosCA)
	require.NotEmpty(t, w.x.Manifest.TalosCA)
	calls, _ := w.up.record()
	require.Equal(t, [][]string{{w.f.Bootstrap}}, calls, "no up after the refusal")
	require.Zero(t, w.opened(), "the Talos API was not opened")
	w.nothingRecovered(t)
	require.Empty(t, w.fresh.Events(), "no call reached the fresh cluster")
}

// A backup that does not fit the stack (of another stack, of another
// cluster, of another Talos minor release) is refused before anything
// changes: no export, no import, no up, no Talos API.
func TestRunRefusesABackupThatDoesNotFit(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for _, tc := range []struct {
		name   string
		change func(*restore.Request)
		want   string
	}{
		{"another stack", func(r *restore.Request) { r.Backup.Manifest.Stack = "other" }, "the backup is of stack other"},
		{"another cluster", func(r *restore.Request) { r.Target.Cluster = "lab" }, `it is of cluster "homelab", the stack's is "lab"`},
		{"another Talos minor", func(r *restore.Request) { r.Target.TalosVersion = "v1.13.0" }, "restore with cluster.talosVersion of the backup's minor release"},
		{"no control plane", func(r *restore.Request) { r.Target.ControlPlanes = nil }, "no control plane"},
	} {
		req := w.req
		tc.change(&req)
		_, err := restore.Run(t.Context(), req, w.env())
		require.ErrorContains(t, err, tc.want, tc.name)
		require.ErrorContains(t, err, "unable to restore stack "+testStack, tc.name)
	}
	exports, imports := w.stack.counts()
	require.Zero(t, exports)
	require.Zero(t, imports)
	calls, _ := w.up.record()
	require.Empty(t, calls)
	require.Zero(t, w.opened())
	w.nothingRecovered(t)
}

// A restore cancelled during its first `up` returns the cancellation and
// recovers nothing, whether the up fails with it or ends as it comes; run
// again, it goes on where it stopped: the state is not seeded twice and
// etcd is recovered.
func TestRunCancelledDuringTheFirstUpRecoversNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		upErrs bool
	}{{"the up fails", true}, {"the up ends", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			w.up.during = func(ctx context.Context, n int) error {
				if n != 1 {
					return nil
				}
				cancel()
				<-ctx.Done()
				if tc.upErrs {
					return fmt.Errorf("pulumi up: %w", ctx.Err())
				}
				return nil
			}
			_, err := restore.Run(ctx, w.req, w.env())
			require.Error(t, err)
			require.True(t, errors.Is(err, context.Canceled), "%v", err)
			if tc.upErrs {
				require.ErrorContains(t, err, "unable to bring up the machines")
			}
			calls, _ := w.up.record()
			require.Len(t, calls, 1, "no up after the cancellation")
			w.nothingRecovered(t)

			w.up.during = nil
			ctx2, cancel2 := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel2()
			res, err := restore.Run(ctx2, w.req, w.env())
			require.NoError(t, err, w.log.String())
			_, imports := w.stack.counts()
			require.Equal(t, 1, imports, "seeded once")
			require.Nil(t, res.Seeded)
			require.Equal(t, etcdKeys, w.fresh.EtcdKeys())
			require.Len(t, res.Recovered.Members, 3)
		})
	}
}

// Talos's disaster recovery needs every control plane's etcd waiting for a
// bootstrap, "Preparing" (issue 35, item A.4): a control plane with no etcd
// service yet, or one Waiting (EPHEMERAL not mounted), is waited for,
// saying so, and nothing is sent; once every one prepares, the recovery
// goes on. A Failed etcd ends the run at once, saying how to wipe the
// node: machined (talos v1.13.9, system.go and service_runner.go) leaves
// a service whose pre stage failed Failed until the node reboots, so
// waiting would wait for nothing.
func TestRunRecoversOnlyWhenEveryControlPlanePrepares(t *testing.T) {
	t.Parallel()
	for _, state := range []string{"-", "Waiting", "Failed"} {
		t.Run(state, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			cps := w.fresh.IPs(talosapitest.ControlPlane)
			w.fresh.Node(cps[2]).SetEtcdServiceState(state)
			short, stop := context.WithTimeout(t.Context(), 2*time.Second)
			defer stop()
			_, err := restore.Run(short, w.req, w.env())
			if state == "Failed" {
				require.ErrorIs(t, err, backup.ErrEtcdFailed)
				require.ErrorContains(t, err, "reset --system-labels-to-wipe EPHEMERAL")
				require.NoError(t, short.Err(), "at once")
			} else {
				require.ErrorContains(t, err, "unable to tell whether etcd runs, nothing was recovered")
				require.Contains(t, w.log.String(), "a recovery needs it Preparing")
			}
			w.nothingRecovered(t)

			w.fresh.Node(cps[2]).SetEtcdServiceState("")
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			_, err = restore.Run(ctx, w.req, w.env())
			require.NoError(t, err, w.log.String())
			require.Equal(t, etcdKeys, w.fresh.EtcdKeys())
		})
	}
}

// Talos answers EtcdRecover and Bootstrap with FailedPrecondition until the
// node's EPHEMERAL is mounted and its CRI is up (issue 35, item A.4): the
// restore retries them, saying what it waits for, and recovers.
func TestRunRetriesARecoveryTheNodeIsNotReadyFor(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	cps := w.fresh.IPs(talosapitest.ControlPlane)
	w.fresh.Node(cps[0]).NotReadyForRecovery(3)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err := restore.Run(ctx, w.req, w.env())
	require.NoError(t, err, w.log.String())
	require.Len(t, w.fresh.Events("recovery-not-ready"), 3, "refused three times, then accepted")
	require.Equal(t, etcdKeys, w.fresh.EtcdKeys())
	require.Contains(t, w.log.String(), "to take the etcd snapshot")
}

// A run again after a run that uploaded the snapshot and asked for the
// bootstrap from it (its journal says so), while no etcd runs yet, never
// uploads again (Talos may be restoring from that file): it waits for the
// recovery that was started (issue 35, item A.4). A journal of another
// backup is refused, naming it. A restore that ends leaves no journal.
func TestRunAgainAfterARecoveryStartedUploadsNothing(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	env := w.env()
	env.Journal = filepath.Join(t.TempDir(), ".access", testStack, "restore-recovery.json")
	first := w.fresh.IPs(talosapitest.ControlPlane)[0]
	write := func(backupTime time.Time) {
		require.NoError(t, os.MkdirAll(filepath.Dir(env.Journal), 0o700))
		b, err := json.Marshal(map[string]any{
			"stack": testStack, "node": first, "backup": backupTime, "snapshotSha256": w.x.Manifest.Snapshot.SHA256, "started": time.Now().UTC(),
		})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(env.Journal, b, 0o600))
	}

	write(w.x.Manifest.Created.Add(-time.Hour))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err := restore.Run(ctx, w.req, env)
	require.ErrorContains(t, err, "is not uploaded over it")
	w.nothingRecovered(t)

	write(w.x.Manifest.Created)
	short, stop := context.WithTimeout(t.Context(), 2*time.Second)
	defer stop()
	_, err = restore.Run(short, w.req, env)
	require.ErrorContains(t, err, "unable to recover etcd")
	require.Contains(t, w.log.String(), "was started by an earlier run: the snapshot is not uploaded again")
	w.nothingRecovered(t)

	require.NoError(t, os.Remove(env.Journal))
	_, err = restore.Run(ctx, w.req, env)
	require.NoError(t, err, w.log.String())
	require.Equal(t, etcdKeys, w.fresh.EtcdKeys())
	require.NoFileExists(t, env.Journal, "a restore that ends leaves no journal")
}

// The commonest disaster (issue 35, item A.2): the control planes lost
// etcd's quorum, the stack's state and the workers are fine. A restore
// into the stack as it is recovers nothing over the running etcd unless
// told to reset the control planes; told so, it checks that no member has a
// leader for the quorum window, resets every control plane's EPHEMERAL
// (their machine configs stay), waits for their etcd to prepare and
// recovers etcd from the backup: no state is seeded or destroyed. With the
// quorum holding, nothing is reset.
func TestRunResetsTheControlPlanesOnlyWhenTheQuorumIsLost(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := restore.Run(ctx, w.req, w.env())
	require.NoError(t, err, w.log.String())
	cps := w.fresh.IPs(talosapitest.ControlPlane)
	w.fresh.SetEtcdKeys(map[string]string{"/registry/configmaps/default/after": "the backup"})
	w.fresh.Node(cps[1]).SetEtcdHealthy(false)
	w.fresh.Node(cps[2]).SetEtcdHealthy(false)

	res, err := restore.Run(ctx, w.req, w.env())
	require.NoError(t, err, w.log.String())
	require.NotEmpty(t, res.Running)
	require.Contains(t, w.log.String(), "CONTROL_PLANES=1")
	require.Empty(t, w.fresh.Events("wipe"), "nothing reset unless asked")

	req := w.req
	req.ResetControlPlanes = true
	env := w.env()
	env.QuorumWindow = 300 * time.Millisecond
	res, err = restore.Run(ctx, req, env)
	require.NoError(t, err, w.log.String())
	require.Equal(t, cps, res.Reset)
	var wiped []string
	for _, e := range w.fresh.Events("wipe") {
		require.Equal(t, "EPHEMERAL", e.Args, "only EPHEMERAL: the machine config stays")
		wiped = append(wiped, e.Node)
	}
	require.ElementsMatch(t, cps, wiped, "every control plane, nothing else")
	require.Equal(t, etcdKeys, w.fresh.EtcdKeys(), "etcd as the backup holds it")
	require.Len(t, w.fresh.Members(), 3)
	_, imports := w.stack.counts()
	require.Equal(t, 1, imports, "the stack's state is kept, not seeded again")

	// The quorum holds now: nothing is reset.
	_, err = restore.Run(ctx, req, env)
	require.ErrorContains(t, err, "has a leader: the quorum holds, so nothing is reset")
	require.Len(t, w.fresh.Events("wipe"), 3, "no second reset")
}

// A recovery Talos took and then failed (its etcd service Failed after the
// bootstrap, as machined leaves it when the snapshot does not restore):
// the run stops at once with the reason and removes the journal, so that
// the next run, once the node is wiped, uploads the snapshot again instead
// of waiting for a recovery that is over.
func TestARecoveryTalosFailedEndsItsJournal(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	env := w.env()
	env.Journal = filepath.Join(t.TempDir(), ".access", testStack, "restore-recovery.json")
	first := w.fresh.IPs(talosapitest.ControlPlane)[0]
	require.NoError(t, os.MkdirAll(filepath.Dir(env.Journal), 0o700))
	b, err := json.Marshal(map[string]any{
		"stack": testStack, "node": first, "backup": w.x.Manifest.Created, "snapshotSha256": w.x.Manifest.Snapshot.SHA256, "started": time.Now().UTC(),
	})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(env.Journal, b, 0o600))
	w.fresh.Node(first).SetEtcdServiceState("Failed")

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = restore.Run(ctx, w.req, env)
	require.ErrorIs(t, err, backup.ErrEtcdFailed, w.log.String())
	require.NoFileExists(t, env.Journal, "that recovery is over")
	w.nothingRecovered(t)
}
