// Package sshtest is an in-process SSH server on loopback standing in for
// the Proxmox host in tests: it runs exec requests with sh and forwards
// direct-tcpip channels (what `ssh -W`/the CONNECT proxy use), optionally
// mapping VM-network addresses to loopback listeners, the way the host
// reaches VMs the test machine cannot.
package sshtest

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/crypto/ssh"
)

// Options configure the server. With neither a key nor a password every
// login is refused.
type Options struct {
	// AuthorizedKey is accepted for public-key logins.
	AuthorizedKey ssh.PublicKey
	// Password is accepted for password logins.
	Password string
	// Routes maps a destination as the host sees it ("10.10.0.5:50000") to
	// the address actually dialled; others are dialled as given.
	Routes map[string]string
	// NoForwarding refuses direct-tcpip, like sshd's AllowTcpForwarding no.
	NoForwarding bool
	// HostKeys are the server's host keys, as a real sshd has one per
	// type; default: one new ed25519 key.
	HostKeys []ssh.Signer
}

// Server is a running test server.
type Server struct {
	Host string
	Port int
	// HostKey is the public key of the first host key.
	HostKey ssh.PublicKey

	opts      Options
	forwarded atomic.Int32
	logins    atomic.Int32
	mu        sync.Mutex
	conns     []net.Conn
}

// New starts a server that stops when the test ends.
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	if len(opts.HostKeys) == 0 {
		signer, _, _ := Key(t)
		opts.HostKeys = []ssh.Signer{signer}
	}
	s := &Server{opts: opts, HostKey: opts.HostKeys[0].PublicKey()}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
			if opts.AuthorizedKey != nil && string(k.Marshal()) == string(opts.AuthorizedKey.Marshal()) {
				s.logins.Add(1)
				return &ssh.Permissions{}, nil
			}
			return nil, errors.New("key not authorized")
		},
		PasswordCallback: func(_ ssh.ConnMetadata, pw []byte) (*ssh.Permissions, error) {
			if opts.Password != "" && string(pw) == opts.Password {
				s.logins.Add(1)
				return &ssh.Permissions{}, nil
			}
			return nil, errors.New("wrong password")
		},
	}
	for _, k := range opts.HostKeys {
		cfg.AddHostKey(k)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	t.Cleanup(func() { _ = l.Close(); s.Kill() })
	s.Host, s.Port = "127.0.0.1", l.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			go s.serve(c, cfg)
		}
	}()
	return s
}

// Addr is host:port.
func (s *Server) Addr() string { return net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) }

// Forwarded counts the direct-tcpip channels opened so far.
func (s *Server) Forwarded() int { return int(s.forwarded.Load()) }

// Logins counts successful authentications (one per SSH connection).
func (s *Server) Logins() int { return int(s.logins.Load()) }

// Kill drops every open connection, as a network cut or sshd restart would.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.conns = nil
}

func (s *Server) serve(c net.Conn, cfg *ssh.ServerConfig) {
	_, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		switch nc.ChannelType() {
		case "session":
			go s.session(nc)
		case "direct-tcpip":
			s.forward(nc)
		default:
			_ = nc.Reject(ssh.UnknownChannelType, "unsupported channel type")
		}
	}
}

// forward handles a direct-tcpip channel (RFC 4254 7.2).
func (s *Server) forward(nc ssh.NewChannel) {
	if s.opts.NoForwarding {
		_ = nc.Reject(ssh.Prohibited, "port forwarding is disabled")
		return
	}
	var p struct {
		Host       string
		Port       uint32
		OriginAddr string
		OriginPort uint32
	}
	if err := ssh.Unmarshal(nc.ExtraData(), &p); err != nil {
		_ = nc.Reject(ssh.ConnectionFailed, "bad request")
		return
	}
	addr := net.JoinHostPort(p.Host, strconv.FormatUint(uint64(p.Port), 10))
	if to, ok := s.opts.Routes[addr]; ok {
		addr = to
	}
	dst, err := net.Dial("tcp", addr)
	if err != nil {
		_ = nc.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	// Counted before the accept reaches the client: a client that is done
	// with the channel at once must find it counted.
	s.forwarded.Add(1)
	ch, reqs, err := nc.Accept()
	if err != nil {
		s.forwarded.Add(-1)
		_ = dst.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	go func() { _, _ = io.Copy(ch, dst); _ = ch.CloseWrite() }()
	go func() { _, _ = io.Copy(dst, ch); _ = dst.Close() }()
}

// session runs one exec request with sh -c and reports its exit status.
func (s *Server) session(nc ssh.NewChannel) {
	ch, reqs, err := nc.Accept()
	if err != nil {
		return
	}
	defer func() { _ = ch.Close() }()
	for req := range reqs {
		if req.Type != "exec" {
			_ = req.Reply(false, nil)
			continue
		}
		var p struct{ Command string }
		_ = ssh.Unmarshal(req.Payload, &p)
		_ = req.Reply(true, nil)
		cmd := exec.Command("sh", "-c", p.Command) //nolint:gosec // the test's own commands
		cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
		status := uint32(0)
		if err := cmd.Run(); err != nil {
			status = 1
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				status = uint32(ee.ExitCode()) //nolint:gosec // exit codes are 0-255
			}
		}
		_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
		return
	}
}

// Key makes a throwaway ed25519 key: its signer, its public key and its
// OpenSSH PEM encoding (what a key file or proxmox.ssh.privateKey holds).
func Key(t testing.TB) (ssh.Signer, ssh.PublicKey, []byte) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	must(t, err)
	signer, err := ssh.NewSignerFromKey(priv)
	must(t, err)
	block, err := ssh.MarshalPrivateKey(priv, "")
	must(t, err)
	return signer, signer.PublicKey(), pem.EncodeToMemory(block)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(fmt.Errorf("unable to set up the sshtest fixture: %w", err))
	}
}
