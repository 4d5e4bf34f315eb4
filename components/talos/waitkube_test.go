package talos_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest"
	"github.com/fluodata/talos-pulumi/internal/rollout"
	"github.com/fluodata/talos-pulumi/internal/testkit/pkitest"
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
// and, like kube-apiserver with Talos's PKI, answers 401 to a request
// without a client certificate of p's CA (the handshake itself takes any
// certificate, as the real API server's does: the agreement test of
// internal/kubeapi against the real one shows it).
func tlsAPIServer(t *testing.T, p pkitest.PKI, h http.Handler) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(clientCertOf(t, p, h))
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
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12}
}

// clientCertOf is kube-apiserver's x509 authenticator: a request whose
// client certificate p's CA did not issue is answered 401, with the
// Status object the API server sends.
func clientCertOf(t *testing.T, p pkitest.PKI, h http.Handler) http.Handler {
	t.Helper()
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(p.CA))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			unauthorized(w)
			return
		}
		if _, err := r.TLS.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			unauthorized(w)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`)
}

// kubeconfig is laid out as Talos writes it.
func kubeconfig(server string, p pkitest.PKI) string {
	return string(kubeapitest.Kubeconfig(server, p.CA, p.ClientCert, p.ClientKey))
}

// said records what a hook says, with the time of each message.
type said struct {
	mu     sync.Mutex
	status []string
	info   []string
	at     []time.Time
}

func (s *said) Status(msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.at = append(s.status, msg), append(s.at, time.Now())
}

func (s *said) Info(msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.info = append(s.info, msg)
}

func (s *said) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(append(append([]string{}, s.status...), s.info...), "\n")
}

// waitTiming polls at once and reports every 50 ms, so that a test sees the
// reports a real run makes every 30 s.
var waitTiming = rollout.Timing{Poll: 5 * time.Millisecond, ProgressEvery: 50 * time.Millisecond}

// kubeWaitHook builds a one-node cluster under mocks and returns the hook
// its waits run in, as the engine calls it before their create, and what
// it says.
func kubeWaitHook(t *testing.T, ctx context.Context) (func(env map[string]string) error, *said) {
	t.Helper()
	hooks, log := &componentstest.Hooks{}, &said{}
	err := pulumi.RunErr(func(pctx *pulumi.Context) error {
		_, err := talos.NewClusterWithDeps(pctx, "lab", &talos.ClusterArgs{
			Cluster:        talos.ClusterSettings{Name: "lab", Endpoint: "https://10.0.0.5:6443", TalosVersion: "v1.12.4"},
			InstallerImage: pulumi.String("factory.talos.dev/metal-installer/abc:v1.12.4"),
			Nodes:          nodes(1, 0),
		}, talos.Deps{Hooks: hooks, Timing: waitTiming, Context: ctx,
			Log: func(*pulumi.Context, pulumi.URN) talos.Logger { return log }})
		return err
	}, pulumi.WithMocks("talos-cluster", "test", &componentstest.Engine{}))
	require.NoError(t, err)
	fn := hooks.Hook("lab" + talos.KubeWaitHookSuffix)
	require.NotNil(t, fn)
	return func(env map[string]string) error {
		vars := resource.PropertyMap{}
		for k, v := range env {
			vars[resource.PropertyKey(k)] = resource.NewStringProperty(v)
		}
		if kc, ok := vars["KUBECONFIG_DATA"]; ok {
			vars["KUBECONFIG_DATA"] = resource.MakeSecret(kc) // as the engine passes it
		}
		return fn(&pulumi.ResourceHookArgs{Name: "lab-api-ready", NewInputs: resource.PropertyMap{"environment": resource.NewObjectProperty(vars)}})
	}, log
}

func TestWaitNodesUntilEveryNodeIsReady(t *testing.T) {
	t.Parallel()
	p := pkitest.New(t, "127.0.0.1")
	url := apiServer(t, p, func(poll int) int { return (poll - 1) / 10 }, 3) // one more node Ready every 10 polls
	wait, log := kubeWaitHook(t, t.Context())
	require.NoError(t, wait(map[string]string{"WAIT_FOR": "nodes", "KUBECONFIG_DATA": kubeconfig(url, p), "NODE_COUNT": "3", "WAIT_TIMEOUT": "60"}))
	out := log.String()
	assert.Contains(t, out, "waiting up to 1m0s for 3 nodes to be Ready")
	assert.Regexp(t, `last seen: [0-2] of 3 nodes Ready, not Ready: (node-0, )?(node-1, )?node-2`, out, "the reports say what the wait saw last, naming the nodes not Ready")
	assert.Contains(t, log.info, "all 3 nodes are Ready after 0s")
}

func TestWaitNodesTimesOutWithWhatToLookAt(t *testing.T) {
	t.Parallel()
	p := pkitest.New(t, "127.0.0.1")
	url := apiServer(t, p, func(int) int { return 1 }, 2)
	wait, _ := kubeWaitHook(t, t.Context())
	err := wait(map[string]string{"WAIT_FOR": "nodes", "KUBECONFIG_DATA": kubeconfig(url, p), "NODE_COUNT": "2", "WAIT_TIMEOUT": "1"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "timed out after 1s, last: 1 of 2 nodes Ready, not Ready: node-1")
	assert.Contains(t, err.Error(), "kubectl -n kube-system get pods -l k8s-app=cilium")
	assert.Contains(t, err.Error(), "run 'pulumi up' again: it goes on waiting")

	// A server the kubeconfig's CA does not vouch for never counts.
	other := pkitest.New(t, "127.0.0.1")
	err = wait(map[string]string{"WAIT_FOR": "nodes", "KUBECONFIG_DATA": kubeconfig(url, other), "NODE_COUNT": "1", "WAIT_TIMEOUT": "1"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "certificate signed by unknown authority")

	err = wait(map[string]string{"WAIT_FOR": "nodes", "KUBECONFIG_DATA": "apiVersion: v1\nkind: Config\n", "NODE_COUNT": "1"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unable to ask the Kubernetes API")
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
	url, polls := readyzServer(t, p, 20)
	wait, log := kubeWaitHook(t, t.Context())
	require.NoError(t, wait(map[string]string{"WAIT_FOR": "api", "KUBECONFIG_DATA": kubeconfig(url, p), "WAIT_TIMEOUT": "60"}))
	assert.Contains(t, log.String(), "/readyz did not answer ok", "the 503s are reported while waiting")
	assert.Contains(t, log.String(), "readyz check failed", "with the API server's words")
	assert.Contains(t, log.info, "the Kubernetes API at "+url+" is ready after 0s")
	assert.EqualValues(t, 23, polls.Load(), "20 answers of 503, then 3 of ok in a row")
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

	wait, log := kubeWaitHook(t, t.Context())
	done := make(chan error, 1)
	go func() {
		done <- wait(map[string]string{"WAIT_FOR": "api", "KUBECONFIG_DATA": kubeconfig("https://"+addr, p), "WAIT_TIMEOUT": "60"})
	}()
	// The server comes up only after the wait has reported a refused
	// connection.
	require.Eventually(t, func() bool { return strings.Contains(log.String(), "connection refused") }, 10*time.Second, 10*time.Millisecond)
	ln, err = net.Listen("tcp", addr)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(clientCertOf(t, p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})))
	_ = srv.Listener.Close()
	srv.Listener = ln
	srv.TLS = serverTLS(t, p)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	require.NoError(t, <-done, log.String())
	assert.Contains(t, log.info, "the Kubernetes API at https://"+addr+" is ready after 0s")
}

func TestWaitAPITimesOutSayingWhatItWaitedFor(t *testing.T) {
	t.Parallel()
	p := pkitest.New(t, "127.0.0.1")
	url, _ := readyzServer(t, p, 1<<30)
	wait, _ := kubeWaitHook(t, t.Context())
	err := wait(map[string]string{"WAIT_FOR": "api", "KUBECONFIG_DATA": kubeconfig(url, p), "WAIT_TIMEOUT": "1"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unable to wait for the Kubernetes API at "+url+" to answer /readyz: timed out after 1s, last: /readyz did not answer ok")
	assert.Contains(t, err.Error(), "503")
	assert.Contains(t, err.Error(), "talosctl -n <first control plane IP> services")

	// A client certificate of another CA is refused (401) as the real API
	// server refuses it: waiting would not change that, the wait stops at
	// once, saying why.
	other := pkitest.New(t, "127.0.0.1")
	mixed := kubeconfig(url, p)
	mixed = strings.Replace(mixed, base64.StdEncoding.EncodeToString(p.ClientCert), base64.StdEncoding.EncodeToString(other.ClientCert), 1)
	mixed = strings.Replace(mixed, base64.StdEncoding.EncodeToString(p.ClientKey), base64.StdEncoding.EncodeToString(other.ClientKey), 1)
	start := time.Now()
	err = wait(map[string]string{"WAIT_FOR": "api", "KUBECONFIG_DATA": mixed, "WAIT_TIMEOUT": "60"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "does not take the kubeconfig's client certificate")
	assert.Less(t, time.Since(start), 10*time.Second, "at once, not after the wait's timeout")

	err = wait(map[string]string{"WAIT_FOR": "pods", "KUBECONFIG_DATA": kubeconfig(url, p)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "WAIT_FOR must be api, nodes or pools")
}

// A wait reports at least every ProgressEvery (30 s in a real run) while it
// lasts, and stops at once, saying so, when the run is cancelled (Ctrl-C).
func TestKubeWaitReportsOnItsClockAndStopsWhenCancelled(t *testing.T) {
	t.Parallel()
	p := pkitest.New(t, "127.0.0.1")
	url, _ := readyzServer(t, p, 1<<30)
	ctx, cancel := context.WithCancel(t.Context())
	wait, log := kubeWaitHook(t, ctx)
	done := make(chan error, 1)
	go func() {
		done <- wait(map[string]string{"WAIT_FOR": "api", "KUBECONFIG_DATA": kubeconfig(url, p), "WAIT_TIMEOUT": "600"})
	}()
	time.Sleep(20 * waitTiming.ProgressEvery)
	cancel()
	start := time.Now()
	err := <-done
	assert.Less(t, time.Since(start), 2*time.Second, "a cancelled wait stops at once")
	require.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), "the run was cancelled after")
	assert.NotContains(t, err.Error(), "pulumi up' again", "a cancelled wait is not a failure to look into")

	log.mu.Lock()
	defer log.mu.Unlock()
	require.GreaterOrEqual(t, len(log.at), 10, "reports while it waited: %v", log.status)
	for i := 1; i < len(log.at); i++ {
		assert.Less(t, log.at[i].Sub(log.at[i-1]), 10*waitTiming.ProgressEvery, "no gap between reports much longer than the clock (the slack is for loaded cores)")
	}
	assert.Contains(t, log.status[len(log.status)-1], "last seen: /readyz did not answer ok")
}
