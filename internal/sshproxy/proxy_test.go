package sshproxy_test

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/fluodata/talos-pulumi/internal/sshproxy"
)

// sshServer is an in-process SSH server that forwards direct-tcpip
// channels, like sshd on the Proxmox host. Kill drops every connection.
type sshServer struct {
	addr    string
	handled atomic.Int32
	mu      sync.Mutex
	conns   []net.Conn
}

func newSSHServer(t *testing.T) *sshServer {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	signer, err := ssh.NewSignerFromKey(key)
	require.NoError(t, err)
	cfg := &ssh.ServerConfig{PasswordCallback: func(_ ssh.ConnMetadata, pw []byte) (*ssh.Permissions, error) {
		if string(pw) != "pw" {
			return nil, fmt.Errorf("wrong password")
		}
		return nil, nil
	}}
	cfg.AddHostKey(signer)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	s := &sshServer{addr: l.Addr().String()}
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

func (s *sshServer) serve(c net.Conn, cfg *ssh.ServerConfig) {
	_, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "direct-tcpip" {
			_ = nc.Reject(ssh.UnknownChannelType, "only direct-tcpip")
			continue
		}
		extra := nc.ExtraData()
		hostLen := binary.BigEndian.Uint32(extra)
		host := string(extra[4 : 4+hostLen])
		port := binary.BigEndian.Uint32(extra[4+hostLen:])
		dst, err := net.Dial("tcp", net.JoinHostPort(host, fmt.Sprint(port)))
		if err != nil {
			_ = nc.Reject(ssh.ConnectionFailed, err.Error())
			continue
		}
		ch, chReqs, err := nc.Accept()
		if err != nil {
			_ = dst.Close()
			continue
		}
		s.handled.Add(1)
		go ssh.DiscardRequests(chReqs)
		go func() { _, _ = io.Copy(ch, dst); _ = ch.Close() }()
		go func() { _, _ = io.Copy(dst, ch); _ = dst.Close() }()
	}
}

func (s *sshServer) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.conns = nil
}

func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	return l.Addr().String()
}

func startProxy(t *testing.T, s *sshServer, dials *atomic.Int32) string {
	t.Helper()
	p := &sshproxy.Proxy{
		Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		Dial: func(ctx context.Context) (*ssh.Client, error) {
			dials.Add(1)
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", s.addr)
			if err != nil {
				return nil, err
			}
			conn, chans, reqs, err := ssh.NewClientConn(c, s.addr, &ssh.ClientConfig{
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

// connect opens a CONNECT tunnel like an HTTPS_PROXY client and returns the
// proxy's status code and the tunnel.
func connect(t *testing.T, proxyURL, target string) (int, net.Conn) {
	t.Helper()
	u, err := url.Parse(proxyURL)
	require.NoError(t, err)
	c, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	_, err = fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	require.NoError(t, err)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	require.NoError(t, err)
	_ = resp.Body.Close() // a CONNECT answer has no body; the tunnel follows
	if resp.StatusCode != http.StatusOK {
		_ = c.Close()
		return resp.StatusCode, nil
	}
	return resp.StatusCode, c
}

func echo(t *testing.T, c net.Conn, msg string) string {
	t.Helper()
	_, err := io.WriteString(c, msg)
	require.NoError(t, err)
	buf := make([]byte, len(msg))
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	return string(buf)
}

func TestTunnelsThroughSSHAndSurvivesADroppedConnection(t *testing.T) {
	t.Parallel()
	s := newSSHServer(t)
	var dials atomic.Int32
	proxyURL := startProxy(t, s, &dials)
	target := echoServer(t)

	code, c := connect(t, proxyURL, target)
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, "hello talos", echo(t, c, "hello talos"))
	_ = c.Close()
	assert.Equal(t, int32(1), s.handled.Load(), "the bytes went through the SSH server")

	s.kill() // the SSH connection drops (host reboot, network blip)
	code, c = connect(t, proxyURL, target)
	require.Equal(t, http.StatusOK, code, "the proxy reconnects")
	assert.Equal(t, "again", echo(t, c, "again"))
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
	assert.Equal(t, int32(1), s.handled.Load())
}

func TestRefusesDestinationsOutsideTheVMNetwork(t *testing.T) {
	t.Parallel()
	s := newSSHServer(t)
	var dials atomic.Int32
	proxyURL := startProxy(t, s, &dials)
	for _, target := range []string{"127.0.0.2:22", "192.0.2.1:443", "example.com:443", "[::1]:80"} {
		code, _ := connect(t, proxyURL, target)
		assert.Equal(t, http.StatusForbidden, code, target)
	}
	assert.Equal(t, int32(0), s.handled.Load(), "nothing refused reached SSH")
	resp, err := http.Get(proxyURL + "/")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, "only CONNECT")
}
