package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/access"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/exitcode"
	"github.com/fluodata/talos-pulumi/internal/cancelfile"
	"github.com/fluodata/talos-pulumi/internal/shell"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
)

// startFunc starts the ssh-proxy helper (access.Start outside tests).
type startFunc func(ctx context.Context, cfg *stacks.Config, o access.Options) (*access.Session, error)

// accessEnv holds the seams of the proxy and exec commands.
type accessEnv struct {
	// ReadConfig returns `pulumi config --show-secrets --json` of a stack.
	ReadConfig func(ctx context.Context, stack string) ([]byte, error)
	// Start starts the ssh-proxy helper.
	Start startFunc
	// Environ is the environment the command runs with (os.Environ).
	Environ []string
	// Signals delivers SIGINT/SIGTERM to exec (nil: none).
	Signals <-chan os.Signal
	// Stdin, Stdout, Stderr are the command's streams.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

func defaultAccessEnv(stdin io.Reader, stdout, stderr io.Writer) accessEnv {
	return accessEnv{
		ReadConfig: func(ctx context.Context, stack string) ([]byte, error) {
			return readConfigJSON(ctx, "pulumi", "", stack, nil)
		},
		Start:   access.Start,
		Environ: os.Environ(),
		Stdin:   stdin, Stdout: stdout, Stderr: stderr,
	}
}

// pulumiFlag adds --pulumi, the CLI that reads the stack's config.
func pulumiFlag(fs *flag.FlagSet, e *accessEnv) {
	fs.Func("pulumi", "path of the pulumi CLI that reads the stack's config (default: pulumi from PATH)", func(path string) error {
		e.ReadConfig = func(ctx context.Context, stack string) ([]byte, error) {
			return readConfigJSON(ctx, path, "", stack, nil)
		}
		return nil
	})
}

// loadStack reads and validates a stack's config; project is the Pulumi
// project its keys belong to.
func loadStack(ctx context.Context, read func(context.Context, string) ([]byte, error), stack string) (cfg *stacks.Config, project string, err error) {
	raw, err := read(ctx, stack)
	if err != nil {
		return nil, "", err
	}
	src, err := stacks.SourceFromConfigJSON(raw)
	if err != nil {
		return nil, "", err
	}
	_ = src.ReadStackFile(".", stack) // every credential checked on its own
	cfg, diags := program.Load(src)
	if err := diags.Err(); err != nil {
		return nil, "", err
	}
	return cfg, src.Project, nil
}

// proxyCmd serves the ssh-proxy helper in the foreground until Ctrl-C, for
// running pulumi, talosctl or kubectl by hand in another shell.
func proxyCmd(ctx context.Context, args []string, e accessEnv) int {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.SetOutput(e.Stderr)
	stack := fs.String("stack", os.Getenv("STACK"), "stack name (default: $STACK)")
	listen := fs.String("listen", "127.0.0.1:0", "address of the proxy (loopback only; port 0 picks a free one)")
	pulumiFlag(fs, &e)
	if err := fs.Parse(args); err != nil {
		return exitcode.Usage
	}
	if *stack == "" || fs.NArg() > 0 {
		_, _ = fmt.Fprintln(e.Stderr, "usage: stackctl proxy --stack NAME [--listen 127.0.0.1:PORT]")
		return exitcode.Usage
	}
	cfg, _, err := loadStack(ctx, e.ReadConfig, *stack)
	if err != nil {
		_, _ = fmt.Fprintf(e.Stderr, "stackctl proxy: %v\n", err)
		return exitcode.BadConfig
	}
	if cfg.Platform != stacks.PlatformProxmox {
		_, _ = fmt.Fprintf(e.Stderr, "stackctl proxy: stack %s is a %s stack; the SSH proxy reaches a Proxmox host's VM network\n", *stack, cfg.Platform)
		return exitcode.Usage
	}
	switch {
	case access.Enabled(cfg):
	case len(cfg.Hosts) > 0:
		_, _ = fmt.Fprintf(e.Stderr, "note: no Proxmox section of stack %s has access %s, so make up does not use this proxy; set it on the sections (proxmox.access, hosts[i].proxmox.access) whose VMs only their host reaches\n",
			*stack, stacks.AccessSSHProxy)
	default:
		_, _ = fmt.Fprintf(e.Stderr, "note: stack %s has proxmox.access %s, so make up does not use this proxy; set proxmox.access: %s for that\n",
			*stack, cfg.Proxmox.Access, stacks.AccessSSHProxy)
	}
	s, err := e.Start(ctx, cfg, access.Options{Listen: *listen, Log: logTo(e.Stderr)})
	if err != nil {
		_, _ = fmt.Fprintf(e.Stderr, "stackctl proxy: %v\n", err)
		return exitcode.Failed
	}
	listening := strings.TrimPrefix(s.URL, "http://")
	if len(s.Tunnels) == 1 && len(s.Direct) == 0 {
		_, _ = fmt.Fprintf(e.Stderr, "ssh-proxy for stack %s: %s -> %s -> %s (everything else refused). Ctrl-C stops it.\n",
			*stack, listening, s.Target, strings.Join(s.Allowed, ", "))
	} else {
		_, _ = fmt.Fprintf(e.Stderr, "ssh-proxy for stack %s on %s (everything else refused). Ctrl-C stops it.\n%s", *stack, listening, describeReaches(s))
	}
	warnDropped(e.Stderr, s)
	// The one line for another shell: eval "$(...)" or copy it.
	_, _ = fmt.Fprintf(e.Stdout, "export HTTPS_PROXY=%[1]s https_proxy=%[1]s NO_PROXY=%[2]s no_proxy=%[2]s\n", shell.Quote(s.URL), shell.Quote(s.NoProxy))
	<-ctx.Done()
	_ = s.Close()
	_, _ = fmt.Fprintln(e.Stderr, "ssh-proxy stopped")
	return exitcode.OK
}

// execCmd runs a command (pulumi up, ...) with the ssh-proxy helper around
// it when the stack says proxmox.access: ssh-proxy, else runs it as it is.
func execCmd(ctx context.Context, args []string, e accessEnv) int {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	fs.SetOutput(e.Stderr)
	stack := fs.String("stack", os.Getenv("STACK"), "stack name (default: $STACK)")
	pulumiFlag(fs, &e)
	if err := fs.Parse(args); err != nil {
		return exitcode.Usage
	}
	argv := fs.Args()
	if *stack == "" || len(argv) == 0 {
		_, _ = fmt.Fprintln(e.Stderr, "usage: stackctl exec --stack NAME -- COMMAND [ARGS...]")
		return exitcode.Usage
	}
	environ := e.Environ
	cfg, _, err := loadStack(ctx, e.ReadConfig, *stack)
	switch {
	case err != nil:
		// The command (pulumi) reads the same config and says what is
		// wrong with it better than a second message here would; but a
		// config too large to start the program with only gets a bare
		// "argument list too long" from it.
		_, _ = fmt.Fprintf(e.Stderr, "stackctl exec: the stack's config could not be read or is invalid; running without the SSH proxy\n")
		for _, p := range stacks.TooLargeProblems(err) {
			_, _ = fmt.Fprintf(e.Stderr, "stackctl exec: %s\n", p)
		}
	case access.Enabled(cfg):
		s, err := startForCommand(ctx, cfg, e.Start, access.Options{}, e.Stderr)
		if err != nil {
			_, _ = fmt.Fprintf(e.Stderr, "stackctl exec: %s %s: %v\n(`make doctor STACK=%s` checks the SSH access)\n", sshProxyKeys(cfg), stacks.AccessSSHProxy, err, *stack)
			return exitcode.Failed
		}
		defer func() { _ = s.Close() }()
		environ = s.Environ(environ)
	}
	return runChild(argv, environ, e)
}

// runChild runs argv in this process group, so a terminal's Ctrl-C reaches
// it directly (once); a SIGTERM sent to this process alone is passed on as
// one interrupt, the signal pulumi cancels gracefully on. Either one also
// creates the file cancelfile.Env names: pulumi tells the program
// nothing when it cancels, and the program's day-2 hooks, which pulumi
// waits for, stop waiting when they see it.
func runChild(argv, environ []string, e accessEnv) int {
	dir, err := os.MkdirTemp("", "stackctl-exec-")
	if err != nil {
		_, _ = fmt.Fprintf(e.Stderr, "stackctl exec: %v\n", err)
		return exitcode.CannotRun
	}
	defer func() { _ = os.RemoveAll(dir) }()
	cancelFile := filepath.Join(dir, "cancelled")
	cmd := exec.Command(argv[0], argv[1:]...) //nolint:gosec // the operator's own command line
	cmd.Env = append(slices.Clone(environ), cancelfile.Env+"="+cancelFile)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.Stdin, e.Stdout, e.Stderr
	if err := cmd.Start(); err != nil {
		_, _ = fmt.Fprintf(e.Stderr, "stackctl exec: %v\n", err)
		return exitcode.CannotRun
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case sig := <-e.Signals:
			if err := os.WriteFile(cancelFile, nil, 0o600); err != nil {
				_, _ = fmt.Fprintf(e.Stderr, "stackctl exec: unable to tell the program that the run is cancelled: %v\n", err)
			}
			if sig == syscall.SIGTERM {
				_ = cmd.Process.Signal(os.Interrupt)
			}
		case err := <-done:
			var ee *exec.ExitError
			switch {
			case err == nil:
				return exitcode.OK
			case errors.As(err, &ee):
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					return exitcode.Signaled(int(ws.Signal()))
				}
				return ee.ExitCode()
			default:
				_, _ = fmt.Fprintf(e.Stderr, "stackctl exec: %v\n", err)
				return exitcode.Failed
			}
		}
	}
}

