package program

import (
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/internal/certs"
	"github.com/fluodata/talos-pulumi/internal/kubeapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
)

// CertificateExpiryOutput is the stack output that says when the client
// certificates of the talosconfig and kubeconfig outputs expire (RFC 3339,
// by output name): the Talos provider renews them only on an `up` within
// certs.RenewWithin of that, so a cluster left alone longer locks its
// operator out. The dates are no secret: the output is in clear.
const CertificateExpiryOutput = "certificateExpiry"

// certificateExpiry reads the expiry of the access files' client
// certificates; one that cannot be read (unknown in a preview) is left
// out.
func certificateExpiry(talosconfig, kubeconfig pulumi.Input) pulumi.StringMapOutput {
	expiry := pulumi.All(talosconfig, kubeconfig).ApplyT(func(v []any) map[string]string {
		out := map[string]string{}
		if s, ok := v[0].(string); ok {
			if creds, err := talosapi.CredentialsFromTalosconfig(s); err == nil {
				if t, err := certs.Expiry(creds.Cert); err == nil {
					out["talosconfig"] = t.UTC().Format(time.RFC3339)
				}
			}
		}
		if s, ok := v[1].(string); ok {
			if t, err := kubeapi.ClientCertExpiry([]byte(s)); err == nil {
				out["kubeconfig"] = t.UTC().Format(time.RFC3339)
			}
		}
		return out
	}).(pulumi.StringMapOutput)
	return pulumi.Unsecret(expiry).(pulumi.StringMapOutput)
}
