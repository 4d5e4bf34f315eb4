//go:build integration

package program_test

import (
	"context"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/events"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/testkit/clitest"
)

// TestIntegrationTheSecretsSurviveALowerTalosVersionWithTheRealCLI checks,
// with the real CLI and the real Talos plugin, what item 1 of issue 23
// observed: the provider replaces the machine secrets when their
// talosVersion is lowered, even by a patch release, so a rollback of
// cluster.talosVersion gave the cluster a new CA. The component ignores a
// change of it: a preview of the lower (and of a higher) version shows the
// secrets unchanged. The program registers the secrets as the component
// does (talos.NewMachineSecrets): the rest of a cluster would dial nodes.
func TestIntegrationTheSecretsSurviveALowerTalosVersionWithTheRealCLI(t *testing.T) {
	ctx := context.Background()
	dir := clitest.Backend(t, "the secrets were not checked with the real Talos plugin")

	version := "v1.12.6"
	prog := func(ctx *pulumi.Context) error {
		_, err := talos.NewMachineSecrets(ctx, "lab"+talos.SecretsSuffix, version)
		return err
	}
	s, err := auto.UpsertStackInlineSource(ctx, "it", "talos-cluster", prog, auto.WorkDir(dir))
	require.NoError(t, err)
	secretsURN := "urn:pulumi:it::talos-cluster::talos:machine/secrets:Secrets::lab-secrets"
	_, err = s.Up(ctx)
	require.NoError(t, err)

	for _, v := range []string{"v1.12.4", "v1.13.0"} {
		version = v
		ch := make(chan events.EngineEvent)
		done := make(chan string)
		go func() {
			op := ""
			for e := range ch {
				if e.ResourcePreEvent != nil && e.ResourcePreEvent.Metadata.URN == secretsURN {
					op = string(e.ResourcePreEvent.Metadata.Op)
				}
			}
			done <- op
		}()
		_, err = s.Preview(ctx, optpreview.EventStreams(ch))
		require.NoError(t, err, v)
		op := <-done
		t.Logf("talosVersion v1.12.6 -> %s: the secrets' step is %q", v, op)
		assert.True(t, op == "same" || op == "", "the secrets are neither replaced nor updated for %s: %s", v, op)
		assert.False(t, strings.Contains(op, "replace"), v)
	}
}
