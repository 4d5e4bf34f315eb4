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
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
)

// realCLI is a driver run against the real pulumi CLI: a project of its own
// in a temporary directory, on the driver's default local file backend
// (<dir>/.pulumi-state), with a passphrase.
type realCLI struct {
	t   *testing.T
	dir string
	cli *driver.CLI
}

// newRealCLI skips the test, saying so, where pulumi is not on PATH
// (`make integration` refuses to start without it).
func newRealCLI(t *testing.T, project string) *realCLI {
	t.Helper()
	if _, err := exec.LookPath("pulumi"); err != nil {
		t.Skip("SKIPPED: the pulumi CLI is not on PATH, so the Automation API integration test did not run")
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), []byte("name: "+project+"\nruntime: go\n"), 0o600))
	t.Setenv("PULUMI_CONFIG_PASSPHRASE", "integration-test")
	t.Setenv("PULUMI_HOME", filepath.Join(dir, ".pulumi-home"))
	cli, err := driver.NewCLI(context.Background(), "", time.Minute)
	require.NoError(t, err)
	return &realCLI{t: t, dir: dir, cli: cli}
}

// run runs one operation with the program and returns its exit code, its
// summary and what it printed.
func (r *realCLI) run(prog pulumi.RunFunc, o driver.Options) (int, driver.Summary, string) {
	r.t.Helper()
	var out, errOut bytes.Buffer
	o.WorkDir, o.SummaryFile = r.dir, filepath.Join(r.dir, o.Op+".json")
	if o.Stack == "" {
		o.Stack = "it"
	}
	code := driver.Run(context.Background(), o, driver.Env{
		Pulumi:  r.cli,
		Program: func(context.Context, stacks.Source, string) pulumi.RunFunc { return prog },
		Stdout:  &out, Stderr: &errOut, Getenv: os.Getenv, Now: time.Now,
	})
	raw, err := os.ReadFile(o.SummaryFile)
	require.NoError(r.t, err, "no summary: %s%s", out.String(), errOut.String())
	var s driver.Summary
	require.NoError(r.t, json.Unmarshal(raw, &s))
	return code, s, out.String() + errOut.String()
}

// TestIntegrationWithTheRealCLI runs preview, up, outputs and destroy of a
// tiny inline project (one component, two secret outputs, no provider
// plugins) with the real pulumi CLI and a local file backend. Run it with
// `make integration`.
//
// The counts are the CLI's own: the root stack resource
// (pulumi:pulumi:Stack) is a resource of the deployment, created by the
// first up and deleted by the destroy like the component.
func TestIntegrationWithTheRealCLI(t *testing.T) {
	r := newRealCLI(t, "driver-it")
	prog := func(ctx *pulumi.Context) error {
		var c pulumi.ResourceState
		if err := ctx.RegisterComponentResource("driverit:index:Thing", "thing", &c); err != nil {
			return err
		}
		ctx.Export("kubeconfig", pulumi.ToSecret(pulumi.String("apiVersion: v1\n")))
		ctx.Export("talosconfig", pulumi.ToSecret(pulumi.String("context: it\n")))
		return nil
	}

	code, s, log := r.run(prog, driver.Options{Op: driver.OpPreview, Create: true})
	require.Equal(t, exitcode.OK, code, log)
	assert.True(t, s.ChangesPending)
	assert.Equal(t, map[string]int{"create": 2}, s.Changes, "the stack and the component: %s", log)

	code, s, log = r.run(prog, driver.Options{Op: driver.OpUp})
	require.Equal(t, exitcode.OK, code, log)
	assert.Equal(t, map[string]int{"create": 2}, s.Changes, "the stack and the component: %s", log)
	assert.Equal(t, []string{"kubeconfig", "talosconfig"}, s.Outputs)

	code, _, log = r.run(prog, driver.Options{Op: driver.OpOutputs})
	require.Equal(t, exitcode.OK, code, log)
	data, err := os.ReadFile(filepath.Join(r.dir, ".access", "it", "kubeconfig"))
	require.NoError(t, err)
	assert.Equal(t, "apiVersion: v1\n", string(data))

	code, s, log = r.run(prog, driver.Options{Op: driver.OpDestroy})
	require.Equal(t, exitcode.OK, code, log)
	// The stack holds no resource of a provider, so the destroy does not
	// run the program (DestroyRunsProgram): the CLI just deletes.
	assert.Equal(t, map[string]int{"delete": 2}, s.Changes, "the component and the stack: %s", log)

	// A second destroy leaves nothing either. With the program, the real
	// CLI records the components it registers as created and keeps them.
	code, _, log = r.run(prog, driver.Options{Op: driver.OpDestroy})
	require.Equal(t, exitcode.OK, code, log)
	assert.Zero(t, r.resources(), "the state holds nothing after a second destroy: %s", log)
}

