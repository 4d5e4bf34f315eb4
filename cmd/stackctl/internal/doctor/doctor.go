// Package doctor checks, from the operator's machine, what `pulumi up` of a
// stack will need: the stack config itself, the Proxmox API with the stack's
// token (nodes, datastores, VM ids), the Proxmox host's SSH key against the
// pinned one, SSH to the host for dnsmasq, the way to the VM network (a
// direct route, or the ssh-proxy helper), and the local tools the program
// runs. Each check says plainly what is missing and how to fix it.
package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/blang/semver"
	"golang.org/x/crypto/ssh"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/access"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/backup"
	"github.com/fluodata/talos-pulumi/internal/backupstore"
	"github.com/fluodata/talos-pulumi/internal/certs"
	"github.com/fluodata/talos-pulumi/internal/pveapi"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
)

// Level is a check result's severity.
type Level string

// Levels, as printed.
const (
	OK   Level = "ok"
	Warn Level = "warn"
	Fail Level = "FAIL"
)

// Result is one check's outcome.
type Result struct {
	Level   Level
	Check   string
	Message string
}

// API is the part of the Proxmox API the doctor reads.
type API interface {
	Version(ctx context.Context) (string, error)
	Nodes(ctx context.Context) ([]pveapi.Node, error)
	Storages(ctx context.Context, node string) ([]pveapi.Storage, error)
	VMs(ctx context.Context) ([]pveapi.ClusterVM, error)
	Permissions(ctx context.Context, path string) (map[string]bool, error)
	QueryURLMetadata(ctx context.Context, node, rawURL string) (pveapi.URLMetadata, error)
	StorageContent(ctx context.Context, node, storage, content string) ([]pveapi.Volume, error)
	VMConfig(ctx context.Context, node string, vmid int) (map[string]any, error)
}

// The real Proxmox client is the doctor's API, checked at compile time.
var _ API = (*pveapi.Client)(nil)

// Env holds the doctor's seams to the outside world.
//
// The Proxmox seams (NewAPI, SSH, DialSSH, ScanHostKey) are called once per
// Proxmox section of the stack (proxmox, then each hosts entry's) with the
// stack as that section alone: its settings as cfg.Proxmox, its VM network
// as cfg.Cluster.Network, its nodes. A stack without hosts entries is
// passed as it is.
type Env struct {
	// NewAPI makes the Proxmox API client for the stack.
	NewAPI func(cfg *stacks.Config) (API, error)
	// SSH runs a command on the Proxmox host as the program would.
	SSH func(ctx context.Context, cfg *stacks.Config, command string) (string, error)
	// DialSSH connects to the Proxmox host (for the ssh-proxy check).
	DialSSH func(ctx context.Context, cfg *stacks.Config) (*ssh.Client, error)
	// ScanHostKey reads the key the Proxmox host presents, without login.
	ScanHostKey func(ctx context.Context, cfg *stacks.Config) (ssh.PublicKey, error)
	// ScanRescueKey reads the key a VPS's rescue system presents, without
	// login.
	ScanRescueKey func(ctx context.Context, c stacks.SSHConfig) (ssh.PublicKey, error)
	// Getenv reads the environment (NO_PROXY, PULUMI_BACKEND_URL, ...).
	Getenv func(string) string
	// Dial opens a TCP connection (net.Dialer.DialContext).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// PulumiVersion is what the pulumi CLI the operations run says of its
	// version (`pulumi version`); nil: not checked.
	PulumiVersion func(ctx context.Context) (string, error)
	// StackOutputs are the stack's outputs, secrets shown (`pulumi stack
	// output --json --show-secrets`); nil: the access files' certificates
	// are not checked.
	StackOutputs func(ctx context.Context, stack string) (map[string]any, error)
	// Now is the clock of the certificates' and snapshots' checks
	// (time.Now when nil).
	Now func() time.Time
	// InClusterSnapshots lists the stack's in-cluster snapshots at
	// backup.target, newest first; nil: their age is not checked.
	InClusterSnapshots func(ctx context.Context, cfg *stacks.Config, stack string) ([]backupstore.Object, error)
	// Timeout bounds each network check.
	Timeout time.Duration
	// Stat reads a file's information on this machine (os.Stat); nil: the
	// local platform's check of this machine's IPv6 is skipped.
	Stat func(name string) (os.FileInfo, error)
}

