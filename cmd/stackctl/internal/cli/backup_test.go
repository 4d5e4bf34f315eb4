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
	"github.com/fluodata/talos-pulumi/internal/pkitest"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
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
