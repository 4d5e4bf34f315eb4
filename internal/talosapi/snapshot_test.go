package talosapi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
)

// clusterKeys are the contents of cluster A's etcd: one value large enough
// that its snapshot comes in many chunks.
var clusterKeys = map[string]string{
	"/registry/namespaces/default":              `{"kind":"Namespace"}`,
	"/registry/secrets/kube-system/bootstrap":   strings.Repeat("s", 300<<10),
	"/registry/configmaps/default/cluster-info": "a: b",
}

// snapshotOf takes a snapshot of a cluster with clusterKeys from its
// first control plane.
func snapshotOf(t *testing.T) (*talosapitest.Cluster, []byte) {
	t.Helper()
	a := talosapitest.Start(t, talosapitest.Topology(3, 0, oldVersion, reboot)...)
	a.SetEtcdKeys(clusterKeys)
	var buf bytes.Buffer
	_, err := newClient(t, a, adminCreds(a)).EtcdSnapshot(ctxT(t), "10.5.0.11", &buf)
	require.NoError(t, err)
	return a, buf.Bytes()
}

func TestEtcdSnapshotIsVerified(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(3, 1, oldVersion, reboot)...)
	c.SetEtcdKeys(clusterKeys)
	cl := newClient(t, c, adminCreds(c))
	ctx := ctxT(t)

	var buf bytes.Buffer
	snap, err := cl.EtcdSnapshot(ctx, "10.5.0.12", &buf)
	require.NoError(t, err)
	sum := sha256.Sum256(buf.Bytes())
	assert.Equal(t, "10.5.0.12", snap.Node)
	assert.Equal(t, int64(buf.Len()), snap.Size)
	assert.Greater(t, snap.Size, int64(300<<10))
	assert.Equal(t, hex.EncodeToString(sum[:]), snap.SHA256, "the sha256 of the whole file")
	assert.Positive(t, snap.Took)
	events := c.Events("EtcdSnapshot")
	require.Len(t, events, 1)
	assert.Equal(t, "10.5.0.12", events[0].Node)
	assert.Empty(t, events[0].Err)

	// The file as stored, checked before a restore.
	path := filepath.Join(t.TempDir(), "etcd.snapshot")
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o600))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	size, err := talosapi.VerifySnapshot(f)
	require.NoError(t, err)
	assert.Equal(t, snap.Size, size)

	// A worker has no etcd.
	_, err = cl.EtcdSnapshot(ctx, "10.5.0.21", io.Discard)
	require.Error(t, err)
	assert.Equal(t, codes.Unimplemented, status.Code(err))
	assert.Contains(t, err.Error(), "unable to take an etcd snapshot of node 10.5.0.21: rpc error: code = Unimplemented desc = etcd snapshot is only available on control plane nodes")
	assert.NotErrorIs(t, err, talosapi.ErrSnapshotCorrupt)
}

func TestEtcdSnapshotRefusesACorruptStream(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(1, 0, oldVersion, reboot)...)
	c.SetEtcdKeys(clusterKeys)
	c.SetSnapshotStream(talosapitest.SnapshotStream{Corrupt: true})
	cl := newClient(t, c, adminCreds(c))

	var buf bytes.Buffer
	_, err := cl.EtcdSnapshot(ctxT(t), "10.5.0.11", &buf)
	require.ErrorIs(t, err, talosapi.ErrSnapshotCorrupt)
	assert.NotErrorIs(t, err, talosapi.ErrUnreachable)
	assert.Contains(t, err.Error(), "unable to take an etcd snapshot of node 10.5.0.11: etcd snapshot is corrupt: its sha256 trailer is ")
	_, err = talosapi.VerifySnapshot(bytes.NewReader(buf.Bytes()))
	assert.ErrorIs(t, err, talosapi.ErrSnapshotCorrupt, "what was written fails the check as well")
}

