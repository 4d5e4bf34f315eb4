package backup_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/backup"
	"github.com/fluodata/talos-pulumi/internal/backupstore"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest/realetcd"
)

// Markers that must never reach a target in clear: etcd contents, the
// state and the stack file.
const (
	etcdMarker  = "ETCD-CONTENTS-MARKER"
	stateMarker = "STATE-EXPORT-MARKER"
	stackMarker = "STACK-FILE-MARKER"
)

// etcdKeys are cluster A's etcd contents.
var etcdKeys = map[string]string{
	"/registry/namespaces/default":          `{"kind":"Namespace","marker":"` + etcdMarker + `"}`,
	"/registry/secrets/default/db-password": strings.Repeat("p", 200<<10),
	"/registry/configmaps/default/settings": "a: b",
}

// client is a Talos API client of the fake cluster c, where the node
// "dead" is a control plane that refuses every connection.
func client(t *testing.T, c *talosapitest.Cluster) *talosapi.Client {
	t.Helper()
	crt, key := c.AdminCert()
	addr := func(node string) string {
		if node == "dead" {
			return "127.0.0.1:1"
		}
		return c.Address(node)
	}
	cl, err := talosapi.New(talosapi.Credentials{CA: c.CA(), Cert: crt, Key: key},
		talosapi.WithAddress(addr), talosapi.WithTimeouts(time.Second, 2*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

func fileStore(t *testing.T) (*backupstore.Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "backups")
	s, err := backupstore.Open(t.Context(), "file://"+dir, backupstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s, dir
}

// oneControlPlane is a cluster of one control plane holding keys, an
// identity and a file target.
func oneControlPlane(t *testing.T, keys map[string]string) (*talosapitest.Cluster, *age.X25519Identity, *backupstore.Store, string) {
	t.Helper()
	a := talosapitest.Start(t, talosapitest.Topology(1, 0, talosapitest.DefaultVersion, 40*time.Millisecond)...)
	a.SetEtcdKeys(keys)
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	store, dir := fileStore(t)
	return a, id, store, dir
}

func source(c *talosapitest.Cluster) backup.Source {
	return backup.Source{
		Stack: "homelab", Cluster: "lab", TalosVersion: talosapitest.DefaultVersion, KubernetesVersion: "1.35.0",
		ControlPlanes: append([]string{"dead"}, c.IPs(talosapitest.ControlPlane)...),
		StackFile:     []byte("config:\n  talos-cluster:cluster:\n    name: lab # " + stackMarker + "\n"), StackFileName: "Pulumi.homelab.yaml",
		State: []byte(`{"version":3,"deployment":{"secrets":"ciphertext","marker":"` + stateMarker + `"}}`),
	}
}

// The drill: a backup of cluster A (its first control plane dead) is
// written encrypted, read back with the identity, and recovered into a
// fresh cluster B, which then has A's etcd contents and one member per
// control plane. It is the code path of `make restore` once the machines
// are up (Recover), on the project's Talos fake with a real etcd
// (realetcd): the backup holds etcd's own snapshot, which etcdutl reads
// (its status gives A's revision and keys), and B's recovery restores it
// with etcdutl into a new etcd, which etcd's own client reads A's keys
// from at A's revision.
func TestBackupThenRecoverIntoFreshNodes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	a := realetcd.Start(t, talosapitest.Topology(3, 1, talosapitest.DefaultVersion, 40*time.Millisecond)...)
	a.SetEtcdKeys(etcdKeys)
	_, revision := realetcd.Read(t, a.EtcdEndpoint())
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	store, dir := fileStore(t)
	var log bytes.Buffer

	start := time.Now()
	res, err := backup.Take(ctx, source(a), client(t, a), store, backup.Options{
		Recipients: []age.Recipient{id.Recipient()}, Keep: backupstore.Policy{Last: 7}, Log: &log,
	})
	tookBackup := time.Since(start)
	require.NoError(t, err, log.String())
	assert.Contains(t, log.String(), "not taking the snapshot from dead")
	assert.Equal(t, "10.5.0.11", res.Manifest.SourceNode, "the first live control plane")
	require.NotNil(t, res.Manifest.SourceMember)
	assert.True(t, res.Manifest.SourceMember.Leader, "the leader gives the snapshot")
	assert.True(t, strings.HasPrefix(res.Name, "homelab/") && strings.HasSuffix(res.Name, ".tar.age"), res.Name)

	// Nothing of etcd, the state or the stack file is at the target in clear.
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path) //nolint:gosec // the test's own directory
		require.NoError(t, err)
		for _, m := range []string{etcdMarker, stateMarker, stackMarker, "db-password"} {
			assert.NotContains(t, string(b), m, "%s holds %s in clear", path, m)
		}
		return nil
	}))
	listed, err := backup.List(ctx, store, "homelab")
	require.NoError(t, err)
	require.Len(t, listed, 1)
	assert.Equal(t, "10.5.0.11", listed[0].Meta["source-node"])

	x, err := backup.Extract(ctx, store, res.Name, []age.Identity{id}, t.TempDir())
	require.NoError(t, err)
	assert.Equal(t, res.Manifest, x.Manifest)
	assert.Contains(t, string(x.State), stateMarker)
	assert.Contains(t, string(x.StackFile), stackMarker)
	st := realetcd.SnapshotStatus(t, x.SnapshotPath)
	assert.Equal(t, revision, st.Revision, "the backup holds A's etcd snapshot")
	assert.Equal(t, len(etcdKeys), st.TotalKey)

	b := realetcd.StartFresh(t, talosapitest.Topology(3, 1, talosapitest.DefaultVersion, 40*time.Millisecond)...)
	start = time.Now()
	got, err := backup.Recover(ctx, client(t, b), x, backup.Target{
		Cluster: "lab", TalosVersion: "v1.12.4", ControlPlanes: b.IPs(talosapitest.ControlPlane),
	}, &log, time.Second)
	tookRecover := time.Since(start)
	require.NoError(t, err, log.String())
	restored, restoredRevision := realetcd.Read(t, b.EtcdEndpoint())
	assert.Equal(t, etcdKeys, restored, "B's etcd serves A's etcd contents")
	assert.Equal(t, revision, restoredRevision, "at A's revision")
	assert.Equal(t, etcdKeys, b.EtcdKeys())
	boot := b.Events("etcd-bootstrap")
	require.Len(t, boot, 1)
	assert.Contains(t, boot[0].Args, fmt.Sprintf("revision=%d hash=%08x total-keys=%d", st.Revision, st.Hash, st.TotalKey),
		"B restored the backup's snapshot with etcdutl")
	assert.Len(t, got.Members, 3, "one member per control plane")
	assert.Equal(t, talosapitest.DefaultVersion, got.TalosVersion)
	t.Logf("3 control planes on the fakes with a real etcd: backup %s (%d bytes encrypted, snapshot %d bytes), recovery %s; members %v, %d keys at revision %d",
		tookBackup.Round(time.Millisecond), res.Size, res.Manifest.Snapshot.Size, tookRecover.Round(time.Millisecond), got.Members, len(restored), restoredRevision)
}

