package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/access"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/exitcode"
	"github.com/fluodata/talos-pulumi/internal/cancelfile"
	"github.com/fluodata/talos-pulumi/internal/testkit/sshtest"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proxmoxStack is the example Proxmox stack's `pulumi config --json`, with
// its proxmox section changed by edit.
func proxmoxStack(t *testing.T, edit func(px map[string]any)) []byte {
	t.Helper()
	return stackstest.ConfigJSON(t, stackstest.EditSection(t, stackstest.Example(t, stackstest.ProxmoxExample), "proxmox", edit))
}

// behindHost is the example stack with proxmox.access: ssh-proxy and SSH to
// an in-process host that reaches the VIP's API server.
func behindHost(t *testing.T) (config []byte, host *sshtest.Server) {
	t.Helper()
	_, pub, pemKey := sshtest.Key(t)
	host = sshtest.New(t, sshtest.Options{AuthorizedKey: pub, Routes: map[string]string{"10.10.0.5:6443": sshtest.APIServer(t)}})
	keyFile := filepath.Join(t.TempDir(), "id_ed25519")
	require.NoError(t, os.WriteFile(keyFile, pemKey, 0o600))
	return proxmoxStack(t, func(px map[string]any) {
		px["access"] = stacks.AccessSSHProxy
		px["localForward"] = true // the test's SSH host listens on loopback
		px["ssh"] = map[string]any{"host": host.Host, "port": host.Port, "user": "root", "privateKeyFile": keyFile}
	}), host
}

func accessEnvFor(config []byte, readErr error) (accessEnv, *syncBuffer, *syncBuffer) {
	var out, errOut syncBuffer
	return accessEnv{
		ReadConfig: func(context.Context, string) ([]byte, error) { return config, readErr },
		Start: func(ctx context.Context, cfg *stacks.Config, o access.Options) (*access.Session, error) {
			o.Getenv = func(string) string { return "" } // no agent, no inherited NO_PROXY
			return access.Start(ctx, cfg, o)
		},
		Environ: []string{"PATH=" + os.Getenv("PATH"), "HTTPS_PROXY=http://corp.example:3128"},
		Stdin:   strings.NewReader(""), Stdout: &out, Stderr: &errOut,
	}, &out, &errOut
}

func TestExecRunsTheCommandThroughTheHelper(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed (installed by .ci/run)")
	}
	config, host := behindHost(t)
	e, out, errOut := accessEnvFor(config, nil)
	code := execCmd(context.Background(), []string{"--stack", "proxmox-homelab", "--",
		"sh", "-c", `echo "proxy=$HTTPS_PROXY"; curl -sSk --fail --max-time 10 https://10.10.0.5:6443/version`}, e)
	require.Equal(t, exitcode.OK, code, out.String()+errOut.String())
	assert.Contains(t, out.String(), "kube-apiserver /version", "the command reached the VIP through the host")
	assert.Equal(t, 1, host.Forwarded())
	assert.Contains(t, errOut.String(), "ssh-proxy: Talos and Kubernetes traffic goes through root@127.0.0.1:")

	// The helper is gone with the command.
	m := regexp.MustCompile(`proxy=http://(127\.0\.0\.1:\d+)`).FindStringSubmatch(out.String())
	require.Len(t, m, 2, out.String())
	_, err := net.DialTimeout("tcp", m[1], time.Second)
	require.Error(t, err, "the proxy stopped when the command ended")
}

func TestExecWithoutTheHelper(t *testing.T) {
	t.Parallel()
	direct := proxmoxStack(t, func(px map[string]any) { px["access"] = stacks.AccessDirect })
	e, out, _ := accessEnvFor(direct, nil)
	e.Start = func(context.Context, *stacks.Config, access.Options) (*access.Session, error) {
		t.Error("a direct stack starts no helper")
		return nil, errors.New("no")
	}
	code := execCmd(context.Background(), []string{"--stack", "proxmox-homelab", "--", "sh", "-c", `echo "proxy=$HTTPS_PROXY"; exit 3`}, e)
	assert.Equal(t, 3, code, "the command's exit code")
	assert.Equal(t, "proxy=http://corp.example:3128\n", out.String(), "the environment is passed on untouched")

	// Unreadable config: the command runs (pulumi explains the problem).
	e, out, errOut := accessEnvFor(nil, errors.New("pulumi config: no stack named 'x'"))
	code = execCmd(context.Background(), []string{"--stack", "x", "--", "sh", "-c", "echo ran"}, e)
	assert.Equal(t, exitcode.OK, code)
	assert.Equal(t, "ran\n", out.String())
	assert.Contains(t, errOut.String(), "running without the SSH proxy")

	assert.Equal(t, exitcode.Usage, execCmd(context.Background(), []string{"--stack", "x"}, e), "no command")
}

func TestExecStopsWhenTheHelperCannotStart(t *testing.T) {
	t.Parallel()
	config := proxmoxStack(t, func(px map[string]any) {
		px["access"] = stacks.AccessSSHProxy
		px["localForward"] = true
		px["ssh"] = map[string]any{"host": "127.0.0.1", "port": 1, "privateKeyFile": "/nonexistent/key"}
	})
	e, out, errOut := accessEnvFor(config, nil)
	code := execCmd(context.Background(), []string{"--stack", "proxmox-homelab", "--", "sh", "-c", "echo ran"}, e)
	assert.Equal(t, exitcode.Failed, code)
	assert.Empty(t, out.String(), "pulumi would fail at the first apply: it is not started")
	assert.Contains(t, errOut.String(), "proxmox.ssh.privateKeyFile")
	assert.Contains(t, errOut.String(), "make doctor STACK=proxmox-homelab")
}

