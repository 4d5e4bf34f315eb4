package talosapitest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// etcdData is what the cluster's etcd holds (c.mu held to use it).
type etcdData struct {
	// identity names the cluster; a snapshot carries it.
	identity string
	keys     map[string]string
	revision int64
	// restoredFrom is the identity of the cluster whose snapshot a
	// recovery restored.
	restoredFrom string
}

func newEtcdData() etcdData {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return etcdData{identity: "fake-" + hex.EncodeToString(b[:]), keys: map[string]string{}, revision: 1}
}

// SnapshotStream is how the control planes send an etcd snapshot: test
// knobs for a stream that is slow or corrupt.
type SnapshotStream struct {
	// ChunkSize is the size of a chunk of the stream (default 4096).
	ChunkSize int
	// Delay is the wait before each chunk but the first: a slow uplink.
	// A caller that gives up ends the stream at once.
	Delay time.Duration
	// Corrupt flips a byte in the middle of the data, after its sha256
	// trailer was computed: the stream fails etcd's integrity check.
	Corrupt bool
}

// SetSnapshotStream sets how the control planes send a snapshot from now
// on.
func (c *Cluster) SetSnapshotStream(s SnapshotStream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.snapStream = s
}

// SetEtcdKeys sets etcd's keys (a copy of keys), as one write: the
// revision grows by one. A Bootstrap replaces them: with none, or with
// those of the snapshot it restores. With a real etcd, they are written to
// it in one transaction (no revision when nothing changes), which fails
// the test while no etcd runs (a cluster of StartFreshWithEtcd before its
// bootstrap).
func (c *Cluster) SetEtcdKeys(keys map[string]string) {
	c.t.Helper()
	if c.realEtcd != nil {
		c.setRealKeys(keys)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.etcd.keys = maps.Clone(keys)
	if c.etcd.keys == nil {
		c.etcd.keys = map[string]string{}
	}
	c.etcd.revision++
}

// EtcdKeys returns a copy of etcd's keys; with a real etcd, those it
// serves now (none while none runs).
func (c *Cluster) EtcdKeys() map[string]string {
	c.t.Helper()
	if c.realEtcd != nil {
		return c.realKeys()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.etcd.keys)
}

// Identity returns the cluster's identity: a name of its own, random, that
// its snapshots carry.
func (c *Cluster) Identity() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.etcd.identity
}

// RestoredFrom returns the identity of the cluster whose snapshot a
// Bootstrap with RecoverEtcd restored, or "". A real etcd's snapshot
// carries no identity of the fake's: with one, it stays "" (the
// "etcd-bootstrap" event gives what etcdutl found in the snapshot
// instead).
func (c *Cluster) RestoredFrom() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.etcd.restoredFrom
}

// Bootstrapped reports whether the cluster's etcd has been bootstrapped
// (always true for a cluster of Start).
func (c *Cluster) Bootstrapped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bootstrapped
}

// HasRecoverySnapshot reports whether the node holds a snapshot that
// EtcdRecover uploaded and no Bootstrap has restored yet.
func (n *Node) HasRecoverySnapshot() bool {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return n.recovery != nil
}

// snapshotContents is what a snapshot of the fake holds.
type snapshotContents struct {
	Cluster  string            `json:"cluster"`
	Revision int64             `json:"revision"`
	Members  []string          `json:"members"`
	Keys     map[string]string `json:"keys"`
}

// snapshotPage: etcd's snapshot is a bbolt file, a whole number of pages,
// and etcd tells a snapshot with a sha256 trailer from one without by its
// size modulo 512 (etcdutl/snapshot v3_snapshot.go saveDB: hasHash :=
// (off % 512) == sha256.Size).
const snapshotPage = 512

// snapshot is the snapshot of etcd as it is now (c.mu held): the JSON of
// its contents, padded with spaces to a whole number of pages, then the
// sha256 of all that, as etcd's Maintenance.Snapshot sends it (v3rpc
// maintenance.go: the data, then "send SHA digest for integrity checks").
func (c *Cluster) snapshot() []byte {
	var members []string
	for _, m := range c.members {
		members = append(members, m.node.spec.Hostname)
	}
	body, err := json.Marshal(snapshotContents{Cluster: c.etcd.identity, Revision: c.etcd.revision, Members: members, Keys: c.etcd.keys})
	if err != nil {
		panic(err) // strings only
	}
	if r := len(body) % snapshotPage; r != 0 {
		body = append(body, bytes.Repeat([]byte(" "), snapshotPage-r)...)
	}
	sum := sha256.Sum256(body)
	return append(body, sum[:]...)
}

