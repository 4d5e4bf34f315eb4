package stacks

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// fingerprintPrefix starts an OpenSSH SHA256 fingerprint; the rest is the
// unpadded base64 of the key's SHA-256 (what `ssh-keygen -l` prints).
const fingerprintPrefix = "SHA256:"

// sha256Size is the length of a SHA-256 digest in bytes.
const sha256Size = 32

// HostKey is a pinned SSH host key (proxmox.ssh.hostKey, rescue.hostKey):
// either a whole public key, or only the SHA256 fingerprint of one.
type HostKey struct {
	// Key is the pinned key; nil when only a fingerprint is pinned.
	Key ssh.PublicKey
	// Fingerprint is the pinned key's SHA256 fingerprint ("SHA256:...").
	Fingerprint string
	// Hosts are the host patterns in front of a known_hosts line, if any.
	Hosts []string
}

// IsSet reports whether a key or fingerprint is pinned.
func (h HostKey) IsSet() bool { return h.Fingerprint != "" }

// Matches reports whether k is the pinned key.
func (h HostKey) Matches(k ssh.PublicKey) bool {
	if h.Key != nil {
		return string(h.Key.Marshal()) == string(k.Marshal())
	}
	return h.IsSet() && ssh.FingerprintSHA256(k) == h.Fingerprint
}

// AuthorizedKey is the key as "<type> <base64>", the one form the command
// provider's hostKey reads (ssh.ParseAuthorizedKey in pulumi-command's
// remote/connection.go), without host patterns or comment; "" for a
// fingerprint-only pin.
func (h HostKey) AuthorizedKey() string {
	if h.Key == nil {
		return ""
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(h.Key)))
}

// CommandHostKey is a pin as the command provider's connection hostKey:
// the whole key, or "" (the provider then checks nothing) when none is
// pinned. Load refuses a fingerprint where the provider connects; should
// one get here all the same, it is passed on as it is, so that the provider
// fails to parse it instead of silently checking nothing.
func CommandHostKey(value string) string {
	pin, err := ParseHostKey(value)
	switch {
	case err == nil && !pin.IsSet():
		return ""
	case err == nil && pin.Key != nil:
		return pin.AuthorizedKey()
	default:
		return value
	}
}

// ParseHostKey reads a pin: a public key line as in authorized_keys or a
// .pub file ("ssh-ed25519 AAAA... [comment]"), the same after known_hosts
// host patterns ("host1,[host2]:2222 ssh-ed25519 AAAA...", what ssh-keyscan
// prints), or a SHA256 fingerprint ("SHA256:..."). Empty is no pin.
func ParseHostKey(s string) (HostKey, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return HostKey{}, nil
	case strings.ContainsAny(s, "\r\n"):
		return HostKey{}, errors.New("holds several lines; pin one key (ssh-keyscan prints one line per key type: take the ssh-ed25519 one, or run it with -t ed25519)")
	case strings.HasPrefix(s, fingerprintPrefix):
		return parseFingerprint(s)
	case strings.HasPrefix(strings.ToUpper(s), "MD5:") || (strings.Count(s, ":") == 15 && !strings.Contains(s, " ")):
		return HostKey{}, fmt.Errorf("%q is an MD5 fingerprint; pin the SHA256 one (ssh-keygen -lf prints it) or the key itself", short(s))
	}
	fields := strings.Fields(s)
	if strings.HasPrefix(fields[0], "@") {
		return HostKey{}, fmt.Errorf("known_hosts markers like %s are not supported; pin the host's own key", fields[0])
	}
	var hosts []string
	key, err := keyFromFields(fields)
	if err != nil && len(fields) >= 3 {
		// known_hosts: host patterns first.
		hosts = strings.Split(fields[0], ",")
		key, err = keyFromFields(fields[1:])
	}
	if err != nil {
		return HostKey{}, fmt.Errorf("%q is neither a public key line like \"ssh-ed25519 AAAA...\" (as ssh-keyscan or a .pub file gives it, optionally after known_hosts host names) nor a fingerprint like \"SHA256:...\"", short(s))
	}
	if _, isCert := key.(*ssh.Certificate); isCert {
		return HostKey{}, errors.New("is a host certificate; pin the host's plain public key")
	}
	return HostKey{Key: key, Fingerprint: ssh.FingerprintSHA256(key), Hosts: hosts}, nil
}

// keyFromFields parses "<type> <base64> [comment...]"; the type must be the
// one encoded in the key, so a line cut in the wrong place is refused.
func keyFromFields(fields []string) (ssh.PublicKey, error) {
	if len(fields) < 2 {
		return nil, errors.New("no key")
	}
	blob, err := base64.StdEncoding.DecodeString(fields[1])
	if err != nil {
		return nil, err
	}
	key, err := ssh.ParsePublicKey(blob)
	if err != nil {
		return nil, err
	}
	if key.Type() != fields[0] {
		return nil, fmt.Errorf("the line says %s but the key is %s", fields[0], key.Type())
	}
	return key, nil
}

func parseFingerprint(s string) (HostKey, error) {
	// ssh-keygen prints no padding; tolerate a pasted one.
	b64 := strings.TrimRight(strings.TrimPrefix(s, fingerprintPrefix), "=")
	sum, err := base64.RawStdEncoding.DecodeString(b64)
	if err != nil || len(sum) != sha256Size {
		return HostKey{}, fmt.Errorf("%q is not a SHA256 fingerprint: SHA256: then 43 base64 characters, as `ssh-keygen -lf` prints it", short(s))
	}
	return HostKey{Fingerprint: fingerprintPrefix + base64.RawStdEncoding.EncodeToString(sum)}, nil
}

