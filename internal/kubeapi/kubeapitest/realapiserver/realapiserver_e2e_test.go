//go:build e2e

package realapiserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recorder is the test's own TB but for what ends a test: Start's Fatalf
// and Skipf are recorded and end only the goroutine Start runs on, so that
// a test can look at how Start fails. Its Logf is recorded too.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	logs   []string
	failed string
}

func (r *recorder) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.failed = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }

func (r *recorder) Skipf(format string, args ...any) { r.Fatalf("skipped: "+format, args...) }

// A cancelled context stops the wait for the API server at once, and the
// API server with it; the wait says what it waits for while it lasts.
func TestStartStopsWhenItsContextIsCancelled(t *testing.T) {
	defer func(every time.Duration) { ReportEvery = every }(ReportEvery)
	ReportEvery = 50 * time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r := &recorder{TB: t}
	done := make(chan *Server)
	go func() {
		defer close(done)
		done <- Start(ctx, r, NewCA(t))
	}()
	// Cancelled once the wait for /readyz has said what it waits for: the
	// API server runs by then.
	require.Eventually(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.logs) > 0
	}, time.Minute, 10*time.Millisecond, "Start says what it waits for")
	cancel()
	cancelled := time.Now()
	if s := <-done; s != nil {
		t.Skipf("kube-apiserver was ready at %s before the cancellation", s.URL())
	}
	assert.Less(t, time.Since(cancelled), 5*time.Second, "Start stops within seconds of the cancellation, the API server stopped")
	r.mu.Lock()
	defer r.mu.Unlock()
	assert.Contains(t, r.logs[0], "realapiserver: waiting for kube-apiserver at https://127.0.0.1:")
	assert.Contains(t, r.logs[0], "to answer /readyz")
	assert.True(t, strings.HasPrefix(r.failed, "realapiserver: unable to start kube-apiserver: "), r.failed)
	assert.Contains(t, r.failed, "cancel")
}

// A started server answers its admin, takes no anonymous request and
// refuses another user the nodes: the set-up Talos gives a control plane.
func TestStartServesTheAdminAndRBAC(t *testing.T) {
	s := Start(t.Context(), t, NewCA(t))
	ctx := t.Context()
	code, body, err := s.Call(ctx, http.MethodGet, "/version", "", nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code, "%s", body)
	assert.Contains(t, string(body), `"gitVersion": "v1.`)
	code, body, err = s.Call(ctx, http.MethodGet, "/api/v1/namespaces/kube-system", "", nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code, "%s", body)

	// No client certificate (Talos's --anonymous-auth=false).
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(s.CA()))
	anonymous := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	defer anonymous.CloseIdleConnections()
	resp, err := anonymous.Get(s.URL() + "/version")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	// A user outside system:masters (Node,RBAC).
	cert, key := s.ca.ClientCert(t, "viewer", "developers")
	viewer := httpClient(t, s.CA(), cert, key)
	defer viewer.CloseIdleConnections()
	resp, err = viewer.Get(s.URL() + "/api/v1/nodes")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
}