// DefaultEnv is the real world.
func DefaultEnv() Env {
	d := &net.Dialer{}
	return Env{
		NewAPI: func(cfg *stacks.Config) (API, error) {
			px := cfg.Proxmox
			return pveapi.New(px.Endpoint, px.APITokenID, px.APITokenSecret.Reveal(), pveapi.Options{Insecure: px.Insecure, Retries: 1})
		},
		SSH:           runSSH,
		DialSSH:       dialSSH,
		ScanHostKey:   scanHostKey,
		ScanRescueKey: access.ScanHostKey,
		Getenv:        os.Getenv,
		Dial:          d.DialContext,
		Timeout:       5 * time.Second,
		Stat:          os.Stat,
		InClusterSnapshots: func(ctx context.Context, cfg *stacks.Config, stack string) ([]backupstore.Object, error) {
			opts, err := backup.StoreOptions(cfg.Backup)
			if err != nil {
				return nil, err
			}
			store, err := backupstore.Open(ctx, cfg.Backup.Target, opts)
			if err != nil {
				return nil, err
			}
			defer func() { _ = store.Close() }()
			return backup.ListInCluster(ctx, store, stack)
		},
	}
}

// checkInClusterSnapshots warns when the newest in-cluster snapshot is
// older than two periods of backup.schedule: a failing Job is seen
// nowhere else.
func checkInClusterSnapshots(ctx context.Context, env Env, cfg *stacks.Config, stack string) Result {
	snapshots, err := env.InClusterSnapshots(ctx, cfg, stack)
	if err != nil {
		return Result{Warn, "snapshots", fmt.Sprintf("%v; the in-cluster snapshots' age is not checked", err)}
	}
	now := time.Now
	if env.Now != nil {
		now = env.Now
	}
	f, err := backup.InClusterFreshness(cfg.Backup.Schedule, snapshots, now())
	if err != nil {
		return Result{Warn, "snapshots", err.Error()}
	}
	if f.Stale {
		return Result{Warn, "snapshots", f.Message}
	}
	return Result{OK, "snapshots", f.Message}
}

// WithPulumi is env with PulumiVersion running the CLI at path.
func (env Env) WithPulumi(path string) Env {
	env.PulumiVersion = func(ctx context.Context) (string, error) {
		out, err := exec.CommandContext(ctx, path, "version").Output() //nolint:gosec // the operator's own CLI
		return string(out), err
	}
	env.StackOutputs = func(ctx context.Context, stack string) (map[string]any, error) {
		cmd := exec.CommandContext(ctx, path, "stack", "output", "--json", "--show-secrets", "--stack", stack) //nolint:gosec // the operator's own CLI
		var stderr strings.Builder
		cmd.Stderr = &stderr
		raw, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("unable to read the stack's outputs: %w: %s", err, strings.TrimSpace(stderr.String()))
		}
		var outs map[string]any
		if err := json.Unmarshal(raw, &outs); err != nil {
			return nil, fmt.Errorf("unable to read the stack's outputs: %w", err)
		}
		return outs, nil
	}
	return env
}

// Run loads the stack config, with the checks `up` runs before anything
// (program.Validate: what patches and Helm values may not undo too), and
// runs every check that applies to it.
func Run(ctx context.Context, env Env, src stacks.Source, stack string) []Result {
	cfg, diags := program.Validate(src)
	var out []Result
	for _, w := range diags.Warnings {
		out = append(out, Result{Warn, "config", w.String()})
	}
	if err := diags.Err(); err != nil {
		return append(out, Result{Fail, "config", err.Error()})
	}
	out = append(out, Result{OK, "config", fmt.Sprintf("stack %s is a valid %s stack with %d nodes", stack, cfg.Platform, len(cfg.Nodes.All()))})
	if env.PulumiVersion != nil {
		out = append(out, checkPulumiCLI(ctx, env))
	}
	if env.StackOutputs != nil {
		out = append(out, checkCertificates(ctx, env, stack)...)
	}
	if env.InClusterSnapshots != nil && cfg.Backup.Schedule != "" {
		out = append(out, checkInClusterSnapshots(ctx, env, cfg, stack))
	}
	if check, ok := platformChecks[cfg.Platform]; ok {
		out = append(out, check(ctx, env, cfg, stack)...)
	}
	return out
}

