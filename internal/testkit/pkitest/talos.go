package pkitest

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"go.yaml.in/yaml/v4"
)

// TalosBundle makes a Talos secrets bundle as `talosctl gen secrets` does:
// every CA, token and cluster secret its own, the service account's key an
// RSA key as Talos makes it. That key is made once per test binary and shared
// by its bundles: a 4096-bit RSA key costs about a second of CPU, and the
// tests make dozens of bundles. It signs nothing the tests look at; a bundle
// of "another cluster" differs in everything else.
func TalosBundle(t testing.TB) *secrets.Bundle {
	t.Helper()
	now := time.Now()
	contract := config.TalosVersionCurrent
	saKey, err := serviceAccountKey()
	must(t, err)
	// Kubernetes's PKI directory layout, which Talos reads a bundle's
	// Kubernetes part from; it makes the rest (Talos CA, tokens, cluster
	// secrets) as NewBundle does.
	pki := t.TempDir()
	for dir, newCA := range map[string]func(time.Time, *config.VersionContract) (*x509.CertificateAuthority, error){
		"ca":             secrets.NewKubernetesCA,
		"etcd/ca":        secrets.NewEtcdCA,
		"front-proxy-ca": secrets.NewAggregatorCA,
	} {
		ca, err := newCA(now, contract)
		must(t, err)
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(pki, dir)), 0o700))
		must(t, os.WriteFile(filepath.Join(pki, dir+".crt"), ca.CrtPEM, 0o600))
		must(t, os.WriteFile(filepath.Join(pki, dir+".key"), ca.KeyPEM, 0o600))
	}
	must(t, os.WriteFile(filepath.Join(pki, "sa.key"), saKey, 0o600))
	b, err := secrets.NewBundleFromKubernetesPKI(pki, "", contract)
	must(t, err)
	b.Clock = secrets.NewFixedClock(now)
	return b
}

// serviceAccountKey is the PEM of the RSA key Talos makes for the
// Kubernetes service accounts (config.VersionContract.UseRSAServiceAccountKey).
var serviceAccountKey = sync.OnceValues(func() ([]byte, error) {
	if !config.TalosVersionCurrent.UseRSAServiceAccountKey() {
		k, err := x509.NewECDSAKey()
		if err != nil {
			return nil, err
		}
		return k.KeyPEM, nil
	}
	k, err := x509.NewRSAKey()
	if err != nil {
		return nil, err
	}
	return k.KeyPEM, nil
})

// WriteTalosSecrets writes b as secrets.yaml (the YAML talosctl writes) into
// dir and returns its path.
func WriteTalosSecrets(t testing.TB, b *secrets.Bundle, dir string) string {
	t.Helper()
	raw, err := yaml.Marshal(b)
	must(t, err)
	p := filepath.Join(dir, "secrets.yaml")
	must(t, os.WriteFile(p, raw, 0o600))
	return p
}

// WriteTalosconfig writes the talosconfig `talosctl gen config` makes from b
// for a cluster name, with the endpoints an operator sets afterwards, into
// dir and returns its path.
func WriteTalosconfig(t testing.TB, b *secrets.Bundle, dir, cluster string, endpoints ...string) string {
	t.Helper()
	in, err := generate.NewInput(cluster, "https://"+cluster+":6443", "", generate.WithSecretsBundle(b), generate.WithEndpointList(endpoints))
	must(t, err)
	tc, err := in.Talosconfig()
	must(t, err)
	raw, err := tc.Bytes()
	must(t, err)
	p := filepath.Join(dir, "talosconfig")
	must(t, os.WriteFile(p, raw, 0o600))
	return p
}
