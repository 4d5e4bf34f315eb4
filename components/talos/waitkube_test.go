package talos_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest"
	"github.com/fluodata/talos-pulumi/internal/pkitest"
)

// apiServer is a Kubernetes API stand-in that demands the client
// certificate and lists nodes, readyAfter(poll) of them Ready, as indented
// JSON (kubectl --raw and ?pretty output) or compact.
func apiServer(t *testing.T, p pkitest.PKI, readyAfter func(poll int) int, total int) string {
	t.Helper()
	var polls atomic.Int32
	return tlsAPIServer(t, p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/nodes" {
			http.NotFound(w, r)
			return
		}
		ready := readyAfter(int(polls.Add(1)))
		var items []string
		for i := range total {
			status := "False"
			if i < ready {
				status = "True"
			}
			items = append(items, fmt.Sprintf(`{"metadata": {"name": "node-%d"}, "status": {"conditions": [
        {"type": "MemoryPressure", "status": "False"},
        {"type": "Ready",
         "status": "%s", "reason": "KubeletReady"}]}}`, i, status))
		}
		_, _ = fmt.Fprintf(w, `{"kind": "NodeList", "items": [%s]}`, strings.Join(items, ",\n"))
	}))
}

// tlsAPIServer serves h on loopback over TLS with p's server certificate
// and, like kube-apiserver with Talos's PKI, demands a client certificate
// of p's CA.
func tlsAPIServer(t *testing.T, p pkitest.PKI, h http.Handler) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = serverTLS(t, p)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // rejected handshakes are part of the test
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

func serverTLS(t *testing.T, p pkitest.PKI) *tls.Config {
	t.Helper()
	cert, err := tls.X509KeyPair(p.ServerCert, p.ServerKey)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(p.CA))
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
}

// kubeconfig is laid out as Talos writes it.
func kubeconfig(server string, p pkitest.PKI) string {
	return string(kubeapitest.Kubeconfig(server, p.CA, p.ClientCert, p.ClientKey))
}

func runWaitNodes(t *testing.T, env ...string) (string, error) {
	t.Helper()
	return runKubeWait(t, append([]string{"WAIT_FOR=nodes"}, env...)...)
}

func runKubeWait(t *testing.T, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("sh", "-c", talos.KubeWaitScript)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "POLL_INTERVAL=0", "REPORT_INTERVAL=0"}, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestWaitNodesUntilEveryNodeIsReady(t *testing.T) {
	t.Parallel()
	p := pkitest.New(t, "127.0.0.1")
	url := apiServer(t, p, func(poll int) int { return poll - 1 }, 3) // one more node Ready per poll
	out, err := runWaitNodes(t, "KUBECONFIG_DATA="+kubeconfig(url, p), "NODE_COUNT=3", "WAIT_TIMEOUT=60")
	require.NoError(t, err, out)
	assert.Contains(t, out, "still waiting")
	assert.Contains(t, out, "2 of 3 nodes Ready")
	assert.Contains(t, out, "nodes-ready: all 3 nodes are Ready")
}

func TestWaitNodesTimesOutWithWhatToLookAt(t *testing.T) {
	t.Parallel()
	p := pkitest.New(t, "127.0.0.1")
	url := apiServer(t, p, func(int) int { return 1 }, 2)
	out, err := runWaitNodes(t, "KUBECONFIG_DATA="+kubeconfig(url, p), "NODE_COUNT=2", "WAIT_TIMEOUT=1")
	require.Error(t, err)
	assert.Contains(t, out, "timed out after 1s: 1 of 2 nodes Ready")
	assert.Contains(t, out, "kubectl -n kube-system get pods -l k8s-app=cilium")

	// A server the kubeconfig's CA does not vouch for never counts.
	other := pkitest.New(t, "127.0.0.1")
	out, err = runWaitNodes(t, "KUBECONFIG_DATA="+kubeconfig(url, other), "NODE_COUNT=1", "WAIT_TIMEOUT=1")
	require.Error(t, err)
	assert.Contains(t, out, "the API server did not answer")

	out, err = runWaitNodes(t, "KUBECONFIG_DATA=apiVersion: v1\nkind: Config\n", "NODE_COUNT=1")
	require.Error(t, err)
	assert.Contains(t, out, "the kubeconfig lacks a server, CA or client certificate")
}

