package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/access"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/backup"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/driver"
	"github.com/fluodata/talos-pulumi/internal/backupstore"
	"github.com/fluodata/talos-pulumi/internal/certs"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
	"github.com/fluodata/talos-pulumi/internal/testkit/pkitest"
	"github.com/fluodata/talos-pulumi/internal/testkit/sshtest"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// importCounter is a fakeStack that counts the imports of a restore.
type importCounter struct {
	fakeStack
	imports int
}

func (s *importCounter) Import(context.Context, apitype.UntypedDeployment) error {
	s.imports++
	return nil
}

// `stackctl restore` reads the identity from the file or BACKUP_IDENTITY,
// and refuses, before the state is touched or anything runs, without one,
// with a public key in its place, and with a backup of another cluster
// (the stack's is homelab; this backup was taken of lab).
func TestStackctlRestoreRefusesBeforeAnythingRuns(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c := talosapitest.Start(t, talosapitest.Topology(1, 0, talosapitest.DefaultVersion, 40*time.Millisecond)...)
	work := t.TempDir()
	talosconfig, err := os.ReadFile(pkitest.WriteTalosconfig(t, talosapitest.Bundle(t), work, "lab", "10.5.0.11")) //nolint:gosec // the test's file
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(work, "Pulumi.homelab.yaml"), []byte("config: {}\n"), 0o600))
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	src := stackstest.EditSection(t, stackstest.Example(t, stackstest.ProxmoxExample), "backup", func(b map[string]any) {
		b["target"], b["recipients"] = "file://"+filepath.Join(t.TempDir(), "backups"), []any{id.Recipient().String()}
	})
	src = stackstest.EditSection(t, src, "proxmox", func(px map[string]any) { px["access"] = "direct" })
	stack := &importCounter{fakeStack: fakeStack{
		outputs: auto.OutputMap{
			"talosconfig": {Value: string(talosconfig), Secret: true},
			"nodes":       {Value: map[string]any{"cp-1": map[string]any{"role": "controlplane", "ip": c.IPs(talosapitest.ControlPlane)[0]}}},
			"clusterName": {Value: "lab"}, "talosVersion": {Value: talosapitest.DefaultVersion}, "kubernetesVersion": {Value: "1.35.0"},
		},
		state: json.RawMessage(`{"resources":[]}`),
	}}
	var stdout, stderr bytes.Buffer
	getenv := map[string]string{}
	env := backupEnv{
		Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return getenv[k] }, Now: time.Now,
		NewTalos: func(tc string, opts ...talosapi.Option) (*talosapi.Client, error) {
			return talosapi.NewFromTalosconfig(tc, append(opts, talosapi.WithAddress(c.Address))...)
		},
	}
	require.NoError(t, runBackup(ctx, driver.BackupRequest{Op: driver.OpBackup, Stack: stack, Source: src, WorkDir: work, Name: "homelab"}, env), stderr.String())

	ups := 0
	req := driver.RestoreRequest{
		Stack: stack, Source: src, WorkDir: work, Name: "homelab",
		Up: func(context.Context, []string, map[string]string) error { ups++; return nil },
	}
	err = runRestore(ctx, req, env)
	require.ErrorContains(t, err, "BACKUP_IDENTITY")

	getenv[IdentityEnv] = id.Recipient().String() // a public key is no identity
	require.Error(t, runRestore(ctx, req, env))

	getenv[IdentityEnv] = id.String()
	err = runRestore(ctx, req, env)
	require.ErrorContains(t, err, `it is of cluster "lab", the stack's is "homelab"`)

	keyFile := filepath.Join(t.TempDir(), "key.txt")
	require.NoError(t, os.WriteFile(keyFile, []byte(id.String()+"\n"), 0o600))
	getenv[IdentityEnv] = ""
	req.Identity = keyFile
	err = runRestore(ctx, req, env)
	require.ErrorContains(t, err, "does not fit", "the file's identity reads the backup")

	req.BackupName = "homelab/20000101T000000Z.tar.age"
	require.Error(t, runRestore(ctx, req, env), "a backup that is not there")
	assert.Zero(t, stack.imports, "the state was not touched")
	assert.Zero(t, ups, "nothing ran")
}

// seedableStack is a stack for a whole restore without the CLI: its state
// export (the backup's, a minimal one of the program's shape, until an
// import), its talosconfig output once the machines' up ran.
type seedableStack struct {
	state       json.RawMessage
	talosconfig string
	imports     int
}

