// Package realetcd runs a real etcd behind the Talos API fake
// (talosapitest), for the tests where the fake's small made-up snapshot
// proves too little: with it, the etcd contents (SetEtcdKeys, EtcdKeys) are
// held by etcd 3.6's own server (go.etcd.io/etcd/server/v3/embed, the
// release Talos 1.12 and 1.13 run), a control plane's EtcdSnapshot streams
// that etcd's maintenance snapshot, and a Bootstrap with RecoverEtcd
// restores the uploaded snapshot with etcdutl, as Talos's etcd service
// does, into a new data directory a new etcd then serves.
//
// It is opt-in (Start, StartFresh): a real etcd takes a moment to start and
// its snapshot is tens of kilobytes, where the rest of the suite is sized
// for the fake's. It is a package of its own so that only the tests that
// use it link etcd's server.
//
// One etcd serves a whole cluster: the fake keeps its own model of the
// membership, its quorum and health (see talosapitest.EtcdBackend).
// Everything listens on loopback ports the kernel picks, in directories of
// the test's, and stops at the end of the test.
package realetcd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
)

// Start is talosapitest.Start with a real etcd, running from the start
// with no keys.
func Start(t testing.TB, specs ...talosapitest.NodeSpec) *talosapitest.Cluster {
	t.Helper()
	return talosapitest.StartWithEtcd(t, New(t), specs...)
}

// StartFresh is talosapitest.StartFresh with a real etcd, which the
// cluster's Bootstrap starts: empty, or from the uploaded snapshot.
func StartFresh(t testing.TB, specs ...talosapitest.NodeSpec) *talosapitest.Cluster {
	t.Helper()
	return talosapitest.StartFreshWithEtcd(t, New(t), specs...)
}

// Read returns every key the etcd at endpoint (Cluster.EtcdEndpoint)
// serves, and the revision it serves them at, read with etcd's own client:
// what a test checks a real etcd holds with.
func Read(t testing.TB, endpoint string) (keys map[string]string, revision int64) {
	t.Helper()
	if endpoint == "" {
		t.Fatal("realetcd: no etcd runs")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("realetcd: unable to connect to etcd: %v", err)
	}
	defer func() { _ = cl.Close() }()
	resp, err := cl.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("realetcd: unable to read etcd's keys: %v", err)
	}
	keys = map[string]string{}
	for _, kv := range resp.Kvs {
		keys[string(kv.Key)] = string(kv.Value)
	}
	return keys, resp.Header.Revision
}

// SnapshotStatus is etcdutl's snapshot status of the snapshot file at path
// (what Talos logs before it restores one): a file that is not an etcd
// snapshot fails the test.
func SnapshotStatus(t testing.TB, path string) snapshot.Status {
	t.Helper()
	st, err := snapshot.NewV3(zap.NewNop()).Status(path)
	if err != nil {
		t.Fatalf("realetcd: %s is not an etcd snapshot: %v", path, err)
	}
	return st
}

// startTimeout bounds an etcd's start: a single member elects itself at
// once (etcd fast-forwards its election ticks), in well under a second.
const startTimeout = 20 * time.Second

// Etcd is a talosapitest.EtcdBackend: at most one etcd server at a time,
// each in a data directory of its own under the test's temporary
// directory.
type Etcd struct {
	dir string

	mu     sync.Mutex
	seq    int
	server *embed.Etcd
	client *clientv3.Client
}

var _ talosapitest.EtcdBackend = (*Etcd)(nil)

// New returns a backend with no etcd running yet; whatever runs stops at
// the end of the test.
func New(t testing.TB) *Etcd {
	t.Helper()
	e := &Etcd{dir: t.TempDir()}
	t.Cleanup(e.Stop)
	return e
}

// Bootstrap starts an etcd with no keys in a new data directory.
func (e *Etcd) Bootstrap(member, _ string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopLocked()
	return e.startLocked(member, e.nextPath("data"))
}

// Recover restores snapshot as Talos 1.13's etcd service does after a bootstrap
// with recover_etcd, with Talos's error messages word for word, then starts
// etcd. One departure: a snapshot whose sha256 trailer is missing or wrong never
// reaches etcdutl's Status, which can panic on it
// (docs/decisions/0004-upstream-behaviours.md#etcdutls-status-can-panic-on-a-corrupt-snapshot).
func (e *Etcd) Recover(member, peerURL string, data []byte, skipHashCheck bool) (talosapitest.EtcdRestore, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopLocked()
	path := e.nextPath("snapshot") // machined's /var/lib/etcd.snapshot
	if data != nil {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return talosapitest.EtcdRestore{}, fmt.Errorf("unable to write the uploaded snapshot: %w", err)
		}
	}
	manager := snapshot.NewV3(zap.NewNop())
	var restored talosapitest.EtcdRestore
	hashed := hasHash(data)
	switch {
	case data == nil, hashed && hashMatches(data), !hashed && skipHashCheck:
		// Nothing (Status fails as Talos's does), a sound snapshot, or a
		// bare bbolt file copied from a data directory, taken on trust as
		// etcdutl takes it with the check off.
		status, err := manager.Status(path)
		if err != nil {
			return restored, fmt.Errorf("error verifying snapshot: %w", err)
		}
		restored = talosapitest.EtcdRestore{
			Hash: status.Hash, Revision: status.Revision, TotalKeys: status.TotalKey, TotalSize: status.TotalSize,
		}
	case hashed && skipHashCheck:
		return restored, errors.New("error verifying snapshot: its sha256 does not match, and the Talos fake opens no corrupt bbolt file (bbolt may panic on it)")
	}
	dataDir := e.nextPath("data") // machined's /var/lib/etcd, empty
	err := manager.Restore(snapshot.RestoreConfig{
		SnapshotPath:   path,
		Name:           member,
		OutputDataDir:  dataDir,
		PeerURLs:       []string{peerURL},
		InitialCluster: member + "=" + peerURL,
		SkipHashCheck:  skipHashCheck,
	})
	if err != nil {
		entries, _ := os.ReadDir(dataDir) //nolint:errcheck // missing: nothing left
		restored.DataLeft = len(entries) > 0
		return restored, fmt.Errorf("error recovering from the snapshot: %w", err)
	}
	if err := os.Remove(path); err != nil {
		return restored, fmt.Errorf("error deleting snapshot: %w", err)
	}
	// The restored member keeps the peer URL Talos gives it (the node's
	// address, port 2380) in its membership: etcd serves from a data
	// directory without checking it, and a single member never dials
	// itself, so nothing listens there or anywhere off loopback.
	return restored, e.startLocked(member, dataDir)
}

