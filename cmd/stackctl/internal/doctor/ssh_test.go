package doctor

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/fluodata/talos-pulumi/internal/testkit/sshtest"
	"github.com/fluodata/talos-pulumi/stacks"
)

func TestRunSSHWithKeyFile(t *testing.T) {
	t.Parallel()
	_, pub, pemKey := sshtest.Key(t)
	host := sshtest.New(t, sshtest.Options{AuthorizedKey: pub})
	keyFile := filepath.Join(t.TempDir(), "id_ed25519")
	require.NoError(t, os.WriteFile(keyFile, pemKey, 0o600))

	cfg := &stacks.Config{Proxmox: stacks.ProxmoxConfig{SSH: stacks.SSHConfig{Host: host.Host, Port: host.Port, User: "root", PrivateKeyFile: keyFile}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := runSSH(ctx, cfg, "echo ready")
	require.NoError(t, err)
	assert.Equal(t, "ready\n", out)

	out, err = runSSH(ctx, cfg, "echo 'dnsmasq is not installed'; exit 3")
	require.Error(t, err)
	assert.Contains(t, out, "dnsmasq is not installed")

	// Another key is refused.
	_, _, other := sshtest.Key(t)
	require.NoError(t, os.WriteFile(keyFile, other, 0o600))
	_, err = runSSH(ctx, cfg, "echo ready")
	require.ErrorContains(t, err, "unable to authenticate")
}

func TestRunSSHChecksThePinnedHostKey(t *testing.T) {
	t.Parallel()
	_, pub, pemKey := sshtest.Key(t)
	host := sshtest.New(t, sshtest.Options{AuthorizedKey: pub})
	_, other, _ := sshtest.Key(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := func(pin ssh.PublicKey) *stacks.Config {
		return &stacks.Config{Proxmox: stacks.ProxmoxConfig{SSH: stacks.SSHConfig{Host: host.Host, Port: host.Port, User: "root",
			PrivateKey: stacks.NewSecret(string(pemKey)), HostKey: string(ssh.MarshalAuthorizedKey(pin))}}}
	}
	out, err := runSSH(ctx, cfg(host.HostKey), "echo ready")
	require.NoError(t, err)
	assert.Equal(t, "ready\n", out)

	_, err = runSSH(ctx, cfg(other), "echo ready")
	require.ErrorContains(t, err, "host key mismatch: "+host.Addr()+" presented the ssh-ed25519 key "+ssh.FingerprintSHA256(host.HostKey)+
		", but proxmox.ssh.hostKey pins "+ssh.FingerprintSHA256(other))
	assert.Equal(t, 1, host.Logins(), "the wrong host got no login")

	got, err := scanHostKey(ctx, cfg(other))
	require.NoError(t, err, "scanning reads the key whatever the pin")
	assert.Equal(t, host.HostKey.Marshal(), got.Marshal())
}
