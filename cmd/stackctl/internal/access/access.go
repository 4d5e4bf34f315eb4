// Package access carries the operator's traffic to a VM network that only
// the Proxmox host reaches (proxmox.access: ssh-proxy): a CONNECT proxy on
// 127.0.0.1 that tunnels through one SSH connection to the host, and the
// environment (HTTPS_PROXY, NO_PROXY) that sends the Talos and Kubernetes
// providers through it while everything else goes direct.
//
// Its parts: Start and Session (this file) run the helper for a stack;
// Proxy (proxy.go) is the CONNECT proxy itself, which lets only the allowed
// destinations through and re-establishes the SSH connection when it drops;
// DialSSH (ssh.go) opens SSH connections to the Proxmox host with the
// stack's credentials, and hostkey.go checks the host's key against its pin.
package access

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/fluodata/talos-pulumi/components/image"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/stacks"
)

// Enabled reports whether the stack reaches its VMs through the proxy.
func Enabled(cfg *stacks.Config) bool {
	return cfg.Platform == stacks.PlatformProxmox && cfg.Proxmox.Access == stacks.AccessSSHProxy
}

// Destinations are what the proxy lets through: the VM network, the VIP and
// every node IP (as /32, should one lie outside the network), and the
// Kubernetes endpoint when it is a name.
func Destinations(cfg *stacks.Config) (prefixes []netip.Prefix, hosts []string) {
	if p, ok := cfg.NodeNetwork(); ok {
		prefixes = append(prefixes, p)
	}
	addOne := func(s string) {
		if a, err := netip.ParseAddr(s); err == nil {
			p := netip.PrefixFrom(a, a.BitLen())
			if !slices.ContainsFunc(prefixes, func(q netip.Prefix) bool { return q.Contains(a) }) {
				prefixes = append(prefixes, p)
			}
			return
		}
		if s != "" && !slices.Contains(hosts, s) {
			hosts = append(hosts, s)
		}
	}
	addOne(cfg.Cluster.VIP)
	addOne(cfg.EndpointHost())
	for _, n := range cfg.Nodes.All() {
		addOne(n.IP)
	}
	return prefixes, hosts
}

// directHosts always bypass the proxy: what the providers, the Pulumi CLI
// and the Go toolchain reach on the internet (the Image Factory, plugin
// downloads from GitHub and get.pulumi.com, Pulumi Cloud, the Go module
// proxy, and the cloud object stores/KMS a backend or secrets provider may
// use). All of them read HTTPS_PROXY; the chart repositories and the
// Proxmox API are added from the stack.
var directHosts = []string{
	"localhost", "127.0.0.1", "::1",
	image.FactoryHost,
	"api.pulumi.com", "get.pulumi.com", "github.com", "api.github.com", ".githubusercontent.com",
	"proxy.golang.org", "sum.golang.org",
	".amazonaws.com", ".googleapis.com", ".windows.net", ".azure.net",
}

// NoProxy is the NO_PROXY list for the stack: the inherited NO_PROXY
// (minus entries that would send the VM network past the proxy), the
// Proxmox API host, the chart repositories, the fixed direct hosts, the
// backend's host and proxmox.noProxy. dropped lists the inherited entries
// left out.
func NoProxy(cfg *stacks.Config, getenv func(string) string) (entries, dropped []string) {
	prefixes, hosts := Destinations(cfg)
	return noProxy(cfg, getenv, prefixes, hosts)
}

func noProxy(cfg *stacks.Config, getenv func(string) string, prefixes []netip.Prefix, hosts []string) (entries, dropped []string) {
	add := func(e string) {
		e = strings.TrimSpace(e)
		if e != "" && !slices.Contains(entries, e) {
			entries = append(entries, e)
		}
	}
	// Go prefers no_proxy, client-go NO_PROXY: keep what either says.
	for e := range strings.SplitSeq(getenv("no_proxy")+","+getenv("NO_PROXY"), ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		if coversVMs(e, prefixes, hosts) {
			if !slices.Contains(dropped, e) {
				dropped = append(dropped, e)
			}
			continue
		}
		add(e)
	}
	add(cfg.Proxmox.EndpointHost())
	for _, repo := range []string{talos.CiliumRepo, talos.ApproverRepo} {
		if u, err := url.Parse(repo); err == nil {
			add(u.Hostname())
		}
	}
	for _, h := range directHosts {
		add(h)
	}
	// The backend, and the Go module proxy `pulumi up` builds the program
	// with.
	for _, v := range []string{getenv("PULUMI_BACKEND_URL"), getenv("GOPROXY")} {
		for part := range strings.SplitSeq(strings.ReplaceAll(v, "|", ","), ",") {
			if u, err := url.Parse(part); err == nil && (u.Scheme == "https" || u.Scheme == "http") {
				add(u.Hostname())
			}
		}
	}
	for _, h := range cfg.Proxmox.NoProxy {
		add(h)
	}
	return entries, dropped
}

// coversVMs reports whether a NO_PROXY entry matches a destination that only
// the proxy reaches ("*", an overlapping CIDR or IP, the endpoint name).
func coversVMs(entry string, prefixes []netip.Prefix, hosts []string) bool {
	if entry == "*" {
		return true
	}
	host := entry
	if h, _, err := net.SplitHostPort(entry); err == nil {
		host = h
	}
	if p, err := netip.ParsePrefix(host); err == nil {
		return slices.ContainsFunc(prefixes, p.Overlaps)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Contains(a) })
	}
	d := strings.ToLower(strings.TrimPrefix(host, "."))
	return slices.ContainsFunc(hosts, func(h string) bool {
		h = strings.ToLower(h)
		return h == d || strings.HasSuffix(h, "."+d)
	})
}

