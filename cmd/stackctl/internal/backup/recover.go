package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fluodata/talos-pulumi/internal/progress"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosversion"
)

// A recovery asks every pollInterval whether the control planes joined, for
// at most joinTimeout: each has to boot and find the bootstrapped one.
const (
	pollInterval = 500 * time.Millisecond
	joinTimeout  = 30 * time.Minute
)

// Recoverer is what a recovery does through the Talos API:
// *talosapi.Client.
type Recoverer interface {
	EtcdRecover(ctx context.Context, node string, snapshot io.Reader) error
	Bootstrap(ctx context.Context, node string, recoverEtcd bool) error
	EtcdMemberList(ctx context.Context, node string) ([]talosapi.EtcdMember, error)
	ServiceList(ctx context.Context, node string) ([]talosapi.Service, error)
	Version(ctx context.Context, node string) (string, error)
}

// ErrEtcdFailed means etcd did not start from the uploaded snapshot: Talos
// answers the bootstrap at once and restores the snapshot later, in the
// etcd service's pre stage (machined's etcd service, recoverFromSnapshot),
// so a snapshot it cannot restore shows only as the service Failed.
var ErrEtcdFailed = errors.New("etcd failed to start from the snapshot")

// Target is the cluster a backup is recovered into.
type Target struct {
	// Cluster and TalosVersion are the stack's: a backup of another
	// cluster, or of another Talos minor release, is refused.
	Cluster, TalosVersion string
	// ControlPlanes are the new control planes' addresses; the first is
	// bootstrapped from the snapshot, the others join it.
	ControlPlanes []string
}

// Recovered is what a recovery found once etcd runs again.
type Recovered struct {
	Members      []string
	TalosVersion string
	Took         time.Duration
}

// CheckFits refuses a backup that does not fit the target: another
// cluster's (its etcd would hold another cluster's identity and
// certificates), or one of another Talos minor release (etcd and the
// Kubernetes it holds are of that release's versions).
func CheckFits(m Manifest, t Target) error {
	var problems []string
	if m.Cluster != t.Cluster {
		problems = append(problems, fmt.Sprintf("it is of cluster %q, the stack's is %q", m.Cluster, t.Cluster))
	}
	bm, okB := talosversion.Minor(m.TalosVersion)
	tm, okT := talosversion.Minor(t.TalosVersion)
	switch {
	case !okB || !okT:
		problems = append(problems, fmt.Sprintf("its Talos version %q or the stack's %q is unknown", m.TalosVersion, t.TalosVersion))
	case bm != tm:
		problems = append(problems, fmt.Sprintf("it was taken on Talos %s, the stack runs %s: restore with cluster.talosVersion of the backup's minor release (v1.%d), then upgrade", m.TalosVersion, t.TalosVersion, bm))
	}
	if len(problems) > 0 {
		return fmt.Errorf("the backup of %s does not fit this stack: %s", m.Created.Format(time.RFC3339), strings.Join(problems, "; "))
	}
	return nil
}

// RecoverOptions are a recovery's hooks around its point of no return.
type RecoverOptions struct {
	// Started, when set, is called once the snapshot is on the first
	// control plane and before its bootstrap from it: from then on Talos
	// may be restoring from the uploaded file, and a run again must not
	// upload over it (the caller records that it started).
	Started func(node string) error
	// Resume skips the upload and the bootstrap: a recovery started by an
	// earlier run is waited for, not started again.
	Resume bool
}

