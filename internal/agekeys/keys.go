// Package agekeys reads the keys of encrypted backups: the recipients a
// stack names (age and SSH public keys) and the identities a restore is
// given (age identity files, SSH private keys). It needs only age, so the
// stack file's front-end checks backup.recipients with it without the
// object store's dependencies.
package agekeys

import (
	"bufio"
	"bytes"
	"crypto/rsa"
	"errors"
	"fmt"
	"io"
	"strings"

	"filippo.io/age"
	"filippo.io/age/agessh"
	"golang.org/x/crypto/ssh"
)

// ErrNoRecipients is returned when a backup would be written without any
// recipient: age cannot encrypt to nobody, and a backup in clear is never
// an acceptable fallback.
var ErrNoRecipients = errors.New("no backup recipients: a backup is never written without one (set backup.recipients)")

// ErrNoIdentities is returned when a restore is given no private key at all,
// so that it fails before it downloads anything.
var ErrNoIdentities = errors.New("no backup identities: give an age identity file or an SSH private key")

// minRSABits is the smallest RSA key accepted as a recipient. age itself
// refuses shorter keys, but the age release in use compares bytes, not bits,
// and so lets a 2041-bit key through; this checks the bits.
const minRSABits = 2048

// maxIdentityFile bounds what ParseIdentities reads: an identity file is a
// few lines, and a wrong path (a backup, a disk image) must not be read
// into memory whole.
const maxIdentityFile = 1 << 20

// ParseRecipients parses backup.recipients: age X25519 keys ("age1...") and
// ssh-ed25519 or ssh-rsa authorized_keys lines, so an operator can use the SSH
// key on their laptop. Other SSH key types have no age recipient; post-quantum
// (cannot be mixed) and plugin (run programs) recipients are refused. Problems
// name the entry (recipients[2]); an empty list is ErrNoRecipients.
func ParseRecipients(keys []string) ([]age.Recipient, error) {
	if len(keys) == 0 {
		return nil, ErrNoRecipients
	}
	out := make([]age.Recipient, 0, len(keys))
	for i, key := range keys {
		r, err := parseRecipient(strings.TrimSpace(key))
		if err != nil {
			return nil, fmt.Errorf("unable to parse recipients[%d]: %w", i, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// RecipientProblem says what is wrong with one entry of backup.recipients,
// or "": the stack file's check, before anything runs.
func RecipientProblem(key string) string {
	if _, err := parseRecipient(strings.TrimSpace(key)); err != nil {
		return err.Error()
	}
	return ""
}

// parseRecipient parses one entry of backup.recipients.
func parseRecipient(key string) (age.Recipient, error) {
	switch {
	case key == "":
		return nil, errors.New("the entry is empty")
	case strings.HasPrefix(strings.ToUpper(key), "AGE-SECRET-KEY-"):
		// Never echo it: it is the private key, pasted by mistake.
		return nil, errors.New("is an age identity, a private key: give its public key ('age-keygen -y <file>'), keep the identity off the stack, and make a new one if this stack file was shared")
	case strings.HasPrefix(key, "age1pq1"):
		return nil, errors.New("post-quantum age recipients (age1pq1...) are not supported: they cannot be mixed with X25519 and SSH recipients; use an age1... X25519 key")
	case strings.HasPrefix(key, "age1"):
		r, err := age.ParseX25519Recipient(key)
		if err != nil {
			return nil, fmt.Errorf("not an age X25519 public key (age1... as printed by age-keygen; plugin recipients are not supported): %w", err)
		}
		return r, nil
	case strings.HasPrefix(key, "ssh-ed25519 "), strings.HasPrefix(key, "ssh-rsa "):
		return parseSSHRecipient(key)
	default:
		kind, _, _ := strings.Cut(key, " ")
		if strings.Contains(kind, "ssh") || strings.HasPrefix(kind, "ecdsa-") {
			return nil, fmt.Errorf("SSH key type %q cannot be an age recipient: use an ssh-ed25519 or ssh-rsa key, or an age1... key", kind)
		}
		return nil, errors.New("neither an age public key (age1...) nor an SSH public key line (ssh-ed25519 AAAA...)")
	}
}

// parseSSHRecipient parses an authorized_keys line of type ssh-ed25519 or
// ssh-rsa, and checks an RSA key's size in bits (see minRSABits).
func parseSSHRecipient(key string) (age.Recipient, error) {
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(key))
	if err != nil {
		return nil, fmt.Errorf("not a valid SSH public key line: %w", err)
	}
	if ck, ok := pub.(ssh.CryptoPublicKey); ok {
		if rk, ok := ck.CryptoPublicKey().(*rsa.PublicKey); ok && rk.N.BitLen() < minRSABits {
			return nil, fmt.Errorf("the RSA key has %d bits, fewer than %d", rk.N.BitLen(), minRSABits)
		}
	}
	r, err := agessh.ParseRecipient(key)
	if err != nil {
		return nil, fmt.Errorf("unable to use the SSH key as an age recipient: %w", err)
	}
	return r, nil
}

// ParseIdentities reads the private keys a restore decrypts with: either an
// age identity file (AGE-SECRET-KEY-1... lines, as age-keygen writes them,
// with # comments and blank lines allowed) or an unencrypted OpenSSH
// private key (ed25519 or RSA, the pair of an ssh-ed25519 or ssh-rsa
// recipient). A passphrase-protected SSH key is refused with a message
// saying what to do instead: a restore runs unattended and has no prompt.
//
// Problems name the line, never its content: the content is a secret.
func ParseIdentities(r io.Reader) ([]age.Identity, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxIdentityFile+1))
	if err != nil {
		return nil, fmt.Errorf("unable to read identities: %w", err)
	}
	if len(data) > maxIdentityFile {
		return nil, fmt.Errorf("unable to read identities: more than %d bytes, not an identity file", maxIdentityFile)
	}
	if bytes.Contains(data, []byte("-----BEGIN ")) {
		return parseSSHIdentity(data)
	}
	var ids []age.Identity
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, err := parseAgeIdentity(line)
		if err != nil {
			return nil, fmt.Errorf("unable to parse identity on line %d: %w", n, err)
		}
		ids = append(ids, id)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("unable to read identities: %w", err)
	}
	if len(ids) == 0 {
		return nil, ErrNoIdentities
	}
	return ids, nil
}

