package doctor

import (
	"context"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/access"
	"github.com/fluodata/talos-pulumi/stacks"
)

// dialSSH connects to the Proxmox host with the credentials the program's
// remote commands use: the configured key, the key file, or the SSH agent.
// cfg is the stack as the section ctx is for (forSection) sees it; its
// errors name that section's keys.
func dialSSH(ctx context.Context, cfg *stacks.Config) (*ssh.Client, error) {
	return access.DialSection(ctx, cfg.Proxmox.SSH, sectionPath(ctx)+".ssh", os.Getenv)
}

// scanHostKey reads the key the Proxmox host presents to the project's SSH
// clients (the pinned key's type, else ed25519 first).
func scanHostKey(ctx context.Context, cfg *stacks.Config) (ssh.PublicKey, error) {
	return access.ScanSectionHostKey(ctx, cfg.Proxmox.SSH, sectionPath(ctx)+".ssh")
}

// authorizedKey is the key as a pin: "<type> <base64>".
func authorizedKey(k ssh.PublicKey) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}

// keyFileType names the key's file under /etc/ssh (ssh_host_<type>_key.pub).
func keyFileType(k ssh.PublicKey) string {
	switch t := k.Type(); {
	case t == ssh.KeyAlgoED25519:
		return "ed25519"
	case t == ssh.KeyAlgoRSA:
		return "rsa"
	case strings.HasPrefix(t, "ecdsa-"):
		return "ecdsa"
	default:
		return "*"
	}
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
