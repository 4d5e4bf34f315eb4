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

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/driver"
	"github.com/fluodata/talos-pulumi/internal/pkitest"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
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