// parseAgeIdentity parses one line of an age identity file. Post-quantum
// identities are accepted: decrypting with one is harmless even though Put
// never encrypts to one.
func parseAgeIdentity(line string) (age.Identity, error) {
	switch {
	case strings.HasPrefix(line, "AGE-SECRET-KEY-1"):
		return age.ParseX25519Identity(line)
	case strings.HasPrefix(line, "AGE-SECRET-KEY-PQ-1"):
		return age.ParseHybridIdentity(line)
	case strings.HasPrefix(line, "AGE-PLUGIN-"):
		return nil, errors.New("age plugin identities are not supported (they run external programs)")
	default:
		return nil, errors.New("not an age identity (AGE-SECRET-KEY-1...) nor a comment")
	}
}

// parseSSHIdentity parses a PEM-encoded SSH private key.
func parseSSHIdentity(pemBytes []byte) ([]age.Identity, error) {
	id, err := agessh.ParseIdentity(pemBytes)
	if err != nil {
		var missing *ssh.PassphraseMissingError
		if errors.As(err, &missing) {
			return nil, fmt.Errorf("unable to parse identity: the SSH private key is protected by a passphrase; "+
				"use an age identity file (age-keygen) or a decrypted copy of the key (ssh-keygen -p -N '' -f COPY): %w", err)
		}
		return nil, fmt.Errorf("unable to parse identity: not an unencrypted ed25519 or RSA SSH private key: %w", err)
	}
	return []age.Identity{id}, nil
}

// IsX25519 reports whether key is an age X25519 public key (age1...): the
// one kind of recipient Sidero's talos-backup encrypts to.
func IsX25519(key string) bool {
	_, err := age.ParseX25519Recipient(strings.TrimSpace(key))
	return err == nil
}
