// Package backup takes and reads the backups of a stack (issue 26): an etcd
// snapshot from a healthy control plane, taken through the Talos API, with
// what a restore needs that nothing else can rebuild (the stack's Pulumi
// state export, whose secrets stay encrypted by the stack's secrets
// provider, and the stack file), in one tar archive encrypted with age to
// the stack's recipients and written as one object: a target never holds a
// half backup, nor a byte of one in clear.
package backup

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"filippo.io/age"

	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/backupstore"
	"github.com/fluodata/talos-pulumi/internal/certs"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/stacks"
)

// The members of a backup's archive, in this order: the manifest first, so
// a reader knows what it holds before the large snapshot.
const (
	ManifestFile = "manifest.json"
	SnapshotFile = "etcd.snapshot"
	StateFile    = "state.json"
	// FormatVersion is the archive's layout; a reader refuses a newer one.
	FormatVersion = 1
)

// Snapshotter takes etcd snapshots, from a member it asked first whether
// it is caught up: *talosapi.Client.
type Snapshotter interface {
	EtcdSnapshot(ctx context.Context, node string, w io.Writer, opts ...talosapi.WaitOption) (talosapi.Snapshot, error)
	EtcdStatus(ctx context.Context, node string) (talosapi.EtcdMemberStatus, error)
}

// maxSnapshotLag is how many raft entries a follower's applied index may
// be behind the newest index any member reports for its snapshot to count
// as current: a follower applies what the leader commits within a few
// entries.
const maxSnapshotLag = 100

// SourceMember is the etcd member a backup's snapshot was taken from, as
// its status said just before.
type SourceMember struct {
	ID               uint64 `json:"id"`
	Leader           bool   `json:"leader"`
	RaftIndex        uint64 `json:"raftIndex"`
	RaftAppliedIndex uint64 `json:"raftAppliedIndex"`
}

// candidate is a control plane whose member may give the snapshot.
type candidate struct {
	node   string
	member SourceMember
}