// etcdLike is a snapshot in etcd's form: a body of whole 512-byte blocks,
// then its sha256.
func etcdLike(blocks int) []byte {
	body := bytes.Repeat([]byte("0123456789abcdef"), blocks*512/16)
	for i := range body {
		body[i] ^= byte(i * 7)
	}
	sum := sha256.Sum256(body)
	return append(body, sum[:]...)
}

func TestVerifySnapshot(t *testing.T) {
	t.Parallel()
	good := etcdLike(70)
	flip := func(at int) []byte {
		b := bytes.Clone(good)
		b[at] ^= 1
		return b
	}
	for name, r := range map[string]io.Reader{
		"whole":           bytes.NewReader(good),
		"a byte per read": iotest.OneByteReader(bytes.NewReader(good)),
		"half reads":      iotest.HalfReader(bytes.NewReader(good)),
		"data with EOF":   iotest.DataErrReader(bytes.NewReader(good)),
		"odd chunks":      &chunkReader{data: good, sizes: []int{1, 31, 33, 5, 32, 64, 4096, 7}},
	} {
		size, err := talosapi.VerifySnapshot(r)
		require.NoError(t, err, name)
		assert.Equal(t, int64(len(good)), size, name)
	}

	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"empty":                {nil, "etcd snapshot is corrupt: it is empty"},
		"a byte of the body":   {flip(1000), "etcd snapshot is corrupt: its sha256 trailer is "},
		"the first byte":       {flip(0), "its sha256 trailer is "},
		"a byte of the hash":   {flip(len(good) - 1), "its sha256 trailer is "},
		"cut by a byte":        {good[:len(good)-1], "etcd snapshot is corrupt: its size (35871 bytes) is not that of a database with etcd's sha256 trailer"},
		"cut by a block":       {good[:len(good)-512], "its sha256 trailer is "},
		"no hash":              {good[:len(good)-32], "is not that of a database with etcd's sha256 trailer"},
		"a hash alone":         {good[len(good)-32:], "its sha256 trailer is "},
		"a file of other data": {[]byte("not a snapshot\n"), "is not that of a database"},
	} {
		size, err := talosapi.VerifySnapshot(iotest.OneByteReader(bytes.NewReader(tc.data)))
		require.ErrorIs(t, err, talosapi.ErrSnapshotCorrupt, name)
		assert.Contains(t, err.Error(), "unable to verify the etcd snapshot: ", name)
		assert.Contains(t, err.Error(), tc.want, name)
		assert.Equal(t, int64(len(tc.data)), size, name)
	}

	// A read that fails is not a corrupt snapshot.
	_, err := talosapi.VerifySnapshot(io.MultiReader(bytes.NewReader(good[:100]), iotest.ErrReader(io.ErrClosedPipe)))
	require.ErrorIs(t, err, io.ErrClosedPipe)
	assert.NotErrorIs(t, err, talosapi.ErrSnapshotCorrupt)
}

// chunkReader returns data in reads of the given sizes, in turn.
type chunkReader struct {
	data  []byte
	sizes []int
	i     int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(r.data), r.sizes[r.i%len(r.sizes)])
	r.i++
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

// cancelWriter cancels the run at its first write.
type cancelWriter struct {
	cancel context.CancelFunc
	mu     sync.Mutex
	at     time.Time
}

func (w *cancelWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.at.IsZero() {
		w.at = time.Now()
		w.cancel()
	}
	return len(p), nil
}

