package access_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/access"
	"github.com/fluodata/talos-pulumi/internal/testkit/sshtest"
	"github.com/fluodata/talos-pulumi/stacks"
)

func noEnv(string) string { return "" }

func TestDialWithAConfiguredKey(t *testing.T) {
	t.Parallel()
	_, pub, pemKey := sshtest.Key(t)
	host := sshtest.New(t, sshtest.Options{AuthorizedKey: pub})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := access.DialSSH(ctx, stacks.SSHConfig{Host: host.Host, Port: host.Port, User: "root", PrivateKey: stacks.NewSecret(string(pemKey))}, noEnv)
	require.NoError(t, err)
	_ = c.Close()

	_, err = access.DialSSH(ctx, stacks.SSHConfig{Host: host.Host, Port: host.Port, User: "root", PrivateKey: stacks.NewSecret("-----BEGIN OPENSSH PRIVATE KEY-----\nnope\n")}, noEnv)
	require.ErrorContains(t, err, "proxmox.ssh: the private key does not parse")
	_, err = access.DialSSH(ctx, stacks.SSHConfig{Host: host.Host, Port: host.Port, User: "root", PrivateKeyFile: filepath.Join(t.TempDir(), "missing")}, noEnv)
	require.ErrorContains(t, err, "proxmox.ssh.privateKeyFile")
	_, err = access.DialSSH(ctx, stacks.SSHConfig{Host: host.Host, Port: host.Port, User: "root"}, noEnv)
	require.ErrorIs(t, err, access.ErrNoSSHCredentials)
}

func TestDialWithTheSSHAgent(t *testing.T) {
	t.Parallel()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	keyring := agent.NewKeyring()
	require.NoError(t, keyring.Add(agent.AddedKey{PrivateKey: priv}))
	signers, err := keyring.Signers()
	require.NoError(t, err)
	host := sshtest.New(t, sshtest.Options{AuthorizedKey: signers[0].PublicKey()})

	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _ = agent.ServeAgent(keyring, c); _ = c.Close() }()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	getenv := func(k string) string {
		if k == "SSH_AUTH_SOCK" {
			return sock
		}
		return ""
	}
	c, err := access.DialSSH(ctx, stacks.SSHConfig{Host: host.Host, Port: host.Port, User: "root"}, getenv)
	require.NoError(t, err)
	_ = c.Close()
	assert.Equal(t, 1, host.Logins())
}

func TestDialEndsWithItsContext(t *testing.T) {
	t.Parallel()
	// A server that accepts TCP but never speaks SSH.
	silent := sshtest.Listen(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	host, port, err := net.SplitHostPort(silent)
	require.NoError(t, err)
	portNum, err := strconv.Atoi(port)
	require.NoError(t, err)
	_, _, pemKey := sshtest.Key(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = access.DialSSH(ctx, stacks.SSHConfig{Host: host, Port: portNum, User: "root", PrivateKey: stacks.NewSecret(string(pemKey))}, noEnv)
	require.Error(t, err)
	assert.Less(t, time.Since(start), 5*time.Second)
}

// hostWithKeys is a test host with an ed25519, an ECDSA and an RSA host key,
// as sshd has by default, and a login key.
func hostWithKeys(t *testing.T) (host *sshtest.Server, keys map[string]ssh.PublicKey, pemKey []byte) {
	t.Helper()
	edSigner, _, _ := sshtest.Key(t)
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ecSigner, err := ssh.NewSignerFromKey(ecKey)
	require.NoError(t, err)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	rsaSigner, err := ssh.NewSignerFromKey(rsaKey)
	require.NoError(t, err)
	_, pub, pemKey := sshtest.Key(t)
	// x/crypto's client would pick the ECDSA key first; OpenSSH's picks
	// ed25519. The order here must not matter.
	host = sshtest.New(t, sshtest.Options{AuthorizedKey: pub, HostKeys: []ssh.Signer{rsaSigner, ecSigner, edSigner}})
	return host, map[string]ssh.PublicKey{"ed25519": edSigner.PublicKey(), "ecdsa": ecSigner.PublicKey(), "rsa": rsaSigner.PublicKey()}, pemKey
}

func line(k ssh.PublicKey) string { return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))) }

