package access

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"

	"golang.org/x/crypto/ssh"

	"github.com/fluodata/talos-pulumi/stacks"
)

// HostKeyPinPath is the config key of the proxmox section's host's pinned
// key (a hosts entry's is hosts[i].proxmox.ssh.hostKey).
const HostKeyPinPath = "proxmox.ssh.hostKey"

// preferredHostKeyAlgorithms is OpenSSH's own client order (ed25519 first),
// not x/crypto's (ECDSA first, ed25519 last): a host has one key per type and
// presents the one of the first algorithm both sides know, so with this order
// the key seen here is the one `ssh` and `ssh-keyscan -t ed25519` show, and a
// fingerprint-only pin (which says nothing about the type) is compared with
// the key users are told to pin.
var preferredHostKeyAlgorithms = []string{
	ssh.KeyAlgoED25519,
	ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521,
	ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256,
}

// HostKeyAlgorithms are the host-key algorithms to offer. With a whole key
// pinned, only the ones of its type: a host with several keys must present
// the pinned one, not whichever type comes first. An RSA key may sign with
// SHA-2 (OpenSSH 8.8 and later refuse SHA-1 "ssh-rsa" signatures).
func HostKeyAlgorithms(pin stacks.HostKey) []string {
	if pin.Key == nil {
		return slices.Clone(preferredHostKeyAlgorithms)
	}
	if pin.Key.Type() == ssh.KeyAlgoRSA {
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
	}
	return []string{pin.Key.Type()}
}

// HostKeyCallback accepts the pinned key (or the key of the pinned
// fingerprint) and refuses any other with a *HostKeyMismatchError. Without a pin it
// accepts every key, as the command provider does without a hostKey; the
// config's warning says so. What goes through the ssh-proxy tunnel (Talos,
// Kubernetes) is TLS of its own, but the dnsmasq commands and the key or
// password login are not.
func HostKeyCallback(pin stacks.HostKey) ssh.HostKeyCallback {
	return hostKeyCallback(pin, HostKeyPinPath)
}

// hostKeyCallback is HostKeyCallback for the pin at pinPath.
func hostKeyCallback(pin stacks.HostKey, pinPath string) ssh.HostKeyCallback {
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		if !pin.IsSet() || pin.Matches(key) {
			return nil
		}
		addr := hostname
		if remote != nil {
			addr = remote.String()
		}
		return &HostKeyMismatchError{Addr: addr, Got: key, Want: pin, PinPath: pinPath}
	}
}

// HostKeyMismatchError is a host presenting another key than the pinned one.
type HostKeyMismatchError struct {
	// Addr is where the connection went.
	Addr string
	// Got is the key the host presented.
	Got ssh.PublicKey
	// Want is the pin.
	Want stacks.HostKey
	// PinPath is the pin's key; "" for proxmox.ssh.hostKey.
	PinPath string
}

// Error shows both fingerprints and what to do about the difference.
func (e *HostKeyMismatchError) Error() string {
	return fmt.Sprintf("host key mismatch: %s presented the %s key %s, but %s pins %s; "+
		"if the host was reinstalled or its keys regenerated, check the new key on its console "+
		"(`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`) and update the pin (`make doctor` prints the line); "+
		"otherwise something between you and the host is answering in its place",
		e.Addr, e.Got.Type(), ssh.FingerprintSHA256(e.Got), cmp.Or(e.PinPath, HostKeyPinPath), e.Want.Fingerprint)
}

// errScanned ends a handshake once the host key is known.
var errScanned = errors.New("host key read")

// ScanHostKey returns the key the host presents to this project's clients
// (the same algorithm choice as DialSSH for c's pin), without logging in, as
// ssh-keyscan does.
func ScanHostKey(ctx context.Context, c stacks.SSHConfig) (ssh.PublicKey, error) {
	return ScanSectionHostKey(ctx, c, ProxmoxSSHPath)
}

// ScanSectionHostKey is ScanHostKey with the settings at key (a section's
// ssh key, e.g. hosts[0].proxmox.ssh), which its messages name.
func ScanSectionHostKey(ctx context.Context, c stacks.SSHConfig, key string) (ssh.PublicKey, error) {
	pin, err := stacks.ParseHostKey(c.HostKey)
	if err != nil {
		return nil, fmt.Errorf("unable to read %s.hostKey: %w", key, err)
	}
	var seen ssh.PublicKey
	cc := &ssh.ClientConfig{
		User: c.User,
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			seen = key
			return errScanned
		},
		HostKeyAlgorithms: HostKeyAlgorithms(pin),
	}
	addr := net.JoinHostPort(c.Host, strconv.Itoa(c.Port))
	_, _, _, err = handshake(ctx, addr, cc)
	if seen != nil {
		return seen, nil
	}
	if err == nil {
		err = errors.New("the handshake ended without a host key")
	}
	return nil, fmt.Errorf("unable to read the host key of %s: %w", addr, err)
}
