package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"filippo.io/age"
	"google.golang.org/grpc"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/access"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/backup"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/driver"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/restore"
	"github.com/fluodata/talos-pulumi/internal/agekeys"
	"github.com/fluodata/talos-pulumi/internal/backupstore"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
)

// IdentityEnv holds an age identity (or SSH private key) as text, for a
// restore in CI: the identity file is the operator's way.
const IdentityEnv = "BACKUP_IDENTITY"

// progressEvery is how often a restore's waits say what they wait for.
const progressEvery = 30 * time.Second

// runRestore is driver.Env.Restore: it takes the backup (the newest, or
// the one named) from backup.target, decrypts and checks it whole into a
// private directory, and restores the stack's cluster from it
// (restore.Run).
func runRestore(ctx context.Context, req driver.RestoreRequest, env backupEnv) error {
	cfg, diags := program.Load(req.Source)
	if err := diags.Err(); err != nil {
		return err
	}
	if err := reachesNodeIPs(cfg); err != nil {
		return err
	}
	if cfg.Backup.Target == "" {
		return fmt.Errorf("stack %s has no backup section: set backup.target to where its backups are (docs/backup.md)", req.Name)
	}
	ids, err := restoreIdentities(req.Identity, env.Getenv)
	if err != nil {
		return err
	}
	target, err := restoreTarget(cfg)
	if err != nil {
		return err
	}
	opts, err := backup.StoreOptions(cfg.Backup)
	if err != nil {
		return err
	}
	store, err := backupstore.Open(ctx, cfg.Backup.Target, opts)
	if err != nil {
		return err
	}
	defer func() { _ = store.Close() }()
	dir, err := os.MkdirTemp("", "stackctl-restore-*") // 0700
	if err != nil {
		return fmt.Errorf("unable to make a private directory for the backup: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	x, name, err := readRestoreBackup(ctx, store, req.Name, req.BackupName, ids, dir, env.Stderr)
	if err != nil {
		return err
	}

	var vars map[string]string
	var dial []talosapi.Option
	if access.Enabled(cfg) {
		s, err := env.StartAccess(ctx, cfg, access.Options{Getenv: env.Getenv})
		if err != nil {
			return err
		}
		defer func() { _ = s.Close() }()
		vars = s.Env()
		dial = append(dial, talosapi.WithDialOptions(grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return s.DialContext(ctx, "tcp", addr)
		})))
	}
	start := env.Now()
	res, err := restore.Run(ctx, restore.Request{Stack: req.Name, Target: target, Backup: x, ResetControlPlanes: req.ResetControlPlanes}, restore.Env{
		Stack: req.Stack,
		Up: func(ctx context.Context, exclude []string) error {
			return req.Up(ctx, exclude, vars)
		},
		Talos: func(talosconfig string) (restore.API, func(), error) {
			c, err := env.NewTalos(talosconfig, dial...)
			if err != nil {
				return nil, nil, err
			}
			return c, func() { _ = c.Close() }, nil
		},
		Log: env.Stderr, ProgressEvery: progressEvery,
		// Beside the stack's access files (git-ignored, private): a run
		// again in this checkout finds the recovery this one started.
		Journal: filepath.Join(req.WorkDir, ".access", req.Name, "restore-recovery.json"),
	})
	if err != nil {
		return err
	}
	etcd := "etcd members " + strings.Join(res.Recovered.Members, ", ")
	if len(res.Running) > 0 {
		etcd = "etcd ran already on " + strings.Join(res.Running, ", ") + ", nothing recovered"
	}
	_, _ = fmt.Fprintf(env.Stdout, "restored stack %s from %s (taken %s of Talos %s): %s, in %s\n",
		req.Name, name, x.Manifest.Created.Format(time.RFC3339), x.Manifest.TalosVersion,
		etcd, env.Now().Sub(start).Round(time.Millisecond))
	return nil
}

// restoreTarget is the cluster the stack file describes: its control
// planes in the program's order (the first is the one bootstrapped).
func restoreTarget(cfg *stacks.Config) (backup.Target, error) {
	t := backup.Target{Cluster: cfg.Cluster.Name, TalosVersion: cfg.Cluster.TalosVersion}
	for _, ref := range cfg.Nodes.Refs() {
		if ref.Role != stacks.RoleControlPlane {
			continue
		}
		if ref.IP == "" {
			return t, fmt.Errorf("%s has no ip: a restore reaches each control plane at its address", ref.Path)
		}
		t.ControlPlanes = append(t.ControlPlanes, ref.IP)
	}
	return t, nil
}

