package sshtest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// The peers below stand in for what sits behind the Proxmox host (node
// ports, the Kubernetes API); tests reach them through Options.Routes.

// Listen serves every connection accepted on a loopback port with handle
// until the test ends, and returns the port's host:port.
func Listen(t testing.TB, handle func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer func() { _ = c.Close() }(); handle(c) }()
		}
	}()
	return l.Addr().String()
}

// Echo is a TCP echo server.
func Echo(t testing.TB) string {
	t.Helper()
	return Listen(t, func(c net.Conn) { _, _ = io.Copy(c, c) })
}

// APIServer is a TLS server answering every request with "kube-apiserver
// <path>", like a Kubernetes API on the VIP; it returns host:port.
func APIServer(t testing.TB) string {
	t.Helper()
	s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "kube-apiserver "+r.URL.Path)
	}))
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "https://")
}

// Connect asks the CONNECT proxy at proxyURL for a tunnel to target, as an
// HTTPS_PROXY client does, and returns the proxy's status and, for 200, the
// tunnel (closed when the test ends).
func Connect(t testing.TB, proxyURL, target string) (int, net.Conn) {
	t.Helper()
	u, err := url.Parse(proxyURL)
	must(t, err)
	c, err := net.Dial("tcp", u.Host)
	must(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	must(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	must(t, err)
	_ = resp.Body.Close() // a CONNECT answer has no body; the tunnel follows
	if resp.StatusCode != http.StatusOK {
		_ = c.Close()
		return resp.StatusCode, nil
	}
	return resp.StatusCode, c
}

// RoundTrip writes msg into c and reads as many bytes back (from Echo).
func RoundTrip(t testing.TB, c net.Conn, msg string) string {
	t.Helper()
	_, err := io.WriteString(c, msg)
	must(t, err)
	buf := make([]byte, len(msg))
	_, err = io.ReadFull(c, buf)
	must(t, err)
	return string(buf)
}
