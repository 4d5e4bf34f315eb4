package access_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http/httpproxy"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/access"
	"github.com/fluodata/talos-pulumi/internal/testkit/sshtest"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// homelab is the example stack (VMs on 10.10.0.0/24 behind the host,
// VIP 10.10.0.5) switched to the SSH proxy.
func homelab(t *testing.T) *stacks.Config {
	t.Helper()
	cfg, d := stacks.Load(stackstest.Example(t, "Pulumi.proxmox-homelab.yaml.example"))
	require.NoError(t, d.Err())
	cfg.Proxmox.Access = stacks.AccessSSHProxy
	return cfg
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// proxyFor answers, like Go's HTTPS_PROXY handling in the providers, which
// proxy a request to target would use under the session's environment.
func proxyFor(t *testing.T, vars map[string]string, target string) *url.URL {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	p, err := (&httpproxy.Config{HTTPSProxy: vars["HTTPS_PROXY"], NoProxy: vars["NO_PROXY"]}).ProxyFunc()(u)
	require.NoError(t, err)
	return p
}

func TestDestinationsAreTheVMNetworkVIPAndEndpoint(t *testing.T) {
	t.Parallel()
	cfg := homelab(t)
	prefixes, hosts := access.Destinations(cfg)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.10.0.0/24")}, prefixes, "VIP and nodes lie inside the network")
	assert.Empty(t, hosts)

	cfg.Cluster.Endpoint = "k8s.lab.example.com"
	cfg.Nodes.Workers[0].IP = "10.20.0.7" // not valid config, but must still be reachable
	prefixes, hosts = access.Destinations(cfg)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.10.0.0/24"), netip.MustParsePrefix("10.20.0.7/32")}, prefixes)
	assert.Equal(t, []string{"k8s.lab.example.com"}, hosts)
}

func TestNoProxySendsOnlyTheVMNetworkThroughTheProxy(t *testing.T) {
	t.Parallel()
	cfg := homelab(t)
	cfg.Cluster.Endpoint = "k8s.lab.example.com"
	cfg.Proxmox.NoProxy = []string{"charts.lan"}
	entries, dropped := access.NoProxy(cfg, env(map[string]string{
		"NO_PROXY":           "corp.example, 10.0.0.0/8,10.10.0.10,.example.com,*,intranet:8080",
		"no_proxy":           "lower.example,10.0.0.0/8",
		"PULUMI_BACKEND_URL": "https://pulumi.corp.example:8443",
		"GOPROXY":            "https://goproxy.corp.example,direct",
	}))
	assert.Equal(t, []string{"10.0.0.0/8", "10.10.0.10", ".example.com", "*"}, dropped,
		"inherited entries that would send VM traffic past the proxy are left out")
	for _, want := range []string{"corp.example", "intranet:8080", "192.168.122.70", "helm.cilium.io", "postfinance.github.io",
		"factory.talos.dev", "api.pulumi.com", "pulumi.corp.example", "charts.lan", "lower.example", "proxy.golang.org", "goproxy.corp.example"} {
		assert.Contains(t, entries, want)
	}

	vars := map[string]string{"HTTPS_PROXY": "http://127.0.0.1:7777", "NO_PROXY": strings.Join(entries, ",")}
	for _, target := range []string{"https://10.10.0.10:50000", "https://10.10.0.5:6443", "https://10.10.0.21:50000", "https://k8s.lab.example.com:6443"} {
		assert.NotNil(t, proxyFor(t, vars, target), "%s goes through the proxy", target)
	}
	for _, target := range []string{"https://192.168.122.70:8006/api2/json", "https://helm.cilium.io/index.yaml",
		"https://postfinance.github.io/kubelet-csr-approver/index.yaml", "https://factory.talos.dev/schematics",
		"https://api.pulumi.com/api/user", "https://objects.githubusercontent.com/x", "https://charts.lan/index.yaml",
		"https://bucket.s3.eu-west-1.amazonaws.com/"} {
		assert.Nil(t, proxyFor(t, vars, target), "%s goes direct", target)
	}
}

// fixture is a Proxmox host stand-in: an SSH server that knows the way to
// the VM network (routes to loopback listeners), and the stack pointing at it
// with a throwaway key file.
type fixture struct {
	cfg  *stacks.Config
	host *sshtest.Server
}

func newFixture(t *testing.T, routes map[string]string) fixture {
	t.Helper()
	_, pub, pemKey := sshtest.Key(t)
	host := sshtest.New(t, sshtest.Options{AuthorizedKey: pub, Routes: routes})
	keyFile := filepath.Join(t.TempDir(), "id_ed25519")
	require.NoError(t, os.WriteFile(keyFile, pemKey, 0o600))
	cfg := homelab(t)
	cfg.Proxmox.SSH = stacks.SSHConfig{Host: host.Host, Port: host.Port, User: "root", PrivateKeyFile: keyFile}
	return fixture{cfg: cfg, host: host}
}

func (f fixture) start(t *testing.T, ctx context.Context) *access.Session {
	t.Helper()
	s, err := access.Start(ctx, f.cfg, access.Options{Getenv: env(nil), Log: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// curl runs the real curl with the session's environment, as pulumi's
// child processes get it.
func curl(ctx context.Context, s *access.Session, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "curl", append([]string{"-sS", "--fail", "--max-time", "10"}, args...)...)
	cmd.Env = s.Environ(os.Environ())
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestClientsUsingHTTPSProxyReachTheVMNetworkThroughSSH(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed (installed by .ci/run)")
	}
	f := newFixture(t, map[string]string{
		"10.10.0.5:6443": sshtest.APIServer(t), // the VIP
		"10.10.0.10:7":   sshtest.Echo(t),      // a node's echo port
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := f.start(t, ctx)
	assert.True(t, strings.HasPrefix(s.URL, "http://127.0.0.1:"), s.URL)

	// curl (https_proxy) to the VIP.
	out, err := curl(ctx, s, "-k", "https://10.10.0.5:6443/version")
	require.NoError(t, err, out)
	assert.Equal(t, "kube-apiserver /version", out)

	// A Go client with Go's HTTPS_PROXY/NO_PROXY rules.
	vars := s.Env()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = func(r *http.Request) (*url.URL, error) {
		return (&httpproxy.Config{HTTPSProxy: vars["HTTPS_PROXY"], NoProxy: vars["NO_PROXY"]}).ProxyFunc()(r.URL)
	}
	tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the test server's certificate names 127.0.0.1
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://10.10.0.5:6443/readyz")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, "kube-apiserver /readyz", string(body))

	// A raw TCP tunnel (CONNECT) to the echo port.
	code, tunnel := sshtest.Connect(t, s.URL, "10.10.0.10:7")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ping", sshtest.RoundTrip(t, tunnel, "ping"))
	forwarded := f.host.Forwarded()
	assert.Equal(t, 3, forwarded, "each connection went through the SSH server")

	// Outside the VM network: refused by the proxy, never forwarded.
	for _, target := range []string{"https://10.20.0.1:443/", "https://192.168.122.70:22/", "https://127.0.0.2:22/"} {
		out, err = curl(ctx, s, "-k", "--proxy", s.URL, "--noproxy", "none.invalid", target) // at the proxy itself, past NO_PROXY
		require.Error(t, err, target)
		assert.Contains(t, out, "403", target)
	}
	assert.Equal(t, forwarded, f.host.Forwarded(), "refused destinations never reach SSH")

	// The SSH connection drops: the next request reconnects.
	f.host.Kill()
	out, err = curl(ctx, s, "-k", "https://10.10.0.5:6443/again")
	require.NoError(t, err, out)
	assert.Equal(t, "kube-apiserver /again", out)
	assert.Equal(t, 2, f.host.Logins(), "one new SSH connection after the drop")
}

func TestStartFailsFastAndClearly(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, err := access.Start(ctx, f.cfg, access.Options{Listen: "0.0.0.0:0", Getenv: env(nil)})
	require.ErrorIs(t, err, access.ErrNotLoopback)

	wrong := *f.cfg
	_, _, otherKey := sshtest.Key(t)
	wrong.Proxmox.SSH.PrivateKeyFile = filepath.Join(t.TempDir(), "other")
	require.NoError(t, os.WriteFile(wrong.Proxmox.SSH.PrivateKeyFile, otherKey, 0o600))
	_, err = access.Start(ctx, &wrong, access.Options{Getenv: env(nil)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unable to start the ssh-proxy (SSH to root@127.0.0.1:")
	assert.Contains(t, err.Error(), "unable to authenticate")

	noKey := *f.cfg
	noKey.Proxmox.SSH.PrivateKeyFile = ""
	_, err = access.Start(ctx, &noKey, access.Options{Getenv: env(nil)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no SSH agent (SSH_AUTH_SOCK)")
}

func TestSessionEndsWithItsContext(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := access.Start(ctx, f.cfg, access.Options{Getenv: env(nil)})
	require.NoError(t, err)
	cancel()
	u, _ := url.Parse(s.URL)
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", u.Host, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return errors.Is(err, syscallECONNREFUSED()) || (err != nil && strings.Contains(err.Error(), "refused"))
	}, 5*time.Second, 20*time.Millisecond, "the listener is closed")
	require.NoError(t, s.Close(), "closing twice is fine")
}

func TestEnvironReplacesInheritedProxyVariables(t *testing.T) {
	t.Parallel()
	s := &access.Session{URL: "http://127.0.0.1:1", NoProxy: "a,b"}
	got := s.Environ([]string{"PATH=/bin", "https_proxy=http://corp:3128", "NO_PROXY=x", "HTTP_PROXY=http://corp:3128"})
	assert.Equal(t, []string{"PATH=/bin", "HTTP_PROXY=http://corp:3128",
		"HTTPS_PROXY=http://127.0.0.1:1", "https_proxy=http://127.0.0.1:1", "NO_PROXY=a,b", "no_proxy=a,b"}, got)
}

func syscallECONNREFUSED() error { return syscall.ECONNREFUSED }