func (s *seedableStack) Export(context.Context) (apitype.UntypedDeployment, error) {
	var d apitype.UntypedDeployment
	err := json.Unmarshal(s.state, &d)
	return d, err
}

func (s *seedableStack) Import(_ context.Context, d apitype.UntypedDeployment) error {
	s.imports++
	var err error
	s.state, err = json.Marshal(d)
	return err
}

func (s *seedableStack) Outputs(context.Context) (auto.OutputMap, error) {
	if s.talosconfig == "" {
		return auto.OutputMap{}, nil
	}
	return auto.OutputMap{"talosconfig": {Value: s.talosconfig, Secret: true}}, nil
}

// programState is a state export of stack homelab as the program leaves it
// (components, the Talos provider, the secrets and the bootstrap).
func programState() json.RawMessage {
	const p = "urn:pulumi:homelab::talos-cluster::"
	const chain = "talos-cluster:index:ProxmoxCluster$talos-cluster:index:TalosCluster$"
	provider := p + "pulumi:providers:talos::default_0_7_1"
	rs := []map[string]any{
		{"urn": p + "pulumi:pulumi:Stack::talos-cluster-homelab", "type": "pulumi:pulumi:Stack", "custom": false},
		{"urn": provider, "type": "pulumi:providers:talos", "custom": true, "id": "p1"},
		{"urn": p + "talos-cluster:index:ProxmoxCluster::homelab", "type": "talos-cluster:index:ProxmoxCluster", "custom": false},
		{"urn": p + "talos-cluster:index:ProxmoxCluster$talos-cluster:index:TalosCluster::homelab", "type": "talos-cluster:index:TalosCluster", "custom": false},
		{"urn": p + chain + "talos:machine/secrets:Secrets::homelab-secrets", "type": "talos:machine/secrets:Secrets", "custom": true, "provider": provider + "::p1"},
		{"urn": p + chain + "talos:machine/bootstrap:Bootstrap::homelab-bootstrap", "type": "talos:machine/bootstrap:Bootstrap", "custom": true, "provider": provider + "::p1",
			"dependencies": []string{p + chain + "talos:machine/secrets:Secrets::homelab-secrets"}},
	}
	raw, _ := json.Marshal(map[string]any{"version": 3, "deployment": map[string]any{"resources": rs}})
	return raw
}

