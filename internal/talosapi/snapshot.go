package talosapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync/atomic"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// DefaultSnapshotTimeout bounds a whole etcd snapshot download or upload.
// A snapshot is hundreds of megabytes on a large cluster, minutes on a
// slow uplink, so the call has neither the read nor the change timeout:
// instead, a stream that makes no progress for that long (the read timeout
// for a download, the change timeout for an upload) is cut with
// ErrTimeout. The caller's context bounds it further.
const DefaultSnapshotTimeout = time.Hour

var (
	// ErrSnapshotCorrupt means an etcd snapshot fails etcd's integrity
	// check: it is empty, has no sha256 trailer, or its trailer does not
	// match its contents.
	ErrSnapshotCorrupt = errors.New("etcd snapshot is corrupt")
	// ErrAlreadyBootstrapped means the node refused a bootstrap: its etcd
	// has data already (the cluster was bootstrapped).
	ErrAlreadyBootstrapped = errors.New("etcd is already bootstrapped")
)

// Snapshot describes an etcd snapshot EtcdSnapshot took.
type Snapshot struct {
	// Node is the control plane it came from.
	Node string
	// Size is its size in bytes, the sha256 trailer included.
	Size int64
	// SHA256 is the hex of the sha256 of the whole file as written (the
	// trailer included): what to compare a stored copy with.
	SHA256 string
	// Took is how long the download took.
	Took time.Duration
}

// EtcdSnapshot streams an etcd snapshot of the control plane node into w,
// checked as etcd's restore will (else ErrSnapshotCorrupt, and the caller
// discards w). It reads the stream itself so that a cut stream is an error, not
// a short snapshot: ctx's, ErrTimeout when the node goes silent, or
// DefaultSnapshotTimeout overall. opts may add WithProgress
// (docs/decisions/0004-upstream-behaviours.md#etcd-snapshots-end-with-their-sha256).
func (c *Client) EtcdSnapshot(ctx context.Context, node string, w io.Writer, opts ...WaitOption) (Snapshot, error) {
	var cfg waitConfig
	for _, o := range opts {
		o(&cfg)
	}
	p := StartProgress("the etcd snapshot of node "+node, cfg.report, cfg.every)
	defer p.Stop()
	start := time.Now()
	check := newSnapshotCheck()
	err := c.call(ctx, node, DefaultSnapshotTimeout, func(ctx context.Context, tc *client.Client) error {
		ctx, stall := watchStall(ctx, c.readTimeout)
		defer stall.stop()
		stream, err := tc.MachineClient.EtcdSnapshot(ctx, &machine.EtcdSnapshotRequest{})
		if err != nil {
			return stall.err(err, tc)
		}
		for {
			d, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return stall.err(err, tc)
			}
			stall.alive()
			if md := d.GetMetadata(); md.GetError() != "" {
				// An error the node reports inside the stream (as apid
				// does for a call it proxies).
				if st := status.FromProto(md.GetStatus()); st.Code() != codes.OK {
					return st.Err()
				}
				return errors.New(md.GetError())
			}
			b := d.GetBytes()
			if len(b) == 0 {
				continue
			}
			if _, err := w.Write(b); err != nil {
				return fmt.Errorf("unable to write it: %w", err)
			}
			_, _ = check.Write(b) //nolint:errcheck // hashes do not fail
			p.Saw(formatBytes(check.size) + " received")
		}
	})
	if err != nil {
		if ctx.Err() != nil {
			return Snapshot{}, fmt.Errorf("unable to take an etcd snapshot of node %s: %w", node, p.Cancelled(ctx))
		}
		return Snapshot{}, fmt.Errorf("unable to take an etcd snapshot of node %s: %w", node, err)
	}
	snap := Snapshot{Node: node, Size: check.size, SHA256: hex.EncodeToString(check.whole.Sum(nil)), Took: time.Since(start)}
	if err := check.verify(); err != nil {
		return snap, fmt.Errorf("unable to take an etcd snapshot of node %s: %w", node, err)
	}
	return snap, nil
}

