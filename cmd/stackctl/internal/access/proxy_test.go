package access_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/access"
	"github.com/fluodata/talos-pulumi/internal/testkit/sshtest"
)

func newSSHServer(t *testing.T) *sshtest.Server {
	return sshtest.New(t, sshtest.Options{Password: "pw", Routes: map[string]string{}})
}

func startProxy(t *testing.T, s *sshtest.Server, dials *atomic.Int32) string {
	t.Helper()
	p := &access.Proxy{
		Allowed:      []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		AllowedHosts: []string{"localhost"},
		Dial: func(ctx context.Context) (*ssh.Client, error) {
			dials.Add(1)
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", s.Addr())
			if err != nil {
				return nil, err
			}
			conn, chans, reqs, err := ssh.NewClientConn(c, s.Addr(), &ssh.ClientConfig{
				User: "root", Auth: []ssh.AuthMethod{ssh.Password("pw")},
				HostKeyCallback: ssh.InsecureIgnoreHostKey(), //nolint:gosec // loopback test server
			})
			if err != nil {
				return nil, err
			}
			return ssh.NewClient(conn, chans, reqs), nil
		},
	}
	srv := httptest.NewServer(p)
	t.Cleanup(func() { srv.Close(); _ = p.Close() })
	return srv.URL
}

func TestTunnelsThroughSSHAndSurvivesADroppedConnection(t *testing.T) {
	t.Parallel()
	s := newSSHServer(t)
	var dials atomic.Int32
	proxyURL := startProxy(t, s, &dials)
	target := sshtest.Echo(t)

	code, c := sshtest.Connect(t, proxyURL, target)
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, "hello talos", sshtest.RoundTrip(t, c, "hello talos"))
	_ = c.Close()
	assert.Equal(t, 1, s.Forwarded(), "the bytes went through the SSH server")

	s.Kill() // the SSH connection drops (host reboot, network blip)
	code, c = sshtest.Connect(t, proxyURL, target)
	require.Equal(t, http.StatusOK, code, "the proxy reconnects")
	assert.Equal(t, "again", sshtest.RoundTrip(t, c, "again"))
	_ = c.Close()
	assert.Equal(t, int32(2), dials.Load(), "one new SSH connection")
}

func TestHTTPSClientThroughTheProxy(t *testing.T) {
	t.Parallel()
	s := newSSHServer(t)
	var dials atomic.Int32
	proxyURL := startProxy(t, s, &dials)
	node := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "kube-apiserver") }))
	defer node.Close()
	client := node.Client()
	tr := client.Transport.(*http.Transport).Clone()
	pu, _ := url.Parse(proxyURL)
	tr.Proxy = http.ProxyURL(pu) // what HTTPS_PROXY does
	client.Transport = tr
	resp, err := client.Get(node.URL)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, "kube-apiserver", string(body))
	assert.Equal(t, 1, s.Forwarded())
}

func TestRefusesDestinationsOutsideTheVMNetwork(t *testing.T) {
	t.Parallel()
	s := newSSHServer(t)
	var dials atomic.Int32
	proxyURL := startProxy(t, s, &dials)
	for _, target := range []string{"127.0.0.2:22", "192.0.2.1:443", "example.com:443", "[::1]:80", "localhost.evil:22"} {
		code, _ := sshtest.Connect(t, proxyURL, target)
		assert.Equal(t, http.StatusForbidden, code, target)
	}
	assert.Equal(t, 0, s.Forwarded(), "nothing refused reached SSH")
	resp, err := http.Get(proxyURL + "/")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, "only CONNECT")
}

func TestAllowedHostNameIsDialledByName(t *testing.T) {
	t.Parallel()
	s := newSSHServer(t)
	var dials atomic.Int32
	proxyURL := startProxy(t, s, &dials)
	_, port, err := net.SplitHostPort(sshtest.Echo(t))
	require.NoError(t, err)
	code, c := sshtest.Connect(t, proxyURL, "LOCALHOST:"+port)
	require.Equal(t, http.StatusOK, code, "the cluster endpoint's name is allowed, in any case")
	assert.Equal(t, "by name", sshtest.RoundTrip(t, c, "by name"))
	_ = c.Close()
}
