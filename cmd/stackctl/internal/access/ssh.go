// This file opens SSH connections to a Proxmox host with the stack's
// credentials, the way the program's remote commands authenticate: the
// configured key, the key file, or the operator's SSH agent. The host's key
// is checked against its section's ssh.hostKey (proxmox.ssh.hostKey,
// hosts[i].proxmox.ssh.hostKey) when one is pinned (hostkey.go).

package access

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/fluodata/talos-pulumi/stacks"
)

// ErrNoSSHCredentials means neither a key nor an SSH agent is available.
var ErrNoSSHCredentials = errors.New("no SSH credentials: no SSH agent (SSH_AUTH_SOCK) and no proxmox.ssh.privateKey(File)")

// noCredentialsError is ErrNoSSHCredentials of another section than
// proxmox's.
type noCredentialsError struct{ key string }

func (e noCredentialsError) Error() string {
	return fmt.Sprintf("no SSH credentials: no SSH agent (SSH_AUTH_SOCK) and no %s.privateKey(File)", e.key)
}

func (e noCredentialsError) Is(target error) bool { return target == ErrNoSSHCredentials }

// DialSSH connects and authenticates to c.Host:c.Port, the settings of
// proxmox.ssh. getenv reads SSH_AUTH_SOCK (os.Getenv outside tests). The
// context bounds the TCP connect and the handshake, not the life of the
// returned client.
func DialSSH(ctx context.Context, c stacks.SSHConfig, getenv func(string) string) (*ssh.Client, error) {
	return DialSection(ctx, c, ProxmoxSSHPath, getenv)
}

// ProxmoxSSHPath is the key of the proxmox section's SSH settings.
const ProxmoxSSHPath = "proxmox.ssh"

// DialSection is DialSSH with the settings at key (a section's ssh key,
// e.g. hosts[0].proxmox.ssh), which its messages name.
func DialSection(ctx context.Context, c stacks.SSHConfig, key string, getenv func(string) string) (*ssh.Client, error) {
	pinPath := key + ".hostKey"
	pin, err := stacks.ParseHostKey(c.HostKey)
	if err != nil {
		return nil, fmt.Errorf("unable to read %s: %w", pinPath, err)
	}
	auth, closeAgent, err := authMethod(ctx, c, key, getenv)
	if err != nil {
		return nil, err
	}
	defer closeAgent()
	cc := &ssh.ClientConfig{
		User:              c.User,
		Auth:              []ssh.AuthMethod{auth},
		HostKeyCallback:   hostKeyCallback(pin, pinPath),
		HostKeyAlgorithms: HostKeyAlgorithms(pin),
	}
	addr := net.JoinHostPort(c.Host, strconv.Itoa(c.Port))
	sc, chans, reqs, err := handshake(ctx, addr, cc)
	if err != nil {
		return nil, err
	}
	return ssh.NewClient(sc, chans, reqs), nil
}

// handshake connects to addr and runs the SSH handshake (key exchange, host
// key check, login) within ctx.
func handshake(ctx context.Context, addr string, cc *ssh.ClientConfig) (ssh.Conn, <-chan ssh.NewChannel, <-chan *ssh.Request, error) {
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	// The handshake also ends when ctx does (Ctrl-C during a slow connect).
	stop := context.AfterFunc(ctx, func() { _ = raw.Close() })
	sc, chans, reqs, err := ssh.NewClientConn(raw, addr, cc)
	if !stop() || err != nil {
		_ = raw.Close()
		if err == nil {
			err = ctx.Err()
		}
		return nil, nil, nil, err
	}
	_ = raw.SetDeadline(time.Time{})
	return sc, chans, reqs, nil
}

// authMethod picks the key (configured or from its file) over the agent.
// The agent connection is only needed during the handshake.
func authMethod(ctx context.Context, c stacks.SSHConfig, key string, getenv func(string) string) (ssh.AuthMethod, func(), error) {
	noop := func() {}
	if c.PrivateKey.IsSet() || c.PrivateKeyFile != "" {
		pem := []byte(c.PrivateKey.Reveal())
		if c.PrivateKeyFile != "" {
			var err error
			if pem, err = os.ReadFile(c.KeyFilePath()); err != nil {
				return nil, noop, fmt.Errorf("%s.privateKeyFile: %w", key, err)
			}
		}
		signer, err := ssh.ParsePrivateKey(pem)
		if err != nil {
			return nil, noop, fmt.Errorf("%s: the private key does not parse (a passphrase-protected key must go through the agent): %w", key, err)
		}
		return ssh.PublicKeys(signer), noop, nil
	}
	sock := getenv("SSH_AUTH_SOCK")
	if sock == "" {
		if key != ProxmoxSSHPath {
			return nil, noop, noCredentialsError{key}
		}
		return nil, noop, ErrNoSSHCredentials
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return nil, noop, fmt.Errorf("unable to connect to the SSH agent at SSH_AUTH_SOCK: %w", err)
	}
	return ssh.PublicKeysCallback(agent.NewClient(conn).Signers), func() { _ = conn.Close() }, nil
}
