// Package access carries the operator's traffic to a VM network that only
// the Proxmox host reaches (proxmox.access: ssh-proxy): a CONNECT proxy on
// 127.0.0.1 that tunnels through one SSH connection to the host, and the
// environment (HTTPS_PROXY, NO_PROXY) that sends the Talos and Kubernetes
// providers through it while everything else goes direct. With hosts
// entries, each Proxmox section (proxmox, hosts[i].proxmox) of access
// ssh-proxy has an SSH connection of its own, and the one proxy sends each
// destination through the connection of the section whose VMs it reaches;
// the VMs of a section of access direct go direct (NO_PROXY).
//
// Its parts: Start and Session (this file) run the helper for a stack;
// Proxy (proxy.go) is the CONNECT proxy of one SSH connection, which lets
// only the allowed destinations through and re-establishes the connection
// when it drops; the router (router.go) picks a section's Proxy for each
// destination; DialSSH (ssh.go) opens SSH connections to a Proxmox host
// with the stack's credentials, and hostkey.go checks the host's key
// against its pin.
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

// Enabled reports whether the stack reaches VMs through the proxy: a
// Proxmox section (proxmox, or a hosts entry's) has access ssh-proxy.
func Enabled(cfg *stacks.Config) bool {
	return cfg.Platform == stacks.PlatformProxmox && len(SSHProxySections(cfg)) > 0
}

// SSHProxySections are the Proxmox sections whose VMs are reached through
// an SSH connection to their host (access ssh-proxy), proxmox first; a
// host lost for good (gone) is none: nothing dials it.
func SSHProxySections(cfg *stacks.Config) []stacks.ProxmoxSection {
	var out []stacks.ProxmoxSection
	for _, s := range cfg.ProxmoxSections() {
		if s.Access == stacks.AccessSSHProxy && !s.Gone {
			out = append(out, s)
		}
	}
	return out
}

// route is how one Proxmox section's VMs are reached: their destinations
// and whether an SSH connection to the section's host carries them.
type route struct {
	section stacks.ProxmoxSection
	// tunnel: through SSH to the section's host (access ssh-proxy; every
	// section when none has it, as `stackctl proxy` is asked for then);
	// else this machine reaches them itself (access direct).
	tunnel bool
	// prefixes are the VM network, the VIP and the endpoint (proxmox's)
	// and the nodes' IPs where outside it (as /32); hosts the endpoint's
	// name (proxmox's).
	prefixes []netip.Prefix
	hosts    []string
	// nodes are the section's nodes' IPs: a node is reached through its
	// own host even where networks overlap.
	nodes []netip.Addr
	// servers: a hosts entry of rented servers (no Proxmox section), whose
	// public addresses this machine reaches itself.
	servers bool
	// gone: a host lost for good; its destinations are refused, nothing
	// dials it or them.
	gone bool
}

// label is the section as messages name it.
func (r *route) label() string { return sectionLabel(r.section) }

func sectionLabel(s stacks.ProxmoxSection) string {
	if s.Host == "" {
		return s.Path
	}
	return fmt.Sprintf("host %s (%s)", s.Host, s.Path)
}