// VerifySnapshot reads a stored etcd snapshot to its end and checks it as
// etcd's restore will (see EtcdSnapshot): an error wrapping
// ErrSnapshotCorrupt when it fails. It returns the snapshot's size.
func VerifySnapshot(r io.Reader) (size int64, err error) {
	check := newSnapshotCheck()
	if _, err := io.CopyBuffer(check, r, make([]byte, 32<<10)); err != nil {
		return check.size, fmt.Errorf("unable to verify the etcd snapshot: %w", err)
	}
	if err := check.verify(); err != nil {
		return check.size, fmt.Errorf("unable to verify the etcd snapshot: %w", err)
	}
	return check.size, nil
}

// EtcdRecover uploads an etcd snapshot to the control plane node, for a
// Bootstrap with recoverEtcd: the node has its config and waits for etcd
// to be bootstrapped (Talos answers FailedPrecondition before its etcd is
// ready to take one). The snapshot is checked as it goes (see
// EtcdSnapshot): one that fails the check gives an error wrapping
// ErrSnapshotCorrupt, and the upload is abandoned before its end, so that
// Talos does not keep it. A stream that takes nothing for the change
// timeout gives ErrTimeout; the whole upload is bounded by
// DefaultSnapshotTimeout.
func (c *Client) EtcdRecover(ctx context.Context, node string, snapshot io.Reader) error {
	err := c.call(ctx, node, DefaultSnapshotTimeout, func(ctx context.Context, tc *client.Client) error {
		ctx, stall := watchStall(ctx, c.changeTimeout)
		defer stall.stop()
		_, err := tc.EtcdRecover(ctx, &uploadReader{r: snapshot, check: newSnapshotCheck(), stall: stall})
		return stall.err(err, tc)
	})
	if err != nil {
		return fmt.Errorf("unable to upload an etcd snapshot to node %s: %w", node, err)
	}
	return nil
}

// Bootstrap bootstraps etcd on the control plane node: it becomes the
// first member of a new etcd cluster, the others join it. With
// recoverEtcd, etcd starts from the snapshot EtcdRecover uploaded to that
// node, with etcd's hash check (RecoverSkipHashCheck is never set). A
// cluster already bootstrapped gives an error wrapping
// ErrAlreadyBootstrapped.
func (c *Client) Bootstrap(ctx context.Context, node string, recoverEtcd bool) error {
	err := c.call(ctx, node, c.changeTimeout, func(ctx context.Context, tc *client.Client) error {
		return tc.Bootstrap(ctx, &machine.BootstrapRequest{RecoverEtcd: recoverEtcd, RecoverSkipHashCheck: false})
	})
	if status.Code(err) == codes.AlreadyExists {
		err = &classifiedError{kind: ErrAlreadyBootstrapped, err: err}
	}
	switch {
	case err == nil:
		return nil
	case recoverEtcd:
		return fmt.Errorf("unable to bootstrap etcd on node %s from the uploaded snapshot: %w", node, err)
	default:
		return fmt.Errorf("unable to bootstrap etcd on node %s: %w", node, err)
	}
}

// snapshotCheck is etcd's restore check of a snapshot, on a stream: the
// snapshot ends with the sha256 of everything before it. It keeps the last 32
// bytes in a window and hashes what leaves it
// (docs/decisions/0004-upstream-behaviours.md#etcd-snapshots-end-with-their-sha256).
type snapshotCheck struct {
	// body hashes all but the last sha256.Size bytes; whole hashes all.
	body, whole hash.Hash
	tail        [sha256.Size]byte
	tailLen     int
	size        int64
}

func newSnapshotCheck() *snapshotCheck {
	return &snapshotCheck{body: sha256.New(), whole: sha256.New()}
}