func TestEtcdSnapshotStopsWhenTheRunIsCancelled(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(1, 0, oldVersion, reboot)...)
	const delay = 500 * time.Millisecond // ten chunks: five seconds, if the cancellation did not stop it
	c.SetSnapshotStream(talosapitest.SnapshotStream{ChunkSize: 64, Delay: delay})
	cl := newClient(t, c, adminCreds(c))

	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	w := &cancelWriter{cancel: cancel}
	_, err := cl.EtcdSnapshot(ctx, "10.5.0.11", w)
	returned := time.Now()
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, talosapi.ErrSnapshotCorrupt)
	assert.NotErrorIs(t, err, talosapi.ErrUnreachable)
	w.mu.Lock()
	defer w.mu.Unlock()
	require.False(t, w.at.IsZero())
	assert.Less(t, returned.Sub(w.at), delay/2, "at once, not at the next chunk")
	assert.Contains(t, err.Error(), "unable to take an etcd snapshot of node 10.5.0.11: the run was cancelled after ")
	assert.Contains(t, err.Error(), "last seen: 64 B received")
	// The node's stream ended with the call.
	require.Eventually(t, func() bool {
		e := c.Events("EtcdSnapshot")
		return len(e) == 1 && e[0].Err != ""
	}, time.Second, 5*time.Millisecond)
}

// The download says how far it got, every `every`: a snapshot of
// hundreds of megabytes takes minutes on a slow uplink.
func TestEtcdSnapshotReportsProgress(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(1, 0, oldVersion, reboot)...)
	// 544 bytes in chunks of 32, 20ms apart: about 320ms.
	c.SetSnapshotStream(talosapitest.SnapshotStream{ChunkSize: 32, Delay: 20 * time.Millisecond})
	cl := newClient(t, c, adminCreds(c))

	const every = 25 * time.Millisecond
	l := newProgressLog()
	snap, err := cl.EtcdSnapshot(ctxT(t), "10.5.0.11", io.Discard, talosapi.WithProgress(l.report, every))
	end := time.Since(l.start)
	require.NoError(t, err)
	msgs := l.messages()
	silence := l.longestSilence(end)
	t.Logf("%d reports in %s, longest silence %s", len(msgs), end.Round(time.Millisecond), silence.Round(time.Millisecond))
	assert.GreaterOrEqual(t, len(msgs), 3)
	assert.LessOrEqual(t, silence, end/2+every, "loose: a loaded machine runs the reporter late")
	for _, m := range msgs {
		assert.True(t, strings.HasPrefix(m, "waiting for the etcd snapshot of node 10.5.0.11 ("), m)
		if !strings.HasSuffix(m, "): last seen: no answer yet") {
			assert.Regexp(t, `\): last seen: \d+ B received$`, m)
		}
	}
	time.Sleep(3 * every)
	assert.Len(t, l.messages(), len(msgs), "no report once the download has returned")
	assert.Equal(t, int64(544), snap.Size)
}

// A node that stops sending is cut after the read timeout, not after the
// snapshot's hour.
func TestEtcdSnapshotOfANodeThatStopsSending(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(1, 0, oldVersion, reboot)...)
	c.SetSnapshotStream(talosapitest.SnapshotStream{ChunkSize: 64, Delay: 3 * time.Second})
	const read = 200 * time.Millisecond
	cl, err := talosapi.New(adminCreds(c), talosapi.WithAddress(c.Address), talosapi.WithTimeouts(read, time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })

	start := time.Now()
	_, err = cl.EtcdSnapshot(ctxT(t), "10.5.0.11", io.Discard)
	took := time.Since(start)
	require.ErrorIs(t, err, talosapi.ErrTimeout)
	assert.NotErrorIs(t, err, talosapi.ErrSnapshotCorrupt)
	assert.Contains(t, err.Error(), "unable to take an etcd snapshot of node 10.5.0.11: timed out: the node took the call, and the stream made no progress for 200ms")
	assert.GreaterOrEqual(t, took, read)
	assert.Less(t, took, 2*time.Second)

	// A node that is off behind a router: nothing answers at all.
	silent := talosapitest.Topology(1, 0, oldVersion, reboot)
	silent[0].Blackhole = true
	d := talosapitest.Start(t, silent...)
	d.Node("10.5.0.11").PowerOff()
	cl2, err := talosapi.New(adminCreds(d), talosapi.WithAddress(d.Address), talosapi.WithTimeouts(read, time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl2.Close() })
	start = time.Now()
	_, err = cl2.EtcdSnapshot(ctxT(t), "10.5.0.11", io.Discard)
	took = time.Since(start)
	require.ErrorIs(t, err, talosapi.ErrUnreachable)
	assert.NotErrorIs(t, err, talosapi.ErrTimeout)
	assert.Less(t, took, 2*time.Second)
}