// A client certificate that expires within 30 days is named, with what to
// do, and its expiry recorded.
func TestABackupWarnsOfExpiringCertificates(t *testing.T) {
	t.Parallel()
	a, id, store, _ := oneControlPlane(t, map[string]string{"/k": "v"})
	now := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	src := source(a)
	src.Certificates = map[string]time.Time{"talosconfig": now.AddDate(0, 0, 10), "kubeconfig": now.AddDate(1, 0, 0)}
	var log bytes.Buffer
	res, err := backup.Take(t.Context(), src, client(t, a), store, backup.Options{
		Recipients: []age.Recipient{id.Recipient()}, Now: func() time.Time { return now }, Log: &log,
	})
	require.NoError(t, err)
	assert.Contains(t, log.String(), "warning: the talosconfig client certificate expires on 2026-12-06 (in 10 days): run `make up` to renew it")
	assert.NotContains(t, log.String(), "kubeconfig client certificate")
	assert.Equal(t, src.Certificates, res.Manifest.Certificates)
}

// A backup without a recipient is refused before a snapshot is taken.
func TestABackupNeedsARecipient(t *testing.T) {
	t.Parallel()
	a := talosapitest.Start(t, talosapitest.Topology(1, 0, talosapitest.DefaultVersion, 40*time.Millisecond)...)
	store, _ := fileStore(t)
	_, err := backup.Take(t.Context(), source(a), client(t, a), store, backup.Options{})
	require.ErrorContains(t, err, "no recipients")
	assert.Empty(t, a.Events("EtcdSnapshot"))
	listed, err := store.List(t.Context())
	require.NoError(t, err)
	assert.Empty(t, listed)
}

// A snapshot that fails etcd's hash on every control plane writes nothing.
func TestACorruptSnapshotWritesNoBackup(t *testing.T) {
	t.Parallel()
	a, id, store, _ := oneControlPlane(t, etcdKeys)
	a.SetSnapshotStream(talosapitest.SnapshotStream{Corrupt: true})
	_, err := backup.Take(t.Context(), source(a), client(t, a), store, backup.Options{Recipients: []age.Recipient{id.Recipient()}})
	require.ErrorIs(t, err, talosapi.ErrSnapshotCorrupt)
	listed, err := store.List(t.Context())
	require.NoError(t, err)
	assert.Empty(t, listed)
}