// startForCommand starts the helper around a pulumi run (exec, the driver)
// and says so. The helper outlives a cancellation: pulumi finishes the
// steps in flight, which need the tunnel, before it exits.
func startForCommand(ctx context.Context, cfg *stacks.Config, start startFunc, o access.Options, stderr io.Writer) (*access.Session, error) {
	o.Log = logTo(stderr)
	s, err := start(context.WithoutCancel(ctx), cfg, o)
	if err != nil {
		return nil, err
	}
	_, _ = fmt.Fprintf(stderr, "ssh-proxy: Talos and Kubernetes traffic goes through %s (proxy %s)\n", s.Target, strings.TrimPrefix(s.URL, "http://"))
	for _, d := range s.Direct {
		_, _ = fmt.Fprintf(stderr, "ssh-proxy: %s is reached directly, not through the proxy: %s\n", reachLabel(d), strings.Join(d.Destinations, ", "))
	}
	warnDropped(stderr, s)
	return s, nil
}

// describeReaches says, a line each, through which SSH connection the
// VMs of each Proxmox section go, and which are reached directly.
func describeReaches(s *access.Session) string {
	var b strings.Builder
	for _, t := range s.Tunnels {
		_, _ = fmt.Fprintf(&b, "  %s: %s -> %s\n", reachLabel(t), t.Target, strings.Join(t.Destinations, ", "))
	}
	for _, d := range s.Direct {
		_, _ = fmt.Fprintf(&b, "  %s: direct (NO_PROXY), not through the proxy: %s\n", reachLabel(d), strings.Join(d.Destinations, ", "))
	}
	return b.String()
}

