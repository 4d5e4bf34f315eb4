//go:build integration

package cli_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest"
	"github.com/fluodata/talos-pulumi/internal/testkit/pkitest"
)

// TestIntegrationTheWaitsRunInTheProgramWithTheRealCLI runs, with the real
// CLI and command plugin, the waits that moved from shell scripts into the
// program (issue 25): a command resource that runs no command, with the
// components' before-create hook. Against a loopback Kubernetes API that
// answers /readyz and a Talos port where nothing listens yet, the first
// `up` creates the API wait and fails on the node's wait, saying what to
// do; the node's wait is not in the state. Once the port answers TLS, the
// next `up` creates it, and a third run has nothing to do.
func TestIntegrationTheWaitsRunInTheProgramWithTheRealCLI(t *testing.T) {
	pulumiPath, err := exec.LookPath("pulumi")
	if err != nil {
		t.Skip("SKIPPED: the pulumi CLI is not on PATH, so the waits were not run by the real engine")
	}
	proj := newTestProject(t, pulumiPath, "waitit", "./cmd/stackctl/internal/cli/testdata/waitprogram")
	dir := proj.dir
	p := pkitest.New(t, "127.0.0.1")
	api := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		http.NotFound(w, r)
	}))
	cert, err := tls.X509KeyPair(p.ServerCert, p.ServerKey)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(p.CA))
	api.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	api.StartTLS()
	t.Cleanup(api.Close)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, kubeapitest.Kubeconfig(api.URL, p.CA, p.ClientCert, p.ClientKey), 0o600))

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close()) // refused: the node still boots its rescue system

	env := []string{"WAIT_KUBECONFIG_FILE=" + kubeconfig, "WAIT_TALOS_PORT=" + strconv.Itoa(port)}
	run := func(args ...string) (string, error) { return proj.run(env, args...) }
	_, err = run("stack", "init", "it")
	require.NoError(t, err)

	out, err := run("up", "--yes", "--stack", "it")
	require.Error(t, err, "the node's wait times out, and fails the up: %s", out)
	t.Logf("first up:\n%s", out)
	assert.Contains(t, out, "the Kubernetes API at "+api.URL+" is ready")
	assert.Contains(t, out, "node-0 (127.0.0.1) does not answer on port "+strconv.Itoa(port)+" within 3s")
	assert.Contains(t, out, "switch its boot to the disk")
	state, err := run("stack", "export", "--stack", "it")
	require.NoError(t, err)
	assert.Contains(t, state, "::it-api-ready")
	assert.NotContains(t, state, "::it-wait-node-0", "a failed wait is not created: the next up waits again")
	assert.NotContains(t, state, string(p.ClientKey), "the kubeconfig stays secret in the state")

	l, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	require.NoError(t, err)
	node := httptest.NewUnstartedServer(http.NotFoundHandler())
	node.Listener = l
	node.Config.ErrorLog = log.New(io.Discard, "", 0)
	node.StartTLS()
	t.Cleanup(node.Close)
	out, err = run("up", "--yes", "--stack", "it")
	require.NoError(t, err, out)
	t.Logf("second up:\n%s", out)
	assert.Contains(t, out, "node-0 answers on port "+strconv.Itoa(port))
	assert.NotContains(t, out, "is ready after", "the API wait ran once, in the first up")

	out, err = run("preview", "--expect-no-changes", "--stack", "it")
	require.NoError(t, err, "nothing to do after the waits: %s", out)
	assert.False(t, strings.Contains(out, "node-0 answers"), "no wait runs in a preview")
}
