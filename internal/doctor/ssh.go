package doctor

import (
	"context"
	"os"

	"golang.org/x/crypto/ssh"

	"github.com/fluodata/talos-pulumi/internal/sshconn"
	"github.com/fluodata/talos-pulumi/stacks"
)

// dialSSH connects to the Proxmox host with the credentials the program's
// remote commands use: the configured key, the key file, or the SSH agent.
func dialSSH(ctx context.Context, cfg *stacks.Config) (*ssh.Client, error) {
	return sshconn.Dial(ctx, cfg.Proxmox.SSH, os.Getenv)
}

// runSSH runs command on the Proxmox host and returns its combined output.
func runSSH(ctx context.Context, cfg *stacks.Config, command string) (string, error) {
	client, err := dialSSH(ctx, cfg)
	if err != nil {
		return "", err
	}
	defer func() { _ = client.Close() }()
	sess, err := client.NewSession()
	if err != nil {
		return "", err
	}
	defer func() { _ = sess.Close() }()
	out, err := sess.CombinedOutput(command)
	return string(out), err
}
