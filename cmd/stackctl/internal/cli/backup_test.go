package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/backup"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/driver"
	"github.com/fluodata/talos-pulumi/internal/backupstore"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
	"github.com/fluodata/talos-pulumi/internal/testkit/pkitest"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// fakeStack is a stack's outputs and state export.
type fakeStack struct {
	outputs auto.OutputMap
	state   json.RawMessage
}

func (f fakeStack) Outputs(context.Context) (auto.OutputMap, error) { return f.outputs, nil }
func (f fakeStack) Export(context.Context) (apitype.UntypedDeployment, error) {
	return apitype.UntypedDeployment{Version: 3, Deployment: f.state}, nil
}

// `stackctl backup` reads the stack's backup section, outputs, state and
// stack file, and writes one encrypted backup of the cluster's etcd that
// `stackctl backups` lists and the identity reads back whole.
func TestStackctlBackupAndBackups(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c := talosapitest.Start(t, talosapitest.Topology(3, 1, talosapitest.DefaultVersion, 40*time.Millisecond)...)
	c.SetEtcdKeys(map[string]string{"/registry/namespaces/default": "ETCD-MARKER"})
	work := t.TempDir()
	talosconfig, err := os.ReadFile(pkitest.WriteTalosconfig(t, talosapitest.Bundle(t), work, "lab", "10.5.0.11")) //nolint:gosec // the test's file
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(work, "Pulumi.homelab.yaml"), []byte("config: {} # STACK-FILE\n"), 0o600))

	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	target := "file://" + filepath.Join(t.TempDir(), "backups")
	src := stackstest.EditSection(t, stackstest.Example(t, stackstest.ProxmoxExample), "backup", func(b map[string]any) {
		b["target"], b["recipients"] = target, []any{id.Recipient().String()}
	})
	src = stackstest.EditSection(t, src, "proxmox", func(px map[string]any) { px["access"] = "direct" })
	nodes := map[string]any{}
	for i, ip := range c.IPs(talosapitest.ControlPlane) {
		nodes["cp-"+string(rune('1'+i))] = map[string]any{"role": "controlplane", "ip": ip}
	}
	stack := fakeStack{
		outputs: auto.OutputMap{
			"talosconfig": {Value: string(talosconfig), Secret: true}, "nodes": {Value: nodes},
			"clusterName": {Value: "lab"}, "talosVersion": {Value: talosapitest.DefaultVersion}, "kubernetesVersion": {Value: "1.35.0"},
		},
		state: json.RawMessage(`{"resources":[],"marker":"STATE-MARKER"}`),
	}
	var stdout, stderr bytes.Buffer
	env := backupEnv{
		Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }, Now: time.Now,
		NewTalos: func(tc string, opts ...talosapi.Option) (*talosapi.Client, error) {
			return talosapi.NewFromTalosconfig(tc, append(opts, talosapi.WithAddress(c.Address))...)
		},
	}
	req := driver.BackupRequest{Op: driver.OpBackup, Stack: stack, Source: src, WorkDir: work, Name: "homelab"}
	require.NoError(t, runBackup(ctx, req, env), stderr.String())
	assert.Contains(t, stdout.String(), "backup homelab/")
	assert.Contains(t, stderr.String(), "etcd's hash checks")

	stdout.Reset()
	req.Op = driver.OpBackups
	require.NoError(t, runBackup(ctx, req, env))
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	require.Len(t, lines, 2, stdout.String())
	assert.Contains(t, lines[1], talosapitest.DefaultVersion)
	assert.Contains(t, lines[1], "10.5.0.11")

	store, err := backupstore.Open(ctx, target, backupstore.Options{})
	require.NoError(t, err)
	defer func() { _ = store.Close() }()
	name := strings.Fields(lines[1])[0]
	x, err := backup.Extract(ctx, store, name, []age.Identity{id}, t.TempDir())
	require.NoError(t, err)
	assert.Equal(t, "lab", x.Manifest.Cluster)
	assert.True(t, x.Manifest.Certificates["talosconfig"].After(time.Now()), "the talosconfig's certificate expiry is recorded: %v", x.Manifest.Certificates)
	assert.Contains(t, string(x.State), "STATE-MARKER")
	assert.Contains(t, string(x.StackFile), "STACK-FILE")
}

