// Package cli is the body of cmd/stackctl: its commands, kept out of package
// main so that tests can run them.
package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/access"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/doctor"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/driver"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/exitcode"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/pveapi"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
)

const usage = `usage:
  stackctl doctor  --stack NAME [--config-json FILE|-]
  stackctl preview|up|refresh|destroy|outputs --stack NAME [flags]   (stackctl up -h lists the flags)
  stackctl backup|backups --stack NAME [flags]                      (an encrypted backup to backup.target; the list of them)
  stackctl restore --stack NAME [--identity FILE] [--name NAME|latest] [--create]
                                                                     (bring the cluster back from a backup: docs/backup.md)
  stackctl backup-get --target URL --stack NAME --identity FILE --out DIR [--name NAME|latest]
                                                                     (a backup's files, decrypted and checked, without the stack)
  stackctl csi-volume-rm --stack NAME --volume DATASTORE:vm-9999-pvc-...
                                                                     (delete a volume the Proxmox CSI plugin left, not attached)
  stackctl machine-configs --out DIR < machineConfigurations.json  (each node's machine config as DIR/<node>.yaml; make outputs)
  stackctl destroy-flags < state.json                               (--run-program while the state holds a provider's resource; make destroy)
  stackctl gitops-status --stack NAME                                (the root Argo CD Application's source, sync and health)
  stackctl proxy   --stack NAME [--listen 127.0.0.1:PORT]            (the ssh-proxy helper, until Ctrl-C)
  stackctl exec    --stack NAME -- COMMAND [ARGS...]                 (COMMAND with the helper when the stack uses it)
  stackctl adopt   --stack NAME --secrets FILE [flags]               (import a running cluster's secrets.yaml; -h lists the flags)`

// Main runs a subcommand and returns the exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		_, _ = fmt.Fprintln(stderr, usage)
		return exitcode.Usage
	}
	switch op := args[0]; {
	case op == "doctor":
		return doctorCmd(ctx, args[1:], os.Getenv("STACK"), stdin, stdout, stderr, doctor.DefaultEnv())
	case op == "proxy":
		return proxyCmd(ctx, args[1:], defaultAccessEnv(stdin, stdout, stderr))
	case op == "exec":
		e := defaultAccessEnv(stdin, stdout, stderr)
		sigs, stop := execSignals()
		defer stop()
		e.Signals = sigs
		return execCmd(ctx, args[1:], e)
	case op == "backup-get":
		return backupGetCmd(ctx, args[1:], stdout, stderr)
	case op == "csi-volume-rm":
		return csiVolumeRmCmd(ctx, args[1:], stdout, stderr, func(cfg *stacks.Config) (csiAPI, error) {
			px := cfg.Proxmox
			return pveapi.New(px.Endpoint, px.APITokenID, px.APITokenSecret.Reveal(), pveapi.Options{Insecure: px.Insecure})
		})
	case op == "machine-configs":
		return machineConfigsCmd(args[1:], stdin, stderr)
	case op == "destroy-flags":
		return destroyFlagsCmd(args[1:], stdin, stdout, stderr)
	case op == "gitops-status":
		return gitopsStatusCmd(ctx, args[1:], stdout, stderr)
	case op == "adopt":
		e := defaultAccessEnv(stdin, stdout, stderr)
		e.ReadConfig = nil // --pulumi decides
		sigs, stop := execSignals()
		defer stop()
		e.Signals = sigs
		return adoptCmd(ctx, args[1:], e)
	case slices.Contains(driver.Ops, op):
		return driverCmd(ctx, op, args[1:], stdout, stderr, os.Getenv, nil)
	default:
		_, _ = fmt.Fprintf(stderr, "stackctl: unknown command %q\n%s\n", args[0], usage)
		return exitcode.Usage
	}
}

