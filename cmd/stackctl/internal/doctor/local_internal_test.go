package doctor

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/stacks"
)

// localEnv dials for real, with DOCKER_HOST as given.
func localEnv(dockerHost string) Env {
	var d net.Dialer
	return Env{
		Dial:    d.DialContext,
		Getenv:  func(k string) string { return map[string]string{"DOCKER_HOST": dockerHost}[k] },
		Timeout: 2 * time.Second,
	}
}

// pingServer answers /_ping on a Unix socket as dockerd does (moby's
// api/server/router/system: 200 "OK" with an Api-Version header).
func pingServer(t *testing.T, status int) string {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.Listen("unix", socket)
	require.NoError(t, err)
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/_ping" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Api-Version", "1.41")
		w.WriteHeader(status)
		_, _ = w.Write([]byte("OK"))
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return socket
}

func TestLocalChecksTheDockerDaemon(t *testing.T) {
	t.Parallel()
	cfg := &stacks.Config{Platform: stacks.PlatformLocal}
	ctx := context.Background()

	up := checkLocal(ctx, localEnv("unix://"+pingServer(t, http.StatusOK)), cfg, "local")[0]
	assert.Equal(t, OK, up.Level, up.Message)
	assert.Contains(t, up.Message, "API 1.41")

	failing := checkDocker(ctx, localEnv("unix://"+pingServer(t, http.StatusInternalServerError)))
	assert.Equal(t, Fail, failing.Level)

	none := checkDocker(ctx, localEnv("unix://"+filepath.Join(t.TempDir(), "none.sock")))
	assert.Equal(t, Fail, none.Level)
	assert.Contains(t, none.Message, "install Docker Engine")

	assert.Equal(t, Warn, checkDocker(ctx, localEnv("tcp://10.0.0.5:2375")).Level)
}

// The real daemon, where this machine runs one (make deps installs
// Debian's docker.io): the fake above answers as it does.
func TestLocalChecksTheRealDockerDaemon(t *testing.T) {
	t.Parallel()
	if c, err := net.Dial("unix", DefaultDockerSocket); err != nil {
		t.Skipf("SKIPPED: no Docker daemon runs at %s (%v)", DefaultDockerSocket, err)
	} else {
		_ = c.Close()
	}
	r := checkDocker(context.Background(), localEnv(""))
	require.Equal(t, OK, r.Level, r.Message)
	assert.Contains(t, r.Message, "API 1.")
}

func TestLocalChecksItsPorts(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = l.Close() }()
	taken := l.Addr().(*net.TCPAddr).Port
	cfg := &stacks.Config{Platform: stacks.PlatformLocal, Local: stacks.LocalConfig{KubernetesPort: taken, TalosPort: 1}}
	rs := checkLocal(context.Background(), localEnv("unix:///nonexistent"), cfg, "local")
	require.Len(t, rs, 3)
	assert.Equal(t, Warn, rs[1].Level)
	assert.True(t, strings.HasPrefix(rs[1].Message, "local.kubernetesPort: something listens on 127.0.0.1:"), rs[1].Message)
	assert.Equal(t, OK, rs[2].Level, rs[2].Message)
}
