package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/access"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/backup"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/driver"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/exitcode"
	"github.com/fluodata/talos-pulumi/components/docker"
	"github.com/fluodata/talos-pulumi/internal/agekeys"
	"github.com/fluodata/talos-pulumi/internal/backupstore"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
)

// backupEnv is what `stackctl backup` and `backups` use besides the stack:
// seams for tests.
type backupEnv struct {
	Stdout, Stderr io.Writer
	// StartAccess starts the ssh-proxy helper (access.Start).
	StartAccess startFunc
	Getenv      func(string) string
	Now         func() time.Time
	// NewTalos makes the Talos API client (talosapi.NewFromTalosconfig).
	NewTalos func(talosconfig string, opts ...talosapi.Option) (*talosapi.Client, error)
}

// runBackup is driver.Env.Backup: `backup` takes a backup of the stack
// (backup.Take) into backup.target, `backups` lists them.
func runBackup(ctx context.Context, req driver.BackupRequest, env backupEnv) error {
	cfg, diags := program.Load(req.Source)
	if err := diags.Err(); err != nil {
		return err
	}
	if err := reachesNodeIPs(cfg); err != nil {
		return err
	}
	b := cfg.Backup
	if b.Target == "" {
		return fmt.Errorf("stack %s has no backup section: set backup.target and backup.recipients (docs/backup.md)", req.Name)
	}
	storeOpts, err := backup.StoreOptions(b)
	if err != nil {
		return err
	}
	store, err := backupstore.Open(ctx, b.Target, storeOpts)
	if err != nil {
		return err
	}
	defer func() { _ = store.Close() }()
	if req.Op == driver.OpBackups {
		objs, snapshots, err := backup.ListAll(ctx, store, req.Name)
		if err != nil {
			return err
		}
		printBackups(env.Stdout, objs, snapshots)
		if b.Schedule != "" {
			now := time.Now
			if env.Now != nil {
				now = env.Now
			}
			f, err := backup.InClusterFreshness(b.Schedule, snapshots, now())
			if err != nil {
				return err
			}
			level := "in-cluster"
			if f.Stale {
				level = "warning"
			}
			_, _ = fmt.Fprintf(env.Stdout, "%s: %s\n", level, f.Message)
		}
		return nil
	}

	recipients, err := agekeys.ParseRecipients(b.Recipients)
	if err != nil {
		return err
	}
	src, talosconfig, err := backupSource(ctx, req)
	if err != nil {
		return err
	}
	opts := []talosapi.Option{}
	if access.Enabled(cfg) {
		s, err := env.StartAccess(ctx, cfg, access.Options{Getenv: env.Getenv})
		if err != nil {
			return err
		}
		defer func() { _ = s.Close() }()
		opts = append(opts, talosapi.WithDialOptions(grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return s.DialContext(ctx, "tcp", addr)
		})))
	}
	client, err := env.NewTalos(talosconfig, opts...)
	if err != nil {
		return fmt.Errorf("unable to use the stack's talosconfig: %w", err)
	}
	defer func() { _ = client.Close() }()
	res, err := backup.Take(ctx, src, client, store, backup.Options{
		Recipients: recipients, Now: env.Now, Log: env.Stderr,
		Keep: backupstore.Policy{Last: b.Keep.Last, Daily: deref(b.Keep.Daily), Weekly: deref(b.Keep.Weekly)},
	})
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(env.Stdout, "backup %s: %d bytes encrypted to %d recipient(s), etcd snapshot of %s (sha256 %s)\n",
		res.Name, res.Size, len(recipients), res.Manifest.SourceNode, res.Manifest.Snapshot.SHA256)
	return nil
}