func (s *snapshotCheck) Write(p []byte) (int, error) {
	s.size += int64(len(p))
	s.whole.Write(p)
	if s.tailLen+len(p) <= len(s.tail) {
		s.tailLen += copy(s.tail[s.tailLen:], p)
		return len(p), nil
	}
	// Of the window and p, all but the last 32 bytes leave the window.
	leave := s.tailLen + len(p) - len(s.tail)
	fromTail := min(leave, s.tailLen)
	s.body.Write(s.tail[:fromTail])
	fromP := leave - fromTail
	s.body.Write(p[:fromP])
	var tail [sha256.Size]byte
	k := copy(tail[:], s.tail[fromTail:s.tailLen])
	copy(tail[k:], p[fromP:])
	s.tail, s.tailLen = tail, len(tail)
	return len(p), nil
}

// snapshotPage: etcd tells a snapshot with a hash from one without by its
// size (a bbolt file is a whole number of pages), see snapshotCheck.
const snapshotPage = 512

func (s *snapshotCheck) verify() error {
	switch {
	case s.size == 0:
		return fmt.Errorf("%w: it is empty", ErrSnapshotCorrupt)
	case s.size%snapshotPage != sha256.Size:
		return fmt.Errorf("%w: its size (%d bytes) is not that of a database with etcd's sha256 trailer (a multiple of %d bytes, plus %d): it is cut short or not an etcd snapshot",
			ErrSnapshotCorrupt, s.size, snapshotPage, sha256.Size)
	}
	if got := s.body.Sum(nil); subtle.ConstantTimeCompare(got, s.tail[:]) != 1 {
		return fmt.Errorf("%w: its sha256 trailer is %x, its contents' sha256 is %x", ErrSnapshotCorrupt, s.tail[:], got)
	}
	return nil
}

// stallWatch cancels a stream's context when it makes no progress for a
// while.
type stallWatch struct {
	d      time.Duration
	timer  *time.Timer
	fired  atomic.Bool
	cancel context.CancelFunc
}

// watchStall returns a context that ends when alive is not called for d.
func watchStall(ctx context.Context, d time.Duration) (context.Context, *stallWatch) {
	ctx, cancel := context.WithCancel(ctx)
	s := &stallWatch{d: d, cancel: cancel}
	s.timer = time.AfterFunc(d, func() {
		s.fired.Store(true)
		cancel()
	})
	return ctx, s
}

func (s *stallWatch) alive() { s.timer.Reset(s.d) }

func (s *stallWatch) stop() {
	s.timer.Stop()
	s.cancel()
}

// err is the stream's error when the watch cut it: ErrTimeout when the
// connection is up (the node took the call and stopped), else
// ErrUnreachable, as call classifies a call that ran out of time.
func (s *stallWatch) err(err error, tc *client.Client) error {
	if err == nil || !s.fired.Load() {
		return err
	}
	// Not the stream's own error (context canceled, a gRPC status that
	// call would classify again as the connection closed under the call).
	if tc.Conn().GetState() == connectivity.Ready {
		return &classifiedError{kind: ErrTimeout, err: fmt.Errorf("the node took the call, and the stream made no progress for %s", s.d)}
	}
	return &classifiedError{kind: ErrUnreachable, err: fmt.Errorf("no answer within %s", s.d)}
}

// uploadReader is the snapshot as EtcdRecover sends it: checked as it
// goes, its end refused when the check fails, the stall watch fed. It
// never returns data with an error: the machinery client's EtcdRecover
// drops the data of a read that ends with io.EOF.
type uploadReader struct {
	r       io.Reader
	check   *snapshotCheck
	stall   *stallWatch
	pending error
}

func (u *uploadReader) Read(p []byte) (int, error) {
	if u.pending != nil {
		return 0, u.pending
	}
	n, err := u.r.Read(p)
	if n > 0 {
		u.stall.alive()
		_, _ = u.check.Write(p[:n]) //nolint:errcheck // hashes do not fail
	}
	if errors.Is(err, io.EOF) {
		if verr := u.check.verify(); verr != nil {
			err = verr
		}
	}
	if n > 0 && err != nil {
		u.pending, err = err, nil
	}
	return n, err
}

// formatBytes says a size for a reader: "512 B", "12.3 MiB".
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