// retryNotReady calls fn until it stops answering FailedPrecondition, which
// Talos answers to EtcdRecover and Bootstrap until the node's EPHEMERAL
// partition is mounted and its CRI is up (machined's EtcdRecover: "etcd
// service is not ready for recovery yet"), saying what it waits for every
// progressEvery; any other error ends it.
func retryNotReady(ctx context.Context, what string, logw io.Writer, progressEvery time.Duration, fn func(context.Context) error) error {
	var last error
	wait := progress.Poll{
		What: what, Interval: pollInterval, Timeout: joinTimeout,
		Report: func(msg string) { _, _ = fmt.Fprintln(logw, msg) }, Every: progressEvery,
	}
	err := wait.Until(ctx, func(ctx context.Context) (bool, error) {
		last = fn(ctx)
		if status.Code(last) == codes.FailedPrecondition {
			return false, last
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	return last
}

// Recover brings etcd back from the extracted backup x on the target's
// fresh control planes: the snapshot is uploaded to the first, which is
// bootstrapped with recover_etcd, and the recovery waits until every
// control plane is a member again, reporting what it waits for every
// progressEvery. It refuses a backup that does not fit (CheckFits) before
// anything is sent. The upload and the bootstrap are retried while the
// node is not ready for them (retryNotReady).
func Recover(ctx context.Context, api Recoverer, x Extracted, t Target, logw io.Writer, progressEvery time.Duration) (Recovered, error) {
	return RecoverWith(ctx, api, x, t, logw, progressEvery, RecoverOptions{})
}

// RecoverWith is Recover with its options.
func RecoverWith(ctx context.Context, api Recoverer, x Extracted, t Target, logw io.Writer, progressEvery time.Duration, o RecoverOptions) (Recovered, error) {
	start := time.Now()
	if len(t.ControlPlanes) == 0 {
		return Recovered{}, errors.New("unable to recover etcd: the stack has no control plane")
	}
	if err := CheckFits(x.Manifest, t); err != nil {
		return Recovered{}, fmt.Errorf("unable to recover etcd: %w", err)
	}
	first := t.ControlPlanes[0]
	if o.Resume {
		_, _ = fmt.Fprintf(logw, "a recovery of %s was started by an earlier run: the snapshot is not uploaded again, the recovery is waited for\n", first)
	} else if err := startRecovery(ctx, api, x, first, logw, progressEvery, o); err != nil {
		return Recovered{}, err
	}
	want := slices.Clone(t.ControlPlanes)
	slices.Sort(want)
	var members []string
	var err error
	wait := progress.Poll{
		What:     fmt.Sprintf("every control plane (%s) to be an etcd member again", strings.Join(want, ", ")),
		Interval: pollInterval, Timeout: joinTimeout,
		Report: func(msg string) { _, _ = fmt.Fprintln(logw, msg) }, Every: progressEvery,
	}
	var failed error
	err = wait.Until(ctx, func(ctx context.Context) (bool, error) {
		list, err := api.EtcdMemberList(ctx, first)
		if err != nil {
			// No etcd answers yet: still restoring, or failed for good
			// (the wait ends, its outcome in failed).
			if failed = etcdFailure(ctx, api, first); failed != nil {
				return true, nil //nolint:nilerr // the failure is in failed
			}
			return false, err
		}
		members = members[:0]
		for _, m := range list {
			members = append(members, m.Hostname)
		}
		if len(list) >= len(want) {
			return true, nil
		}
		return false, fmt.Errorf("%d of %d members: %s", len(list), len(want), strings.Join(members, ", "))
	})
	if err == nil {
		err = failed
	}
	if err != nil {
		return Recovered{Members: members}, fmt.Errorf("unable to recover etcd: %w", err)
	}
	version, err := api.Version(ctx, first)
	if err != nil {
		return Recovered{Members: members}, fmt.Errorf("unable to read the Talos version of %s: %w", first, err)
	}
	slices.Sort(members)
	return Recovered{Members: members, TalosVersion: version, Took: time.Since(start)}, nil
}

// etcdFailure is the failure of the etcd service of node, nil while it is
// not Failed (or unknown).
func etcdFailure(ctx context.Context, api Recoverer, node string) error {
	svcs, err := api.ServiceList(ctx, node)
	if err != nil {
		return nil //nolint:nilerr // unknown: the wait goes on, as for a node that does not answer
	}
	for _, s := range svcs {
		if s.ID == "etcd" && s.State == "Failed" {
			return EtcdFailed(node, s.LastEvent)
		}
	}
	return nil
}

// EtcdFailed is the error of a node whose etcd service is Failed, with the
// service's last event. A failed service stays so until the node reboots,
// and Talos keeps what a failed restore wrote, refusing the next bootstrap
// until the node's EPHEMERAL is wiped: the error says how.
func EtcdFailed(node, lastEvent string) error {
	return fmt.Errorf("%w on %s (%s): Talos keeps what the restore wrote; wipe its EPHEMERAL partition (talosctl -n %s reset --system-labels-to-wipe EPHEMERAL --reboot --graceful=false), then run make restore again",
		ErrEtcdFailed, node, lastEvent, node)
}

// startRecovery uploads the snapshot to first (from its start at each
// attempt) and bootstraps it from the snapshot, each retried while the
// node is not ready; o.Started is called between the two.
func startRecovery(ctx context.Context, api Recoverer, x Extracted, first string, logw io.Writer, progressEvery time.Duration, o RecoverOptions) error {
	f, err := os.Open(x.SnapshotPath)
	if err != nil {
		return fmt.Errorf("unable to read the snapshot: %w", err)
	}
	defer func() { _ = f.Close() }()
	_, _ = fmt.Fprintf(logw, "uploading the etcd snapshot (%d bytes, taken %s from %s) to %s\n",
		x.Manifest.Snapshot.Size, x.Manifest.Created.Format(time.RFC3339), x.Manifest.SourceNode, first)
	err = retryNotReady(ctx, fmt.Sprintf("%s to take the etcd snapshot (its EPHEMERAL partition mounted)", first), logw, progressEvery,
		func(ctx context.Context) error {
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return fmt.Errorf("unable to read the snapshot: %w", err)
			}
			return api.EtcdRecover(ctx, first, f)
		})
	if err != nil {
		return err
	}
	if o.Started != nil {
		if err := o.Started(first); err != nil {
			return err
		}
	}
	_, _ = fmt.Fprintf(logw, "bootstrapping etcd on %s from the snapshot\n", first)
	return retryNotReady(ctx, fmt.Sprintf("%s to accept the bootstrap from the snapshot", first), logw, progressEvery,
		func(ctx context.Context) error { return api.Bootstrap(ctx, first, true) })
}
