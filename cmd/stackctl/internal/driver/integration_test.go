//go:build integration

package driver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/driver"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/exitcode"
	"github.com/fluodata/talos-pulumi/stacks"
)

// TestIntegrationWithTheRealCLI runs preview, up, outputs and destroy of a
// tiny inline project (one component, two secret outputs, no provider
// plugins) with the real pulumi CLI and a local file backend. Run it with
// `make integration`; it is skipped, saying so, where pulumi is not on PATH.
func TestIntegrationWithTheRealCLI(t *testing.T) {
	if _, err := exec.LookPath("pulumi"); err != nil {
		t.Skip("SKIPPED: the pulumi CLI is not on PATH, so the Automation API integration test did not run")
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), []byte("name: driver-it\nruntime: go\n"), 0o600))
	t.Setenv("PULUMI_CONFIG_PASSPHRASE", "integration-test")
	t.Setenv("PULUMI_HOME", filepath.Join(dir, ".pulumi-home"))

	cli, err := driver.NewCLI(context.Background(), "", time.Minute)
	require.NoError(t, err)
	program := func(stacks.Source) pulumi.RunFunc {
		return func(ctx *pulumi.Context) error {
			var c pulumi.ResourceState
			if err := ctx.RegisterComponentResource("driverit:index:Thing", "thing", &c); err != nil {
				return err
			}
			ctx.Export("kubeconfig", pulumi.ToSecret(pulumi.String("apiVersion: v1\n")))
			ctx.Export("talosconfig", pulumi.ToSecret(pulumi.String("context: it\n")))
			return nil
		}
	}
	run := func(op string, create bool) (int, driver.Summary, string) {
		var out, errOut bytes.Buffer
		o := driver.Options{Op: op, Stack: "it", WorkDir: dir, Create: create, SummaryFile: filepath.Join(dir, op+".json")}
		code := driver.Run(context.Background(), o, driver.Env{
			Pulumi: cli, Program: program, Stdout: &out, Stderr: &errOut, Getenv: os.Getenv, Now: time.Now,
		})
		raw, _ := os.ReadFile(o.SummaryFile)
		var s driver.Summary
		_ = json.Unmarshal(raw, &s)
		return code, s, out.String() + errOut.String()
	}

	code, s, log := run(driver.OpPreview, true)
	require.Equal(t, exitcode.OK, code, log)
	assert.True(t, s.ChangesPending)

	code, s, log = run(driver.OpUp, false)
	require.Equal(t, exitcode.OK, code, log)
	assert.Equal(t, 1, s.Changes["create"], log)
	assert.Equal(t, []string{"kubeconfig", "talosconfig"}, s.Outputs)

	code, _, log = run(driver.OpOutputs, false)
	require.Equal(t, exitcode.OK, code, log)
	data, err := os.ReadFile(filepath.Join(dir, ".access", "it", "kubeconfig"))
	require.NoError(t, err)
	assert.Equal(t, "apiVersion: v1\n", string(data))

	code, s, log = run(driver.OpDestroy, false)
	require.Equal(t, exitcode.OK, code, log)
	assert.Equal(t, 1, s.Changes["delete"], log)
}