// routes are the stack's Proxmox sections with their destinations,
// proxmox first: each its VM network and its nodes' IPs; proxmox also the
// VIP and the Kubernetes endpoint, unless an IP of them is another
// section's.
func routes(cfg *stacks.Config) []*route {
	sections := cfg.ProxmoxSections()
	enabled := Enabled(cfg)
	out := make([]*route, len(sections))
	index := map[string]int{}
	for i, s := range sections {
		out[i] = &route{section: s, gone: s.Gone, tunnel: !s.Gone && (!enabled || s.Access == stacks.AccessSSHProxy)}
		index[s.Path] = i
		if p, ok := cfg.SectionNetwork(s); ok {
			out[i].prefixes = append(out[i].prefixes, p)
		}
	}
	var nodes []*stacks.NodeConfig
	for _, n := range cfg.Nodes.All() {
		if !cfg.OnServers(n.Host) { // the servers' routes are below
			nodes = append(nodes, n)
		}
	}
	for _, n := range nodes {
		if a, err := netip.ParseAddr(n.IP); err == nil {
			r := out[index[cfg.SectionOf(n.Host).Path]]
			r.nodes = append(r.nodes, a.Unmap())
		}
	}
	addOne := func(r *route, s string) {
		if a, err := netip.ParseAddr(s); err == nil {
			p := netip.PrefixFrom(a, a.BitLen())
			if !slices.ContainsFunc(r.prefixes, func(q netip.Prefix) bool { return q.Contains(a) }) {
				r.prefixes = append(r.prefixes, p)
			}
			return
		}
		if s != "" && !slices.Contains(r.hosts, s) {
			r.hosts = append(r.hosts, s)
		}
	}
	// Rented servers of hosts entries: on their public addresses, reached
	// from here directly.
	for i, h := range cfg.Hosts {
		if !h.Servers() {
			continue
		}
		r := &route{servers: true, section: stacks.ProxmoxSection{
			Path: fmt.Sprintf("hosts[%d]", i), Host: h.Name, ProxmoxConfig: &stacks.ProxmoxConfig{Access: stacks.AccessDirect},
		}}
		for _, n := range cfg.Nodes.All() {
			if a, err := netip.ParseAddr(n.IP); err == nil && n.Host == h.Name {
				r.nodes = append(r.nodes, a.Unmap())
				addOne(r, n.IP)
			}
		}
		out = append(out, r)
	}
	// The VIP and the endpoint are the proxmox host's, as before hosts
	// existed, unless they are an address of another section.
	others := out[1:]
	for _, s := range []string{cfg.Cluster.VIP, cfg.EndpointHost()} {
		if a, err := netip.ParseAddr(s); err == nil && slices.ContainsFunc(others, func(r *route) bool { return r.covers(a.Unmap()) }) {
			continue
		}
		addOne(out[0], s)
	}
	for _, n := range nodes {
		addOne(out[index[cfg.SectionOf(n.Host).Path]], n.IP)
	}
	return out
}

// covers reports whether a is one of the section's nodes or in its
// network.
func (r *route) covers(a netip.Addr) bool {
	return slices.Contains(r.nodes, a) || slices.ContainsFunc(r.prefixes, func(p netip.Prefix) bool { return p.Contains(a) })
}

// tunnelled is what the tunnels carry, together.
func tunnelled(rs []*route) (prefixes []netip.Prefix, hosts []string) {
	for _, r := range rs {
		if !r.tunnel {
			continue
		}
		for _, p := range r.prefixes {
			if !slices.Contains(prefixes, p) {
				prefixes = append(prefixes, p)
			}
		}
		for _, h := range r.hosts {
			if !slices.Contains(hosts, h) {
				hosts = append(hosts, h)
			}
		}
	}
	return prefixes, hosts
}

