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

// AccessFiles are the stack outputs whose client certificates expire.
var AccessFiles = []string{"talosconfig", "kubeconfig"}

// AccessFileExpiry is when the client certificate of the access file name
// (an output of AccessFiles, its text) expires.
func AccessFileExpiry(name, text string) (time.Time, error) {
	if name == "kubeconfig" {
		return kubeapi.ClientCertExpiry([]byte(text))
	}
	creds, err := talosapi.CredentialsFromTalosconfig(text)
	if err != nil {
		return time.Time{}, err
	}
	return certs.Expiry(creds.Cert)
}

// certificateExpiry reads the expiry of the access files' client
// certificates; one that cannot be read (unknown in a preview) is left
// out.
func certificateExpiry(talosconfig, kubeconfig pulumi.Input) pulumi.StringMapOutput {
	expiry := pulumi.All(talosconfig, kubeconfig).ApplyT(func(v []any) map[string]string {
		out := map[string]string{}
		for i, name := range AccessFiles {
			if s, ok := v[i].(string); ok {
				if t, err := AccessFileExpiry(name, s); err == nil {
					out[name] = t.UTC().Format(time.RFC3339)
				}
			}
		}
		return out
	}).(pulumi.StringMapOutput)
	return pulumi.Unsecret(expiry).(pulumi.StringMapOutput)
}