// readSnapshot checks a snapshot as etcd's restore does (the trailer is
// there, and matches unless skipHash) and reads its contents.
func readSnapshot(data []byte, skipHash bool) (snapshotContents, error) {
	var s snapshotContents
	hasHash := len(data)%snapshotPage == sha256.Size
	if !hasHash && !skipHash {
		return s, errors.New("snapshot missing hash but --skip-hash-check=false")
	}
	body := data
	if hasHash {
		body = data[:len(data)-sha256.Size]
		if want, got := data[len(body):], sha256.Sum256(body); !skipHash && !bytes.Equal(want, got[:]) {
			return s, fmt.Errorf("expected sha256 %x, got %x", want, got)
		}
	}
	if err := json.Unmarshal(body, &s); err != nil {
		return s, fmt.Errorf("not a snapshot of the fake's etcd: %w", err)
	}
	if s.Keys == nil {
		s.Keys = map[string]string{}
	}
	return s, nil
}

// EtcdSnapshot streams the snapshot of the node's etcd member, in chunks,
// as Talos does (its own etcd client's Snapshot, which ends with etcd's
// sha256 trailer): the fake's own, or the real etcd's maintenance
// snapshot. A worker refuses it, as Talos does.
func (s *server) EtcdSnapshot(_ *machine.EtcdSnapshotRequest, stream grpc.ServerStreamingServer[common.Data]) error {
	if err := s.onControlPlane("etcd snapshot"); err != nil {
		return err
	}
	n := s.n
	n.c.mu.Lock()
	if self := n.c.memberOf(n); self == nil || !n.etcdRunning || n.state != stateUp {
		n.c.mu.Unlock()
		return fmt.Errorf("failed reading etcd snapshot: %w", errEtcdNotRunning)
	}
	knobs := n.c.snapStream
	var data []byte
	if n.c.realEtcd == nil {
		data = n.c.snapshot()
	}
	n.c.mu.Unlock()
	if n.c.realEtcd != nil {
		var err error
		if data, err = n.c.realEtcd.Snapshot(stream.Context()); err != nil {
			return fmt.Errorf("failed reading etcd snapshot: %w", err)
		}
	}

	if knobs.Corrupt {
		data[(len(data)-sha256.Size)/2] ^= 0xff
	}
	chunk := knobs.ChunkSize
	if chunk <= 0 {
		chunk = 4096
	}
	ctx := stream.Context()
	for off := 0; off < len(data); off += chunk {
		if off > 0 && knobs.Delay > 0 {
			select {
			case <-ctx.Done():
				return status.FromContextError(ctx.Err()).Err()
			case <-time.After(knobs.Delay):
			}
		}
		if err := stream.Send(&common.Data{Bytes: data[off:min(off+chunk, len(data))]}); err != nil {
			return err
		}
	}
	return nil
}

// maxRecovery bounds what the fake keeps of an upload.
const maxRecovery = 64 << 20

// EtcdRecover stores an uploaded snapshot on the node for a Bootstrap with
// RecoverEtcd. Talos writes the upload to a file as it comes and checks
// it only at the bootstrap (etcd's restore); the fake's own etcd checks it
// here too, and refuses a snapshot that fails etcd's integrity check:
// nothing is stored then, as Talos removes a file whose upload failed. A
// real etcd's cluster stores whatever comes, as Talos does: the restore
// checks it.
func (s *server) EtcdRecover(stream grpc.ClientStreamingServer[common.Data, machine.EtcdRecoverResponse]) error {
	if err := s.onControlPlane("etcd recover"); err != nil {
		return err
	}
	if func() bool { defer s.lock()(); return s.n.notReadyForRecovery() }() {
		return status.Error(codes.FailedPrecondition, "etcd service is not ready for recovery yet")
	}
	var buf bytes.Buffer
	for {
		d, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if buf.Len()+len(d.GetBytes()) > maxRecovery {
			return status.Errorf(codes.ResourceExhausted, "the fake keeps no snapshot larger than %d bytes", maxRecovery)
		}
		buf.Write(d.GetBytes())
	}
	if s.n.c.realEtcd == nil {
		if _, err := readSnapshot(buf.Bytes(), false); err != nil {
			return status.Errorf(codes.InvalidArgument, "error verifying snapshot: %v", err)
		}
	}
	n := s.n
	n.c.mu.Lock()
	n.recovery = buf.Bytes()
	n.c.record(n.spec.IP, "recovery-stored", fmt.Sprintf("bytes=%d", buf.Len()))
	n.c.mu.Unlock()
	return stream.SendAndClose(&machine.EtcdRecoverResponse{Messages: []*machine.EtcdRecover{{Metadata: s.meta()}}})
}

