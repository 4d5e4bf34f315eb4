package realapiserver

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/testkit/pkitest"
)

// Without the binary, a test that needs the API server is skipped, never
// passed: it says what builds the binary.
func TestStartSkipsWithoutTheBinary(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "kube-apiserver")
	t.Setenv(BinaryEnv, missing)
	_, err := Binary()
	require.EqualError(t, err, "no kube-apiserver at "+missing+" ($KUBE_APISERVER): `make kube-apiserver` builds bin/kube-apiserver")

	var skipped, returned bool
	t.Run("start", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		Start(t.Context(), t, NewCA(t))
		returned = true
	})
	assert.True(t, skipped, "the test is skipped")
	assert.False(t, returned, "Start does not return")
}

// The binary is looked for at the repository's root, whichever package's
// folder the test runs in.
func TestBinaryIsTheRepositorysBin(t *testing.T) {
	t.Setenv(BinaryEnv, "")
	root, err := repoRoot()
	require.NoError(t, err)
	assert.FileExists(t, filepath.Join(root, "go.mod"))
	assert.FileExists(t, filepath.Join(root, "tools", "kube-apiserver", "go.mod"), "the tool's module beside it")
	if _, err := Binary(); err != nil {
		assert.ErrorContains(t, err, filepath.Join(root, "bin", "kube-apiserver")+" (the repository's): `make kube-apiserver` builds")
	}
}

// The CA may be a throwaway one or the Kubernetes CA of a Talos secrets
// bundle: the certificates it issues verify against it for their use.
func TestCAIssuesCertificatesThatVerify(t *testing.T) {
	t.Parallel()
	k8s := pkitest.TalosBundle(t).Certs.K8s
	for name, ca := range map[string]CA{"throwaway": NewCA(t), "Talos": {Cert: k8s.Crt, Key: k8s.Key}} {
		caCert, _, err := ca.parse()
		require.NoError(t, err, name)
		roots := x509.NewCertPool()
		roots.AddCert(caCert)

		certPEM, _ := ca.ClientCert(t, "admin", "system:masters")
		block, _ := pem.Decode(certPEM)
		require.NotNil(t, block, name)
		cert, err := x509.ParseCertificate(block.Bytes)
		require.NoError(t, err, name)
		assert.Equal(t, "admin", cert.Subject.CommonName, name)
		assert.Equal(t, []string{"system:masters"}, cert.Subject.Organization, name)
		_, err = cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		require.NoError(t, err, name)

		files := writePKI(t, ca, t.TempDir(), net.IPv4(127, 0, 0, 1))
		serverPEM, err := os.ReadFile(files.serverCert)
		require.NoError(t, err, name)
		block, _ = pem.Decode(serverPEM)
		require.NotNil(t, block, name)
		server, err := x509.ParseCertificate(block.Bytes)
		require.NoError(t, err, name)
		for _, host := range []string{"127.0.0.1", "localhost", "kubernetes.default.svc"} {
			_, err = server.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			require.NoError(t, err, "%s: %s", name, host)
		}
	}

	_, _, err := CA{Cert: []byte("junk"), Key: []byte("junk")}.parse()
	require.EqualError(t, err, "unable to parse the CA certificate: no PEM block")
}