// An in-cluster snapshot (age-encrypted, as talos-backup writes it under
// <stack>/in-cluster/) newer than the stack's last backup is what `make
// restore` takes by default: its etcd, with the backup's state. `make
// backups` lists it apart; `make backup`'s retention keeps each kind's
// newest ones.
func TestStackctlRestoreFromAnInClusterSnapshot(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	spec := []talosapitest.NodeSpec{{IP: "10.10.0.10", Hostname: "cp-0", Role: talosapitest.ControlPlane}}
	live := talosapitest.Start(t, spec...)
	live.SetEtcdKeys(map[string]string{"/registry/configmaps/default/at": "backup-time"})
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "backups")
	src := stackstest.EditSection(t, stackstest.Example(t, stackstest.ProxmoxExample), "backup", func(b map[string]any) {
		b["target"], b["recipients"], b["keep"] = "file://"+dir, []any{id.Recipient().String()}, map[string]any{"last": 1, "daily": 0, "weekly": 0}
	})
	src = stackstest.EditSection(t, src, "proxmox", func(px map[string]any) { px["access"] = "direct" })
	work := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(work, "Pulumi.homelab.yaml"), []byte("config: {}\n"), 0o600))

	current := live
	var stdout, stderr bytes.Buffer
	env := backupEnv{
		Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }, Now: time.Now,
		NewTalos: func(_ string, opts ...talosapi.Option) (*talosapi.Client, error) {
			return talosapi.NewFromTalosconfig(current.Talosconfig(), append(opts, talosapi.WithAddress(current.Address))...)
		},
	}
	stack := &seedableStack{state: json.RawMessage(`{"version":3,"deployment":{"resources":[]}}`)} // destroyed
	fake := homelabStack(t, live)
	breq := driver.BackupRequest{Op: driver.OpBackup, Stack: fake, Source: src, WorkDir: work, Name: "homelab"}
	require.NoError(t, runBackup(ctx, breq, env), stderr.String())

	// talos-backup's object, an hour later, with newer etcd contents.
	live.SetEtcdKeys(map[string]string{"/registry/configmaps/default/at": "snapshot-time"})
	cl, err := talosapi.NewFromTalosconfig(live.Talosconfig(), talosapi.WithAddress(live.Address))
	require.NoError(t, err)
	defer func() { _ = cl.Close() }()
	var snap bytes.Buffer
	_, err = cl.EtcdSnapshot(ctx, "10.10.0.10", &snap)
	require.NoError(t, err)
	// talos-backup writes under the prefix the program gives it, which
	// ends in the cluster instance (issue 35, item A.3).
	fp, err := backup.TalosCAFingerprint(live.Talosconfig())
	require.NoError(t, err)
	instance := certs.InstanceID(fp)
	writeInCluster := func(name string, at time.Time) {
		path := filepath.Join(dir, "homelab", "in-cluster", name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
		var enc bytes.Buffer
		w, err := age.Encrypt(&enc, id.Recipient())
		require.NoError(t, err)
		_, err = w.Write(snap.Bytes())
		require.NoError(t, err)
		require.NoError(t, w.Close())
		require.NoError(t, os.WriteFile(path, enc.Bytes(), 0o600))
		require.NoError(t, os.Chtimes(path, at, at))
	}
	later := time.Now().Add(time.Hour)
	writeInCluster(instance+"/homelab-old.snap.age", later.Add(-30*time.Minute))
	writeInCluster(instance+"/homelab-new.snap.age", later)
	newName := "homelab/in-cluster/" + instance + "/homelab-new.snap.age"
	// Newer, of another instance of the stack (destroyed and made again
	// with other secrets), and one from before the instances: neither is
	// paired with this instance's backup.
	writeInCluster("0123456789abcdef/homelab-other.snap.age", later.Add(2*time.Hour))
	writeInCluster("homelab-untied.snap.age", later.Add(time.Hour))

	stdout.Reset()
	breq.Op = driver.OpBackups
	require.NoError(t, runBackup(ctx, breq, env))
	assert.Contains(t, stdout.String(), newName)
	assert.Contains(t, stdout.String(), "in-cluster (etcd only)")

	// Another backup: keep.last 1 leaves one backup and one snapshot.
	breq.Op = driver.OpBackup
	require.NoError(t, runBackup(ctx, breq, env), stderr.String())
	store, err := backupstore.Open(ctx, "file://"+dir, backupstore.Options{})
	require.NoError(t, err)
	defer func() { _ = store.Close() }()
	backups, err := backup.List(ctx, store, "homelab")
	require.NoError(t, err)
	snapshots, err := backup.ListInCluster(ctx, store, "homelab")
	require.NoError(t, err)
	require.Len(t, backups, 1)
	require.Len(t, snapshots, 1)
	require.Equal(t, "homelab/in-cluster/0123456789abcdef/homelab-other.snap.age", snapshots[0].Name, "the newest snapshot is kept")
	writeInCluster(instance+"/homelab-new.snap.age", later)
	writeInCluster("homelab-untied.snap.age", later.Add(time.Hour))

	// The cluster is gone; fresh machines come up.
	current = talosapitest.StartFresh(t, spec...)
	stack.talosconfig = current.Talosconfig()
	ups := 0
	req := driver.RestoreRequest{
		Stack: stack, Source: src, WorkDir: work, Name: "homelab", Identity: writeKey(t, id),
		Up: func(context.Context, []string, map[string]string) error { ups++; return nil },
	}
	stderr.Reset()
	// An explicit snapshot of another instance, or from before the
	// instances, is refused before anything changes.
	for bad, want := range map[string]string{
		"homelab/in-cluster/0123456789abcdef/homelab-other.snap.age": "is of cluster instance 0123456789abcdef",
		"homelab/in-cluster/homelab-untied.snap.age":                 "was written before the snapshots were put under their cluster instance",
	} {
		req.BackupName = bad
		require.ErrorContains(t, runRestore(ctx, req, env), want)
		assert.Zero(t, stack.imports, "nothing imported")
	}
	req.BackupName = ""
	require.NoError(t, runRestore(ctx, req, env), stderr.String())
	assert.Contains(t, stderr.String(), "not pairing in-cluster snapshot homelab/in-cluster/0123456789abcdef/homelab-other.snap.age")
	assert.Contains(t, stderr.String(), "reading in-cluster snapshot "+newName+", with the state and stack file of backup homelab/")
	assert.Equal(t, map[string]string{"/registry/configmaps/default/at": "snapshot-time"}, current.EtcdKeys(), "the snapshot's etcd, not the backup's")
	assert.Equal(t, 1, stack.imports)
	assert.Equal(t, 2, ups)
}