// The restore drill on the Talos side: a snapshot of cluster A, checked
// and stored, uploaded to a control plane of a fresh cluster B, which
// bootstraps etcd from it: B has A's keys, and a member per control plane.
func TestRestoreASnapshotIntoAFreshCluster(t *testing.T) {
	t.Parallel()
	a, data := snapshotOf(t)
	path := filepath.Join(t.TempDir(), "etcd.snapshot")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	ctx := ctxT(t)

	b := talosapitest.StartFresh(t, talosapitest.Topology(3, 1, oldVersion, reboot)...)
	cl := newClient(t, b, adminCreds(b))
	require.False(t, b.Bootstrapped())
	assert.Empty(t, b.Members())
	_, err := cl.EtcdStatus(ctx, "10.5.0.11")
	require.Error(t, err, "no etcd before the bootstrap")

	// A recovery needs a snapshot on the node.
	err = cl.Bootstrap(ctx, "10.5.0.11", true)
	require.Error(t, err)
	assert.Equal(t, codes.FailedPrecondition, status.Code(err))
	assert.Contains(t, err.Error(), "unable to bootstrap etcd on node 10.5.0.11 from the uploaded snapshot: ")
	assert.False(t, b.Bootstrapped())

	// A worker takes none.
	err = cl.EtcdRecover(ctx, "10.5.0.21", bytes.NewReader(data))
	require.Error(t, err)
	assert.Equal(t, codes.Unimplemented, status.Code(err))

	f, err := os.Open(path)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	_, err = talosapi.VerifySnapshot(f)
	require.NoError(t, err)
	_, err = f.Seek(0, io.SeekStart)
	require.NoError(t, err)
	require.NoError(t, cl.EtcdRecover(ctx, "10.5.0.11", f))
	assert.True(t, b.Node("10.5.0.11").HasRecoverySnapshot())
	require.NoError(t, cl.Bootstrap(ctx, "10.5.0.11", true))

	assert.Equal(t, clusterKeys, b.EtcdKeys())
	assert.Equal(t, a.Identity(), b.RestoredFrom())
	assert.NotEqual(t, a.Identity(), b.Identity())
	assert.Equal(t, []string{"cp-1", "cp-2", "cp-3"}, b.Members())
	assert.False(t, b.Node("10.5.0.11").HasRecoverySnapshot(), "restored, and deleted")
	require.NoError(t, talosapi.EtcdQuorumSafe(ctx, cl, b.IPs(talosapitest.ControlPlane), ""))
	members, err := cl.EtcdMemberList(ctx, "10.5.0.13")
	require.NoError(t, err)
	assert.Len(t, members, 3)

	// Once only, on any node.
	for _, node := range []string{"10.5.0.11", "10.5.0.12"} {
		err = cl.Bootstrap(ctx, node, false)
		require.ErrorIs(t, err, talosapi.ErrAlreadyBootstrapped, node)
		assert.Equal(t, codes.AlreadyExists, status.Code(err), node)
		assert.Contains(t, err.Error(), "unable to bootstrap etcd on node "+node+": etcd is already bootstrapped: ", node)
	}
	assert.Equal(t, clusterKeys, b.EtcdKeys())

	// B's snapshot holds A's keys now.
	var again bytes.Buffer
	_, err = cl.EtcdSnapshot(ctx, "10.5.0.13", &again)
	require.NoError(t, err)
	assert.Contains(t, again.String(), `"/registry/configmaps/default/cluster-info":"a: b"`)

	var log []string
	for _, e := range b.Events("Bootstrap", "EtcdRecover", "recovery-stored", "etcd-bootstrap", "etcd-join") {
		s := strings.TrimSpace(e.Node + " " + e.Call + " " + e.Args)
		if e.Err != "" {
			s += " -> error"
		}
		log = append(log, s)
	}
	assert.Equal(t, []string{
		"10.5.0.11 Bootstrap recover=true skipHashCheck=false -> error",
		"10.5.0.21 EtcdRecover -> error",
		"10.5.0.11 EtcdRecover",
		fmt.Sprintf("10.5.0.11 recovery-stored bytes=%d", len(data)),
		"10.5.0.11 Bootstrap recover=true skipHashCheck=false",
		"10.5.0.11 etcd-bootstrap keys=3 revision=2 from=" + a.Identity(),
		"10.5.0.12 etcd-join bootstrapped by 10.5.0.11",
		"10.5.0.13 etcd-join bootstrapped by 10.5.0.11",
		"10.5.0.11 Bootstrap recover=false skipHashCheck=false -> error",
		"10.5.0.12 Bootstrap recover=false skipHashCheck=false -> error",
	}, log)
}