// driverCmd parses an operation's flags and runs it. pulumiCmd replaces the
// CLI (tests); nil finds pulumi on PATH.
func driverCmd(ctx context.Context, op string, args []string, stdout, stderr io.Writer, getenv func(string) string, pulumiCmd auto.PulumiCommand) int {
	fs := flag.NewFlagSet(op, flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := driver.Options{Op: op}
	fs.StringVar(&o.Stack, "stack", getenv("STACK"), "stack name (default: $STACK)")
	fs.StringVar(&o.WorkDir, "dir", ".", "directory with Pulumi.yaml and the stack files")
	fs.StringVar(&o.BackendURL, "backend", getenv("PULUMI_BACKEND_URL"), "state backend URL (default: $PULUMI_BACKEND_URL, else file://<dir>/.pulumi-state)")
	fs.StringVar(&o.SecretsProvider, "secrets-provider", getenv("SECRETS_PROVIDER"), "secrets provider of a new stack (default: $SECRETS_PROVIDER, else passphrase)")
	fs.BoolVar(&o.Create, "create", false, "create the stack if it does not exist")
	fs.StringVar(&o.SummaryFile, "summary", "", "write a JSON summary of the run to this file")
	fs.StringVar(&o.OutDir, "out", "", "outputs: directory for kubeconfig and talosconfig (default: <dir>/.access/<stack>)")
	fs.StringVar(&o.BackupName, "name", "latest", "restore: the backup's name as `stackctl backups` lists it, or latest")
	fs.BoolVar(&o.ResetControlPlanes, "reset-control-planes", false, "restore: with the stack's cluster in place and etcd's quorum lost, reset the control planes' EPHEMERAL and recover etcd from the backup; the workers and their disks stay")
	fs.StringVar(&o.Identity, "identity", "", "restore: age identity file or SSH private key of one of backup.recipients (default: the key's text in $"+IdentityEnv+")")
	fs.BoolVar(&o.ExitOnChanges, "exit-code-on-changes", false, fmt.Sprintf("preview: exit with %d when changes are pending", exitcode.ChangesPending))
	pulumiPath := fs.String("pulumi", "", "path of the pulumi CLI (default: from PATH)")
	grace := fs.Duration("grace", driver.DefaultGrace, "after Ctrl-C/SIGTERM, how long pulumi may finish and save its state before it is killed")
	if err := fs.Parse(args); err != nil {
		return exitcode.Usage
	}
	if fs.NArg() > 0 {
		_, _ = fmt.Fprintf(stderr, "stackctl %s: unexpected arguments %v\n", op, fs.Args())
		return exitcode.Usage
	}
	if pulumiCmd == nil {
		cli, err := driver.NewCLI(ctx, *pulumiPath, *grace)
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "stackctl %s: %v\n", op, err)
			return exitcode.Failed
		}
		pulumiCmd = cli
	}
	return driver.Run(ctx, o, driver.Env{
		Pulumi: pulumiCmd,
		Program: func(ctx context.Context, src stacks.Source, op string) pulumi.RunFunc {
			o := program.Options{Talos: talos.Deps{Destroy: op == driver.OpDestroy, Context: ctx}}
			return func(ctx *pulumi.Context) error { return program.Run(ctx, src, o) }
		},
		Validate: func(src stacks.Source) error {
			_, diags := program.Validate(src)
			return diags.Err()
		},
		Access: func(ctx context.Context, src stacks.Source) (map[string]string, func(), error) {
			return driverAccess(ctx, src, getenv, stderr, access.Start)
		},
		Backup:  backupOf(stdout, stderr, getenv),
		Restore: restoreOf(stdout, stderr, getenv),
		Stdout:  stdout, Stderr: stderr, Getenv: getenv, Now: time.Now,
	})
}

// driverAccess starts the ssh-proxy helper for a driver operation when the
// stack uses it.
func driverAccess(ctx context.Context, src stacks.Source, getenv func(string) string, stderr io.Writer, start startFunc) (map[string]string, func(), error) {
	cfg, diags := program.Load(src)
	if diags.HasErrors() || !access.Enabled(cfg) {
		return nil, func() {}, nil
	}
	s, err := startForCommand(ctx, cfg, start, access.Options{Getenv: getenv}, stderr)
	if err != nil {
		return nil, nil, err
	}
	return s.Env(), func() { _ = s.Close() }, nil
}

func doctorCmd(ctx context.Context, args []string, defaultStack string, stdin io.Reader, stdout, stderr io.Writer, env doctor.Env) int {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stack := fs.String("stack", defaultStack, "stack name (default: $STACK)")
	configJSON := fs.String("config-json", "", "read `pulumi config --show-secrets --json` output from this file (- for stdin) instead of running pulumi")
	pulumiPath := fs.String("pulumi", "pulumi", "path of the pulumi CLI that reads the stack's config")
	if err := fs.Parse(args); err != nil {
		return exitcode.Usage
	}
	if *stack == "" {
		_, _ = fmt.Fprintln(stderr, "stackctl doctor: --stack (or STACK) is required")
		return exitcode.Usage
	}
	raw, err := readConfigJSON(ctx, *pulumiPath, *configJSON, *stack, stdin)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "stackctl doctor: %v\n", err)
		return exitcode.BadConfig
	}
	src, err := stacks.SourceFromConfigJSON(raw)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "stackctl doctor: %v\n", err)
		return exitcode.BadConfig
	}
	_ = src.ReadStackFile(".", *stack) // every credential checked on its own
	if env.PulumiVersion == nil && *configJSON == "" {
		env = env.WithPulumi(*pulumiPath)
	}
	results := doctor.Run(ctx, env, src, *stack)
	doctor.Print(stdout, results)
	if doctor.Failed(results) {
		_, _ = fmt.Fprintln(stdout, "\nSome checks failed: `pulumi up` would fail at the first of these.")
		return exitcode.Failed
	}
	_, _ = fmt.Fprintln(stdout, "\nEverything `pulumi up` needs is in place.")
	return exitcode.OK
}

// readConfigJSON reads `pulumi config --show-secrets --json` of a stack from
// the CLI at pulumiPath, or from a file (- for stdin) when from is set.
func readConfigJSON(ctx context.Context, pulumiPath, from, stack string, stdin io.Reader) ([]byte, error) {
	switch from {
	case "-":
		return io.ReadAll(stdin)
	case "":
		// The CLI decrypts the stack's secrets (it knows the passphrase or
		// secrets provider); the values stay in this process's memory.
		cmd := exec.CommandContext(ctx, pulumiPath, "config", "--show-secrets", "--json", "--stack", stack) //nolint:gosec // the operator's CLI
		var errOut strings.Builder
		cmd.Stderr = &errOut
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("unable to run pulumi config --stack %s: %w: %s", stack, err, strings.TrimSpace(errOut.String()))
		}
		return out, nil
	default:
		return os.ReadFile(from) //nolint:gosec // a path the operator gives
	}
}
