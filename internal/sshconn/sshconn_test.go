package sshconn_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh/agent"

	"github.com/fluodata/talos-pulumi/internal/sshconn"
	"github.com/fluodata/talos-pulumi/internal/sshtest"
	"github.com/fluodata/talos-pulumi/stacks"
)

func noEnv(string) string { return "" }

func TestDialWithAConfiguredKey(t *testing.T) {
	t.Parallel()
	_, pub, pemKey := sshtest.Key(t)
	host := sshtest.New(t, sshtest.Options{AuthorizedKey: pub})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := sshconn.Dial(ctx, stacks.SSHConfig{Host: host.Host, Port: host.Port, User: "root", PrivateKey: stacks.NewSecret(string(pemKey))}, noEnv)
	require.NoError(t, err)
	_ = c.Close()

	_, err = sshconn.Dial(ctx, stacks.SSHConfig{Host: host.Host, Port: host.Port, User: "root", PrivateKey: stacks.NewSecret("-----BEGIN OPENSSH PRIVATE KEY-----\nnope\n")}, noEnv)
	require.ErrorContains(t, err, "proxmox.ssh: the private key does not parse")
	_, err = sshconn.Dial(ctx, stacks.SSHConfig{Host: host.Host, Port: host.Port, User: "root", PrivateKeyFile: filepath.Join(t.TempDir(), "missing")}, noEnv)
	require.ErrorContains(t, err, "proxmox.ssh.privateKeyFile")
	_, err = sshconn.Dial(ctx, stacks.SSHConfig{Host: host.Host, Port: host.Port, User: "root"}, noEnv)
	require.ErrorIs(t, err, sshconn.ErrNoCredentials)
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
	c, err := sshconn.Dial(ctx, stacks.SSHConfig{Host: host.Host, Port: host.Port, User: "root"}, getenv)
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
	_, err = sshconn.Dial(ctx, stacks.SSHConfig{Host: host, Port: portNum, User: "root", PrivateKey: stacks.NewSecret(string(pemKey))}, noEnv)
	require.Error(t, err)
	assert.Less(t, time.Since(start), 5*time.Second)
}
