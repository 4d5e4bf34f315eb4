// This file serves a local HTTP CONNECT proxy whose connections are dialled
// onward through one SSH connection (to the Proxmox host), so the Talos and
// Kubernetes providers on the operator's machine reach a VM network only that
// host can reach. Only destinations inside the allowed networks go through;
// the SSH connection is re-established when it drops.

package access

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// SSHDialer opens the SSH connection; called again after it drops.
type SSHDialer func(ctx context.Context) (*ssh.Client, error)

// Proxy is the CONNECT proxy.
type Proxy struct {
	// Allowed are the networks (and single addresses, as /32) that may be
	// reached: the stack's VM network and VIP.
	Allowed []netip.Prefix
	// AllowedHosts are host names that may be reached (the cluster's
	// endpoint when it is a name); the Proxmox host resolves them.
	AllowedHosts []string
	Dial         SSHDialer
	// Log receives one line per refused request and per reconnect.
	Log func(format string, args ...any)
	// RefusalHint is added to the log line of a refused request (e.g. how
	// to let that host bypass the proxy).
	RefusalHint string
	// Name is the Proxmox section the SSH connection goes to (e.g.
	// `host office (hosts[0].proxmox)`), for messages where a stack has
	// several; "" for the one Proxmox host.
	Name string

	mu     sync.Mutex
	client *ssh.Client
}

// ErrNotAllowed is returned for a destination outside the allowed networks.
var ErrNotAllowed = errors.New("destination is outside the stack's VM network")

// Check reports whether host:port may be reached and returns the address to
// dial. IP literals must lie in Allowed; names must be in AllowedHosts (any
// other name would be a destination outside the VM network).
func (p *Proxy) Check(hostport string) (string, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", fmt.Errorf("unable to parse %q as host:port: %w", hostport, err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return "", fmt.Errorf("%q is not a port", port)
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		if slices.ContainsFunc(p.AllowedHosts, func(h string) bool { return strings.EqualFold(h, host) }) {
			return net.JoinHostPort(strings.ToLower(host), port), nil
		}
		return "", fmt.Errorf("%s: %w", host, ErrNotAllowed)
	}
	if !slices.ContainsFunc(p.Allowed, func(pr netip.Prefix) bool { return pr.Contains(addr.Unmap()) }) {
		return "", fmt.Errorf("%s: %w", addr, ErrNotAllowed)
	}
	return netip.AddrPortFrom(addr.Unmap(), uint16(n)).String(), nil
}

// ServeHTTP implements the CONNECT method.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "only CONNECT is supported", http.StatusMethodNotAllowed)
		return
	}
	dst, err := p.Check(r.Host)
	if err != nil {
		refuse(w, r, err, p.RefusalHint, p.logf)
		return
	}
	p.connect(w, r, dst)
}

// refuse answers a CONNECT the proxy does not carry, and logs it.
func refuse(w http.ResponseWriter, r *http.Request, err error, hint string, logf func(string, ...any)) {
	if hint != "" {
		logf("refused CONNECT %s: %v; %s", r.Host, err, hint)
	} else {
		logf("refused CONNECT %s: %v", r.Host, err)
	}
	http.Error(w, err.Error(), http.StatusForbidden)
}

// connect tunnels the CONNECT request's connection to dst (a checked
// destination) through SSH.
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request, dst string) {
	upstream, err := p.dial(r.Context(), dst)
	if err != nil {
		p.logf("CONNECT %s: %v", dst, err)
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer func() { _ = upstream.Close() }()
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "connection cannot be taken over", http.StatusInternalServerError)
		return
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	defer func() { _ = conn.Close() }()
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(upstream, buf); done <- struct{}{} }()
	go func() { _, _ = io.Copy(conn, upstream); done <- struct{}{} }()
	<-done
}

// dial opens a TCP connection through SSH, reconnecting SSH once if the
// current connection is gone.
func (p *Proxy) dial(ctx context.Context, addr string) (net.Conn, error) {
	for attempt := 0; ; attempt++ {
		client, err := p.sshClient(ctx)
		if err != nil {
			return nil, err
		}
		conn, err := client.Dial("tcp", addr)
		if err == nil {
			return conn, nil
		}
		var open *ssh.OpenChannelError
		if errors.As(err, &open) || attempt > 0 {
			// The host answered: the destination itself refused.
			return nil, fmt.Errorf("unable to connect via SSH: %w", err)
		}
		p.drop(client)
	}
}

func (p *Proxy) sshClient(ctx context.Context) (*ssh.Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client != nil {
		return p.client, nil
	}
	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	c, err := p.Dial(dctx)
	if err != nil {
		return nil, fmt.Errorf("unable to connect over SSH to %s: %w", p.hostName(), err)
	}
	p.client = c
	go func() {
		_ = c.Wait() // returns when the connection drops
		if p.Name != "" {
			p.logf("SSH connection to %s closed; the next request reconnects", p.hostName())
		} else {
			p.logf("SSH connection closed; the next request reconnects")
		}
		p.drop(c)
	}()
	return c, nil
}

func (p *Proxy) drop(c *ssh.Client) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client == c {
		_ = c.Close()
		p.client = nil
	}
}

// Connect opens the SSH connection now, so a wrong key or host shows at
// start instead of at the first request.
func (p *Proxy) Connect(ctx context.Context) error {
	_, err := p.sshClient(ctx)
	return err
}

// Close closes the SSH connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client == nil {
		return nil
	}
	err := p.client.Close()
	p.client = nil
	return err
}

// hostName is the host the SSH connection goes to, for messages.
func (p *Proxy) hostName() string {
	if p.Name == "" {
		return "the Proxmox host"
	}
	return "the Proxmox host of " + p.Name
}

func (p *Proxy) logf(format string, args ...any) {
	if p.Log != nil {
		p.Log(format, args...)
	}
}
