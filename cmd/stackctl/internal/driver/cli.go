package driver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/blang/semver"
)

// DefaultGrace is how long a cancelled pulumi gets to finish the steps in
// flight and save its state before it is killed.
const DefaultGrace = 5 * time.Minute

// CLI is the Pulumi CLI as an auto.PulumiCommand. Unlike the SDK's own, it
// starts pulumi in a process group of its own, so a Ctrl-C at the terminal
// reaches only the driver, which forwards exactly one interrupt: pulumi
// takes a second one as "terminate now" and would leave the stack locked.
type CLI struct {
	Path    string
	version semver.Version
	// Grace bounds the wait after the interrupt.
	Grace time.Duration
}

// NewCLI finds pulumi (on PATH unless path is given) and reads its version.
func NewCLI(ctx context.Context, path string, grace time.Duration) (*CLI, error) {
	if path == "" {
		p, err := exec.LookPath("pulumi")
		if err != nil {
			return nil, fmt.Errorf("unable to find pulumi on PATH (install it: https://www.pulumi.com/docs/install/): %w", err)
		}
		path = p
	}
	out, err := exec.CommandContext(ctx, path, "version").Output() //nolint:gosec // the operator's pulumi
	if err != nil {
		return nil, fmt.Errorf("unable to run `%s version`: %w", path, err)
	}
	v, err := semver.ParseTolerant(strings.TrimSpace(string(out)))
	if err != nil {
		return nil, fmt.Errorf("unable to parse the `pulumi version` output %q: %w", out, err)
	}
	return &CLI{Path: path, version: v, Grace: grace}, nil
}

// Version implements auto.PulumiCommand.
func (c *CLI) Version() semver.Version { return c.version }

// Run implements auto.PulumiCommand.
func (c *CLI) Run(ctx context.Context, workdir string, stdin io.Reader, additionalOutput, additionalErrorOutput []io.Writer,
	additionalEnv []string, args ...string,
) (string, string, int, error) {
	if !slices.Contains(args, "--non-interactive") {
		args = append(args, "--non-interactive")
	}
	cmd := exec.CommandContext(ctx, c.Path, args...) //nolint:gosec // the operator's pulumi with our arguments
	cmd.Dir = workdir
	cmd.Env = append(append(os.Environ(), additionalEnv...), "PULUMI_AUTOMATION_API=true")
	var stdout, stderr bytes.Buffer
	cmd.Stdout = io.MultiWriter(append(additionalOutput, &stdout)...)
	cmd.Stderr = io.MultiWriter(append(additionalErrorOutput, &stderr)...)
	cmd.Stdin = stdin
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = c.Grace
	err := cmd.Run()
	code := -2                               // the SDK's "unknown"
	if ee, ok := err.(*exec.ExitError); ok { //nolint:errorlint // exec returns it unwrapped
		code = ee.ExitCode()
	} else if err == nil {
		code = 0
	}
	return stdout.String(), stderr.String(), code, err
}