// resources counts the resources in the stack's state (`pulumi stack
// export`, with the real CLI).
func (r *realCLI) resources() int {
	r.t.Helper()
	cmd := exec.Command("pulumi", "stack", "export", "--stack", "it", "--cwd", r.dir)
	cmd.Env = append(os.Environ(), "PULUMI_BACKEND_URL=file://"+filepath.Join(r.dir, ".pulumi-state"))
	out, err := cmd.Output()
	require.NoError(r.t, err)
	var doc struct {
		Deployment struct {
			Resources []json.RawMessage `json:"resources"`
		} `json:"deployment"`
	}
	require.NoError(r.t, json.Unmarshal(out, &doc))
	return len(doc.Deployment.Resources)
}

// TestIntegrationPreviewExitCodeOnChanges checks `stackctl preview
// --exit-code-on-changes` (driver.Options.ExitOnChanges) with the real CLI:
// exit 0 on a stack the program leaves as it is, 4 when it would change it.
// The program is shaped as this project's: it first reads the stack's last
// outputs through the engine's readStackOutputs function (program.ReadLast),
// which must count as no change, then registers components (no provider
// plugin needed) and exports.
func TestIntegrationPreviewExitCodeOnChanges(t *testing.T) {
	r := newRealCLI(t, "exitcode-it")
	things, version := []string{"a", "b"}, "1.34.1"
	var last program.Last
	prog := func(ctx *pulumi.Context) error {
		var err error
		if last, err = program.ReadLast(ctx); err != nil {
			return err
		}
		for _, name := range things {
			var c pulumi.ResourceState
			if err := ctx.RegisterComponentResource("exitcodeit:index:Thing", name, &c); err != nil {
				return err
			}
		}
		ctx.Export("kubernetesVersion", pulumi.String(version))
		ctx.Export("nodes", pulumi.Map{"cp-0": pulumi.StringMap{"role": pulumi.String("controlplane"), "ip": pulumi.String("10.0.0.10")}})
		return nil
	}
	preview := func() (int, driver.Summary, string) {
		return r.run(prog, driver.Options{Op: driver.OpPreview, ExitOnChanges: true})
	}

	// A new stack: everything is to create.
	code, s, log := r.run(prog, driver.Options{Op: driver.OpPreview, Create: true, ExitOnChanges: true})
	assert.Equal(t, exitcode.ChangesPending, code, log)
	assert.Equal(t, map[string]int{"create": 3}, s.Changes, "the stack and 2 components: %s", log)
	assert.Nil(t, last.Cluster, "a new stack has no last outputs")

	code, s, log = r.run(prog, driver.Options{Op: driver.OpUp})
	require.Equal(t, exitcode.OK, code, log)
	assert.Equal(t, map[string]int{"create": 3}, s.Changes, log)

	// Unchanged: the read of the last outputs is no change.
	code, s, log = preview()
	assert.Equal(t, exitcode.OK, code, log)
	assert.False(t, s.ChangesPending, log)
	assert.Equal(t, map[string]int{"same": 3}, s.Changes, log)
	require.NotNil(t, last.Cluster, "the preview read the up's outputs: %s", log)
	assert.Equal(t, "1.34.1", last.Cluster.KubernetesVersion)

	// A resource more.
	things = append(things, "c")
	code, s, log = preview()
	assert.Equal(t, exitcode.ChangesPending, code, log)
	assert.True(t, s.ChangesPending, log)
	assert.Equal(t, map[string]int{"create": 1, "same": 3}, s.Changes, log)
	assert.Contains(t, s.Error, "changes pending: 1 to create, 3 to same")

	// A resource less.
	things = things[:1]
	code, s, log = preview()
	assert.Equal(t, exitcode.ChangesPending, code, log)
	assert.Equal(t, map[string]int{"delete": 1, "same": 2}, s.Changes, log)

	// Only an output changes: the CLI counts no change (the stack resource
	// stays the same; its outputs are no step), as `pulumi preview
	// --expect-no-changes` does (pulumi/pulumi#5087), though it shows the
	// new value.
	things, version = []string{"a", "b"}, "1.35.0"
	code, s, log = preview()
	assert.Equal(t, exitcode.OK, code, log)
	assert.Equal(t, map[string]int{"same": 3}, s.Changes, log)
	assert.Contains(t, log, `~ kubernetesVersion: "1.34.1" => "1.35.0"`)
}
