// Package pkitest makes a throwaway certificate authority for tests: a CA,
// a server certificate for one IP and a client certificate, PEM-encoded, as
// a talosconfig or kubeconfig carries them; and Talos secrets bundles and
// talosconfigs as talosctl writes them.
package pkitest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"testing"
	"time"
)

// PKI holds PEM blocks.
type PKI struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey []byte
}

// New makes a CA, a server certificate for serverIP and an admin client
// certificate, valid for an hour.
func New(t testing.TB, serverIP string) PKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	must(t, err)
	ca, err := x509.ParseCertificate(caDER)
	must(t, err)
	issue := func(serial int64, tmpl *x509.Certificate) ([]byte, []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		must(t, err)
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		must(t, err)
		keyDER, err := x509.MarshalECPrivateKey(key)
		must(t, err)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	}
	p := PKI{CA: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})}
	p.ServerCert, p.ServerKey = issue(2, &x509.Certificate{
		Subject: pkix.Name{CommonName: "server"}, IPAddresses: []net.IP{net.ParseIP(serverIP)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	p.ClientCert, p.ClientKey = issue(3, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "admin", Organization: []string{"os:admin", "system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return p
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
