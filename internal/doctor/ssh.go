package doctor

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/fluodata/talos-pulumi/stacks"
)

// runSSH runs command on the Proxmox host with the credentials the program's
// remote commands use: the configured key, the key file, or the SSH agent.
func runSSH(ctx context.Context, cfg *stacks.Config, command string) (string, error) {
	c := cfg.Proxmox.SSH
	var auth []ssh.AuthMethod
	switch {
	case c.PrivateKey.IsSet() || c.PrivateKeyFile != "":
		pem := []byte(c.PrivateKey.Reveal())
		if c.PrivateKeyFile != "" {
			var err error
			if pem, err = os.ReadFile(c.KeyFilePath()); err != nil {
				return "", fmt.Errorf("proxmox.ssh.privateKeyFile: %w", err)
			}
		}
		signer, err := ssh.ParsePrivateKey(pem)
		if err != nil {
			return "", fmt.Errorf("proxmox.ssh: the private key does not parse (a passphrase-protected key must go through the agent): %w", err)
		}
		auth = append(auth, ssh.PublicKeys(signer))
	case os.Getenv("SSH_AUTH_SOCK") != "":
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", os.Getenv("SSH_AUTH_SOCK"))
		if err != nil {
			return "", fmt.Errorf("SSH agent at SSH_AUTH_SOCK: %w", err)
		}
		defer func() { _ = conn.Close() }()
		auth = append(auth, ssh.PublicKeysCallback(agent.NewClient(conn).Signers))
	default:
		return "", fmt.Errorf("no SSH credentials: no SSH agent (SSH_AUTH_SOCK) and no proxmox.ssh.privateKey(File)")
	}
	cc := &ssh.ClientConfig{
		User: c.User,
		Auth: auth,
		// Like the command provider without a hostKey: the host key is not
		// pinned by the stack, so it cannot be checked here either.
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), //nolint:gosec // mirrors the provider's behaviour
	}
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", net.JoinHostPort(c.Host, strconv.Itoa(c.Port)))
	if err != nil {
		return "", err
	}
	defer func() { _ = raw.Close() }()
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	sc, chans, reqs, err := ssh.NewClientConn(raw, c.Host, cc)
	if err != nil {
		return "", err
	}
	client := ssh.NewClient(sc, chans, reqs)
	defer func() { _ = client.Close() }()
	sess, err := client.NewSession()
	if err != nil {
		return "", err
	}
	defer func() { _ = sess.Close() }()
	var out bytes.Buffer
	sess.Stdout, sess.Stderr = &out, &out
	err = sess.Run(command)
	return out.String(), err
}
