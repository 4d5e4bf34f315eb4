package access_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/access"
	"github.com/fluodata/talos-pulumi/internal/testkit/sshtest"
	"github.com/fluodata/talos-pulumi/stacks"
)

// The stack-file fixture of these tests, in the form the engine hands the
// program (as stacks' own tests build it: proxmoxKeys, multiHostKeys).

type stackKeys map[string]any

type obj = map[string]any

const project = "talos-cluster"

func (k stackKeys) source(secretKeys ...string) stacks.Source {
	src := stacks.Source{Project: project, Values: map[string]string{}}
	for key, v := range k {
		if s, ok := v.(string); ok {
			src.Values[project+":"+key] = s
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		src.Values[project+":"+key] = string(b)
	}
	for _, s := range secretKeys {
		src.SecretKeys = append(src.SecretKeys, project+":"+s)
	}
	return src
}

// sshHost is a Proxmox host stand-in (an SSH server that reaches its VMs
// through routes to loopback listeners) listening on one loopback address,
// and the key file that logs in to it.
type sshHost struct {
	*sshtest.Server
	// Host and Port are where it listens (Server's Host and Port are
	// 127.0.0.1's, behind the relay for another address).
	Host    string
	Port    int
	KeyFile string
}

func newSSHHost(t *testing.T, addr string, routes map[string]string) sshHost {
	t.Helper()
	_, pub, pemKey := sshtest.Key(t)
	srv := sshtest.New(t, sshtest.Options{AuthorizedKey: pub, Routes: routes})
	keyFile := filepath.Join(t.TempDir(), "id_ed25519")
	require.NoError(t, os.WriteFile(keyFile, pemKey, 0o600))
	h := sshHost{Server: srv, Host: srv.Host, Port: srv.Port, KeyFile: keyFile}
	if addr != srv.Host {
		h.Host, h.Port = relay(t, addr, srv.Addr())
	}
	return h
}

// relay listens on addr (a loopback address, port 0) and forwards every
// connection to to: an SSH server at another loopback address.
func relay(t *testing.T, addr, to string) (string, int) {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Skipf("no second loopback address %s here: %v", addr, err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", to)
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, up)
			mu.Unlock()
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	a := l.Addr().(*net.TCPAddr)
	return a.IP.String(), a.Port
}

func sshKeys(h sshHost) obj {
	return obj{"host": h.Host, "port": h.Port, "user": "root", "privateKeyFile": h.KeyFile,
		"hostKey": strings.TrimSpace(string(ssh.MarshalAuthorizedKey(h.HostKey)))}
}

// threeHosts is a stack over three Proxmox VE hosts on three networks
// (KubeSpan, no VIP, a DNS endpoint): proxmox (10.10.0.0/24) and office
// (10.20.0.0/24) behind their hosts' SSH (a, b), edge (10.30.0.0/24)
// reached directly.
func threeHosts(a, b sshHost) stackKeys {
	return stackKeys{
		"platform": "proxmox",
		"cluster": obj{
			"name": "lab", "talosVersion": "v1.12.4",
			"network":  obj{"gateway": "10.10.0.1"},
			"endpoint": "k8s.lab.example.com",
			"kubeSpan": obj{"enabled": true},
		},
		"nodes": obj{
			"controlPlanes": []any{
				obj{"name": "cp-0", "ip": "10.10.0.10", "vmId": 110},
				obj{"name": "cp-1", "ip": "10.20.0.10", "vmId": 110, "host": "office"},
				obj{"name": "cp-2", "ip": "10.30.0.10", "vmId": 110, "host": "edge"},
			},
			"workers": []any{
				obj{"name": "worker-0", "ip": "10.10.0.20", "vmId": 120},
				obj{"name": "worker-1", "ip": "10.20.0.20", "vmId": 120, "host": "office"},
				obj{"name": "worker-2", "ip": "10.30.0.20", "vmId": 120, "host": "edge"},
			},
		},
		"proxmox": obj{
			"endpoint": "https://192.168.122.70:8006/", "apiTokenId": "root@pam!pulumi",
			"apiTokenSecret": "6f1c2e0a-8b7d-4c3e-9f5a-1d2b3c4d5e6f",
			"access":         stacks.AccessSSHProxy, "localForward": true, "ssh": sshKeys(a),
		},
		"hosts": []any{
			obj{
				"name": "office",
				"proxmox": obj{
					"endpoint": "https://198.51.100.7:8006/", "apiTokenId": "root@pam!office",
					"apiTokenSecret": "0e9d8c7b-6a5f-4e3d-2c1b-0a9f8e7d6c5b",
					"access":         stacks.AccessSSHProxy, "localForward": true, "ssh": sshKeys(b),
				},
				"network": obj{"gateway": "10.20.0.1"},
			},
			obj{
				"name": "edge",
				"proxmox": obj{
					"endpoint": "https://203.0.113.9:8006/", "apiTokenId": "root@pam!edge",
					"apiTokenSecret": "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d",
					"dnsmasq":        obj{"enabled": false},
				},
				"network": obj{"gateway": "10.30.0.1"},
			},
		},
	}
}

// load is the stack of k, as the program loads it.
func load(t *testing.T, k stackKeys) *stacks.Config {
	t.Helper()
	cfg, d := stacks.Load(k.source("proxmox", "hosts"))
	require.NoError(t, d.Err())
	return cfg
}

func firstHost(k stackKeys) obj { return k["hosts"].([]any)[0].(obj) }

// logLines collects the proxy's log lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// Each host's nodes go through that host's SSH connection; a node of a
// host reached directly is refused by the proxy and goes direct
// (NO_PROXY); every connection is opened at start and comes back on its
// own after a drop.
func TestEachHostsNodesGoThroughThatHostsSSH(t *testing.T) {
	t.Parallel()
	echoA, echoB := sshtest.Echo(t), sshtest.Echo(t)
	a := newSSHHost(t, "127.0.0.1", map[string]string{
		"10.10.0.10:7": echoA, "k8s.lab.example.com:6443": sshtest.APIServer(t),
	})
	b := newSSHHost(t, "127.0.0.2", map[string]string{"10.20.0.10:7": echoB, "10.20.0.20:7": echoB})
	cfg := load(t, threeHosts(a, b))
	require.True(t, access.Enabled(cfg))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var log logLines
	s, err := access.Start(ctx, cfg, access.Options{Getenv: env(nil), Log: log.logf})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	assert.Equal(t, 1, a.Logins(), "proxmox's SSH connection is opened at start")
	assert.Equal(t, 1, b.Logins(), "office's SSH connection is opened at start")

	targetA := "root@127.0.0.1:" + strconv.Itoa(a.Port)
	targetB := "root@127.0.0.2:" + strconv.Itoa(b.Port)
	assert.Equal(t, targetA+" (proxmox), "+targetB+" (host office (hosts[0].proxmox))", s.Target)
	assert.Equal(t, []access.Reach{
		{Section: "proxmox", Target: targetA, Destinations: []string{"10.10.0.0/24", "k8s.lab.example.com"}},
		{Section: "hosts[0].proxmox", Host: "office", Target: targetB, Destinations: []string{"10.20.0.0/24"}},
	}, s.Tunnels)
	assert.Equal(t, []access.Reach{{Section: "hosts[1].proxmox", Host: "edge", Destinations: []string{"10.30.0.0/24"}}}, s.Direct)
	assert.Equal(t, []string{"10.10.0.0/24", "10.20.0.0/24", "k8s.lab.example.com"}, s.Allowed)

	// Host A's node through A's SSH, host B's through B's.
	code, c := sshtest.Connect(t, s.URL, "10.10.0.10:7")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, "to a", sshtest.RoundTrip(t, c, "to a"))
	assert.Equal(t, []int{1, 0}, []int{a.Forwarded(), b.Forwarded()}, "10.10.0.10 went through proxmox's host")

	code, c = sshtest.Connect(t, s.URL, "10.20.0.10:7")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, "to b", sshtest.RoundTrip(t, c, "to b"))
	assert.Equal(t, []int{1, 1}, []int{a.Forwarded(), b.Forwarded()}, "10.20.0.10 went through office's host")

	// The endpoint's name is the proxmox host's to resolve and reach.
	out, err := curl(ctx, s, "-k", "https://k8s.lab.example.com:6443/version")
	require.NoError(t, err, out)
	assert.Equal(t, "kube-apiserver /version", out)
	assert.Equal(t, []int{2, 1}, []int{a.Forwarded(), b.Forwarded()})

	// The process's own clients dial the same way.
	conn, err := s.DialContext(ctx, "tcp", "10.20.0.20:7")
	require.NoError(t, err)
	assert.Equal(t, "dialled", sshtest.RoundTrip(t, conn, "dialled"))
	_ = conn.Close()
	assert.Equal(t, []int{2, 2}, []int{a.Forwarded(), b.Forwarded()})

	// Host edge is reached directly: the proxy refuses its nodes, naming
	// its access; NO_PROXY sends them past the proxy.
	for _, target := range []string{"10.30.0.20:50000", "10.30.0.10:6443"} {
		code, _ = sshtest.Connect(t, s.URL, target)
		assert.Equal(t, http.StatusForbidden, code, target)
	}
	_, err = s.DialContext(ctx, "tcp", "10.30.0.20:50000")
	require.ErrorIs(t, err, access.ErrDirect)
	assert.ErrorContains(t, err, "10.30.0.20: destination is reached directly, not through the proxy: it is a VM destination of host edge (hosts[1].proxmox), whose hosts[1].proxmox.access is direct")
	assert.Contains(t, log.String(), "refused CONNECT 10.30.0.20:50000: 10.30.0.20: destination is reached directly")
	// Outside every section: refused as before.
	code, _ = sshtest.Connect(t, s.URL, "192.0.2.1:443")
	assert.Equal(t, http.StatusForbidden, code)
	_, err = s.DialContext(ctx, "tcp", "192.0.2.1:443")
	require.ErrorIs(t, err, access.ErrNotAllowed)
	assert.Equal(t, []int{2, 2}, []int{a.Forwarded(), b.Forwarded()}, "refused destinations never reach SSH")

	noProxy := strings.Split(s.NoProxy, ",")
	for _, want := range []string{"10.30.0.0/24", "192.168.122.70", "198.51.100.7", "203.0.113.9"} {
		assert.Contains(t, noProxy, want, "direct: edge's VM network and every section's API host")
	}
	vars := s.Env()
	for _, target := range []string{"https://10.10.0.10:50000", "https://10.20.0.20:50000", "https://k8s.lab.example.com:6443"} {
		assert.NotNil(t, proxyFor(t, vars, target), "%s goes through the proxy", target)
	}
	for _, target := range []string{"https://10.30.0.20:50000", "https://198.51.100.7:8006/api2/json", "https://203.0.113.9:8006/api2/json"} {
		assert.Nil(t, proxyFor(t, vars, target), "%s goes direct", target)
	}

	// Office's connection drops: the next request reconnects it alone.
	b.Kill()
	require.Eventually(t, func() bool {
		return strings.Contains(log.String(), "SSH connection to the Proxmox host of host office (hosts[0].proxmox) closed")
	},
		5*time.Second, 10*time.Millisecond, log.String())
	code, c = sshtest.Connect(t, s.URL, "10.20.0.10:7")
	require.Equal(t, http.StatusOK, code, "the proxy reconnects")
	assert.Equal(t, "again", sshtest.RoundTrip(t, c, "again"))
	assert.Equal(t, []int{1, 2}, []int{a.Logins(), b.Logins()}, "one new SSH connection, to office's host")
}