// restoreIdentities reads the age identities from the file, or else from
// the environment (IdentityEnv).
func restoreIdentities(file string, getenv func(string) string) ([]age.Identity, error) {
	var r io.Reader
	switch {
	case file != "":
		f, err := os.Open(file) //nolint:gosec // the operator's own key file
		if err != nil {
			return nil, fmt.Errorf("unable to read the identity: %w", err)
		}
		defer func() { _ = f.Close() }()
		r = f
	case getenv(IdentityEnv) != "":
		r = strings.NewReader(getenv(IdentityEnv))
	default:
		return nil, errors.New("a restore needs the age identity of one of backup.recipients: IDENTITY=<file> (--identity), or its text in " + IdentityEnv)
	}
	return agekeys.ParseIdentities(r)
}

// restoreOf is driver.Env.Restore for the real program.
func restoreOf(stdout, stderr io.Writer, getenv func(string) string) func(context.Context, driver.RestoreRequest) error {
	return func(ctx context.Context, req driver.RestoreRequest) error {
		return runRestore(ctx, req, backupEnv{
			Stdout: stdout, Stderr: stderr, StartAccess: access.Start, Getenv: getenv, Now: time.Now,
			NewTalos: talosapi.NewFromTalosconfig,
		})
	}
}

// readRestoreBackup reads what a restore starts from: the backup named, or
// by "latest" (or "") the newest of the stack's backups and in-cluster
// snapshots. An in-cluster snapshot is read with the newest backup's state
// and stack file (backup.ExtractInCluster).
func readRestoreBackup(ctx context.Context, store *backupstore.Store, stack, name string, ids []age.Identity, dir string, logw io.Writer) (backup.Extracted, string, error) {
	backups, snapshots, err := backup.ListAll(ctx, store, stack)
	if err != nil {
		return backup.Extracted{}, "", err
	}
	if len(backups) == 0 {
		return backup.Extracted{}, "", fmt.Errorf("no backups of stack %s at the target (make backup writes one; an in-cluster snapshot alone lacks the state and secrets a restore needs)", stack)
	}
	var snapshot *backupstore.Object
	full := backups[0]
	switch {
	case name == "" || name == "latest":
		name = full.Name
		// The newest snapshot after the newest backup, of its cluster
		// instance (ExtractInCluster checks it against the manifest).
		instance := full.Meta[backup.InstanceMeta]
		for i, s := range snapshots {
			if !s.Created.After(full.Created) {
				break
			}
			if instance != "" && backup.InClusterInstance(stack, s.Name) == instance {
				snapshot = &snapshots[i]
				break
			}
			_, _ = fmt.Fprintf(logw, "not pairing in-cluster snapshot %s with backup %s: it is not of the backup's cluster instance\n", s.Name, full.Name)
		}
	case backup.IsInCluster(stack, name):
		i := slices.IndexFunc(snapshots, func(o backupstore.Object) bool { return o.Name == name })
		if i < 0 {
			return backup.Extracted{}, "", fmt.Errorf("no in-cluster snapshot %s at the target (make backups lists them)", name)
		}
		snapshot = &snapshots[i]
		// The newest backup of the snapshot's instance.
		instance := backup.InClusterInstance(stack, name)
		if j := slices.IndexFunc(backups, func(o backupstore.Object) bool { return instance != "" && o.Meta[backup.InstanceMeta] == instance }); j >= 0 {
			full = backups[j]
		}
	}
	if snapshot == nil {
		_, _ = fmt.Fprintf(logw, "reading backup %s\n", name)
		x, err := backup.Extract(ctx, store, name, ids, dir)
		return x, name, err
	}
	_, _ = fmt.Fprintf(logw, "reading in-cluster snapshot %s, with the state and stack file of backup %s\n", snapshot.Name, full.Name)
	x, err := backup.ExtractInCluster(ctx, store, full.Name, snapshot.Name, snapshot.Created, ids, dir)
	return x, snapshot.Name, err
}
