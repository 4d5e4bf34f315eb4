// Package certs reads what the operator must know of a client certificate
// in a kubeconfig or talosconfig: when it expires. The Talos provider
// renews both only on an `up` within 30 days of their expiry; a cluster
// left alone longer locks its operator out.
package certs

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"
)

// RenewWithin is how long before its expiry a client certificate is
// renewed by an `up` (the Talos provider's window), and from when the
// tools warn.
const RenewWithin = 30 * 24 * time.Hour

// Expiry is the NotAfter of the first certificate of a PEM bundle.
func Expiry(pemData []byte) (time.Time, error) {
	block, _ := pem.Decode(pemData)
	if block == nil || block.Type != "CERTIFICATE" {
		return time.Time{}, errors.New("unable to read the client certificate: no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return time.Time{}, fmt.Errorf("unable to read the client certificate: %w", err)
	}
	return cert.NotAfter, nil
}

// Warning says that the certificate name expires within RenewWithin of
// now, and what to do, or "".
func Warning(name string, notAfter, now time.Time) string {
	left := notAfter.Sub(now)
	switch {
	case left <= 0:
		return fmt.Sprintf("the %s client certificate expired on %s: run `make up` to renew it", name, notAfter.UTC().Format(time.DateOnly))
	case left < RenewWithin:
		return fmt.Sprintf("the %s client certificate expires on %s (in %d days): run `make up` to renew it", name, notAfter.UTC().Format(time.DateOnly), int(left.Hours()/24))
	}
	return ""
}