// snapshotSources are the control planes whose etcd member may give a
// current snapshot, the leader first: etcd's Snapshot has no quorum check,
// so a member cut off from the others streams a valid, old one. A member
// counts when its status names a leader, has no errors, is a voter, and
// has applied within maxSnapshotLag of the newest raft index any member
// reports. The others are named in the error when none counts.
func snapshotSources(ctx context.Context, nodes []string, snap Snapshotter, logw io.Writer) ([]candidate, error) {
	type answer struct {
		node string
		st   talosapi.EtcdMemberStatus
		err  error
	}
	var answers []answer
	var newest uint64
	for _, node := range nodes {
		st, err := snap.EtcdStatus(ctx, node)
		answers = append(answers, answer{node, st, err})
		if err == nil && st.RaftIndex > newest {
			newest = st.RaftIndex
		}
	}
	var out []candidate
	var skipped []string
	for _, a := range answers {
		st := a.st
		var why string
		switch {
		case a.err != nil:
			why = a.err.Error()
		case st.Leader == 0:
			why = "its etcd member has no leader (cut off from the quorum)"
		case len(st.Errors) > 0:
			why = "its etcd member reports " + strings.Join(st.Errors, ", ")
		case st.Learner:
			why = "its etcd member is a learner"
		case st.RaftAppliedIndex+maxSnapshotLag < newest:
			why = fmt.Sprintf("its etcd member applied raft index %d of %d", st.RaftAppliedIndex, newest)
		}
		if why != "" {
			skipped = append(skipped, a.node+": "+why)
			_, _ = fmt.Fprintf(logw, "not taking the snapshot from %s: %s\n", a.node, why)
			continue
		}
		c := candidate{node: a.node, member: SourceMember{ID: st.MemberID, Leader: st.Leader == st.MemberID, RaftIndex: st.RaftIndex, RaftAppliedIndex: st.RaftAppliedIndex}}
		if c.member.Leader {
			out = append([]candidate{c}, out...)
		} else {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("unable to take an etcd snapshot: no control plane's etcd member has a leader and is caught up, so a snapshot now could be an old one (%s); bring etcd's quorum back first",
			strings.Join(skipped, "; "))
	}
	return out, nil
}

// Store is where backups go: *backupstore.Store.
type Store interface {
	Put(ctx context.Context, name string, plain io.Reader, to []age.Recipient, meta map[string]string) (backupstore.Object, error)
	List(ctx context.Context) ([]backupstore.Object, error)
	Delete(ctx context.Context, name string) error
	Get(ctx context.Context, name string, ids []age.Identity, w io.Writer) error
}

// Source is what one backup is taken of.
type Source struct {
	// Stack names the stack; backups are stored under "<stack>/".
	Stack string
	// Cluster is the cluster's name, TalosVersion and KubernetesVersion
	// what its nodes run (the stack's outputs), recorded so that a restore
	// refuses a backup that does not fit.
	Cluster, TalosVersion, KubernetesVersion string
	// ControlPlanes are the control planes' addresses, tried in order: a
	// dead one is passed over for the next.
	ControlPlanes []string
	// StackFile is Pulumi.<stack>.yaml as it is on disk; StackFileName its
	// name.
	StackFile     []byte
	StackFileName string
	// State is the stack's Pulumi state export (pulumi stack export): its
	// secrets are ciphertext of the stack's secrets provider.
	State []byte
	// Certificates are the client certificates' expiry, by name
	// (talosconfig, kubeconfig), recorded for the operator.
	Certificates map[string]time.Time
	// TalosCA is the sha256 of the cluster's Talos CA certificate
	// (TalosCAFingerprint): a restore refuses a stack with other secrets.
	TalosCA string
}

// Manifest describes a backup; it is the archive's first member.
type Manifest struct {
	FormatVersion     int       `json:"formatVersion"`
	Stack             string    `json:"stack"`
	Cluster           string    `json:"cluster"`
	Created           time.Time `json:"created"`
	TalosVersion      string    `json:"talosVersion"`
	KubernetesVersion string    `json:"kubernetesVersion"`
	SourceNode        string    `json:"sourceNode"`
	// SourceMember is the etcd member of SourceNode as it stood when the
	// snapshot was taken (none in backups from before it was recorded).
	SourceMember  *SourceMember        `json:"sourceMember,omitempty"`
	Snapshot      SnapshotInfo         `json:"snapshot"`
	StackFileName string               `json:"stackFileName"`
	StateSize     int64                `json:"stateSize"`
	Certificates  map[string]time.Time `json:"certificates,omitempty"`
	TalosCA       string               `json:"talosCA,omitempty"`
}

// SnapshotInfo is the etcd snapshot's size and sha256 (of the whole file,
// etcd's trailer included).
type SnapshotInfo struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Options are a backup's recipients, retention and seams.
type Options struct {
	// Recipients are whom the backup is encrypted to; none is an error.
	Recipients []age.Recipient
	// Keep is the retention applied after the backup is written.
	Keep backupstore.Policy
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// TempDir holds the snapshot while it is taken (os.TempDir when
	// empty): a private directory is made in it, removed at the end.
	TempDir string
	// Log says what is done, and what a wait waits for every ProgressEvery.
	Log           io.Writer
	ProgressEvery time.Duration
}

// Result is what Take did.
type Result struct {
	Name     string
	Size     int64
	Manifest Manifest
	Deleted  []string
}

// Take takes a backup of src into store: the etcd snapshot of the first
// control plane that gives a whole one (checked by its etcd hash), then the
// archive, encrypted, as "<stack>/<UTC time>.tar.age", then the retention.
// A failure leaves the target as it was: the archive is one object, written
// atomically, and the retention runs only after it is written.
func Take(ctx context.Context, src Source, snap Snapshotter, store Store, o Options) (Result, error) {
	if len(o.Recipients) == 0 {
		return Result{}, errors.New("unable to take a backup: no recipients; set backup.recipients (a backup is never written unencrypted)")
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	logw := o.Log
	if logw == nil {
		logw = io.Discard
	}
	dir, err := os.MkdirTemp(o.TempDir, "talos-backup-*") // 0700
	if err != nil {
		return Result{}, fmt.Errorf("unable to make a private directory for the snapshot: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()

	snapPath := filepath.Join(dir, SnapshotFile)
	if len(src.ControlPlanes) == 0 {
		return Result{}, errors.New("unable to take an etcd snapshot: the stack names no control plane (run up first)")
	}
	sources, err := snapshotSources(ctx, src.ControlPlanes, snap, logw)
	if err != nil {
		return Result{}, err
	}
	taken, member, err := snapshotFromAny(ctx, sources, snap, snapPath, logw, o.ProgressEvery)
	if err != nil {
		return Result{}, err
	}
	created := now().UTC().Truncate(time.Second)
	m := Manifest{
		FormatVersion: FormatVersion, Stack: src.Stack, Cluster: src.Cluster, Created: created,
		TalosVersion: src.TalosVersion, KubernetesVersion: src.KubernetesVersion, SourceNode: taken.Node, SourceMember: &member,
		Snapshot:      SnapshotInfo{Size: taken.Size, SHA256: taken.SHA256},
		StackFileName: src.StackFileName, StateSize: int64(len(src.State)), Certificates: src.Certificates,
		TalosCA: src.TalosCA,
	}
	for _, n := range slices.Sorted(maps.Keys(src.Certificates)) {
		if w := certs.Warning(n, src.Certificates[n], now()); w != "" {
			_, _ = fmt.Fprintf(logw, "warning: %s\n", w)
		}
	}
	name := ObjectName(src.Stack, created)
	_, _ = fmt.Fprintf(logw, "writing %s (etcd snapshot of %s, %d bytes; state %d bytes), encrypted to %d recipient(s)\n",
		name, taken.Node, taken.Size, len(src.State), len(o.Recipients))

	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeArchive(pw, m, snapPath, src)) }()
	obj, err := store.Put(ctx, name, pr, o.Recipients, meta(m))
	_ = pr.CloseWithError(errors.New("the store stopped reading")) // ends the writer if Put failed early
	if err != nil {
		return Result{}, fmt.Errorf("unable to write backup %s: %w", name, err)
	}
	res := Result{Name: name, Size: obj.Size, Manifest: m}

	deleted, err := retain(ctx, store, src.Stack, o.Keep, logw)
	res.Deleted = deleted
	if err != nil {
		return res, fmt.Errorf("backup %s is written, but unable to apply the retention: %w", name, err)
	}
	return res, nil
}

// ObjectName is a backup's name: by stack, then by time, so that names sort
// as the backups were taken.
func ObjectName(stack string, created time.Time) string {
	return stack + "/" + created.UTC().Format("20060102T150405Z") + ".tar" + backupstore.Suffix
}

// snapshotFromAny takes the snapshot from the first source that gives a
// whole one, into path (0600), and says which member it was.
func snapshotFromAny(ctx context.Context, sources []candidate, snap Snapshotter, path string, logw io.Writer, every time.Duration) (talosapi.Snapshot, SourceMember, error) {
	var errs []error
	for _, c := range sources {
		node := c.node
		if err := ctx.Err(); err != nil {
			return talosapi.Snapshot{}, SourceMember{}, fmt.Errorf("unable to take an etcd snapshot: %w", err)
		}
		role := "a follower"
		if c.member.Leader {
			role = "the leader"
		}
		_, _ = fmt.Fprintf(logw, "taking the etcd snapshot of %s (%s, raft index %d applied)\n", node, role, c.member.RaftAppliedIndex)
		s, err := snapshotTo(ctx, node, snap, path, logw, every)
		if err == nil {
			_, _ = fmt.Fprintf(logw, "etcd snapshot of %s: %d bytes in %s, etcd's hash checks\n", node, s.Size, s.Took.Round(time.Millisecond))
			return s, c.member, nil
		}
		if ctx.Err() != nil {
			return talosapi.Snapshot{}, SourceMember{}, err
		}
		_, _ = fmt.Fprintf(logw, "no snapshot from %s: %v; trying the next control plane\n", node, err)
		errs = append(errs, err)
	}
	return talosapi.Snapshot{}, SourceMember{}, fmt.Errorf("unable to take an etcd snapshot from any control plane: %w", errors.Join(errs...))
}

func snapshotTo(ctx context.Context, node string, snap Snapshotter, path string, logw io.Writer, every time.Duration) (talosapi.Snapshot, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600) //nolint:gosec // our own private temporary directory
	if err != nil {
		return talosapi.Snapshot{}, fmt.Errorf("unable to create the snapshot file: %w", err)
	}
	report := func(msg string) { _, _ = fmt.Fprintln(logw, msg) }
	s, err := snap.EtcdSnapshot(ctx, node, f, talosapi.WithProgress(report, every))
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("unable to write the snapshot file: %w", cerr)
	}
	return s, err
}