func reachLabel(r access.Reach) string {
	if r.Host == "" {
		return r.Section
	}
	return fmt.Sprintf("host %s (%s)", r.Host, r.Section)
}

// sshProxyKeys names the access keys that say ssh-proxy, for messages:
// "proxmox.access is", "hosts[0].proxmox.access is", "proxmox.access and
// hosts[0].proxmox.access are".
func sshProxyKeys(cfg *stacks.Config) string {
	var keys []string
	for _, s := range access.SSHProxySections(cfg) {
		keys = append(keys, s.Path+".access")
	}
	if len(keys) == 1 {
		return keys[0] + " is"
	}
	return strings.Join(keys, " and ") + " are"
}

func warnDropped(w io.Writer, s *access.Session) {
	if len(s.Dropped) > 0 {
		_, _ = fmt.Fprintf(w, "ssh-proxy: left out of NO_PROXY, since they would send VM traffic past the proxy: %s\n", strings.Join(s.Dropped, ", "))
	}
}

func logTo(w io.Writer) func(string, ...any) {
	return func(format string, args ...any) { _, _ = fmt.Fprintf(w, "ssh-proxy: "+format+"\n", args...) }
}

// execSignals subscribes to the signals exec handles itself.
func execSignals() (<-chan os.Signal, func()) {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	return ch, func() { signal.Stop(ch) }
}
