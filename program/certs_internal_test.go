package program

import (
	"os"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/certs"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
	"github.com/fluodata/talos-pulumi/internal/testkit/pkitest"
)

type noResources struct{}

func (noResources) NewResource(a pulumi.MockResourceArgs) (string, resource.PropertyMap, error) {
	return a.Name, a.Inputs, nil
}
func (noResources) Call(pulumi.MockCallArgs) (resource.PropertyMap, error) {
	return resource.PropertyMap{}, nil
}

// The certificateExpiry output reads the talosconfig's client certificate
// from the secret output, is itself in clear, and leaves out what it
// cannot read (here a kubeconfig that is none).
func TestTheCertificateExpiryOutput(t *testing.T) {
	t.Parallel()
	talosconfig, err := os.ReadFile(pkitest.WriteTalosconfig(t, talosapitest.Bundle(t), t.TempDir(), "lab", "10.10.0.10")) //nolint:gosec // the test's file
	require.NoError(t, err)
	creds, err := talosapi.CredentialsFromTalosconfig(string(talosconfig))
	require.NoError(t, err)
	want, err := certs.Expiry(creds.Cert)
	require.NoError(t, err)

	got := make(chan map[string]string, 1)
	secret := make(chan bool, 1)
	err = pulumi.RunErr(func(ctx *pulumi.Context) error {
		out := certificateExpiry(pulumi.ToSecret(pulumi.String(string(talosconfig))), pulumi.ToSecret(pulumi.String("not a kubeconfig")))
		secret <- pulumi.IsSecret(out)
		out.ApplyT(func(m map[string]string) error { got <- m; return nil })
		return nil
	}, pulumi.WithMocks("talos-cluster", "test", noResources{}))
	require.NoError(t, err)
	assert.False(t, <-secret, "the dates are no secret")
	assert.Equal(t, map[string]string{"talosconfig": want.UTC().Format(time.RFC3339)}, <-got)
}
