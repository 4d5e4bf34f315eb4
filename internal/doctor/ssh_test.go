package doctor

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/fluodata/talos-pulumi/stacks"
)

// sshServer is an in-process SSH server on loopback that accepts one public
// key and runs exec requests with sh, like a host would.
func sshServer(t *testing.T, allowed ssh.PublicKey) (host string, port int) {
	t.Helper()
	_, hostKey, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	signer, err := ssh.NewSignerFromKey(hostKey)
	require.NoError(t, err)
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		if string(k.Marshal()) == string(allowed.Marshal()) {
			return &ssh.Permissions{}, nil
		}
		return nil, assert.AnError
	}}
	cfg.AddHostKey(signer)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serveSSH(c, cfg)
		}
	}()
	return "127.0.0.1", l.Addr().(*net.TCPAddr).Port
}

func serveSSH(c net.Conn, cfg *ssh.ServerConfig) {
	_, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		ch, chReqs, err := nc.Accept()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = ch.Close() }()
			for req := range chReqs {
				if req.Type != "exec" {
					_ = req.Reply(false, nil)
					continue
				}
				var p struct{ Command string }
				_ = ssh.Unmarshal(req.Payload, &p)
				_ = req.Reply(true, nil)
				cmd := exec.Command("sh", "-c", p.Command)
				cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
				status := uint32(0)
				if err := cmd.Run(); err != nil {
					status = 1
					var ee *exec.ExitError
					if errors.As(err, &ee) {
						status = uint32(ee.ExitCode())
					}
				}
				_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
				return
			}
		}()
	}
}

func TestRunSSHWithKeyFile(t *testing.T) {
	t.Parallel()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	sshPub, err := ssh.NewPublicKey(pub)
	require.NoError(t, err)
	host, port := sshServer(t, sshPub)

	block, err := ssh.MarshalPrivateKey(priv, "")
	require.NoError(t, err)
	keyFile := filepath.Join(t.TempDir(), "id_ed25519")
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(block), 0o600))

	cfg := &stacks.Config{Proxmox: stacks.ProxmoxConfig{SSH: stacks.SSHConfig{Host: host, Port: port, User: "root", PrivateKeyFile: keyFile}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := runSSH(ctx, cfg, "echo ready")
	require.NoError(t, err)
	assert.Equal(t, "ready\n", out)

	out, err = runSSH(ctx, cfg, "echo 'dnsmasq is not installed'; exit 3")
	require.Error(t, err)
	assert.Contains(t, out, "dnsmasq is not installed")

	// Another key is refused.
	_, other, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	block, err = ssh.MarshalPrivateKey(other, "")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(block), 0o600))
	_, err = runSSH(ctx, cfg, "echo ready")
	require.ErrorContains(t, err, "unable to authenticate")
}
