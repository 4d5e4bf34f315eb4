//go:build integration

package program_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/testkit/clitest"
	"github.com/fluodata/talos-pulumi/program"
)

// TestIntegrationReadPreviousWithTheRealCLI checks, with the real pulumi
// CLI and a local file backend, what the refusals of issue 18 rest on: a
// program reads its own stack's last outputs through the engine's
// readStackOutputs function, in a preview and in an up, before it registers
// new ones; the read is no step (nothing "to read" in a preview) and, on a
// stack that has outputs or none yet, no warning. Run it with `make
// integration`; it is skipped, saying so, where pulumi is not on PATH.
func TestIntegrationReadPreviousWithTheRealCLI(t *testing.T) {
	ctx := context.Background()
	dir := clitest.Backend(t, "the read of the last outputs was not checked")
	t.Setenv("PULUMI_HOME", filepath.Join(dir, ".pulumi-home"))

	// Each run exports the cluster it was asked for (the version given)
	// and what it read of the last run.
	version := "1.34.1"
	seen := ""
	prog := func(ctx *pulumi.Context) error {
		prev, err := program.ReadPrevious(ctx)
		if err != nil {
			return err
		}
		seen = "none"
		if prev != nil {
			seen = prev.KubernetesVersion
			for _, cp := range prev.ControlPlanes {
				seen += " " + cp
			}
		}
		ctx.Export("kubernetesVersion", pulumi.String(version))
		ctx.Export("nodes", pulumi.Map{"cp-0": pulumi.StringMap{"role": pulumi.String("controlplane"), "ip": pulumi.String("10.0.0.10")}})
		// Secret outputs, as every real stack has (issue 35, item 0.1): the
		// SDK's plain invoke refused the whole read for them.
		ctx.Export("kubeconfig", pulumi.ToSecret(pulumi.String("apiVersion: v1\nkind: Config\n")))
		ctx.Export("talosconfig", pulumi.ToSecret(pulumi.String("context: it\n")))
		return nil
	}
	s, err := auto.UpsertStackInlineSource(ctx, "it", "previous-it", prog)
	require.NoError(t, err)

	var log strings.Builder
	up, err := s.Up(ctx, optup.ProgressStreams(&log))
	require.NoError(t, err)
	assert.Equal(t, "none", seen, "the first up has no last outputs")
	assert.Equal(t, map[string]int{"create": 1}, *up.Summary.ResourceChanges, "the stack alone")
	assert.NotContains(t, log.String(), "unable to read the stack's last outputs")

	version = "1.35.0"
	log.Reset()
	pre, err := s.Preview(ctx, optpreview.ProgressStreams(&log))
	require.NoError(t, err)
	assert.Equal(t, "1.34.1 cp-0", seen, "a preview reads the last up's outputs")
	assert.Equal(t, map[apitype.OpType]int{apitype.OpSame: 1}, pre.ChangeSummary, "the read is no step")
	assert.NotContains(t, log.String(), "unable to read the stack's last outputs")

	_, err = s.Up(ctx)
	require.NoError(t, err)
	assert.Equal(t, "1.34.1 cp-0", seen, "an up reads the last up's outputs, not its own")

	log.Reset()
	_, err = s.Up(ctx, optup.ProgressStreams(&log))
	require.NoError(t, err)
	assert.Equal(t, "1.35.0 cp-0", seen)
	assert.NotContains(t, log.String(), "unable to read the stack's last outputs", "the secret outputs are read")
	// The secrets stay secret in the state: the read unwraps nothing that
	// the program exports again.
	out, err := s.Outputs(ctx)
	require.NoError(t, err)
	assert.True(t, out["kubeconfig"].Secret, "kubeconfig is still a secret output")
	// The backend's own file (the Automation API's export decrypts).
	stackDir := filepath.Join(dir, "state", ".pulumi", "stacks", "previous-it")
	for _, f := range []string{filepath.Join(stackDir, "it.json"), filepath.Join(stackDir, "it.json.bak")} {
		state, err := os.ReadFile(f)
		require.NoError(t, err)
		assert.NotContains(t, string(state), "kind: Config", "no secret in clear in the state (%s)", f)
		assert.Contains(t, string(state), "ciphertext", "the secret outputs are encrypted (%s)", f)
	}
}