// platformChecks are each platform's own checks, by its stack-file name.
var platformChecks = map[stacks.Platform]func(ctx context.Context, env Env, cfg *stacks.Config, stack string) []Result{
	stacks.PlatformProxmox: checkProxmox,
	stacks.PlatformVPS: func(ctx context.Context, env Env, cfg *stacks.Config, _ string) []Result {
		return checkVPS(ctx, env, cfg)
	},
	stacks.PlatformLocal: checkLocal,
}

// Failed reports whether any result is a failure.
func Failed(rs []Result) bool {
	return slices.ContainsFunc(rs, func(r Result) bool { return r.Level == Fail })
}

// Print writes results one per line.
func Print(w io.Writer, rs []Result) {
	for _, r := range rs {
		_, _ = fmt.Fprintf(w, "%-4s  %-8s  %s\n", r.Level, r.Check, r.Message)
	}
}

// MinPulumiCLI is the oldest Pulumi CLI the program runs with: the version
// of the Go SDK it is built with (resource hooks, replaceWith, the
// engine's readStackOutputs function), as Pulumi.yaml's
// requiredPulumiVersion and the README say.
const MinPulumiCLI = "3.259.0"

// checkPulumiCLI checks the version of the pulumi CLI the operations run.
func checkPulumiCLI(ctx context.Context, env Env) Result {
	out, err := env.PulumiVersion(ctx)
	if err != nil {
		return Result{Fail, "pulumi", fmt.Sprintf("unable to run `pulumi version`: %v; install the Pulumi CLI %s or newer", err, MinPulumiCLI)}
	}
	have, err := semver.ParseTolerant(strings.TrimSpace(out))
	if err != nil {
		return Result{Warn, "pulumi", fmt.Sprintf("`pulumi version` says %q, not a version this check reads; the program needs %s or newer", strings.TrimSpace(out), MinPulumiCLI)}
	}
	if have.LT(semver.MustParse(MinPulumiCLI)) {
		return Result{Fail, "pulumi", fmt.Sprintf("the Pulumi CLI is %s, older than %s, the oldest this program runs with (resource hooks, replaceWith); upgrade it", have, MinPulumiCLI)}
	}
	return Result{OK, "pulumi", fmt.Sprintf("the Pulumi CLI is %s (%s or newer needed)", have, MinPulumiCLI)}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// checkCertificates says until when the client certificates of the
// stack's talosconfig and kubeconfig are valid, and warns of one that
// expires within certs.RenewWithin: the Talos provider renews them only on
// an `up` in that window, so a cluster left alone longer locks its
// operator out.
func checkCertificates(ctx context.Context, env Env, stack string) []Result {
	outs, err := env.StackOutputs(ctx, stack)
	if err != nil {
		return []Result{{Warn, "certs", fmt.Sprintf("%v; the client certificates' expiry is not checked", err)}}
	}
	now := time.Now
	if env.Now != nil {
		now = env.Now
	}
	var out []Result
	for _, name := range program.AccessFiles {
		text, _ := outs[name].(string)
		if text == "" {
			out = append(out, Result{OK, "certs", fmt.Sprintf("stack %s has no %s output yet (no up): nothing to check", stack, name)})
			continue
		}
		notAfter, err := program.AccessFileExpiry(name, text)
		switch {
		case err != nil:
			out = append(out, Result{Warn, "certs", fmt.Sprintf("the %s output: %v", name, err)})
		case certs.Warning(name, notAfter, now()) != "":
			out = append(out, Result{Warn, "certs", certs.Warning(name, notAfter, now())})
		default:
			out = append(out, Result{OK, "certs", fmt.Sprintf("the %s client certificate is valid until %s", name, notAfter.UTC().Format(time.DateOnly))})
		}
	}
	return out
}