// Options tune Start.
type Options struct {
	// Listen is the proxy's address; it must be on loopback, since anyone
	// who can connect reaches the VM network. Default 127.0.0.1:0 (any free
	// port).
	Listen string
	// Dial opens the SSH connection; default: the stack's proxmox.ssh
	// settings with the key, key file or SSH agent.
	Dial SSHDialer
	// Getenv reads SSH_AUTH_SOCK, NO_PROXY and PULUMI_BACKEND_URL
	// (default os.Getenv).
	Getenv func(string) string
	// Log receives the proxy's lines (refusals, reconnects); default none.
	Log func(format string, args ...any)
}

// Session is a running proxy.
type Session struct {
	// URL is the proxy's address for HTTPS_PROXY, http://127.0.0.1:PORT.
	URL string
	// NoProxy is the NO_PROXY list, comma-separated.
	NoProxy string
	// Dropped are the inherited NO_PROXY entries left out.
	Dropped []string
	// Target is user@host:port of the SSH connection, for messages.
	Target string
	// Allowed lists what goes through (networks and names), for messages.
	Allowed []string

	proxy *Proxy
	srv   *http.Server
	done  chan struct{}
}

// ErrNotLoopback refuses a listen address other hosts could reach.
var ErrNotLoopback = errors.New("the proxy must listen on a loopback address (127.0.0.1 or ::1): anyone who can connect to it reaches the VM network")

// Start opens the SSH connection (so a wrong key fails here, not in the
// middle of an update) and serves the proxy until Close or ctx ends.
func Start(ctx context.Context, cfg *stacks.Config, o Options) (*Session, error) {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(o.Listen)
	if err != nil {
		return nil, fmt.Errorf("unable to parse the listen address %q: %w", o.Listen, err)
	}
	if a, err := netip.ParseAddr(host); (err != nil && host != "localhost") || (err == nil && !a.IsLoopback()) {
		return nil, fmt.Errorf("listen address %q: %w", o.Listen, ErrNotLoopback)
	}
	sshCfg := cfg.Proxmox.SSH
	if o.Dial == nil {
		o.Dial = func(ctx context.Context) (*ssh.Client, error) { return DialSSH(ctx, sshCfg, o.Getenv) }
	}
	prefixes, hosts := Destinations(cfg)
	noProxyList, dropped := noProxy(cfg, o.Getenv, prefixes, hosts)
	p := &Proxy{
		Allowed: prefixes, AllowedHosts: hosts, Dial: o.Dial, Log: o.Log,
		RefusalHint: "only the VM network goes through the Proxmox host; a host that must be reached directly belongs in proxmox.noProxy",
	}
	s := &Session{
		NoProxy: strings.Join(noProxyList, ","), Dropped: dropped, proxy: p, done: make(chan struct{}),
		Target: fmt.Sprintf("%s@%s", sshCfg.User, net.JoinHostPort(sshCfg.Host, fmt.Sprint(sshCfg.Port))),
	}
	for _, pr := range prefixes {
		s.Allowed = append(s.Allowed, pr.String())
	}
	s.Allowed = append(s.Allowed, hosts...)
	if err := p.Connect(ctx); err != nil {
		return nil, fmt.Errorf("unable to start the ssh-proxy (SSH to %s): %w", s.Target, err)
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", o.Listen)
	if err != nil {
		_ = p.Close()
		return nil, fmt.Errorf("unable to start the ssh-proxy: %w", err)
	}
	s.URL = "http://" + l.Addr().String()
	s.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(l)
	}()
	go func() {
		select {
		case <-ctx.Done():
			_ = s.Close()
		case <-s.done:
		}
	}()
	return s, nil
}

// proxyVars are the variables Env sets, in both spellings: Go's httpproxy
// prefers the lowercase one, client-go reads NO_PROXY first, curl takes
// either; a stale spelling left in the environment would win somewhere.
var proxyVars = []string{"HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"}

// Env is what a process needs to use the proxy.
func (s *Session) Env() map[string]string {
	env := make(map[string]string, len(proxyVars))
	for _, k := range proxyVars {
		if strings.EqualFold(k, "HTTPS_PROXY") {
			env[k] = s.URL
		} else {
			env[k] = s.NoProxy
		}
	}
	return env
}

// Environ returns base (an os.Environ list) with the proxy variables
// replaced by the session's.
func (s *Session) Environ(base []string) []string {
	env := s.Env()
	out := make([]string, 0, len(base)+len(env))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, ours := env[k]; !ours {
			out = append(out, kv)
		}
	}
	for _, k := range proxyVars {
		out = append(out, k+"="+env[k])
	}
	return out
}

// Close stops serving and closes the SSH connection, which ends every open
// tunnel.
func (s *Session) Close() error {
	err := s.srv.Close()
	if cerr := s.proxy.Close(); err == nil {
		err = cerr
	}
	<-s.done
	return err
}

// DialContext opens a TCP connection to addr (host:port in the VM network)
// through the session's SSH connection, as the proxy does for a CONNECT: a
// process's own clients (stackctl backup's Talos API client) use it where
// they cannot take the proxy from the environment.
func (s *Session) DialContext(ctx context.Context, _, addr string) (net.Conn, error) {
	to, err := s.proxy.Check(addr)
	if err != nil {
		return nil, err
	}
	return s.proxy.dial(ctx, to)
}