// writeArchive writes the archive: the manifest, the snapshot, the state
// and the stack file.
func writeArchive(w io.Writer, m Manifest, snapPath string, src Source) error {
	tw := tar.NewWriter(w)
	manifest, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("unable to encode the manifest: %w", err)
	}
	if err := addBytes(tw, ManifestFile, manifest, m.Created); err != nil {
		return err
	}
	f, err := os.Open(snapPath) //nolint:gosec // our own temporary file
	if err != nil {
		return fmt.Errorf("unable to read the snapshot file: %w", err)
	}
	defer func() { _ = f.Close() }()
	if err := tw.WriteHeader(&tar.Header{Name: SnapshotFile, Mode: 0o600, Size: m.Snapshot.Size, ModTime: m.Created}); err != nil {
		return fmt.Errorf("unable to write the archive: %w", err)
	}
	if n, err := io.Copy(tw, f); err != nil || n != m.Snapshot.Size {
		return fmt.Errorf("unable to copy the snapshot into the archive (%d of %d bytes): %w", n, m.Snapshot.Size, err)
	}
	if err := addBytes(tw, StateFile, src.State, m.Created); err != nil {
		return err
	}
	if err := addBytes(tw, stackFileMember(src.StackFileName), src.StackFile, m.Created); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("unable to finish the archive: %w", err)
	}
	return nil
}

