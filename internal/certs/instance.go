package certs

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"strings"
)

// InstanceIDLength is how many hex digits of its CA's fingerprint name a
// cluster instance: 64 bits, enough to tell the instances of one stack
// apart.
const InstanceIDLength = 16

// Fingerprint is the sha256, in hex, of the DER of the first certificate
// of a PEM bundle, given as PEM or as base64 of PEM (the Talos provider's
// client configuration): what a backup's manifest records of the Talos CA.
func Fingerprint(pemOrBase64 string) (string, error) {
	s := strings.TrimSpace(pemOrBase64)
	if !strings.HasPrefix(s, "-----BEGIN ") {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return "", errors.New("unable to read the CA: neither PEM nor base64 of PEM")
		}
		s = string(b)
	}
	block, _ := pem.Decode([]byte(s))
	if block == nil {
		return "", errors.New("unable to read the CA: not PEM")
	}
	sum := sha256.Sum256(block.Bytes)
	return hex.EncodeToString(sum[:]), nil
}

// InstanceID names a cluster instance by its Talos CA's fingerprint: a
// stack destroyed and brought up again is a new instance (a new CA, a new
// secretbox key), whose snapshots cannot be paired with the other's
// secrets. "" for a fingerprint too short to have one.
func InstanceID(fingerprint string) string {
	if len(fingerprint) < InstanceIDLength {
		return ""
	}
	return fingerprint[:InstanceIDLength]
}

// HasCertificate reports whether text holds a PEM certificate.
func HasCertificate(text string) bool {
	rest := []byte(text)
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return false
		}
		if block.Type == "CERTIFICATE" {
			return true
		}
	}
}