// The retention runs after each backup: the newest Last stay.
func TestTheRetentionKeepsTheNewest(t *testing.T) {
	t.Parallel()
	a, id, store, _ := oneControlPlane(t, map[string]string{"/k": "v"})
	var mu sync.Mutex
	now := time.Date(2026, 11, 1, 3, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); now = now.Add(time.Hour); return now }
	var names []string
	for range 4 {
		res, err := backup.Take(t.Context(), source(a), client(t, a), store, backup.Options{
			Recipients: []age.Recipient{id.Recipient()}, Keep: backupstore.Policy{Last: 2}, Now: clock,
		})
		require.NoError(t, err)
		names = append(names, res.Name)
	}
	listed, err := backup.List(t.Context(), store, "homelab")
	require.NoError(t, err)
	var kept []string
	for _, o := range listed {
		kept = append(kept, o.Name)
	}
	assert.Equal(t, []string{names[3], names[2]}, kept)
}

// A backup of another cluster, or of another Talos minor release, is
// refused before anything is sent to the new nodes.
func TestARecoveryRefusesABackupThatDoesNotFit(t *testing.T) {
	t.Parallel()
	m := backup.Manifest{Cluster: "lab", TalosVersion: "v1.12.4", Created: time.Date(2026, 11, 1, 3, 0, 0, 0, time.UTC)}
	require.NoError(t, backup.CheckFits(m, backup.Target{Cluster: "lab", TalosVersion: "v1.12.9"}))
	err := backup.CheckFits(m, backup.Target{Cluster: "prod", TalosVersion: "v1.13.0"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `it is of cluster "lab", the stack's is "prod"`)
	assert.Contains(t, err.Error(), "restore with cluster.talosVersion of the backup's minor release (v1.12)")

	b := talosapitest.StartFresh(t, talosapitest.Topology(1, 0, talosapitest.DefaultVersion, 40*time.Millisecond)...)
	_, err = backup.Recover(t.Context(), client(t, b), backup.Extracted{Manifest: m}, backup.Target{
		Cluster: "prod", TalosVersion: "v1.12.4", ControlPlanes: b.IPs(talosapitest.ControlPlane),
	}, &bytes.Buffer{}, time.Second)
	require.Error(t, err)
	assert.Empty(t, b.Events("EtcdRecover", "Bootstrap"), "nothing was sent")
}

// A backup that is not what was written (bytes appended, or cut short at
// the target) is refused whole: age's authentication fails, and nothing is
// taken for a backup.
func TestATruncatedBackupIsRefused(t *testing.T) {
	t.Parallel()
	a, id, store, dir := oneControlPlane(t, etcdKeys)
	res, err := backup.Take(t.Context(), source(a), client(t, a), store, backup.Options{Recipients: []age.Recipient{id.Recipient()}})
	require.NoError(t, err)
	path := filepath.Join(dir, filepath.FromSlash(res.Name))
	info, err := os.Stat(path)
	require.NoError(t, err)
	// Bytes after age's last chunk: the archive inside reads whole, but
	// the object is not what was written.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0) //nolint:gosec // the test's own file
	require.NoError(t, err)
	_, err = f.WriteString("trailing")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = backup.Extract(t.Context(), store, res.Name, []age.Identity{id}, t.TempDir())
	require.Error(t, err)

	for _, cut := range []int64{17 + 8, 64 << 10, info.Size() / 2} {
		require.NoError(t, os.Truncate(path, info.Size()+8-cut))
		_, err = backup.Extract(t.Context(), store, res.Name, []age.Identity{id}, t.TempDir())
		require.Error(t, err, "cut by %d bytes", cut)
	}
}

// etcd's Snapshot has no quorum check: a member cut off from the others
// streams a valid, old snapshot (issue 35, item A.5). The backup asks each
// control plane's member first and takes the snapshot from one that has a
// leader (the leader first), recording which in the manifest; with no
// member that has a leader, it takes none and says why.
func TestABackupTakesNoSnapshotFromAMemberWithoutALeader(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	a := talosapitest.Start(t, talosapitest.Topology(3, 0, talosapitest.DefaultVersion, 40*time.Millisecond)...)
	a.SetEtcdKeys(etcdKeys)
	cps := a.IPs(talosapitest.ControlPlane)
	a.Node(cps[0]).SetEtcdHealthy(false) // cut off: no leader in its status
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	store, _ := fileStore(t)
	var log bytes.Buffer
	src := source(a)
	src.ControlPlanes = cps
	res, err := backup.Take(ctx, src, client(t, a), store, backup.Options{Recipients: []age.Recipient{id.Recipient()}, Log: &log})
	require.NoError(t, err, log.String())
	assert.NotEqual(t, cps[0], res.Manifest.SourceNode, "not the member cut off from the quorum")
	assert.Contains(t, log.String(), "not taking the snapshot from "+cps[0]+": its etcd member has no leader")
	require.NotNil(t, res.Manifest.SourceMember)
	assert.NotZero(t, res.Manifest.SourceMember.ID)
	for _, e := range a.Events("EtcdSnapshot") {
		assert.NotEqual(t, cps[0], e.Node, "no snapshot asked of it")
	}

	// Quorum lost: no member has a leader.
	a.Node(cps[1]).SetEtcdHealthy(false)
	_, err = backup.Take(ctx, src, client(t, a), store, backup.Options{Recipients: []age.Recipient{id.Recipient()}, Log: &log})
	require.ErrorContains(t, err, "no control plane's etcd member has a leader and is caught up")
}

// A failing snapshot Job is seen nowhere else (issue 35, item B.8): the
// newest in-cluster snapshot older than two periods of the schedule, or
// none, is stale.
func TestInClusterFreshness(t *testing.T) {
	t.Parallel()
	newest := time.Date(2026, 11, 28, 0, 0, 5, 0, time.UTC)
	snaps := []backupstore.Object{{Name: "homelab/in-cluster/0123456789abcdef/lab-1.snap.age", Created: newest}}
	for _, tc := range []struct {
		now   time.Time
		snaps []backupstore.Object
		stale bool
		want  string
	}{
		{newest.Add(5 * time.Hour), snaps, false, "is 5h0m0s old"},
		{newest.Add(11 * time.Hour), snaps, false, "is 11h0m0s old"},
		{newest.Add(12*time.Hour + time.Minute), snaps, true, "two runs of schedule"},
		{newest, nil, true, "no in-cluster snapshot at the target"},
	} {
		f, err := backup.InClusterFreshness("0 */6 * * *", tc.snaps, tc.now)
		require.NoError(t, err)
		assert.Equal(t, tc.stale, f.Stale, f.Message)
		assert.Contains(t, f.Message, tc.want)
	}
	_, err := backup.InClusterFreshness("every day", snaps, newest)
	require.ErrorContains(t, err, "unable to read backup.schedule")
}

// failingRestore is a control plane on which Talos took the snapshot and
// the bootstrap, then failed to restore it: as machined does, it answered
// the bootstrap at once, and its etcd service is Failed with the pre
// stage's error; no etcd answers.
type failingRestore struct{ bootstraps int }

func (f *failingRestore) EtcdRecover(context.Context, string, io.Reader) error { return nil }
func (f *failingRestore) Bootstrap(context.Context, string, bool) error {
	f.bootstraps++
	return nil
}

func (f *failingRestore) EtcdMemberList(context.Context, string) ([]talosapi.EtcdMember, error) {
	return nil, errors.New("rpc error: code = Unavailable desc = etcd is not running")
}

func (f *failingRestore) ServiceList(context.Context, string) ([]talosapi.Service, error) {
	return []talosapi.Service{{ID: "apid", State: "Running", Healthy: true}, {ID: "etcd", State: "Failed", HealthUnknown: true,
		LastEvent: "Failed to run pre stage: error recovering from the snapshot: expected sha256 [1 2 3], got [4 5 6]"}}, nil
}
func (f *failingRestore) Version(context.Context, string) (string, error) { return "v1.12.4", nil }

// A snapshot Talos cannot restore fails the recovery at once, with Talos's
// reason and what to do, instead of waiting 30 minutes for members that
// never come.
func TestARecoveryStopsWhenEtcdFailsToRestore(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	a := talosapitest.Start(t, talosapitest.Topology(1, 0, talosapitest.DefaultVersion, 0)...)
	a.SetEtcdKeys(etcdKeys)
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	store, _ := fileStore(t)
	res, err := backup.Take(ctx, source(a), client(t, a), store, backup.Options{Recipients: []age.Recipient{id.Recipient()}, Keep: backupstore.Policy{Last: 7}, Log: io.Discard})
	require.NoError(t, err)
	x, err := backup.Extract(ctx, store, res.Name, []age.Identity{id}, t.TempDir())
	require.NoError(t, err)

	api := &failingRestore{}
	start := time.Now()
	_, err = backup.Recover(ctx, api, x, backup.Target{Cluster: "lab", TalosVersion: "v1.12.4", ControlPlanes: []string{"10.5.0.10"}}, io.Discard, time.Second)
	require.ErrorIs(t, err, backup.ErrEtcdFailed)
	assert.Contains(t, err.Error(), "expected sha256", "Talos's reason")
	assert.Contains(t, err.Error(), "reset --system-labels-to-wipe EPHEMERAL", "what to do")
	assert.Less(t, time.Since(start), 5*time.Second, "at once, not after the join timeout")
	assert.Equal(t, 1, api.bootstraps)
}
