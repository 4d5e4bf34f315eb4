package talosapitest_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest/realetcd"
)

// realCtx bounds a test of the real etcd: each start takes a few hundred
// milliseconds, more under the race detector.
func realCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// machineryClient is talosctl's client of one node of c, which uploads what
// it is given, unchecked (talosapi's client refuses a corrupt snapshot
// before its end).
func machineryClient(t *testing.T, ctx context.Context, c *talosapitest.Cluster, node string) *client.Client {
	t.Helper()
	crt, key := c.AdminCert()
	tc, err := (talosapi.Credentials{CA: c.CA(), Cert: crt, Key: key}).TLSConfig()
	require.NoError(t, err)
	cl, err := client.New(ctx, client.WithTLSConfig(tc), client.WithEndpoints(c.Address(node)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

func readSnapshot(t *testing.T, ctx context.Context, cl *client.Client) []byte {
	t.Helper()
	r, err := cl.EtcdSnapshot(ctx, &machine.EtcdSnapshotRequest{})
	require.NoError(t, err)
	defer func() { _ = r.Close() }()
	data, err := io.ReadAll(r)
	require.NoError(t, err)
	return data
}

// etcdService is the etcd service of a node as its ServiceList gives it:
// its state and the message of its last event.
func etcdService(t *testing.T, ctx context.Context, cl *client.Client) (state, msg string) {
	t.Helper()
	resp, err := cl.ServiceList(ctx)
	require.NoError(t, err)
	for _, s := range resp.GetMessages()[0].GetServices() {
		if s.GetId() == "etcd" {
			if ev := s.GetEvents().GetEvents(); len(ev) > 0 {
				msg = ev[len(ev)-1].GetMsg()
			}
			return s.GetState(), msg
		}
	}
	t.Fatal("no etcd service")
	return "", ""
}

// A cluster of realetcd holds its keys in a real etcd and streams that
// etcd's own snapshot: etcdutl reads it (its status gives etcd's revision
// and keys) and restores it with its hash check, and refuses it with a
// byte flipped. It fails if the mode falls back to the fake's made-up
// snapshot, which etcdutl cannot open.
func TestTheRealEtcdsSnapshotIsEtcdsOwn(t *testing.T) {
	t.Parallel()
	ctx := realCtx(t)
	c := realetcd.Start(t, talosapitest.Topology(1, 1, "", reboot)...)
	require.True(t, c.RealEtcd())
	c.SetEtcdKeys(map[string]string{"/registry/a": "1", "/registry/b": "2"})
	keys := map[string]string{"/registry/a": "1", "/registry/c": "3"}
	c.SetEtcdKeys(keys)
	assert.Equal(t, keys, c.EtcdKeys(), "b deleted, c put")
	served, revision := realetcd.Read(t, c.EtcdEndpoint())
	assert.Equal(t, keys, served, "etcd's own client reads the keys")
	assert.Equal(t, int64(3), revision, "each SetEtcdKeys is one transaction")

	cp1 := machineryClient(t, ctx, c, "10.5.0.11")
	data := readSnapshot(t, ctx, cp1)
	require.Equal(t, sha256.Size, len(data)%512, "etcd's sha256 trailer")
	size, err := talosapi.VerifySnapshot(bytes.NewReader(data))
	require.NoError(t, err)
	assert.Equal(t, int64(len(data)), size)

	dir := t.TempDir()
	manager := snapshot.NewV3(zap.NewNop())
	restore := func(name string, data []byte) error {
		path := filepath.Join(dir, name+".db")
		require.NoError(t, os.WriteFile(path, data, 0o600))
		return manager.Restore(snapshot.RestoreConfig{
			SnapshotPath: path, Name: "cp-1", OutputDataDir: filepath.Join(dir, name),
			PeerURLs: []string{"https://10.5.0.11:2380"}, InitialCluster: "cp-1=https://10.5.0.11:2380",
		})
	}
	path := filepath.Join(dir, "status.db")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	st := realetcd.SnapshotStatus(t, path) // etcdutl opens it: a bbolt file
	assert.Equal(t, revision, st.Revision)
	assert.Equal(t, len(keys), st.TotalKey)
	require.NoError(t, restore("whole", data), "etcdutl restores it with its hash check")

	c.SetSnapshotStream(talosapitest.SnapshotStream{Corrupt: true, ChunkSize: 1000})
	bad := readSnapshot(t, ctx, cp1)
	// A new snapshot of a real etcd need not have the first one's size
	// (its free pages vary): the flipped byte shows in the hash.
	_, err = talosapi.VerifySnapshot(bytes.NewReader(bad))
	require.Error(t, err, "the hash check refuses the flipped byte")
	assert.ErrorContains(t, restore("corrupt", bad), "expected sha256", "a flipped byte fails etcdutl's restore")

	r, err := machineryClient(t, ctx, c, "10.5.0.21").EtcdSnapshot(ctx, &machine.EtcdSnapshotRequest{})
	if err == nil {
		_, err = io.ReadAll(r)
		_ = r.Close()
	}
	assert.Equal(t, codes.Unimplemented, status.Code(err), "a worker has no etcd")
}

// A recovery on a fresh cluster of realetcd restores the uploaded snapshot
// with etcdutl and a new etcd serves it: etcd's own client reads the
// source's keys at the source's revision, the bootstrap's event gives
// what etcdutl's status found, and the other control plane joins.
func TestTheRealEtcdRecoversFromTheUploadedSnapshot(t *testing.T) {
	t.Parallel()
	ctx := realCtx(t)
	a := realetcd.Start(t, talosapitest.Topology(1, 0, "", reboot)...)
	keys := map[string]string{"/registry/namespaces/default": "ns", "/registry/secrets/default/db": "hunter2"}
	a.SetEtcdKeys(keys)
	_, revision := realetcd.Read(t, a.EtcdEndpoint())
	data := readSnapshot(t, ctx, machineryClient(t, ctx, a, "10.5.0.11"))

	b := realetcd.StartFresh(t, talosapitest.Topology(2, 0, "", reboot)...)
	assert.Empty(t, b.EtcdEndpoint(), "no etcd before the bootstrap")
	assert.Empty(t, b.EtcdKeys())
	cp1 := machineryClient(t, ctx, b, "10.5.0.11")
	_, err := cp1.EtcdRecover(ctx, bytes.NewReader(data))
	require.NoError(t, err)
	require.True(t, b.Node("10.5.0.11").HasRecoverySnapshot())
	require.NoError(t, cp1.Bootstrap(ctx, &machine.BootstrapRequest{RecoverEtcd: true}))

	assert.Equal(t, keys, b.EtcdKeys())
	served, restoredRevision := realetcd.Read(t, b.EtcdEndpoint())
	assert.Equal(t, keys, served)
	assert.Equal(t, revision, restoredRevision, "the snapshot's revision")
	assert.NotEqual(t, a.EtcdEndpoint(), b.EtcdEndpoint(), "an etcd of its own")
	assert.False(t, b.Node("10.5.0.11").HasRecoverySnapshot(), "restored, and deleted")
	assert.Equal(t, []string{"cp-1", "cp-2"}, b.Members())
	assert.Empty(t, b.RestoredFrom(), "a real snapshot carries no identity of the fake's")
	boot := b.Events("etcd-bootstrap")
	require.Len(t, boot, 1)
	assert.Contains(t, boot[0].Args, fmt.Sprintf("keys=2 revision=%d hash=", revision))
	assert.Contains(t, boot[0].Args, "total-keys=2")
	state, _ := etcdService(t, ctx, cp1)
	assert.Equal(t, "Running", state)

	err = cp1.Bootstrap(ctx, &machine.BootstrapRequest{})
	assert.Equal(t, codes.AlreadyExists, status.Code(err))
}

// What Talos does with a recovery that cannot restore, which the fake's
// own etcd does not show: the upload is stored unchecked and the bootstrap
// answers OK; the etcd service then fails in its pre stage with
// etcdutl's error (machined's recoverFromSnapshot) and runs no member.
// Without an upload, the status fails and the data directory stays empty:
// a bootstrap is taken again. A flipped byte fails the restore's hash
// check after etcdutl wrote into the data directory: Talos refuses every
// bootstrap from then on ("etcd data directory is not empty") until the
// node's EPHEMERAL is wiped, after which the recovery works.
func TestARealEtcdRecoveryThatCannotRestoreFailsAsInTalos(t *testing.T) {
	t.Parallel()
	ctx := realCtx(t)
	a := realetcd.Start(t, talosapitest.Topology(1, 0, "", reboot)...)
	keys := map[string]string{"/registry/a": "1"}
	a.SetEtcdKeys(keys)
	data := readSnapshot(t, ctx, machineryClient(t, ctx, a, "10.5.0.11"))

	b := realetcd.StartFresh(t, talosapitest.Topology(1, 0, "", reboot)...)
	cp1 := machineryClient(t, ctx, b, "10.5.0.11")

	require.NoError(t, cp1.Bootstrap(ctx, &machine.BootstrapRequest{RecoverEtcd: true}), "Talos answers before it restores")
	state, msg := etcdService(t, ctx, cp1)
	assert.Equal(t, "Failed", state)
	assert.Regexp(t, `^Failed to run pre stage: error verifying snapshot: stat .*: no such file or directory$`, msg)
	assert.Empty(t, b.Members())
	_, err := cp1.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})
	assert.ErrorContains(t, err, "etcd is not running on this node")

	corrupt := bytes.Clone(data)
	corrupt[len(corrupt)/2] ^= 0xff
	_, err = cp1.EtcdRecover(ctx, bytes.NewReader(corrupt))
	require.NoError(t, err, "Talos stores the upload unchecked")
	require.True(t, b.Node("10.5.0.11").HasRecoverySnapshot())
	require.NoError(t, cp1.Bootstrap(ctx, &machine.BootstrapRequest{RecoverEtcd: true}), "an empty data directory: taken again")
	state, msg = etcdService(t, ctx, cp1)
	assert.Equal(t, "Failed", state)
	assert.Regexp(t, `^Failed to run pre stage: error recovering from the snapshot: expected sha256 \[`, msg)
	assert.True(t, b.Node("10.5.0.11").HasRecoverySnapshot(), "Talos keeps the file of a failed restore")
	assert.False(t, b.Bootstrapped())
	assert.Empty(t, b.EtcdKeys())

	_, err = cp1.EtcdRecover(ctx, bytes.NewReader(data))
	require.NoError(t, err)
	err = cp1.Bootstrap(ctx, &machine.BootstrapRequest{RecoverEtcd: true})
	assert.Equal(t, codes.AlreadyExists, status.Code(err), "what the failed restore left refuses it")
	assert.ErrorContains(t, err, "etcd data directory is not empty")

	require.NoError(t, connect(t, b).ResetEphemeral(ctx, "10.5.0.11"))
	require.Eventually(t, func() bool { return b.Node("10.5.0.11").Boots() == 1 }, 5*time.Second, time.Millisecond)
	assert.False(t, b.Node("10.5.0.11").HasRecoverySnapshot(), "the upload was on EPHEMERAL")
	state, _ = etcdService(t, ctx, cp1)
	assert.Equal(t, "Preparing", state, "waiting for a bootstrap again")
	_, err = cp1.EtcdRecover(ctx, bytes.NewReader(data))
	require.NoError(t, err)
	require.NoError(t, cp1.Bootstrap(ctx, &machine.BootstrapRequest{RecoverEtcd: true}))
	assert.Equal(t, keys, b.EtcdKeys())
	state, _ = etcdService(t, ctx, cp1)
	assert.Equal(t, "Running", state)
}
