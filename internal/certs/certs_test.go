package certs_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/certs"
)

func TestExpiry(t *testing.T) {
	t.Parallel()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	notAfter := time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "admin"}, NotBefore: notAfter.AddDate(-1, 0, 0), NotAfter: notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	got, err := certs.Expiry(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	require.NoError(t, err)
	assert.Equal(t, notAfter, got.UTC())

	_, err = certs.Expiry([]byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"))
	require.ErrorContains(t, err, "no PEM certificate")
}

func TestWarning(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	assert.Empty(t, certs.Warning("talosconfig", now.AddDate(0, 2, 0), now), "two months left: nothing to say")
	assert.Equal(t, "the kubeconfig client certificate expires on 2026-12-10 (in 14 days): run `make up` to renew it",
		certs.Warning("kubeconfig", now.AddDate(0, 0, 14), now))
	assert.Equal(t, "the talosconfig client certificate expired on 2026-11-20: run `make up` to renew it",
		certs.Warning("talosconfig", now.AddDate(0, 0, -6), now))
}
