package doctor_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/doctor"
	"github.com/fluodata/talos-pulumi/internal/certs"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
	"github.com/fluodata/talos-pulumi/internal/testkit/pkitest"
)

// certLines are the doctor's lines about the access files' certificates.
func certLines(rs []doctor.Result) []string {
	var out []string
	for _, r := range rs {
		if r.Check == "certs" {
			out = append(out, string(r.Level)+" "+r.Message)
		}
	}
	return out
}

// make doctor says until when the talosconfig's client certificate is
// valid, warns within the Talos provider's 30-day renewal window, and says
// so when the outputs cannot be read or there are none yet.
func TestDoctorChecksTheClientCertificates(t *testing.T) {
	t.Parallel()
	talosconfig, err := os.ReadFile(pkitest.WriteTalosconfig(t, talosapitest.Bundle(t), t.TempDir(), "lab", "10.10.0.10")) //nolint:gosec // the test's file
	require.NoError(t, err)
	creds, err := talosapi.CredentialsFromTalosconfig(string(talosconfig))
	require.NoError(t, err)
	notAfter, err := certs.Expiry(creds.Cert)
	require.NoError(t, err)

	run := func(outputs map[string]any, err error, now time.Time) []string {
		e := env(healthyAPI())
		e.StackOutputs = func(context.Context, string) (map[string]any, error) { return outputs, err }
		e.Now = func() time.Time { return now }
		return certLines(doctor.Run(context.Background(), e, direct(t), "proxmox-homelab"))
	}
	day := notAfter.UTC().Format(time.DateOnly)
	assert.Equal(t, []string{
		"ok the talosconfig client certificate is valid until " + day,
		"ok stack proxmox-homelab has no kubeconfig output yet (no up): nothing to check",
	}, run(map[string]any{"talosconfig": string(talosconfig)}, nil, notAfter.AddDate(0, -6, 0)))

	lines := run(map[string]any{"talosconfig": string(talosconfig)}, nil, notAfter.Add(-12*24*time.Hour))
	require.NotEmpty(t, lines)
	assert.True(t, strings.HasPrefix(lines[0], "warn the talosconfig client certificate expires on "+day), lines[0])
	assert.Contains(t, lines[0], "run `make up` to renew it")

	assert.Equal(t, []string{"warn unable to read the stack's outputs: exit status 255: passphrase must be set; the client certificates' expiry is not checked"},
		run(nil, errors.New("unable to read the stack's outputs: exit status 255: passphrase must be set"), notAfter))
}
