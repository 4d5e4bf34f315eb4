package agekeys_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"io"
	"strings"
	"testing"

	"filippo.io/age"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/fluodata/talos-pulumi/internal/agekeys"
)

// sshLine is the authorized_keys line of a crypto public key.
func sshLine(t *testing.T, pub any) string {
	t.Helper()
	k, err := ssh.NewPublicKey(pub)
	require.NoError(t, err)
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))) + " someone@laptop"
}

// Every accepted form parses; every problem names the entry's index and
// says what is wrong.
func TestParseRecipients(t *testing.T) {
	t.Parallel()
	ageKey := x25519(t).Recipient().String()
	edLine, _ := sshEd25519(t)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	smallRSA, err := rsa.GenerateKey(rand.Reader, 1024) //nolint:gosec // a too-small key is the point
	require.NoError(t, err)
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)

	got, err := agekeys.ParseRecipients([]string{ageKey, edLine, " " + sshLine(t, &rsaKey.PublicKey) + "\n"})
	require.NoError(t, err)
	require.Len(t, got, 3)

	_, err = agekeys.ParseRecipients(nil)
	require.ErrorIs(t, err, agekeys.ErrNoRecipients)
	_, err = agekeys.ParseRecipients([]string{})
	require.ErrorIs(t, err, agekeys.ErrNoRecipients)

	for _, tc := range []struct {
		name, bad, want string
	}{
		{"empty", "  ", "empty"},
		{"garbage", "not-a-key", "neither an age public key"},
		{"bad age key", "age1qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq", "not an age X25519 public key"},
		{"age secret key", "AGE-SECRET-KEY-1QQQQ", "is an age identity, a private key"},
		{"post-quantum", "age1pq1qqqq", "post-quantum"},
		{"ecdsa", sshLine(t, &ecKey.PublicKey), `"ecdsa-sha2-nistp256" cannot be an age recipient`},
		{"small rsa", sshLine(t, &smallRSA.PublicKey), "1024 bits, fewer than 2048"},
		{"broken ssh", "ssh-ed25519 AAAAnotbase64!", "not a valid SSH public key line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := agekeys.ParseRecipients([]string{ageKey, edLine, tc.bad})
			require.Error(t, err)
			require.ErrorContains(t, err, "unable to parse recipients[2]: ")
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// Identity files with comments and SSH private keys parse; an encrypted
// SSH key is refused with advice; a bad line is named without its secret.
func TestParseIdentities(t *testing.T) {
	t.Parallel()
	a, b := x25519(t), x25519(t)
	file := "# created: 2026-05-04\n# public key: " + a.Recipient().String() + "\n" + a.String() + "\n\n" + b.String() + "\n"
	ids, err := agekeys.ParseIdentities(strings.NewReader(file))
	require.NoError(t, err)
	require.Len(t, ids, 2)

	_, priv := sshEd25519(t)
	ids, err = agekeys.ParseIdentities(bytes.NewReader(priv))
	require.NoError(t, err)
	require.Len(t, ids, 1)

	_, err = agekeys.ParseIdentities(bytes.NewReader(asPassphraseProtected(t, priv)))
	require.ErrorContains(t, err, "protected by a passphrase")
	require.ErrorContains(t, err, "use an age identity file")

	_, err = agekeys.ParseIdentities(strings.NewReader("# only a comment\n\n"))
	require.ErrorIs(t, err, agekeys.ErrNoIdentities)

	secretish := "AGE-SECRET-KEY-1NOTREALLYAKEYBUTSECRETLOOKING"
	_, err = agekeys.ParseIdentities(strings.NewReader("# c\n" + secretish + "\n"))
	require.ErrorContains(t, err, "unable to parse identity on line 2")
	require.NotContains(t, err.Error(), "SECRETLOOKING", "an error never repeats a secret")

	_, err = agekeys.ParseIdentities(strings.NewReader("hello\n"))
	require.ErrorContains(t, err, "not an age identity")
}

// What the parsed keys encrypt, they decrypt: an age X25519 identity and
// an SSH ed25519 key pair; a wrong identity of either kind fails. (The
// store encrypts with the same age.Encrypt: internal/backupstore.)
func TestAgeRoundTrip(t *testing.T) {
	t.Parallel()
	id := x25519(t)
	edLine, edPriv := sshEd25519(t)
	_, otherPriv := sshEd25519(t)
	sshIDs, err := agekeys.ParseIdentities(bytes.NewReader(edPriv))
	require.NoError(t, err)
	wrongSSH, err := agekeys.ParseIdentities(bytes.NewReader(otherPriv))
	require.NoError(t, err)

	for _, tc := range []struct {
		name  string
		to    []string
		ids   []age.Identity
		wrong []age.Identity
	}{
		{"x25519", []string{id.Recipient().String()}, []age.Identity{id}, []age.Identity{x25519(t)}},
		{"ssh-ed25519", []string{edLine}, sshIDs, wrongSSH},
		{"either of two", []string{edLine, id.Recipient().String()}, []age.Identity{id}, []age.Identity{x25519(t)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			to, err := agekeys.ParseRecipients(tc.to)
			require.NoError(t, err)
			var sealed bytes.Buffer
			w, err := age.Encrypt(&sealed, to...)
			require.NoError(t, err)
			_, err = w.Write([]byte("ROUND-TRIP"))
			require.NoError(t, err)
			require.NoError(t, w.Close())

			r, err := age.Decrypt(bytes.NewReader(sealed.Bytes()), tc.ids...)
			require.NoError(t, err)
			got, err := io.ReadAll(r)
			require.NoError(t, err)
			require.Equal(t, "ROUND-TRIP", string(got))

			_, err = age.Decrypt(bytes.NewReader(sealed.Bytes()), tc.wrong...)
			var noMatch *age.NoIdentityMatchError
			require.ErrorAs(t, err, &noMatch)
		})
	}
}
