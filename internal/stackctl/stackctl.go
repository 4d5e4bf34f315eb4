// Package stackctl is the body of cmd/stackctl, kept importable for tests.
package stackctl

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/fluodata/talos-pulumi/internal/doctor"
	"github.com/fluodata/talos-pulumi/stacks"
)

// Exit codes.
const (
	ExitOK       = 0
	ExitFailed   = 1 // a check failed
	ExitUsage    = 2
	ExitNoConfig = 3 // the stack's config could not be read
)

// Main runs a subcommand and returns the exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		_, _ = fmt.Fprintln(stderr, "usage: stackctl doctor --stack NAME [--config-json FILE|-]")
		return ExitUsage
	}
	switch args[0] {
	case "doctor":
		return doctorCmd(ctx, args[1:], os.Getenv("STACK"), stdin, stdout, stderr, doctor.DefaultEnv())
	default:
		_, _ = fmt.Fprintf(stderr, "stackctl: unknown command %q (known: doctor)\n", args[0])
		return ExitUsage
	}
}

func doctorCmd(ctx context.Context, args []string, defaultStack string, stdin io.Reader, stdout, stderr io.Writer, env doctor.Env) int {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stack := fs.String("stack", defaultStack, "stack name (default: $STACK)")
	configJSON := fs.String("config-json", "", "read `pulumi config --show-secrets --json` output from this file (- for stdin) instead of running pulumi")
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	if *stack == "" {
		_, _ = fmt.Fprintln(stderr, "stackctl doctor: --stack (or STACK) is required")
		return ExitUsage
	}
	raw, err := readConfigJSON(ctx, *configJSON, *stack, stdin)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "stackctl doctor: %v\n", err)
		return ExitNoConfig
	}
	src, err := SourceFromJSON(raw)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "stackctl doctor: %v\n", err)
		return ExitNoConfig
	}
	results := doctor.Run(ctx, env, src, *stack)
	doctor.Print(stdout, results)
	if doctor.Failed(results) {
		_, _ = fmt.Fprintln(stdout, "\nSome checks failed: `pulumi up` would fail at the first of these.")
		return ExitFailed
	}
	_, _ = fmt.Fprintln(stdout, "\nEverything `pulumi up` needs is in place.")
	return ExitOK
}

func readConfigJSON(ctx context.Context, from, stack string, stdin io.Reader) ([]byte, error) {
	switch from {
	case "-":
		return io.ReadAll(stdin)
	case "":
		// The CLI decrypts the stack's secrets (it knows the passphrase or
		// secrets provider); the values stay in this process's memory.
		cmd := exec.CommandContext(ctx, "pulumi", "config", "--show-secrets", "--json", "--stack", stack)
		var errOut strings.Builder
		cmd.Stderr = &errOut
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("pulumi config --stack %s: %w: %s", stack, err, strings.TrimSpace(errOut.String()))
		}
		return out, nil
	default:
		return os.ReadFile(from) //nolint:gosec // a path the operator gives
	}
}

// SourceFromJSON turns `pulumi config --show-secrets --json` output into the
// config source the program sees.
func SourceFromJSON(raw []byte) (stacks.Source, error) {
	var entries map[string]struct {
		Value  string `json:"value"`
		Secret bool   `json:"secret"`
	}
	if err := json.Unmarshal(raw, &entries); err != nil {
		return stacks.Source{}, fmt.Errorf("stack config is not the JSON `pulumi config --json` prints: %w", err)
	}
	src := stacks.Source{Values: map[string]string{}}
	for k, e := range entries {
		project, _, ok := strings.Cut(k, ":")
		if !ok {
			continue
		}
		if strings.HasSuffix(k, ":platform") {
			src.Project = project
		}
		src.Values[k] = e.Value
		if e.Secret {
			src.SecretKeys = append(src.SecretKeys, k)
		}
	}
	if src.Project == "" {
		return src, errors.New("the stack has no platform key: is it this project's stack?")
	}
	return src, nil
}