// short keeps a quoted value readable in a message (keys are long).
func short(s string) string {
	const maxLen = 40
	if len(s) <= maxLen {
		return s
	}
	return s[:maxLen] + "..."
}

// hostKeyUse says who connects with a pin.
type hostKeyUse struct {
	// path is the pin's key path.
	path string
	// host and port are where the connection goes (after defaults).
	host string
	port int
	// command names what pulumi-command runs over the connection; empty
	// when only the project's own SSH client (internal/access) connects.
	command string
	// contacted: the stack connects to this host at all.
	contacted bool
	// unpinned is the warning's reason when no key is pinned, howTo how
	// to get the key.
	unpinned, howTo string
}

// validateHostKey checks one pin against how it is used. Where pulumi-command
// connects, only a whole key other than RSA works: a fingerprint would check
// nothing, and an RSA key fails against OpenSSH 8.8 and later
// (docs/decisions/0004-upstream-behaviours.md#pulumi-command-checks-one-host-key).
func validateHostKey(d *Diagnostics, value string, use hostKeyUse) {
	if strings.TrimSpace(value) == "" {
		if use.contacted {
			d.warnf(use.path, "not set: %s; %s", use.unpinned, use.howTo)
		}
		return
	}
	pin, err := ParseHostKey(value)
	if err != nil {
		d.errorf(use.path, "%v", err)
		return
	}
	if use.command != "" && pin.Key == nil {
		d.errorf(use.path, "a fingerprint cannot be checked by the command provider, which runs %s over SSH: it takes only a whole key; pin the key line instead (`ssh-keyscan -t ed25519 %s`, after checking that its fingerprint is %s)", use.command, use.host, pin.Fingerprint)
		return
	}
	if use.command != "" && pin.Key.Type() == ssh.KeyAlgoRSA {
		d.errorf(use.path, "an RSA key makes the command provider, which runs %s over SSH, offer only SHA-1 RSA signatures, which OpenSSH 8.8 and later refuse; pin the host's ed25519 key instead (`ssh-keyscan -t ed25519 %s`)", use.command, use.host)
		return
	}
	if want, ok := hostsCover(pin.Hosts, use.host, use.port); !ok {
		d.warnf(use.path, "is a known_hosts line for %s, not for %s: make sure it is this host's key", strings.Join(pin.Hosts, ","), want)
	}
}

// hostsCover checks a known_hosts line's plain host patterns against the
// host the pin is for (a line copied from another host's entry is the likely
// mistake) and returns that host as known_hosts writes it; hashed and
// wildcard patterns are not judged.
func hostsCover(patterns []string, host string, port int) (string, bool) {
	want := knownhosts.Normalize(net.JoinHostPort(host, strconv.Itoa(port)))
	if len(patterns) == 0 || host == "" {
		return want, true
	}
	for _, p := range patterns {
		if strings.ContainsAny(p, "*?!|") || strings.EqualFold(p, want) {
			return want, true
		}
	}
	return want, false
}

// validateProxmoxHostKey checks proxmox.ssh.hostKey. The host is reached over
// SSH by the dnsmasq reservations (pulumi-command) and by the ssh-proxy
// helper and `make doctor` (internal/access).
func validateProxmoxHostKey(d *Diagnostics, section ProxmoxSection) {
	px := section.ProxmoxConfig
	host := px.SSH.Host
	if host == "" {
		host = px.EndpointHost()
	}
	use := hostKeyUse{path: section.Path + ".ssh.hostKey", host: host, port: px.SSH.Port,
		contacted: px.DNSMasqEnabled() || px.Access == AccessSSHProxy}
	var what []string
	if px.DNSMasqEnabled() {
		use.command = "the dnsmasq reservations"
		what = append(what, "the dnsmasq reservations")
	}
	if px.Access == AccessSSHProxy {
		what = append(what, "the ssh-proxy traffic (Talos and Kubernetes API calls)")
	}
	use.unpinned = fmt.Sprintf("SSH to %s accepts any host key, so a machine in the middle could take %s", host, strings.Join(what, " and "))
	use.howTo = "`make doctor` prints the host's key: pin it once its fingerprint matches `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` on the host's console"
	validateHostKey(d, px.SSH.HostKey, use)
}

// validateRescueHostKey checks a VPS node's rescue.hostKey: the install
// (pulumi-command) logs in with the rescue password.
func validateRescueHostKey(d *Diagnostics, ref NodeRef) {
	host := ref.Rescue.Host
	if host == "" {
		host = ref.IP
	}
	validateHostKey(d, ref.Rescue.HostKey, hostKeyUse{
		path: ref.Path + ".rescue.hostKey", host: host, port: ref.Rescue.Port,
		command: "the install", contacted: true,
		unpinned: fmt.Sprintf("the install's SSH to %s accepts any host key, so a machine in the middle would get the rescue password and could write the disk", host),
		howTo:    fmt.Sprintf("while the server is in rescue, `ssh-keyscan -t ed25519 %s` prints the key: pin it once its fingerprint (`| ssh-keygen -lf -`) matches the one the provider shows for the rescue system", host),
	})
}