// EtcdRecover checks the snapshot as it sends it, and abandons the upload
// of one that fails: the node keeps nothing.
func TestEtcdRecoverRefusesACorruptSnapshot(t *testing.T) {
	t.Parallel()
	_, data := snapshotOf(t)
	b := talosapitest.StartFresh(t, talosapitest.Topology(1, 0, oldVersion, reboot)...)
	cl := newClient(t, b, adminCreds(b))
	ctx := ctxT(t)

	corrupt := bytes.Clone(data)
	corrupt[len(corrupt)/3] ^= 0xff
	for name, bad := range map[string][]byte{"flipped": corrupt, "cut": data[:len(data)-100], "empty": nil} {
		err := cl.EtcdRecover(ctx, "10.5.0.11", bytes.NewReader(bad))
		require.ErrorIs(t, err, talosapi.ErrSnapshotCorrupt, name)
		assert.Contains(t, err.Error(), "unable to upload an etcd snapshot to node 10.5.0.11: ", name)
		assert.False(t, b.Node("10.5.0.11").HasRecoverySnapshot(), name)
	}
	assert.Empty(t, b.Events("recovery-stored"))

	// The last bytes of a read that also ends the file are sent (the
	// machinery client's EtcdRecover would drop them).
	require.NoError(t, cl.EtcdRecover(ctx, "10.5.0.11", iotest.DataErrReader(bytes.NewReader(data))))
	assert.True(t, b.Node("10.5.0.11").HasRecoverySnapshot())

	// A failing source is its own error.
	err := cl.EtcdRecover(ctx, "10.5.0.11", iotest.ErrReader(errors.New("disk on fire")))
	require.Error(t, err)
	assert.NotErrorIs(t, err, talosapi.ErrSnapshotCorrupt)
	assert.Contains(t, err.Error(), "disk on fire")
}

func TestBootstrapAFreshCluster(t *testing.T) {
	t.Parallel()
	b := talosapitest.StartFresh(t, talosapitest.Topology(3, 1, oldVersion, reboot)...)
	cl := newClient(t, b, adminCreds(b))
	ctx := ctxT(t)

	err := cl.Bootstrap(ctx, "10.5.0.21", false)
	require.Error(t, err)
	assert.Equal(t, codes.FailedPrecondition, status.Code(err))
	assert.Contains(t, err.Error(), "unable to bootstrap etcd on node 10.5.0.21: rpc error: code = FailedPrecondition desc = bootstrap can only be performed on a control plane node")

	require.NoError(t, cl.Bootstrap(ctx, "10.5.0.12", false))
	assert.Equal(t, []string{"cp-2", "cp-1", "cp-3"}, b.Members())
	assert.Empty(t, b.EtcdKeys())
	assert.Empty(t, b.RestoredFrom())
	require.NoError(t, talosapi.EtcdQuorumSafe(ctx, cl, b.IPs(talosapitest.ControlPlane), ""))
}