// backupSource reads what a backup holds from the stack: its outputs (the
// cluster's name, versions and control planes, and the talosconfig to reach
// them), its state export and its stack file.
func backupSource(ctx context.Context, req driver.BackupRequest) (backup.Source, string, error) {
	outs, err := req.Stack.Outputs(ctx)
	if err != nil {
		return backup.Source{}, "", fmt.Errorf("unable to read the stack's outputs: %w", err)
	}
	values := map[string]any{}
	for k, v := range outs {
		values[k] = v.Value
	}
	prev := program.PreviousFromOutputs(values)
	talosconfig, _ := values["talosconfig"].(string)
	if prev == nil || talosconfig == "" || len(prev.ControlPlaneIPs) == 0 {
		return backup.Source{}, "", fmt.Errorf("stack %s has no cluster yet (no nodes or talosconfig output): run up first", req.Name)
	}
	export, err := req.Stack.Export(ctx)
	if err != nil {
		return backup.Source{}, "", fmt.Errorf("unable to export the stack's state: %w", err)
	}
	state, err := json.Marshal(export)
	if err != nil {
		return backup.Source{}, "", fmt.Errorf("unable to encode the stack's state: %w", err)
	}
	name := "Pulumi." + req.Name + ".yaml"
	stackFile, err := os.ReadFile(filepath.Join(req.WorkDir, name)) //nolint:gosec // the stack's own file
	if err != nil {
		return backup.Source{}, "", fmt.Errorf("unable to read the stack file: %w", err)
	}
	ca, err := backup.TalosCAFingerprint(talosconfig)
	if err != nil {
		return backup.Source{}, "", fmt.Errorf("unable to read the stack's talosconfig output: %w", err)
	}
	return backup.Source{
		Stack: req.Name, TalosCA: ca, Cluster: prev.ClusterName, TalosVersion: prev.TalosVersion, KubernetesVersion: prev.KubernetesVersion,
		ControlPlanes: prev.ControlPlaneIPs, StackFile: stackFile, StackFileName: name, State: state,
		Certificates: certificates(values),
	}, talosconfig, nil
}

// certificates are the client certificates' expiry of the access files,
// those that can be read.
func certificates(values map[string]any) map[string]time.Time {
	out := map[string]time.Time{}
	for _, name := range program.AccessFiles {
		if text, ok := values[name].(string); ok {
			if t, err := program.AccessFileExpiry(name, text); err == nil {
				out[name] = t
			}
		}
	}
	return out
}

// printBackups lists backups, newest first, with what their metadata says,
// then the in-cluster snapshots (etcd alone; their metadata is
// talos-backup's, which records no versions).
func printBackups(w io.Writer, objs, snapshots []backupstore.Object) {
	if len(objs)+len(snapshots) == 0 {
		_, _ = fmt.Fprintln(w, "no backups")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "NAME\tCREATED\tSIZE\tTALOS\tKUBERNETES\tSOURCE NODE")
	for _, o := range objs {
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", o.Name, o.Created.UTC().Format(time.RFC3339), o.Size,
			o.Meta["talos-version"], o.Meta["kubernetes-version"], o.Meta["source-node"])
	}
	for _, o := range snapshots {
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%d\t-\t-\t%s (etcd only)\n", o.Name, o.Created.UTC().Format(time.RFC3339), o.Size, backup.InClusterDir)
	}
	_ = tw.Flush()
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// backupOf is driver.Env.Backup for the real program.
func backupOf(stdout, stderr io.Writer, getenv func(string) string) func(context.Context, driver.BackupRequest) error {
	return func(ctx context.Context, req driver.BackupRequest) error {
		return runBackup(ctx, req, backupEnv{
			Stdout: stdout, Stderr: stderr, StartAccess: access.Start, Getenv: getenv, Now: time.Now,
			NewTalos: talosapi.NewFromTalosconfig,
		})
	}
}

