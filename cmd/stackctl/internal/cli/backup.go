package cli

import (
	"context"
	"encoding/json"
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
	"github.com/fluodata/talos-pulumi/internal/agekeys"
	"github.com/fluodata/talos-pulumi/internal/backupstore"
	"github.com/fluodata/talos-pulumi/internal/certs"
	"github.com/fluodata/talos-pulumi/internal/kubeapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/program"
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
	b := cfg.Backup
	if b.Target == "" {
		return fmt.Errorf("stack %s has no backup section: set backup.target and backup.recipients (docs/backup.md)", req.Name)
	}
	store, err := backupstore.Open(ctx, b.Target, backupstore.Options{
		AccessKeyID: b.S3.AccessKeyID, SecretAccessKey: b.S3.SecretAccessKey.Reveal(),
	})
	if err != nil {
		return err
	}
	defer func() { _ = store.Close() }()
	if req.Op == driver.OpBackups {
		objs, err := backup.List(ctx, store, req.Name)
		if err != nil {
			return err
		}
		printBackups(env.Stdout, objs)
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
	return backup.Source{
		Stack: req.Name, Cluster: prev.ClusterName, TalosVersion: prev.TalosVersion, KubernetesVersion: prev.KubernetesVersion,
		ControlPlanes: prev.ControlPlaneIPs, StackFile: stackFile, StackFileName: name, State: state,
		Certificates: certificates(talosconfig, values["kubeconfig"]),
	}, talosconfig, nil
}

// certificates are the client certificates' expiry of the access files,
// those that can be read.
func certificates(talosconfig string, kubeconfig any) map[string]time.Time {
	out := map[string]time.Time{}
	if creds, err := talosapi.CredentialsFromTalosconfig(talosconfig); err == nil {
		if t, err := certs.Expiry(creds.Cert); err == nil {
			out["talosconfig"] = t
		}
	}
	if kc, ok := kubeconfig.(string); ok {
		if t, err := kubeapi.ClientCertExpiry([]byte(kc)); err == nil {
			out["kubeconfig"] = t
		}
	}
	return out
}

// printBackups lists backups, newest first, with what their metadata says.
func printBackups(w io.Writer, objs []backupstore.Object) {
	if len(objs) == 0 {
		_, _ = fmt.Fprintln(w, "no backups")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "NAME\tCREATED\tSIZE\tTALOS\tKUBERNETES\tSOURCE NODE")
	for _, o := range objs {
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", o.Name, o.Created.UTC().Format(time.RFC3339), o.Size,
			o.Meta["talos-version"], o.Meta["kubernetes-version"], o.Meta["source-node"])
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