func addBytes(tw *tar.Writer, name string, b []byte, at time.Time) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(b)), ModTime: at}); err != nil {
		return fmt.Errorf("unable to write %s into the archive: %w", name, err)
	}
	if _, err := tw.Write(b); err != nil {
		return fmt.Errorf("unable to write %s into the archive: %w", name, err)
	}
	return nil
}

// stackFileMember is the stack file's member name: its base name, never a
// path out of the archive.
func stackFileMember(name string) string {
	base := filepath.Base(name)
	if base == "." || base == "/" || base == "" {
		return "Pulumi.stack.yaml"
	}
	return base
}

// meta is what a listing shows without the identity: small facts, in clear
// (backupstore.Store.Put), never a secret.
func meta(m Manifest) map[string]string {
	return map[string]string{
		"created": m.Created.Format(time.RFC3339), "cluster": m.Cluster, "source-node": m.SourceNode,
		"talos-version": m.TalosVersion, "kubernetes-version": m.KubernetesVersion,
		"snapshot-size": fmt.Sprint(m.Snapshot.Size), InstanceMeta: certs.InstanceID(m.TalosCA),
	}
}

// InstanceMeta is the metadata key of a backup's cluster instance (the
// certs.InstanceID of its Talos CA; a fingerprint of a public certificate,
// stored in clear): what pairs it with the in-cluster snapshots of the same
// instance without reading the archive. The archive's manifest, which is
// encrypted, is checked again before a pairing is used.
const InstanceMeta = "talos-instance"

// InClusterInstance is the cluster instance an in-cluster snapshot of
// stack belongs to, from its name (<stack>/in-cluster/<instance>/...); ""
// for one written before the snapshots were put under their instance.
func InClusterInstance(stack, name string) string {
	rest, ok := strings.CutPrefix(name, InClusterPrefix(stack))
	if !ok {
		return ""
	}
	instance, _, found := strings.Cut(rest, "/")
	if !found {
		return ""
	}
	return instance
}

// InClusterDir is where, under a stack's backups, the in-cluster schedule
// (backup.schedule, Sidero's talos-backup) puts its snapshots: age-encrypted
// etcd snapshots alone, "<cluster>-<RFC 3339 time>.snap.age".
const InClusterDir = "in-cluster"

// List returns the stack's backups (`make backup`'s archives), newest
// first.
func List(ctx context.Context, store Store, stack string) ([]backupstore.Object, error) {
	backups, _, err := ListAll(ctx, store, stack)
	return backups, err
}

// ListInCluster returns the stack's in-cluster snapshots, newest first.
func ListInCluster(ctx context.Context, store Store, stack string) ([]backupstore.Object, error) {
	_, snapshots, err := ListAll(ctx, store, stack)
	return snapshots, err
}

// ListAll returns the stack's backups and, apart, its in-cluster
// snapshots, newest first, from one listing of the target (a listing
// reads every object's attributes).
func ListAll(ctx context.Context, store Store, stack string) (backups, snapshots []backupstore.Object, err error) {
	all, err := store.List(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("unable to list the backups: %w", err)
	}
	for _, o := range all {
		rest, ok := strings.CutPrefix(o.Name, stack+"/")
		if !ok {
			continue
		}
		if !strings.Contains(rest, "/") {
			backups = append(backups, o)
		} else if snap, ok := strings.CutPrefix(rest, InClusterDir+"/"); ok && strings.Count(snap, "/") <= 1 && strings.HasSuffix(snap, ".snap"+backupstore.Suffix) {
			// <instance>/<file>, or <file> from before the instances.
			snapshots = append(snapshots, o)
		}
	}
	return backups, snapshots, nil
}