// Bootstrap makes the node etcd's first member, empty or, with RecoverEtcd,
// from the snapshot EtcdRecover stored. It refuses as Talos does (a worker or a
// rebooting node: FailedPrecondition; etcd data: AlreadyExists), and also a
// second bootstrap in the cluster and a recovery without an upload, which Talos
// accepts and then fails on. With a real etcd, see bootstrapRealEtcd.
func (s *server) Bootstrap(_ context.Context, req *machine.BootstrapRequest) (*machine.BootstrapResponse, error) {
	if s.n.c.realEtcd != nil {
		return s.bootstrapRealEtcd(req)
	}
	defer s.lock()()
	n := s.n
	c := n.c
	if err := n.refuseBootstrap(); err != nil {
		return nil, err
	}
	data := snapshotContents{Keys: map[string]string{}, Revision: 1}
	if req.GetRecoverEtcd() {
		if n.recovery == nil {
			return nil, status.Error(codes.FailedPrecondition, "no etcd snapshot was uploaded for the recovery")
		}
		var err error
		if data, err = readSnapshot(n.recovery, req.GetRecoverSkipHashCheck()); err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "error recovering from the snapshot: %v", err)
		}
		n.recovery = nil // Talos deletes it once restored
		c.etcd.restoredFrom = data.Cluster
	}
	c.etcd.keys, c.etcd.revision = data.Keys, data.Revision
	args := fmt.Sprintf("keys=%d revision=%d", len(data.Keys), data.Revision)
	if data.Cluster != "" {
		args += " from=" + data.Cluster
	}
	n.bootstrapped(args)
	return &machine.BootstrapResponse{Messages: []*machine.Bootstrap{{Metadata: s.meta()}}}, nil
}

// refuseBootstrap is Talos's refusal of a bootstrap on the node (c.mu
// held); see Bootstrap.
func (n *Node) refuseBootstrap() error {
	c := n.c
	switch {
	case n.spec.Role != ControlPlane:
		return status.Error(codes.FailedPrecondition, "bootstrap can only be performed on a control plane node")
	case n.state != stateUp:
		return status.Error(codes.FailedPrecondition, errRebootInProgress.Error())
	case n.notReadyForRecovery():
		return status.Error(codes.FailedPrecondition, "the node is not ready for a bootstrap yet")
	case c.bootstrapped || c.memberOf(n) != nil || n.etcdDataLeft:
		return status.Error(codes.AlreadyExists, "etcd data directory is not empty")
	}
	return nil
}

// bootstrapped makes n the first member of the bootstrapped etcd, and the
// other control planes that are up join it (c.mu held).
func (n *Node) bootstrapped(args string) {
	c := n.c
	c.bootstrapped = true
	c.join(n)
	c.record(n.spec.IP, "etcd-bootstrap", args)
	for _, o := range c.nodes {
		if o.spec.Role == ControlPlane && o.state == stateUp && c.memberOf(o) == nil {
			c.join(o)
			c.record(o.spec.IP, "etcd-join", "bootstrapped by "+n.spec.IP)
		}
	}
}

// bootstrapRealEtcd is Bootstrap with a real etcd, restored with etcdutl as
// Talos's EtcdBackend.Recover does. As in Talos, the call succeeds whatever the
// restore does (a failure leaves the service Failed, no member, and maybe a data
// directory that refuses the next bootstrap); unlike Talos, it answers after the
// restore and etcd's start, so that a test sees the outcome at once.
func (s *server) bootstrapRealEtcd(req *machine.BootstrapRequest) (*machine.BootstrapResponse, error) {
	n := s.n
	c := n.c
	c.bootstrapMu.Lock()
	defer c.bootstrapMu.Unlock()
	c.mu.Lock()
	if err := n.refuseBootstrap(); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	upload := n.recovery
	c.mu.Unlock()

	// etcd restores and starts without c.mu held: the other nodes keep
	// answering meanwhile; bootstrapMu keeps a second bootstrap out.
	var restored EtcdRestore
	var err error
	if req.GetRecoverEtcd() {
		restored, err = c.realEtcd.Recover(n.spec.Hostname, etcdPeerURL(n.spec.IP), upload, req.GetRecoverSkipHashCheck())
	} else {
		err = c.realEtcd.Bootstrap(n.spec.Hostname, etcdPeerURL(n.spec.IP))
	}
	var keys map[string]string
	if err == nil {
		keys = c.realKeys()
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		n.etcdFailure = "Failed to run pre stage: " + err.Error()
		n.etcdDataLeft = restored.DataLeft
		c.record(n.spec.IP, "etcd-failed", n.etcdFailure)
		return &machine.BootstrapResponse{Messages: []*machine.Bootstrap{{Metadata: s.meta()}}}, nil
	}
	n.etcdFailure = ""
	args := fmt.Sprintf("keys=%d", len(keys))
	if req.GetRecoverEtcd() {
		n.recovery = nil // Talos deletes it once restored
		args += fmt.Sprintf(" revision=%d hash=%08x total-keys=%d total-size=%d",
			restored.Revision, restored.Hash, restored.TotalKeys, restored.TotalSize)
	}
	n.bootstrapped(args)
	return &machine.BootstrapResponse{Messages: []*machine.Bootstrap{{Metadata: s.meta()}}}, nil
}