func TestDialChecksThePinnedHostKey(t *testing.T) {
	t.Parallel()
	host, keys, pemKey := hostWithKeys(t)
	strangerSigner, _, _ := sshtest.Key(t)
	stranger := strangerSigner.PublicKey()
	edFP := ssh.FingerprintSHA256(keys["ed25519"])

	cases := map[string]struct {
		pin string
		// wantSeen is the key the host must have presented on a mismatch.
		wantSeen ssh.PublicKey
		wantErr  string
	}{
		"none pinned: any key":        {pin: ""},
		"ed25519 key":                 {pin: line(keys["ed25519"])},
		"ecdsa key, known_hosts":      {pin: "[" + host.Host + "]:" + strconv.Itoa(host.Port) + " " + line(keys["ecdsa"])},
		"rsa key":                     {pin: line(keys["rsa"]) + " root@pve"},
		"ed25519 fingerprint":         {pin: edFP},
		"wrong key":                   {pin: line(stranger), wantSeen: keys["ed25519"]},
		"wrong fingerprint":           {pin: ssh.FingerprintSHA256(stranger), wantSeen: keys["ed25519"]},
		"fingerprint of another type": {pin: ssh.FingerprintSHA256(keys["ecdsa"]), wantSeen: keys["ed25519"]},
		"malformed pin":               {pin: "SHA256:nope", wantErr: "unable to read proxmox.ssh.hostKey: "},
	}
	// One after another: the cases share the host, and its login count
	// proves that no credentials reach a host with the wrong key.
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			before := host.Logins()
			client, err := access.DialSSH(ctx, stacks.SSHConfig{Host: host.Host, Port: host.Port, User: "root",
				PrivateKey: stacks.NewSecret(string(pemKey)), HostKey: c.pin}, noEnv)
			switch {
			case c.wantSeen != nil:
				require.Error(t, err)
				var mismatch *access.HostKeyMismatchError
				require.ErrorAs(t, err, &mismatch)
				pin, perr := stacks.ParseHostKey(c.pin)
				require.NoError(t, perr)
				assert.Equal(t, fmt.Sprintf("ssh: handshake failed: host key mismatch: %s presented the %s key %s, but proxmox.ssh.hostKey pins %s; "+
					"if the host was reinstalled or its keys regenerated, check the new key on its console (`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`) "+
					"and update the pin (`make doctor` prints the line); otherwise something between you and the host is answering in its place",
					host.Addr(), c.wantSeen.Type(), ssh.FingerprintSHA256(c.wantSeen), pin.Fingerprint), err.Error())
				assert.Equal(t, before, host.Logins(), "no credentials are offered to a host with the wrong key")
			case c.wantErr != "":
				require.ErrorContains(t, err, c.wantErr)
			default:
				require.NoError(t, err)
				_ = client.Close()
			}
		})
	}
}

func TestScanHostKey(t *testing.T) {
	t.Parallel()
	host, keys, _ := hostWithKeys(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	at := stacks.SSHConfig{Host: host.Host, Port: host.Port, User: "root"}

	got, err := access.ScanHostKey(ctx, at)
	require.NoError(t, err)
	assert.Equal(t, line(keys["ed25519"]), line(got), "unpinned: the key ssh would show, ed25519")

	for _, typ := range []string{"ecdsa", "rsa"} {
		pinned := at
		pinned.HostKey = line(keys[typ])
		got, err = access.ScanHostKey(ctx, pinned)
		require.NoError(t, err)
		assert.Equal(t, line(keys[typ]), line(got), "pinned: the key of the pinned type")
	}
	assert.Zero(t, host.Logins(), "scanning never logs in")

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	_, err = access.ScanHostKey(ctx, stacks.SSHConfig{Host: "127.0.0.1", Port: closed, User: "root"})
	require.ErrorContains(t, err, "unable to read the host key of 127.0.0.1:"+strconv.Itoa(closed)+": ")
}

// The documented way to get the pin (docs/ssh-host-keys.md):
// ssh-keyscan's lines are pins as they are, and ssh-keygen -lf prints the
// fingerprints the pins carry.
func TestSSHKeyscanLinesArePins(t *testing.T) {
	t.Parallel()
	keyscan, err := exec.LookPath("ssh-keyscan")
	if err != nil {
		t.Skip("ssh-keyscan is not installed (Debian: openssh-client)")
	}
	keygen, err := exec.LookPath("ssh-keygen")
	if err != nil {
		t.Skip("ssh-keygen is not installed (Debian: openssh-client)")
	}
	host, keys, pemKey := hostWithKeys(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, keyscan, "-t", "ed25519,ecdsa,rsa", "-p", strconv.Itoa(host.Port), host.Host).Output() //nolint:gosec // test's own arguments
	require.NoError(t, err)
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	require.Len(t, lines, 3, "one line per host key:\n%s", out)

	fps := exec.CommandContext(ctx, keygen, "-lf", "-") //nolint:gosec // test's own arguments
	fps.Stdin = strings.NewReader(string(out))
	fpOut, err := fps.Output()
	require.NoError(t, err)
	for _, l := range lines {
		pin, err := stacks.ParseHostKey(l)
		require.NoError(t, err, l)
		assert.Equal(t, []string{"[" + host.Host + "]:" + strconv.Itoa(host.Port)}, pin.Hosts)
		assert.Contains(t, string(fpOut), pin.Fingerprint+" ", "ssh-keygen -lf shows the pin's fingerprint")
		client, err := access.DialSSH(ctx, stacks.SSHConfig{Host: host.Host, Port: host.Port, User: "root", PrivateKey: stacks.NewSecret(string(pemKey)), HostKey: l}, noEnv)
		require.NoError(t, err, l)
		_ = client.Close()
	}
	assert.Contains(t, string(fpOut), ssh.FingerprintSHA256(keys["ed25519"]))
}