// Destinations are what the proxy lets through: the VM network, the VIP and
// every node IP (as /32, should one lie outside the network), and the
// Kubernetes endpoint when it is a name. With hosts entries, those of every
// section whose access is ssh-proxy, each section's VM network and nodes;
// the VIP and the endpoint are the proxmox section's.
func Destinations(cfg *stacks.Config) (prefixes []netip.Prefix, hosts []string) {
	return tunnelled(routes(cfg))
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
// Proxmox API host of every section, the chart repositories, the fixed
// direct hosts, the backend's host, the VM networks and node IPs of the
// sections with access direct, and each section's noProxy. dropped lists
// the inherited entries left out.
func NoProxy(cfg *stacks.Config, getenv func(string) string) (entries, dropped []string) {
	return noProxy(getenv, routes(cfg))
}

func noProxy(getenv func(string) string, rs []*route) (entries, dropped []string) {
	prefixes, hosts := tunnelled(rs)
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
	for _, r := range rs {
		add(r.section.EndpointHost())
	}
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
	// The VMs of the sections this machine reaches itself (access direct);
	// a gone host's stay with the proxy, which refuses them at once.
	for _, r := range rs {
		if r.tunnel || r.gone {
			continue
		}
		for _, e := range directEntries(r, prefixes) {
			add(e)
		}
		for _, h := range r.hosts {
			if !slices.Contains(hosts, h) {
				add(h)
			}
		}
	}
	for _, r := range rs {
		for _, h := range r.section.NoProxy {
			add(h)
		}
	}
	return entries, dropped
}

// directEntries are the NO_PROXY entries of a section reached directly:
// its network and addresses, each one unless it overlaps what a tunnel
// carries (hosts sharing a network), where its nodes' IPs alone go.
func directEntries(r *route, tunnelled []netip.Prefix) []string {
	var out []string
	overlaps := false
	for _, p := range r.prefixes {
		if slices.ContainsFunc(tunnelled, p.Overlaps) {
			overlaps = true
			continue
		}
		out = append(out, noProxyEntry(p))
	}
	if overlaps {
		for _, a := range r.nodes {
			if e := a.String(); !slices.Contains(out, e) && !slices.ContainsFunc(r.prefixes, func(p netip.Prefix) bool { return !slices.ContainsFunc(tunnelled, p.Overlaps) && p.Contains(a) }) {
				out = append(out, e)
			}
		}
	}
	return out
}

// noProxyEntry is a prefix as NO_PROXY lists it: a single address as an
// IP, a network as a CIDR.
func noProxyEntry(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
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
	// Dial opens the SSH connection to a section's host; default: the
	// section's ssh settings with the key, key file or SSH agent.
	Dial SectionDialer
	// Getenv reads SSH_AUTH_SOCK, NO_PROXY and PULUMI_BACKEND_URL
	// (default os.Getenv).
	Getenv func(string) string
	// Log receives the proxy's lines (refusals, reconnects); default none.
	Log func(format string, args ...any)
}

// SectionDialer opens the SSH connection to a Proxmox section's host;
// called again after it drops.
type SectionDialer func(ctx context.Context, section stacks.ProxmoxSection) (*ssh.Client, error)

// Session is a running proxy.
type Session struct {
	// URL is the proxy's address for HTTPS_PROXY, http://127.0.0.1:PORT.
	URL string
	// NoProxy is the NO_PROXY list, comma-separated.
	NoProxy string
	// Dropped are the inherited NO_PROXY entries left out.
	Dropped []string
	// Target is user@host:port of the SSH connection, for messages; with
	// several, each followed by its section, comma-separated.
	Target string
	// Allowed lists what goes through (networks and names), for messages.
	Allowed []string
	// Tunnels are the SSH connections, one per section with access
	// ssh-proxy, proxmox first; Direct the sections reached directly.
	Tunnels, Direct []Reach

	router *router
	srv    *http.Server
	done   chan struct{}
}

// Reach is how a session reaches one Proxmox section's VMs.
type Reach struct {
	// Section is its key, proxmox or hosts[i].proxmox; Host the hosts
	// entry's name ("" for proxmox).
	Section, Host string
	// Target is user@host:port of its SSH connection ("" when reached
	// directly).
	Target string
	// Destinations are its VM network, addresses and names.
	Destinations []string
}

// ErrNotLoopback refuses a listen address other hosts could reach.
var ErrNotLoopback = errors.New("the proxy must listen on a loopback address (127.0.0.1 or ::1): anyone who can connect to it reaches the VM network")

// Start opens the SSH connection of every section with access ssh-proxy
// (so a wrong key fails here, not in the middle of an update) and serves
// the proxy until Close or ctx ends. Each CONNECT goes through the SSH
// connection of the section whose VMs it reaches (see routes); a stack
// without a section of access ssh-proxy (`stackctl proxy` asked for
// anyway) has every section tunnelled.
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
	rs := routes(cfg)
	prefixes, hosts := tunnelled(rs)
	noProxyList, dropped := noProxy(o.Getenv, rs)
	rt := &router{log: o.Log, hint: "only the VM network goes through the Proxmox host; a host that must be reached directly belongs in proxmox.noProxy"}
	s := &Session{NoProxy: strings.Join(noProxyList, ","), Dropped: dropped, router: rt, done: make(chan struct{})}
	for _, r := range rs {
		rt.ways = append(rt.ways, way{route: r})
		reach := Reach{Section: r.section.Path, Host: r.section.Host}
		for _, p := range r.prefixes {
			reach.Destinations = append(reach.Destinations, p.String())
		}
		reach.Destinations = append(reach.Destinations, r.hosts...)
		if r.gone {
			continue
		}
		if !r.tunnel {
			s.Direct = append(s.Direct, reach)
			continue
		}
		reach.Target = sshTarget(r.section.SSH)
		s.Tunnels = append(s.Tunnels, reach)
		section := r.section
		dial := func(ctx context.Context) (*ssh.Client, error) {
			return DialSection(ctx, section.SSH, section.Path+".ssh", o.Getenv)
		}
		if o.Dial != nil {
			dial = func(ctx context.Context) (*ssh.Client, error) { return o.Dial(ctx, section) }
		}
		rt.ways[len(rt.ways)-1].proxy = &Proxy{Allowed: r.prefixes, AllowedHosts: r.hosts, Dial: dial, Log: o.Log}
	}
	several := len(rs) > 1
	var targets []string
	for i, w := range rt.tunnels() {
		if several {
			w.proxy.Name = w.label()
			targets = append(targets, fmt.Sprintf("%s (%s)", s.Tunnels[i].Target, w.label()))
		} else {
			targets = append(targets, s.Tunnels[i].Target)
		}
	}
	s.Target = strings.Join(targets, ", ")
	if several {
		rt.hint = "only the VM networks of the Proxmox sections with access ssh-proxy go through their hosts; a host that must be reached directly belongs in their noProxy"
	}
	for _, pr := range prefixes {
		s.Allowed = append(s.Allowed, pr.String())
	}
	s.Allowed = append(s.Allowed, hosts...)
	err = rt.connect(ctx, func(w way) string {
		if several {
			return fmt.Sprintf("%s, %s.ssh", sshTarget(w.section.SSH), w.section.Path)
		}
		return s.Target
	})
	if err != nil {
		_ = rt.close()
		return nil, err
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", o.Listen)
	if err != nil {
		_ = rt.close()
		return nil, fmt.Errorf("unable to start the ssh-proxy: %w", err)
	}
	s.URL = "http://" + l.Addr().String()
	s.srv = &http.Server{Handler: rt, ReadHeaderTimeout: 30 * time.Second}
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

// sshTarget is user@host:port of an SSH connection, for messages.
func sshTarget(c stacks.SSHConfig) string {
	return fmt.Sprintf("%s@%s", c.User, net.JoinHostPort(c.Host, fmt.Sprint(c.Port)))
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

// Close stops serving and closes the SSH connections, which ends every
// open tunnel.
func (s *Session) Close() error {
	err := s.srv.Close()
	if cerr := s.router.close(); err == nil {
		err = cerr
	}
	<-s.done
	return err
}

// DialContext opens a TCP connection to addr (host:port in a VM network)
// through the SSH connection of the section that reaches it, as the proxy
// does for a CONNECT: a process's own clients (stackctl backup's Talos API
// client) use it where they cannot take the proxy from the environment.
func (s *Session) DialContext(ctx context.Context, _, addr string) (net.Conn, error) {
	return s.router.dial(ctx, addr)
}
