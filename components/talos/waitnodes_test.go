package talos_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"log"
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
	"github.com/fluodata/talos-pulumi/internal/pkitest"
)

// apiServer is a Kubernetes API stand-in that demands the client
// certificate and lists nodes, readyAfter(poll) of them Ready, as indented
// JSON (kubectl --raw and ?pretty output) or compact.
func apiServer(t *testing.T, p pkitest.PKI, readyAfter func(poll int) int, total int) string {
	t.Helper()
	cert, err := tls.X509KeyPair(p.ServerCert, p.ServerKey)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(p.CA))
	var polls atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // rejected handshakes are part of the test
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

// kubeconfig is laid out as Talos writes it.
func kubeconfig(server string, p pkitest.PKI) string {
	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
    - name: lab
      cluster:
        server: %s
        certificate-authority-data: %s
users:
    - name: admin@lab
      user:
        client-certificate-data: %s
        client-key-data: %s
contexts:
    - context:
        cluster: lab
        namespace: default
        user: admin@lab
      name: admin@lab
current-context: admin@lab
`, server, b64(p.CA), b64(p.ClientCert), b64(p.ClientKey))
}

func runWaitNodes(t *testing.T, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("sh", "-c", talos.WaitNodesScript)
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
