//go:build integration

package cli_test

import (
	"bytes"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIntegrationCtrlCStopsAWaitingHookWithTheRealCLI checks item 14 of
// issue 23 with the real CLI: on a first Ctrl-C pulumi lets the steps in
// flight finish and tells the program nothing, so a resource hook that
// waits (a day-2 gate or settle) went on waiting, silent, until a second
// Ctrl-C. Run as `make up` runs it, under `stackctl exec`, in a process
// group of its own that gets one SIGINT as a terminal's Ctrl-C sends it,
// the hook sees the cancellation (internal/cancelfile) and pulumi exits
// within seconds, not after the hook's three minutes. Pulumi CLI 3.229 and
// later also interrupt the program itself on the engine's Cancel, so plain
// `pulumi up` (no stackctl, no cancel file) stops the hook the same way.
func TestIntegrationCtrlCStopsAWaitingHookWithTheRealCLI(t *testing.T) {
	pulumiPath, err := exec.LookPath("pulumi")
	if err != nil {
		t.Skip("SKIPPED: the pulumi CLI is not on PATH, so the cancellation was not checked")
	}
	p := newTestProject(t, pulumiPath, "cancelit", "./cmd/stackctl/internal/cli/testdata/hookprogram")
	stackctl := p.build(t, "stackctl", "./cmd/stackctl")
	project, env := p.project, p.env
	run := func(args ...string) {
		out, err := p.run(nil, args...)
		require.NoError(t, err, out)
	}
	run("stack", "init", "it")
	for name, argv := range map[string][]string{
		"under stackctl exec": {stackctl, "exec", "--stack", "it", "--pulumi", pulumiPath, "--", pulumiPath, "up", "--yes", "--stack", "it"},
		"plain pulumi up":     {pulumiPath, "up", "--yes", "--stack", "it"},
	} {
		t.Run(name, func(t *testing.T) { ctrlCStopsTheHook(t, argv, project, env) })
	}
}

// ctrlCStopsTheHook runs argv in a process group of its own, sends the
// group one SIGINT once the hook waits, and checks that the hook stopped.
func ctrlCStopsTheHook(t *testing.T, argv []string, project string, env []string) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(argv[0], argv[1:]...) //nolint:gosec // the test's own binaries
	cmd.Dir, cmd.Env = project, env
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a terminal's foreground group
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	waiting := func() bool { return strings.Contains(out.String(), "hook: waiting for the run to be cancelled") }
	deadline := time.Now().Add(3 * time.Minute)
	for !waiting() && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	require.True(t, waiting(), "the hook never started waiting: %s", out.String())
	sent := time.Now()
	require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGINT), "one Ctrl-C to the whole group")
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t.Fatalf("pulumi still ran 90 s after the Ctrl-C: %s", out.String())
	}
	took := time.Since(sent)
	t.Logf("pulumi exited %s after the Ctrl-C", took.Round(100*time.Millisecond))
	assert.Less(t, took, 30*time.Second)
	assert.Contains(t, out.String(), "hook: the run was cancelled, stopped waiting")
	assert.NotContains(t, out.String(), "never cancelled")
}
