package agekeys_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"strings"
	"testing"

	"filippo.io/age"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
)

// x25519 makes a fresh age identity.
func x25519(t testing.TB) *age.X25519Identity {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	return id
}

// sshEd25519 makes an ed25519 key pair: its authorized_keys line and its
// unencrypted OpenSSH private key (PEM).
func sshEd25519(t *testing.T) (pubLine string, privPEM []byte) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	sshPub, err := ssh.NewPublicKey(pub)
	require.NoError(t, err)
	block, err := ssh.MarshalPrivateKey(priv, "backup@test")
	require.NoError(t, err)
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub))) + " backup@test", pem.EncodeToMemory(block)
}

// asPassphraseProtected rewrites an OpenSSH private key's header to say
// that it is encrypted (aes256-ctr, bcrypt), as ssh-keygen writes a key
// with a passphrase. The key is refused on its header alone, before any
// decryption; a real ssh.MarshalPrivateKeyWithPassphrase spends seconds in
// bcrypt under the race detector for the same answer.
func asPassphraseProtected(t *testing.T, privPEM []byte) []byte {
	t.Helper()
	block, _ := pem.Decode(privPEM)
	require.NotNil(t, block)
	require.True(t, strings.HasPrefix(string(block.Bytes), opensshMagic))
	var k struct {
		CipherName   string
		KdfName      string
		KdfOpts      string
		NumKeys      uint32
		PubKey       []byte
		PrivKeyBlock []byte
		Rest         []byte `ssh:"rest"`
	}
	require.NoError(t, ssh.Unmarshal(block.Bytes[len(opensshMagic):], &k))
	k.CipherName, k.KdfName = "aes256-ctr", "bcrypt"
	k.KdfOpts = string(ssh.Marshal(struct {
		Salt   string
		Rounds uint32
	}{Salt: "0123456789abcdef", Rounds: 16}))
	block.Bytes = append([]byte(opensshMagic), ssh.Marshal(&k)...)
	return pem.EncodeToMemory(block)
}

// opensshMagic starts the body of an OpenSSH private key.
const opensshMagic = "openssh-key-v1\x00"
