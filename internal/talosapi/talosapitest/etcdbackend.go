package talosapitest

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// EtcdBackend is a real etcd holding a cluster's etcd contents in place of
// the fake's own small model (package realetcd implements it with etcd's
// server and etcdutl). It holds the contents only: the membership, its
// quorum and its health stay the fake's model, so that one etcd serves the
// whole cluster however many control planes it has, and a rollout test
// sees the same members with a real etcd as without. Its methods are safe
// for concurrent use.
type EtcdBackend interface {
	// Bootstrap starts an etcd with no keys, in a new data directory, its
	// one member named member (the node's hostname; peerURL is the URL
	// Talos would give it).
	Bootstrap(member, peerURL string) error
	// Recover does what Talos's etcd service does before it starts etcd
	// after a Bootstrap with RecoverEtcd: etcdutl's snapshot status and
	// restore of snapshot (the uploaded file; nil: none was uploaded) into
	// a new data directory, with the restore's hash check unless
	// skipHashCheck; then it starts etcd from that directory. Its error is
	// the one Talos's etcd service fails with; the status says whether a
	// failed restore left files in the data directory.
	Recover(member, peerURL string, snapshot []byte, skipHashCheck bool) (EtcdRestore, error)
	// SetKeys makes the keys etcd's, in one transaction.
	SetKeys(ctx context.Context, keys map[string]string) error
	// Keys returns etcd's keys; none when no etcd runs.
	Keys(ctx context.Context) (map[string]string, error)
	// Snapshot returns etcd's maintenance snapshot as etcd sends it (the
	// bbolt file, then its sha256).
	Snapshot(ctx context.Context) ([]byte, error)
	// Endpoint is the loopback address of etcd's client API, "" when no
	// etcd runs.
	Endpoint() string
	// Stop stops etcd and forgets its data, as a wipe of the control
	// planes' EPHEMERAL does.
	Stop()
}

// EtcdRestore is what a recovery's restore found (etcdutl's snapshot
// status, which Talos logs before it restores).
type EtcdRestore struct {
	Hash      uint32
	Revision  int64
	TotalKeys int
	TotalSize int64
	// DataLeft: the restore failed after it wrote into the data directory,
	// which Talos's bootstrap then refuses as not empty.
	DataLeft bool
}

// StartWithEtcd is Start with a real etcd (EtcdBackend) holding the
// contents, started at once: see package realetcd.
func StartWithEtcd(t testing.TB, etcd EtcdBackend, specs ...NodeSpec) *Cluster {
	t.Helper()
	c := start(t, true, specs, etcd)
	name, peer := firstMember(specs)
	if err := etcd.Bootstrap(name, peer); err != nil {
		t.Fatalf("talosapitest: unable to start etcd: %v", err)
	}
	return c
}

// StartFreshWithEtcd is StartFresh with a real etcd (EtcdBackend) holding
// the contents, started by the Bootstrap: see package realetcd.
func StartFreshWithEtcd(t testing.TB, etcd EtcdBackend, specs ...NodeSpec) *Cluster {
	t.Helper()
	return start(t, false, specs, etcd)
}

// firstMember is the member name and peer URL of the first control plane
// of specs, which the etcd of a cluster of Start stands for.
func firstMember(specs []NodeSpec) (name, peerURL string) {
	for _, s := range specs {
		if s.Role == ControlPlane {
			name = s.Hostname
			if name == "" {
				name = strings.ReplaceAll(s.IP, ".", "-")
			}
			return name, etcdPeerURL(s.IP)
		}
	}
	return "default", etcdPeerURL("127.0.0.1")
}

// etcdPeerURL is the peer URL Talos gives a control plane's etcd member.
func etcdPeerURL(ip string) string { return "https://" + net.JoinHostPort(ip, "2380") }

// RealEtcd reports whether a real etcd holds the cluster's contents.
func (c *Cluster) RealEtcd() bool { return c.realEtcd != nil }

// EtcdEndpoint is the loopback address of the real etcd's client API, for
// a test to read it with etcd's own client; "" without a real etcd, or
// while none runs.
func (c *Cluster) EtcdEndpoint() string {
	if c.realEtcd == nil {
		return ""
	}
	return c.realEtcd.Endpoint()
}

// etcdCallTimeout bounds a call of the test's (SetEtcdKeys, EtcdKeys) to
// the real etcd, which has no context of its own.
const etcdCallTimeout = 10 * time.Second

func (c *Cluster) setRealKeys(keys map[string]string) {
	c.t.Helper()
	if c.realEtcd.Endpoint() == "" {
		c.t.Errorf("talosapitest: SetEtcdKeys: no etcd runs (bootstrap the cluster first)")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), etcdCallTimeout)
	defer cancel()
	if err := c.realEtcd.SetKeys(ctx, keys); err != nil {
		c.t.Errorf("talosapitest: unable to set etcd's keys: %v", err)
	}
}

func (c *Cluster) realKeys() map[string]string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), etcdCallTimeout)
	defer cancel()
	keys, err := c.realEtcd.Keys(ctx)
	if err != nil {
		c.t.Errorf("talosapitest: unable to read etcd's keys: %v", err)
	}
	return keys
}