// A stack without a backup section says how to add one.
func TestStackctlBackupWithoutASection(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	err := runBackup(t.Context(), driver.BackupRequest{
		Op: driver.OpBackup, Stack: fakeStack{}, Source: stackstest.Example(t, stackstest.ProxmoxExample), Name: "homelab",
	}, backupEnv{Stdout: &stdout, Stderr: &stderr})
	require.ErrorContains(t, err, "has no backup section: set backup.target and backup.recipients")
}

// `stackctl backup-get` brings a backup's files back without the stack:
// the latest by default, checked whole, into a new private directory; a
// wrong identity leaves nothing behind.
func TestStackctlBackupGet(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c := talosapitest.Start(t, talosapitest.Topology(1, 0, talosapitest.DefaultVersion, 40*time.Millisecond)...)
	c.SetEtcdKeys(map[string]string{"/k": "v"})
	crt, key := c.AdminCert()
	cl, err := talosapi.New(talosapi.Credentials{CA: c.CA(), Cert: crt, Key: key}, talosapi.WithAddress(c.Address))
	require.NoError(t, err)
	defer func() { _ = cl.Close() }()
	dir := t.TempDir()
	target := "file://" + filepath.Join(dir, "backups")
	store, err := backupstore.Open(ctx, target, backupstore.Options{})
	require.NoError(t, err)
	defer func() { _ = store.Close() }()
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	res, err := backup.Take(ctx, backup.Source{
		Stack: "homelab", Cluster: "lab", TalosVersion: talosapitest.DefaultVersion, ControlPlanes: c.IPs(talosapitest.ControlPlane),
		StackFile: []byte("config: {}\n"), StackFileName: "Pulumi.homelab.yaml", State: []byte(`{"deployment":{}}`),
	}, cl, store, backup.Options{Recipients: []age.Recipient{id.Recipient()}})
	require.NoError(t, err)
	keyFile := filepath.Join(dir, "key.txt")
	require.NoError(t, os.WriteFile(keyFile, []byte(id.String()+"\n"), 0o600))

	out := filepath.Join(dir, "restored")
	var stdout, stderr bytes.Buffer
	code := Main(ctx, []string{"backup-get", "--target", target, "--stack", "homelab", "--identity", keyFile, "--out", out}, nil, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	assert.Contains(t, stdout.String(), res.Name)
	for _, f := range []string{"manifest.json", "etcd.snapshot", "state.json", "Pulumi.homelab.yaml"} {
		info, err := os.Stat(filepath.Join(out, f))
		require.NoError(t, err, f)
		assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), f)
	}
	info, err := os.Stat(out)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), info.Mode().Perm())

	other, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(keyFile, []byte(other.String()+"\n"), 0o600))
	out2 := filepath.Join(dir, "wrong")
	stderr.Reset()
	code = Main(ctx, []string{"backup-get", "--target", target, "--stack", "homelab", "--identity", keyFile, "--out", out2}, nil, &stdout, &stderr)
	assert.NotEqual(t, 0, code)
	assert.Contains(t, stderr.String(), "none of the given identities is a recipient")
	assert.NoDirExists(t, out2, "nothing of a backup that fails its checks is kept")
}

// A local stack reached through published ports is refused by key before
// any call: backup and restore reach the control planes at their IPs.
func TestBackupAndRestoreRefuseAPublishedLocalStack(t *testing.T) {
	t.Parallel()
	cfg := &stacks.Config{Platform: stacks.PlatformLocal}
	require.NoError(t, reachesNodeIPs(cfg))
	cfg.Local.APIAccess = "published"
	require.ErrorContains(t, reachesNodeIPs(cfg), "local.apiAccess is published: backup and restore reach the control planes at their IPs")
	require.NoError(t, reachesNodeIPs(&stacks.Config{Platform: stacks.PlatformProxmox}))
}