// readyzServer answers /readyz as kube-apiserver does while it starts
// (refused connections are the listener not being there yet, which a test
// gets from an address nobody listens on): 503 with the failing checks
// for the first notReady polls, then 200 "ok". It counts the polls.
func readyzServer(t *testing.T, p pkitest.PKI, notReady int) (string, *atomic.Int32) {
	t.Helper()
	var polls atomic.Int32
	url := tlsAPIServer(t, p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		if int(polls.Add(1)) <= notReady {
			http.Error(w, "[-]etcd failed: reason withheld\nreadyz check failed", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	return url, &polls
}

func TestWaitAPIUntilReadyzAnswersOK(t *testing.T) {
	t.Parallel()
	p := pkitest.New(t, "127.0.0.1")
	url, polls := readyzServer(t, p, 4)
	out, err := runKubeWait(t, "WAIT_FOR=api", "KUBECONFIG_DATA="+kubeconfig(url, p), "WAIT_TIMEOUT=60", "API_STREAK=2")
	require.NoError(t, err, out)
	assert.Contains(t, out, "/readyz did not answer ok", "the 503s are reported while waiting")
	assert.Contains(t, out, "api-ready: the Kubernetes API at "+url+" is ready")
	assert.EqualValues(t, 6, polls.Load(), "4 answers of 503, then 2 of ok in a row")
}

// The API's address refuses connections for a while (no listener yet, as
// while the VIP is unassigned), then a server comes up there.
func TestWaitAPIWhileTheEndpointRefusesConnections(t *testing.T) {
	t.Parallel()
	p := pkitest.New(t, "127.0.0.1")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // refused until the server below starts

	cmd := exec.Command("sh", "-c", talos.KubeWaitScript)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "POLL_INTERVAL=0", "REPORT_INTERVAL=0", "WAIT_FOR=api", "API_STREAK=1",
		"WAIT_TIMEOUT=60", "KUBECONFIG_DATA=" + kubeconfig("https://"+addr, p)}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); _ = pw.Close() }()

	// The server comes up only after the script has met a refused connection
	// (curl: "Failed to connect ... Couldn't connect to server").
	lines := bufio.NewScanner(pr)
	var out strings.Builder
	for lines.Scan() && !strings.Contains(lines.Text(), "Failed to connect") {
		out.WriteString(lines.Text() + "\n")
	}
	require.Contains(t, lines.Text(), "still waiting", out.String())
	ln, err = net.Listen("tcp", addr)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	_ = srv.Listener.Close()
	srv.Listener = ln
	srv.TLS = serverTLS(t, p)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	for lines.Scan() {
		out.WriteString(lines.Text() + "\n")
	}
	require.NoError(t, <-done, out.String())
	assert.Contains(t, out.String(), "api-ready: the Kubernetes API at https://"+addr+" is ready")
}

func TestWaitAPITimesOutSayingWhatItWaitedFor(t *testing.T) {
	t.Parallel()
	p := pkitest.New(t, "127.0.0.1")
	url, _ := readyzServer(t, p, 1<<30)
	out, err := runKubeWait(t, "WAIT_FOR=api", "KUBECONFIG_DATA="+kubeconfig(url, p), "WAIT_TIMEOUT=1")
	require.Error(t, err)
	assert.Contains(t, out, "api-ready: timed out after 1s: /readyz did not answer ok")
	assert.Contains(t, out, "503")
	assert.Contains(t, out, "waited for the Kubernetes API at "+url+" (the cluster endpoint: the VIP or cluster.endpoint) to answer /readyz")
	assert.Contains(t, out, "talosctl -n <first control plane IP> services")

	// Without the kubeconfig's client certificate the API server refuses
	// the handshake: that is never ready.
	other := pkitest.New(t, "127.0.0.1")
	mixed := kubeconfig(url, p)
	mixed = strings.Replace(mixed, base64.StdEncoding.EncodeToString(p.ClientCert), base64.StdEncoding.EncodeToString(other.ClientCert), 1)
	mixed = strings.Replace(mixed, base64.StdEncoding.EncodeToString(p.ClientKey), base64.StdEncoding.EncodeToString(other.ClientKey), 1)
	out, err = runKubeWait(t, "WAIT_FOR=api", "KUBECONFIG_DATA="+mixed, "WAIT_TIMEOUT=1")
	require.Error(t, err, out)
	assert.Contains(t, out, "api-ready: timed out")

	out, err = runKubeWait(t, "WAIT_FOR=pods", "KUBECONFIG_DATA="+kubeconfig(url, p))
	require.Error(t, err)
	assert.Contains(t, out, "WAIT_FOR must be api or nodes")
}
