package servers_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/servers"
	"github.com/fluodata/talos-pulumi/internal/rollout"
	"github.com/fluodata/talos-pulumi/internal/testkit/sshtest"
)

// said records what the wait says.
type said struct {
	mu           sync.Mutex
	status, info []string
}

func (s *said) Status(msg string) { s.mu.Lock(); s.status = append(s.status, msg); s.mu.Unlock() }
func (s *said) Info(msg string)   { s.mu.Lock(); s.info = append(s.info, msg); s.mu.Unlock() }

func (s *said) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(append(append([]string{}, s.status...), s.info...), "\n")
}

// fast polls every 5 ms and reports every 20 ms: a real run's 2 s and 30 s.
var fast = rollout.Timing{Poll: 5 * time.Millisecond, ProgressEvery: 20 * time.Millisecond}

// waitEnv is the environment of node-0's wait resource, for a port on loopback.
func waitEnv(port int, timeout string) map[string]string {
	env := servers.Wait{NodeName: "node-0", NodeIP: "127.0.0.1", TimeoutLabel: timeout + "s", Hint: "switch the boot mode"}.Env()
	env["TALOS_PORT"], env["WAIT_TIMEOUT"] = strconv.Itoa(port), timeout
	return env
}

func portOf(srv *httptest.Server) int { return srv.Listener.Addr().(*net.TCPAddr).Port }

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}

func TestWaitReturnsWhenTalosAnswers(t *testing.T) {
	t.Parallel()
	// Maintenance mode: TLS without client certificates.
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	log := &said{}
	require.NoError(t, servers.RunWait(t.Context(), log, waitEnv(portOf(srv), "30"), fast))
	assert.Contains(t, log.info, "switch the boot mode", "what the operator must do stays among the diagnostics")
	assert.Contains(t, log.String(), "node-0 answers on port "+strconv.Itoa(portOf(srv)))
}

// A configured node asks for a client certificate; that is Talos too.
func TestWaitAcceptsANodeThatWantsAClientCertificate(t *testing.T) {
	t.Parallel()
	for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		srv := httptest.NewUnstartedServer(http.NotFoundHandler())
		srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert, MinVersion: version, MaxVersion: version}
		srv.StartTLS()
		log := &said{}
		require.NoError(t, servers.RunWait(t.Context(), log, waitEnv(portOf(srv), "30"), fast), "TLS %x", version)
		assert.Contains(t, log.String(), "answers on port")
		srv.Close()
	}
}

// The node comes up while the wait waits (the reboot takes a while): the
// listener opens once the wait has reported the refused port.
func TestWaitKeepsWaitingUntilTheNodeBoots(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	log := &said{}
	done := make(chan error, 1)
	go func() { done <- servers.RunWait(t.Context(), log, waitEnv(port, "60"), fast) }()
	require.Eventually(t, func() bool { return strings.Contains(log.String(), "connection refused") }, 10*time.Second, 5*time.Millisecond)
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Listener = l
	srv.StartTLS()
	t.Cleanup(srv.Close)
	require.NoError(t, <-done, log.String())
	assert.Contains(t, log.String(), "waiting for the Talos API at 127.0.0.1:"+strconv.Itoa(port)+" to answer")
	assert.Contains(t, log.String(), "last seen: unable to connect", "each report says what the port did last")
	assert.Contains(t, log.String(), "switch the boot mode", "each report repeats what the operator must do")
	assert.Contains(t, log.String(), "answers on port")
}

func TestWaitTimesOutWithInstructions(t *testing.T) {
	t.Parallel()
	port := freePort(t) // nothing listens: a node still in rescue
	err := servers.RunWait(t.Context(), &said{}, waitEnv(port, "1"), fast)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "node-0 (127.0.0.1) does not answer on port "+strconv.Itoa(port)+" within 1s")
	assert.Contains(t, err.Error(), "connection refused")
	assert.Contains(t, err.Error(), "run 'pulumi up' again: it goes on waiting, the install is not repeated")
}

// A port that takes the connection and says nothing, or closes it, is not
// Talos (a rescue system's other service, a firewall's proxy).
func TestWaitDoesNotTakeAnyListenerForTalos(t *testing.T) {
	t.Parallel()
	addr := sshtest.Listen(t, func(c net.Conn) { _, _ = c.Write([]byte("SSH-2.0-OpenSSH_9.2\r\n")) })
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	// 5 s, not 1: under -race on a loaded CI machine the first probe's
	// dial alone has outlasted a 1 s wait (seen once), leaving no answer
	// to report.
	err = servers.RunWait(t.Context(), &said{}, waitEnv(p, "5"), fast)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "took the connection, then")
}

func TestWaitStopsWhenTheRunIsCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- servers.RunWait(ctx, &said{}, waitEnv(freePort(t), "600"), fast) }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
		assert.Contains(t, err.Error(), "the run was cancelled")
		assert.NotContains(t, err.Error(), "pulumi up' again")
	case <-time.After(5 * time.Second):
		t.Fatal("the wait went on after the run was cancelled")
	}
}
