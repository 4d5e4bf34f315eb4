// Package adopt moves a running cluster, made by the Ansible playbooks or
// talosctl, under this tool: it checks the cluster's secrets.yaml the way the
// Talos provider will read it, describes the `pulumi import` of the secrets
// and records the bootstrap already done in the stack's state, so the next
// `up` generates configs the running nodes accept instead of a new PKI, and
// bootstraps no second etcd.
package adopt

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/fluodata/talos-pulumi/stacks"
)

// ErrInvalidSecrets marks a secrets file the provider would reject, misread
// or crash on.
var ErrInvalidSecrets = errors.New("invalid secrets file")

// LoadSecrets reads a secrets bundle (`talosctl gen secrets` output) with the
// same decoder as the Talos provider's import and checks everything the
// import and the later config generation use: each section present, each
// certificate and key parseable and belonging together, and the talosconfig
// the provider derives from it can be made. Every problem is reported, each
// named by its path in the file.
func LoadSecrets(path string) (*secrets.Bundle, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("unable to read the secrets file: %w", err)
	}
	bundle, err := secrets.LoadBundle(path)
	if err != nil {
		return nil, fmt.Errorf("unable to load %s as a secrets bundle: %w: %w", path, ErrInvalidSecrets, err)
	}
	var problems []string
	if err := bundle.Validate(); err != nil {
		problems = append(problems, splitMulti(err)...)
	}
	if bundle.Certs != nil {
		for _, p := range []struct {
			key  string
			pair *x509.PEMEncodedCertificateAndKey
		}{
			{"certs.etcd", bundle.Certs.Etcd},
			{"certs.k8s", bundle.Certs.K8s},
			{"certs.k8saggregator", bundle.Certs.K8sAggregator},
			{"certs.os", bundle.Certs.OS},
		} {
			if p.pair == nil || mentioned(problems, p.key) {
				continue // Validate reported it
			}
			if _, err := tls.X509KeyPair(p.pair.Crt, p.pair.Key); err != nil {
				problems = append(problems, fmt.Sprintf("%s: the key does not belong to the certificate (%v)", p.key, err))
			}
		}
	}
	if len(problems) == 0 {
		// The provider's import derives the client configuration this way;
		// a failure here is a failed import there.
		in, err := generate.NewInput("adopt", "https://adopt:6443", "", generate.WithSecretsBundle(bundle))
		if err == nil {
			_, err = in.Talosconfig()
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("no Talos client certificate can be made from certs.os: %v", err))
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w %s:\n  - %s", ErrInvalidSecrets, path, strings.Join(problems, "\n  - "))
	}
	return bundle, nil
}

// CheckTalosconfig confirms that a talosconfig (the one kept next to
// secrets.yaml in the Ansible environment folder) trusts the bundle's Talos
// CA, i.e. both files belong to the same cluster: an admin certificate
// signed by another CA would make every apply of the next `up` fail. It
// warns when the names differ and lists the machines the stack does not
// have: the old ones, to retire once the stack's nodes have joined.
func CheckTalosconfig(cfg *stacks.Config, bundle *secrets.Bundle, path string) (warnings []string, err error) {
	// Not config.Open: it creates a missing file.
	raw, err := os.ReadFile(path) //nolint:gosec // the operator names the file
	if err != nil {
		return nil, fmt.Errorf("unable to read the talosconfig: %w", err)
	}
	tc, err := config.FromBytes(raw)
	if err != nil {
		return nil, fmt.Errorf("unable to parse the talosconfig %s: %w", path, err)
	}
	if len(tc.Contexts) == 0 {
		return nil, fmt.Errorf("talosconfig %s: no contexts", path)
	}
	want := bytes.TrimSpace(bundle.Certs.OS.Crt)
	known := map[string]bool{cfg.Cluster.VIP: true, cfg.EndpointHost(): true}
	for _, n := range cfg.Nodes.All() {
		known[n.IP] = true
	}
	// A talosconfig may hold contexts of several clusters; the ones that
	// trust the bundle's CA are this cluster's.
	matched := 0
	for _, name := range slices.Sorted(maps.Keys(tc.Contexts)) {
		c := tc.Contexts[name]
		ca, err := base64.StdEncoding.DecodeString(c.CA)
		if err != nil || !bytes.Equal(bytes.TrimSpace(ca), want) {
			continue
		}
		matched++
		if name != cfg.Cluster.Name {
			warnings = append(warnings, fmt.Sprintf("talosconfig context %q is not cluster.name %q; the running cluster keeps the name it was made with, so set cluster.name to it", name, cfg.Cluster.Name))
		}
		for _, h := range slices.Concat(c.Endpoints, c.Nodes) {
			host := h
			if hp, err := netip.ParseAddrPort(h); err == nil {
				host = hp.Addr().String()
			}
			if !known[host] {
				warnings = append(warnings, fmt.Sprintf("talosconfig context %q names %s, which the stack does not have: the stack's nodes join the cluster, retire %s afterwards (talosctl reset --graceful)", name, h, h))
			}
		}
	}
	if matched == 0 {
		return nil, fmt.Errorf("talosconfig %s: no context trusts the Talos CA of the secrets file (certs.os); they belong to different clusters", path)
	}
	return warnings, nil
}

// ImportedTalosVersion is the talosVersion the provider's import records
// for a bundle: it cannot know the real one and picks by the encryption
// secret (aescbc before Talos 1.3). The program's version follows as an
// in-place update.
func ImportedTalosVersion(b *secrets.Bundle) string {
	if b.Secrets != nil && b.Secrets.AESCBCEncryptionSecret != "" {
		return "v1.2"
	}
	return "v1.3"
}

// SiblingTalosconfig returns the talosconfig next to a secrets file, the
// Ansible environment folder's layout, or "" when there is none.
func SiblingTalosconfig(secretsPath string) string {
	p := filepath.Join(filepath.Dir(secretsPath), "talosconfig")
	if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
		return p
	}
	return ""
}

// splitMulti turns a go-multierror into its lines.
func splitMulti(err error) []string {
	var out []string
	if u, ok := err.(interface{ Unwrap() []error }); ok { //nolint:errorlint // a join's parts, not a chain
		for _, e := range u.Unwrap() {
			out = append(out, e.Error())
		}
		return out
	}
	if u, ok := err.(interface{ WrappedErrors() []error }); ok { //nolint:errorlint // go-multierror's parts
		for _, e := range u.WrappedErrors() {
			out = append(out, e.Error())
		}
		return out
	}
	return []string{err.Error()}
}

func mentioned(problems []string, key string) bool {
	for _, p := range problems {
		if strings.HasPrefix(p, key+" ") || strings.HasPrefix(p, key+".") || strings.HasPrefix(p, key+":") {
			return true
		}
	}
	return false
}