// SetKeys makes keys etcd's, in one transaction (one revision): the keys
// it has that keys lacks are deleted, the others put.
func (e *Etcd) SetKeys(ctx context.Context, keys map[string]string) error {
	cl := e.currentClient()
	if cl == nil {
		return errors.New("no etcd runs")
	}
	have, err := cl.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return fmt.Errorf("unable to read etcd's keys: %w", err)
	}
	var ops []clientv3.Op
	for _, kv := range have.Kvs {
		if _, keep := keys[string(kv.Key)]; !keep {
			ops = append(ops, clientv3.OpDelete(string(kv.Key)))
		}
	}
	for k, v := range keys {
		ops = append(ops, clientv3.OpPut(k, v))
	}
	if len(ops) == 0 {
		return nil
	}
	if _, err := cl.Txn(ctx).Then(ops...).Commit(); err != nil {
		return fmt.Errorf("unable to write etcd's keys: %w", err)
	}
	return nil
}

// Keys returns etcd's keys; none while no etcd runs.
func (e *Etcd) Keys(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	cl := e.currentClient()
	if cl == nil {
		return out, nil
	}
	resp, err := cl.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("unable to read etcd's keys: %w", err)
	}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out, nil
}

// Snapshot returns etcd's maintenance snapshot, as Talos's EtcdSnapshot
// streams it: the bbolt file, then etcd's sha256 of it.
func (e *Etcd) Snapshot(ctx context.Context) ([]byte, error) {
	cl := e.currentClient()
	if cl == nil {
		return nil, errors.New("no etcd runs")
	}
	rc, err := cl.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("unable to take etcd's snapshot: %w", err)
	}
	defer func() { _ = rc.Close() }()
	buf, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("unable to read etcd's snapshot: %w", err)
	}
	return buf, nil
}

// hasHash reports whether data ends with etcd's sha256 trailer, by etcd's
// own rule (etcdutl's hasChecksum: the size modulo 512 is 32).
func hasHash(data []byte) bool { return len(data)%512 == sha256.Size }

// hashMatches reports whether data's sha256 trailer is the sha256 of what
// comes before it.
func hashMatches(data []byte) bool {
	body := data[:len(data)-sha256.Size]
	sum := sha256.Sum256(body)
	return bytes.Equal(sum[:], data[len(body):])
}

// Endpoint is the address of etcd's client API on loopback, "" while no
// etcd runs.
func (e *Etcd) Endpoint() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.server == nil {
		return ""
	}
	return e.server.Clients[0].Addr().String()
}

// Stop stops etcd, if one runs; its data directory stays until the test's
// temporary directory goes.
func (e *Etcd) Stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopLocked()
}

func (e *Etcd) currentClient() *clientv3.Client {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.client
}

// nextPath is a new path under the backend's directory (e.mu held): each
// start and each upload has its own, as a reset node's EPHEMERAL is new.
func (e *Etcd) nextPath(kind string) string {
	e.seq++
	return filepath.Join(e.dir, fmt.Sprintf("%s-%d", kind, e.seq))
}

// startLocked starts etcd on loopback ports the kernel picks, serving
// dataDir (e.mu held, none running).
func (e *Etcd) startLocked(member, dataDir string) error {
	cfg := embed.NewConfig()
	cfg.Name = member
	cfg.Dir = dataDir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	loopback := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{loopback}, []url.URL{loopback}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{loopback}, []url.URL{loopback}
	// Read only for a new data directory; a restored one has its
	// membership already.
	cfg.InitialCluster = member + "=" + loopback.String()
	// The data is the test's and thrown away with it: no fsync.
	cfg.UnsafeNoFsync = true
	// A single member still waits out a random part of its election
	// timeout before it elects itself (up to 1 s with etcd's 100 ms tick
	// and 1 s election); on loopback, a tenth of that is plenty.
	cfg.TickMs, cfg.ElectionMs = 10, 100
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("unable to start etcd: %w", err)
	}
	select {
	case <-srv.Server.ReadyNotify():
	case err := <-srv.Err():
		srv.Close()
		return fmt.Errorf("unable to start etcd: %w", err)
	case <-time.After(startTimeout):
		srv.Close()
		return fmt.Errorf("unable to start etcd: not ready within %s", startTimeout)
	}
	cl, err := clientv3.New(clientv3.Config{
		Endpoints: []string{srv.Clients[0].Addr().String()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
	})
	if err != nil {
		srv.Close()
		return fmt.Errorf("unable to connect to etcd: %w", err)
	}
	e.server, e.client = srv, cl
	return nil
}

func (e *Etcd) stopLocked() {
	if e.client != nil {
		_ = e.client.Close()
	}
	if e.server != nil {
		e.server.Close()
	}
	e.server, e.client = nil, nil
}