// execUntilReady runs script through exec on a direct-access stack, with
// the signals the test sends, and returns once it printed "ready": the
// signal channel, its output and its exit code to come.
func execUntilReady(t *testing.T, script string) (chan<- os.Signal, *syncBuffer, <-chan int) {
	t.Helper()
	e, out, _ := accessEnvFor(proxmoxStack(t, func(px map[string]any) { px["access"] = stacks.AccessDirect }), nil)
	sigs := make(chan os.Signal, 2)
	e.Signals = sigs
	done := make(chan int, 1)
	go func() {
		done <- execCmd(context.Background(), []string{"--stack", "proxmox-homelab", "--", "sh", "-c", script}, e)
	}()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "ready") }, 10*time.Second, 10*time.Millisecond, out.String())
	return sigs, out, done
}

func TestExecPassesSIGTERMOnAsOneInterrupt(t *testing.T) {
	t.Parallel()
	sigs, out, done := execUntilReady(t, `trap 'echo interrupted; exit 130' INT; echo ready; while :; do sleep 0.05; done`)
	sigs <- os.Interrupt // a terminal's Ctrl-C already reached the command itself: not passed on
	time.Sleep(200 * time.Millisecond)
	assert.NotContains(t, out.String(), "interrupted")
	sigs <- syscall.SIGTERM
	select {
	case code := <-done:
		assert.Equal(t, 130, code)
		assert.Contains(t, out.String(), "interrupted")
	case <-time.After(10 * time.Second):
		t.Fatal("the command did not get the interrupt")
	}
}

// Ctrl-C cancels pulumi, which tells the program nothing: the day-2 hooks
// it waits for would go on waiting (item 14 of issue 23). The command gets
// the path of a file that appears on the first interrupt, and the file is
// gone afterwards.
func TestExecTellsTheProgramOfAnInterrupt(t *testing.T) {
	t.Parallel()
	sigs, out, done := execUntilReady(t, `echo "file=$`+cancelfile.Env+`"; [ -e "$`+cancelfile.Env+`" ] && exit 3; echo ready; `+
		`while [ ! -e "$`+cancelfile.Env+`" ]; do sleep 0.05; done; echo cancelled`)
	sigs <- os.Interrupt
	select {
	case code := <-done:
		assert.Equal(t, exitcode.OK, code)
		assert.Contains(t, out.String(), "cancelled")
	case <-time.After(10 * time.Second):
		t.Fatal("the command never saw the cancellation")
	}
	_, file, _ := strings.Cut(strings.Split(out.String(), "\n")[0], "file=")
	require.NotEmpty(t, file)
	assert.NoFileExists(t, file, "removed with its directory")
}

func TestProxyCommandServesUntilCancelled(t *testing.T) {
	t.Parallel()
	config, host := behindHost(t)
	e, out, errOut := accessEnvFor(config, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- proxyCmd(ctx, []string{"--stack", "proxmox-homelab"}, e) }()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "export HTTPS_PROXY=") }, 10*time.Second, 10*time.Millisecond, errOut.String())
	assert.Contains(t, errOut.String(), "-> 10.10.0.0/24 (everything else refused)")

	// The printed line works in a shell.
	cmd := exec.Command("sh", "-c", out.String()+`curl -sSk --fail --max-time 10 https://10.10.0.5:6443/livez`)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	got, err := cmd.CombinedOutput()
	require.NoError(t, err, string(got))
	assert.Equal(t, "kube-apiserver /livez", string(got))
	assert.Equal(t, 1, host.Forwarded())

	cancel()
	select {
	case code := <-done:
		assert.Equal(t, exitcode.OK, code)
		assert.Contains(t, errOut.String(), "ssh-proxy stopped")
	case <-time.After(10 * time.Second):
		t.Fatal("Ctrl-C did not stop the proxy")
	}

	vps, _, _ := accessEnvFor(stackstest.ConfigJSON(t, stackstest.Example(t, stackstest.VPSExample)), nil)
	assert.Equal(t, exitcode.Usage, proxyCmd(context.Background(), []string{"--stack", "vps-prod"}, vps))
}

func TestDriverAccessOnlyForSSHProxyStacks(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	never := func(context.Context, *stacks.Config, access.Options) (*access.Session, error) {
		t.Error("no helper for this stack")
		return nil, errors.New("no")
	}
	for _, raw := range [][]byte{proxmoxStack(t, func(px map[string]any) { px["access"] = stacks.AccessDirect }), stackstest.ConfigJSON(t, stackstest.Example(t, stackstest.VPSExample))} {
		src, err := stacks.SourceFromConfigJSON(raw)
		require.NoError(t, err)
		env, stop, err := driverAccess(context.Background(), src, os.Getenv, &stderr, never)
		require.NoError(t, err)
		assert.Nil(t, env)
		stop()
	}

	config, _ := behindHost(t)
	src, err := stacks.SourceFromConfigJSON(config)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	env, stop, err := driverAccess(ctx, src, func(string) string { return "" }, &stderr, access.Start)
	require.NoError(t, err)
	cancel() // a cancelled operation still finishes through the helper
	time.Sleep(100 * time.Millisecond)
	addr := strings.TrimPrefix(env["HTTPS_PROXY"], "http://")
	c, err := net.DialTimeout("tcp", addr, time.Second)
	require.NoError(t, err, "the helper outlives the cancellation")
	defer func() { _ = c.Close() }()
	assert.Contains(t, env["NO_PROXY"], "192.168.122.70")
	stop()
	// The helper's connections end with it. (Dialing the address again
	// would prove nothing: another test's listener may have its port by
	// then.)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = c.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "stopped after the operation: its connection is closed")
}