// homelabStack is the Proxmox example's stack as backup reads it, its one
// control plane cp-0 (10.10.0.10) on the fake cluster live.
func homelabStack(t *testing.T, live *talosapitest.Cluster) fakeStack {
	t.Helper()
	var d map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(programState(), &d))
	return fakeStack{
		outputs: auto.OutputMap{
			"talosconfig": {Value: live.Talosconfig(), Secret: true},
			"nodes":       {Value: map[string]any{"cp-0": map[string]any{"role": "controlplane", "ip": "10.10.0.10"}}},
			"clusterName": {Value: "homelab"}, "talosVersion": {Value: "v1.13.9"}, "kubernetesVersion": {Value: "1.36.3"},
		},
		state: d["deployment"],
	}
}

func writeKey(t *testing.T, id *age.X25519Identity) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "key.txt")
	require.NoError(t, os.WriteFile(path, []byte(id.String()+"\n"), 0o600))
	return path
}

// With proxmox.access ssh-proxy, backup and restore reach the control
// planes through the Proxmox host's SSH connection (the test host routes
// 10.10.0.10:50000 to the Talos fake; nothing else reaches it), as `up`
// does: the snapshot is taken, then recovered into fresh machines behind a
// new host.
func TestBackupAndRestoreThroughTheSSHProxy(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	spec := []talosapitest.NodeSpec{{IP: "10.10.0.10", Hostname: "cp-0", Role: talosapitest.ControlPlane}}
	live := talosapitest.Start(t, spec...)
	live.SetEtcdKeys(map[string]string{"/registry/secrets/default/app": "via-ssh"})
	_, pub, pemKey := sshtest.Key(t)
	keyFile := filepath.Join(t.TempDir(), "id_ed25519")
	require.NoError(t, os.WriteFile(keyFile, pemKey, 0o600))
	host := sshtest.New(t, sshtest.Options{AuthorizedKey: pub, Routes: map[string]string{"10.10.0.10:50000": live.Address("10.10.0.10")}})

	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	src := stackstest.EditSection(t, stackstest.Example(t, stackstest.ProxmoxExample), "backup", func(b map[string]any) {
		b["target"], b["recipients"] = "file://"+filepath.Join(t.TempDir(), "backups"), []any{id.Recipient().String()}
	})
	work := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(work, "Pulumi.homelab.yaml"), []byte("config: {}\n"), 0o600))
	var stdout, stderr bytes.Buffer
	env := backupEnv{
		Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }, Now: time.Now,
		StartAccess: func(ctx context.Context, cfg *stacks.Config, o access.Options) (*access.Session, error) {
			require.Equal(t, stacks.AccessSSHProxy, cfg.Proxmox.Access)
			cfg.Proxmox.SSH = stacks.SSHConfig{Host: host.Host, Port: host.Port, User: "root", PrivateKeyFile: keyFile}
			return access.Start(ctx, cfg, o)
		},
		// No address map: the client dials 10.10.0.10:50000, which only
		// the session's dialer reaches.
		NewTalos: talosapi.NewFromTalosconfig,
	}
	fake := homelabStack(t, live)
	require.NoError(t, runBackup(ctx, driver.BackupRequest{Op: driver.OpBackup, Stack: fake, Source: src, WorkDir: work, Name: "homelab"}, env), stderr.String())
	require.Positive(t, host.Forwarded(), "the snapshot came through the SSH connection")

	fresh := talosapitest.StartFresh(t, spec...)
	host = sshtest.New(t, sshtest.Options{AuthorizedKey: pub, Routes: map[string]string{"10.10.0.10:50000": fresh.Address("10.10.0.10")}})
	stack := &seedableStack{state: json.RawMessage(`{"version":3,"deployment":{"resources":[]}}`), talosconfig: fresh.Talosconfig()}
	var vars []map[string]string
	req := driver.RestoreRequest{
		Stack: stack, Source: src, WorkDir: work, Name: "homelab", Identity: writeKey(t, id),
		Up: func(_ context.Context, _ []string, v map[string]string) error { vars = append(vars, v); return nil },
	}
	require.NoError(t, runRestore(ctx, req, env), stderr.String())
	assert.Equal(t, map[string]string{"/registry/secrets/default/app": "via-ssh"}, fresh.EtcdKeys())
	assert.Positive(t, host.Forwarded(), "the recovery went through the SSH connection")
	require.Len(t, vars, 2)
	assert.NotEmpty(t, vars[0]["HTTPS_PROXY"], "each up gets the session's proxy")
}
