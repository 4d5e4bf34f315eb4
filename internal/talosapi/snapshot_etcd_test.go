package talosapi_test

import (
	"bytes"
	"context"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/fluodata/talos-pulumi/internal/talosapi"
)

// startEtcd runs a real etcd 3.6 (the server Talos 1.12 and 1.13 run) on
// loopback ports of its own, in a directory of the test's, and returns a
// client of it.
func startEtcd(t *testing.T, dataDir string) *clientv3.Client {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = dataDir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	peer, _ := url.Parse("http://127.0.0.1:0")
	client, _ := url.Parse("http://127.0.0.1:0")
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.InitialCluster = cfg.Name + "=http://127.0.0.1:0"
	e, err := embed.StartEtcd(cfg)
	require.NoError(t, err)
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(20 * time.Second):
		t.Fatal("etcd did not start within 20 s")
	}
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Clients[0].Addr().String()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// The check a backup and a restore run on an etcd snapshot
// (talosapi.VerifySnapshot: etcd's sha256 trailer) agrees with real etcd
// 3.6 (issue 35, item D): the stream of its maintenance Snapshot call, as
// Talos passes it on, passes and restores with etcdutl's hash check into a
// data directory that a new etcd serves with the same keys; a byte flipped
// in the data, or the stream cut, fails both the check and etcdutl's
// restore.
func TestTheSnapshotCheckAgreesWithRealEtcd(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	cl := startEtcd(t, filepath.Join(dir, "source"))
	for i, k := range []string{"/registry/namespaces/default", "/registry/secrets/default/db-password"} {
		_, err := cl.Put(ctx, k, string(rune('a'+i)))
		require.NoError(t, err)
	}
	rc, err := cl.Snapshot(ctx)
	require.NoError(t, err)
	stream, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())

	restore := func(name string, data []byte) error {
		path := filepath.Join(dir, name+".db")
		require.NoError(t, os.WriteFile(path, data, 0o600))
		return snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
			SnapshotPath: path, Name: "cp-1", OutputDataDir: filepath.Join(dir, name),
			PeerURLs: []string{"http://127.0.0.1:2380"}, InitialCluster: "cp-1=http://127.0.0.1:2380",
		})
	}

	size, err := talosapi.VerifySnapshot(bytes.NewReader(stream))
	require.NoError(t, err, "a real snapshot passes the check")
	assert.Equal(t, int64(len(stream)), size)
	require.NoError(t, restore("whole", stream), "etcdutl restores it with its hash check")
	restored := startEtcd(t, filepath.Join(dir, "whole"))
	got, err := restored.Get(ctx, "/registry/secrets/default/db-password")
	require.NoError(t, err)
	require.Len(t, got.Kvs, 1)
	assert.Equal(t, "b", string(got.Kvs[0].Value), "the restored etcd serves the snapshot's keys")

	corrupt := bytes.Clone(stream)
	corrupt[len(corrupt)/2] ^= 0xff
	_, err = talosapi.VerifySnapshot(bytes.NewReader(corrupt))
	require.Error(t, err, "a flipped byte fails the check")
	require.Error(t, restore("corrupt", corrupt), "and etcdutl's restore")

	cut := stream[:len(stream)-100]
	_, err = talosapi.VerifySnapshot(bytes.NewReader(cut))
	require.Error(t, err, "a cut stream fails the check")
	require.Error(t, restore("cut", cut), "and etcdutl's restore")
}
