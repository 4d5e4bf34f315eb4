package access_test

import (
	"context"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/access"
	"github.com/fluodata/talos-pulumi/internal/testkit/sshtest"
	"github.com/fluodata/talos-pulumi/stacks"
)

// rescueKey is a rescue system's pinned host key (no warning).
const rescueKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJzbzgU1kskLi7H36Wq4kAjh/rmPo053Qwt7aZy3WMdA"

// withServers is threeHosts with edge replaced by hosts[1], hetzner, an
// entry of rented servers holding cp-2 (192.0.2.30) and worker-2
// (192.0.2.40) on their public addresses; office reached directly.
func withServers(a sshHost) stackKeys {
	k := threeHosts(a, a)
	office := firstHost(k)["proxmox"].(obj)
	office["access"] = stacks.AccessDirect
	k["hosts"].([]any)[1] = obj{
		"name":    "hetzner",
		"vps":     obj{"allowedCidrs": []any{"198.51.100.10/32"}},
		"network": obj{"gateway": "172.31.1.1", "prefixLength": 32},
	}
	rescue := func() obj { return obj{"password": "rescue-pw", "hostKey": rescueKey} }
	nodes := k["nodes"].(obj)
	nodes["controlPlanes"].([]any)[2] = obj{"name": "cp-2", "ip": "192.0.2.30", "host": "hetzner", "rescue": rescue()}
	nodes["workers"].([]any)[2] = obj{"name": "worker-2", "ip": "192.0.2.40", "host": "hetzner", "rescue": rescue()}
	return k
}

// loadServers is the stack of k with its credentials (the rescue
// passwords too) secret.
func loadServers(t *testing.T, k stackKeys) *stacks.Config {
	t.Helper()
	cfg, d := stacks.Load(k.source("proxmox", "hosts", "nodes"))
	require.NoError(t, d.Err())
	require.True(t, cfg.OnServers("hetzner"))
	return cfg
}

// The servers' nodes are no tunnel's: their addresses are in NO_PROXY,
// and the proxy refuses them, saying this machine reaches them itself.
func TestServersAreReachedDirectly(t *testing.T) {
	t.Parallel()
	echo := sshtest.Echo(t)
	a := newSSHHost(t, "127.0.0.1", map[string]string{"10.10.0.10:7": echo})
	cfg := loadServers(t, withServers(a))
	require.True(t, access.Enabled(cfg))
	assert.Equal(t, []stacks.ProxmoxSection{cfg.ProxmoxSections()[0]}, access.SSHProxySections(cfg))

	prefixes, hosts := access.Destinations(cfg)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.10.0.0/24")}, prefixes, "the servers are no destination of the proxy")
	assert.Equal(t, []string{"k8s.lab.example.com"}, hosts)

	entries, dropped := access.NoProxy(cfg, env(map[string]string{"NO_PROXY": "192.0.2.0/24"}))
	assert.Empty(t, dropped, "an inherited entry covering the servers is kept: they go direct")
	for _, want := range []string{"192.0.2.30", "192.0.2.40", "10.20.0.0/24", "192.0.2.0/24"} {
		assert.Contains(t, entries, want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var log logLines
	s, err := access.Start(ctx, cfg, access.Options{Getenv: env(nil), Log: log.logf})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.Len(t, s.Tunnels, 1)
	assert.Equal(t, "proxmox", s.Tunnels[0].Section)
	assert.Equal(t, []access.Reach{
		{Section: "hosts[0].proxmox", Host: "office", Destinations: []string{"10.20.0.0/24"}},
		{Section: "hosts[1]", Host: "hetzner", Destinations: []string{"192.0.2.30/32", "192.0.2.40/32"}},
	}, s.Direct)
	assert.NotContains(t, s.Allowed, "192.0.2.30/32")

	for _, target := range []string{"192.0.2.30:50000", "192.0.2.40:6443"} {
		code, _ := sshtest.Connect(t, s.URL, target)
		assert.Equal(t, http.StatusForbidden, code, target)
	}
	_, err = s.DialContext(ctx, "tcp", "192.0.2.40:50000")
	require.ErrorIs(t, err, access.ErrDirect)
	assert.ErrorContains(t, err, "192.0.2.40: destination is reached directly, not through the proxy: it is a rented server of host hetzner (hosts[1]), which this machine reaches itself on its public address (NO_PROXY lists it)")
	assert.NotContains(t, err.Error(), "access", "a server has no access key to set")
	assert.Contains(t, log.String(), "refused CONNECT 192.0.2.30:50000: 192.0.2.30: destination is reached directly")
	assert.Zero(t, a.Forwarded(), "nothing went through SSH")

	// The home VM still goes through its host.
	code, c := sshtest.Connect(t, s.URL, "10.10.0.10:7")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, "x", sshtest.RoundTrip(t, c, "x"))
	assert.Equal(t, 1, a.Forwarded())

	vars := s.Env()
	for _, target := range []string{"https://192.0.2.30:50000", "https://192.0.2.40:50000"} {
		assert.Nil(t, proxyFor(t, vars, target), "%s goes direct", target)
	}
	assert.NotNil(t, proxyFor(t, vars, "https://10.10.0.10:50000"))
	noProxy := strings.Split(s.NoProxy, ",")
	assert.Contains(t, noProxy, "192.0.2.30")
	assert.Contains(t, noProxy, "192.0.2.40")
}

// A server's address is its own even where a tunnelled network holds it:
// a node is reached as its entry says, whatever the prefixes.
func TestServersInsideATunnelledNetworkStayDirect(t *testing.T) {
	t.Parallel()
	echo := sshtest.Echo(t)
	a := newSSHHost(t, "127.0.0.1", map[string]string{"10.10.0.99:7": echo})
	k := withServers(a)
	// A server whose public address lies in the home network's range
	// (not valid for the component, but reachable).
	k["nodes"].(obj)["workers"].([]any)[2].(obj)["ip"] = "10.10.0.40"
	cfg, d := stacks.Load(k.source("proxmox", "hosts", "nodes"))
	require.NoError(t, d.Err())

	entries, _ := access.NoProxy(cfg, env(nil))
	assert.Contains(t, entries, "10.10.0.40", "the server alone, not the network it overlaps")
	assert.NotContains(t, entries, "10.10.0.0/24")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := access.Start(ctx, cfg, access.Options{Getenv: env(nil), Log: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	_, err = s.DialContext(ctx, "tcp", "10.10.0.40:50000")
	require.ErrorIs(t, err, access.ErrDirect)
	assert.ErrorContains(t, err, "rented server of host hetzner")
	code, c := sshtest.Connect(t, s.URL, "10.10.0.99:7")
	require.Equal(t, http.StatusOK, code, "another address of the network goes through its host")
	assert.Equal(t, "y", sshtest.RoundTrip(t, c, "y"))
}

// An endpoint that is a server's address (given, or by default the first
// control plane's) is the server's: reached directly, no tunnel's.
func TestServersEndpointIsNoTunnelsKnownBug(t *testing.T) {
	t.Parallel()
	a := sshHost{Server: &sshtest.Server{HostKey: mustSigner(t).PublicKey()}, Host: "127.0.0.1", Port: 2201, KeyFile: "/k"}
	k := withServers(a)
	k["cluster"].(obj)["endpoint"] = "192.0.2.30"
	prefixes, _ := access.Destinations(loadServers(t, k))
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.10.0.0/24")}, prefixes)
}