// backupGetCmd is `stackctl backup-get`: it downloads one backup of a stack
// from a target, decrypts it with the identity and checks it whole
// (backup.Extract), into a new directory of the operator's: the state
// export, the stack file, the etcd snapshot and the manifest. It needs
// neither the stack nor its state, which a disaster may have taken: the
// target and the identity are enough. The S3 credentials come from the
// usual AWS environment.
func backupGetCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("backup-get", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := fs.String("target", "", "the stack's backup.target (file:///... or s3://...)")
	stack := fs.String("stack", os.Getenv("STACK"), "stack name: backups are under <stack>/ (default: $STACK)")
	name := fs.String("name", "latest", "the backup's name as `stackctl backups` lists it, or latest")
	identity := fs.String("identity", "", "age identity file or SSH private key of one of backup.recipients")
	out := fs.String("out", "", "new directory to write the backup's files to (made 0700; must not exist)")
	if err := fs.Parse(args); err != nil {
		return exitcode.Usage
	}
	if *target == "" || *stack == "" || *identity == "" || *out == "" || fs.NArg() > 0 {
		_, _ = fmt.Fprintln(stderr, "stackctl backup-get: --target, --stack, --identity and --out are required")
		return exitcode.Usage
	}
	if err := backupGet(ctx, *target, *stack, *name, *identity, *out, stdout); err != nil {
		_, _ = fmt.Fprintf(stderr, "stackctl backup-get: %v\n", err)
		return exitcode.Failed
	}
	return exitcode.OK
}

func backupGet(ctx context.Context, target, stack, name, identityFile, out string, stdout io.Writer) error {
	f, err := os.Open(identityFile) //nolint:gosec // the operator's own key file
	if err != nil {
		return fmt.Errorf("unable to read the identity: %w", err)
	}
	ids, err := agekeys.ParseIdentities(f)
	_ = f.Close()
	if err != nil {
		return err
	}
	store, err := backupstore.Open(ctx, target, backupstore.Options{})
	if err != nil {
		return err
	}
	defer func() { _ = store.Close() }()
	if name == "latest" {
		objs, err := backup.List(ctx, store, stack)
		if err != nil {
			return err
		}
		if len(objs) == 0 {
			return fmt.Errorf("no backups of stack %s at the target", stack)
		}
		name = objs[0].Name
	}
	if err := os.Mkdir(out, 0o700); err != nil {
		return fmt.Errorf("unable to make the output directory (it must not exist): %w", err)
	}
	x, err := backup.Extract(ctx, store, name, ids, out)
	if err != nil {
		_ = os.RemoveAll(out) // nothing of a backup that fails its checks is kept
		return err
	}
	manifest, err := json.MarshalIndent(x.Manifest, "", "  ")
	if err != nil {
		return fmt.Errorf("unable to encode the manifest: %w", err)
	}
	for file, data := range map[string][]byte{
		backup.ManifestFile: manifest, backup.StateFile: x.State, x.Manifest.StackFileName: x.StackFile,
	} {
		if err := os.WriteFile(filepath.Join(out, filepath.Base(file)), data, 0o600); err != nil {
			return fmt.Errorf("unable to write %s: %w", file, err)
		}
	}
	_, _ = fmt.Fprintf(stdout, "backup %s of cluster %s (Talos %s, taken %s from %s) checked and written to %s:\n"+
		"  %s  the etcd snapshot (talosctl bootstrap --recover-from, or the recovery of docs/backup.md)\n"+
		"  %s  the Pulumi state export (pulumi stack import --file)\n  %s  the stack file\n",
		name, x.Manifest.Cluster, x.Manifest.TalosVersion, x.Manifest.Created.Format(time.RFC3339), x.Manifest.SourceNode, out,
		backup.SnapshotFile, backup.StateFile, filepath.Base(x.Manifest.StackFileName))
	return nil
}

// reachesNodeIPs refuses a stack whose nodes this machine reaches only
// through published ports: backup and restore call each control plane at
// its IP.
func reachesNodeIPs(cfg *stacks.Config) error {
	if cfg.Platform == stacks.PlatformLocal && cfg.Local.APIAccess == docker.AccessPublished {
		return fmt.Errorf("local.apiAccess is %s: backup and restore reach the control planes at their IPs, which this machine does not route to; "+
			"run them where local.apiAccess is bridge (Docker Engine on Linux)", docker.AccessPublished)
	}
	return nil
}