// A node goes through its own host's connection even where hosts share a
// network; an address of that network that is no node's goes through the
// first host's.
func TestHostsOnOneNetworkRouteEachNodeThroughItsHost(t *testing.T) {
	t.Parallel()
	echo := sshtest.Echo(t)
	a := newSSHHost(t, "127.0.0.1", map[string]string{"10.10.0.10:7": echo, "10.10.0.99:7": echo})
	b := newSSHHost(t, "127.0.0.2", map[string]string{"10.10.0.30:7": echo})
	k := threeHosts(a, b)
	k["hosts"] = k["hosts"].([]any)[:1]
	delete(firstHost(k), "network") // office shares the cluster's network
	k["nodes"] = obj{
		"controlPlanes": []any{obj{"name": "cp-0", "ip": "10.10.0.10", "vmId": 110}},
		"workers":       []any{obj{"name": "worker-0", "ip": "10.10.0.30", "vmId": 130, "host": "office"}},
	}
	cfg := load(t, k)
	prefixes, hosts := access.Destinations(cfg)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.10.0.0/24")}, prefixes)
	assert.Equal(t, []string{"k8s.lab.example.com"}, hosts)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := access.Start(ctx, cfg, access.Options{Getenv: env(nil), Log: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	for _, c := range []struct {
		target string
		want   []int
	}{{"10.10.0.30:7", []int{0, 1}}, {"10.10.0.10:7", []int{1, 1}}, {"10.10.0.99:7", []int{2, 1}}} {
		code, conn := sshtest.Connect(t, s.URL, c.target)
		require.Equal(t, http.StatusOK, code, c.target)
		assert.Equal(t, "x", sshtest.RoundTrip(t, conn, "x"))
		assert.Equal(t, c.want, []int{a.Forwarded(), b.Forwarded()}, c.target)
	}
}

// A wrong key, a missing key file or no credentials at all for a hosts
// entry fail the start, naming that entry's keys.
func TestStartNamesTheSectionWhoseSSHFails(t *testing.T) {
	t.Parallel()
	a := newSSHHost(t, "127.0.0.1", nil)
	b := newSSHHost(t, "127.0.0.2", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := func(edit func(ssh obj)) error {
		k := threeHosts(a, b)
		edit(firstHost(k)["proxmox"].(obj)["ssh"].(obj))
		s, err := access.Start(ctx, load(t, k), access.Options{Getenv: env(nil)})
		if err == nil {
			_ = s.Close()
		}
		return err
	}

	err := start(func(ssh obj) { ssh["privateKeyFile"] = a.KeyFile })
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unable to start the ssh-proxy (SSH to root@127.0.0.2:"+strconv.Itoa(b.Port)+", hosts[0].proxmox.ssh): ")
	assert.Contains(t, err.Error(), "unable to authenticate")

	err = start(func(ssh obj) { ssh["privateKeyFile"] = filepath.Join(t.TempDir(), "missing") })
	require.ErrorContains(t, err, "hosts[0].proxmox.ssh.privateKeyFile: open ")

	err = start(func(ssh obj) { delete(ssh, "privateKeyFile") })
	require.ErrorIs(t, err, access.ErrNoSSHCredentials)
	assert.ErrorContains(t, err, "no SSH agent (SSH_AUTH_SOCK) and no hosts[0].proxmox.ssh.privateKey(File)")

	err = start(func(ssh obj) { ssh["hostKey"] = line(a.HostKey) })
	var mismatch *access.HostKeyMismatchError
	require.ErrorAs(t, err, &mismatch)
	assert.ErrorContains(t, err, "but hosts[0].proxmox.ssh.hostKey pins "+ssh.FingerprintSHA256(a.HostKey))
}

// Which sections the proxy carries: those of access ssh-proxy; the others'
// VMs, and the endpoint's name with a direct proxmox section, go in
// NO_PROXY.
func TestDestinationsAreTheSSHProxySections(t *testing.T) {
	t.Parallel()
	// No SSH here: the hosts are never contacted.
	a := sshHost{Server: &sshtest.Server{HostKey: mustSigner(t).PublicKey()}, Host: "127.0.0.1", Port: 2201, KeyFile: "/k"}
	b := sshHost{Server: a.Server, Host: "127.0.0.2", Port: 2202, KeyFile: "/k"}

	k := threeHosts(a, b)
	k["proxmox"].(obj)["access"] = stacks.AccessDirect
	cfg := load(t, k)
	require.True(t, access.Enabled(cfg), "office has access ssh-proxy")
	assert.Equal(t, []stacks.ProxmoxSection{cfg.ProxmoxSections()[1]}, access.SSHProxySections(cfg))
	cfg.Nodes.Workers[1].IP = "10.40.0.7" // office's, outside its network (not valid config, but reachable)
	prefixes, hosts := access.Destinations(cfg)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.20.0.0/24"), netip.MustParsePrefix("10.40.0.7/32")}, prefixes)
	assert.Empty(t, hosts)
	entries, dropped := access.NoProxy(cfg, env(map[string]string{"NO_PROXY": "10.0.0.0/8,10.10.0.10"}))
	assert.Equal(t, []string{"10.0.0.0/8"}, dropped, "what would send office's VMs past the proxy")
	for _, want := range []string{"10.10.0.10", "10.10.0.0/24", "k8s.lab.example.com", "10.30.0.0/24", "192.168.122.70", "198.51.100.7", "203.0.113.9"} {
		assert.Contains(t, entries, want)
	}
	assert.NotContains(t, entries, "10.20.0.0/24")

	firstHost(k)["proxmox"].(obj)["access"] = stacks.AccessDirect
	assert.False(t, access.Enabled(load(t, k)), "no section has access ssh-proxy")
}

func mustSigner(t *testing.T) ssh.Signer {
	s, _, _ := sshtest.Key(t)
	return s
}

// A host lost for good (issue 48, item 7): its section has access
// ssh-proxy and its SSH is down, yet the proxy starts without dialling it,
// refuses its VMs at once (not in NO_PROXY, so nobody waits on them
// directly), and carries the other hosts as before.
func TestAGoneHostIsNeverDialled(t *testing.T) {
	t.Parallel()
	echo := sshtest.Echo(t)
	a := newSSHHost(t, "127.0.0.1", map[string]string{"10.10.0.10:7": echo})
	dead, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no second loopback address 127.0.0.2 here: %v", err)
	}
	b := sshHost{Server: a.Server, Host: "127.0.0.2", Port: dead.Addr().(*net.TCPAddr).Port, KeyFile: a.KeyFile}
	require.NoError(t, dead.Close()) // office's SSH is down: nothing listens
	k := threeHosts(a, b)
	firstHost(k)["gone"] = true
	cfg := load(t, k)
	require.True(t, access.Enabled(cfg), "proxmox has access ssh-proxy")
	assert.Equal(t, []stacks.ProxmoxSection{cfg.ProxmoxSections()[0]}, access.SSHProxySections(cfg))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var log logLines
	s, err := access.Start(ctx, cfg, access.Options{Getenv: env(nil), Log: log.logf})
	require.NoError(t, err, "office is not dialled")
	t.Cleanup(func() { _ = s.Close() })
	assert.Equal(t, []access.Reach{{Section: "proxmox", Target: "root@127.0.0.1:" + strconv.Itoa(a.Port), Destinations: []string{"10.10.0.0/24", "k8s.lab.example.com"}}}, s.Tunnels)
	assert.Equal(t, []access.Reach{{Section: "hosts[1].proxmox", Host: "edge", Destinations: []string{"10.30.0.0/24"}}}, s.Direct)

	code, c := sshtest.Connect(t, s.URL, "10.10.0.10:7")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, "alive", sshtest.RoundTrip(t, c, "alive"))

	code, _ = sshtest.Connect(t, s.URL, "10.20.0.10:50000")
	assert.Equal(t, http.StatusForbidden, code)
	_, err = s.DialContext(ctx, "tcp", "10.20.0.20:50000")
	require.ErrorIs(t, err, access.ErrGone)
	assert.ErrorContains(t, err, "10.20.0.20: destination is on a host that is gone: it is a VM destination of host office (hosts[0].proxmox), which is lost for good (hosts[0].gone)")
	assert.NotContains(t, strings.Split(s.NoProxy, ","), "10.20.0.0/24", "office's VMs stay with the proxy, which refuses them")
	assert.Equal(t, 1, a.Logins())
}