// InClusterPrefix is where a stack's in-cluster snapshots are.
func InClusterPrefix(stack string) string { return stack + "/" + InClusterDir + "/" }

// IsInCluster reports whether name is one of the stack's in-cluster
// snapshots.
func IsInCluster(stack, name string) bool { return strings.HasPrefix(name, InClusterPrefix(stack)) }

// retain deletes the stack's backups, and apart from them its in-cluster
// snapshots, that the policy does not keep: each kind keeps its own newest
// ones, so that frequent snapshots never push a whole backup out.
func retain(ctx context.Context, store Store, stack string, p backupstore.Policy, logw io.Writer) ([]string, error) {
	backups, snapshots, err := ListAll(ctx, store, stack)
	if err != nil {
		return nil, err
	}
	_, drop := backupstore.Retain(backups, p)
	if len(snapshots) > 0 {
		_, dropSnapshots := backupstore.Retain(snapshots, p)
		drop = append(drop, dropSnapshots...)
	}
	var deleted []string
	for _, o := range drop {
		if err := store.Delete(ctx, o.Name); err != nil {
			return deleted, fmt.Errorf("unable to delete %s: %w", o.Name, err)
		}
		_, _ = fmt.Fprintf(logw, "deleted %s (retention)\n", o.Name)
		deleted = append(deleted, o.Name)
	}
	return deleted, nil
}

// TalosCAFingerprint is the sha256 (hex) of the Talos CA certificate of a
// talosconfig's current context: the cluster's identity, which its secrets
// make and a backup records.
func TalosCAFingerprint(talosconfig string) (string, error) {
	creds, err := talosapi.CredentialsFromTalosconfig(talosconfig)
	if err != nil {
		return "", err
	}
	fp, err := certs.Fingerprint(string(creds.CA))
	if err != nil {
		return "", fmt.Errorf("unable to read the talosconfig's CA: %w", err)
	}
	return fp, nil
}

// Freshness is how the newest in-cluster snapshot stands against the
// schedule that takes them.
type Freshness struct {
	// Message says how old the newest snapshot is, or that there is none.
	Message string
	// Stale is true when the newest snapshot is older than two of the
	// schedule's periods (two runs that should have written one did not:
	// a failing Job is seen nowhere else), or when there is none.
	Stale bool
}

// InClusterFreshness says how the newest of snapshots (newest first) stands
// against schedule (backup.schedule) at now.
func InClusterFreshness(schedule string, snapshots []backupstore.Object, now time.Time) (Freshness, error) {
	sched, err := talos.ParseEtcdBackupSchedule(schedule)
	if err != nil {
		return Freshness{}, fmt.Errorf("unable to read backup.schedule %q: %w", schedule, err)
	}
	if len(snapshots) == 0 {
		return Freshness{Stale: true, Message: fmt.Sprintf("no in-cluster snapshot at the target (schedule %q; the next run is due at %s): until one is there, check the CronJob kube-system/%s and its Jobs' logs",
			schedule, sched.Next(now).UTC().Format(time.RFC3339), talos.EtcdBackupName)}, nil
	}
	newest := snapshots[0].Created.UTC()
	due := sched.Next(sched.Next(newest))
	age := now.Sub(newest).Round(time.Minute)
	if now.After(due) {
		return Freshness{Stale: true, Message: fmt.Sprintf("the newest in-cluster snapshot, %s, is %s old: two runs of schedule %q since then wrote none; check the CronJob kube-system/%s and its Jobs' logs",
			snapshots[0].Name, age, schedule, talos.EtcdBackupName)}, nil
	}
	return Freshness{Message: fmt.Sprintf("the newest in-cluster snapshot, %s, is %s old (schedule %q)", snapshots[0].Name, age, schedule)}, nil
}

// StoreOptions are the object store's options for the stack's backup
// section: its S3 credentials and the CA file's contents.
func StoreOptions(b stacks.BackupConfig) (backupstore.Options, error) {
	o := backupstore.Options{AccessKeyID: b.S3.AccessKeyID, SecretAccessKey: b.S3.SecretAccessKey.Reveal()}
	if path := b.S3.CAFilePath(); path != "" {
		pemData, err := os.ReadFile(path) //nolint:gosec // the operator's own file, named in the stack file
		if err != nil {
			return o, fmt.Errorf("unable to read backup.s3.caFile: %w", err)
		}
		o.CABundle = pemData
	}
	return o, nil
}
