// Package driver runs this project's Pulumi operations for CI through the
// Automation API: `stackctl preview|up|refresh|destroy|outputs`.
//
// The program runs inline, in the driver's own process: the driver binary is
// built once per CI run and every operation reuses it, instead of the CLI
// compiling the Go program for each operation. Progress streams to stdout; a
// JSON summary is written for every run, and a Markdown one is appended to
// $GITHUB_STEP_SUMMARY when GitHub Actions sets it.
package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optrefresh"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/exitcode"
	"github.com/fluodata/talos-pulumi/stacks"
)

// Operations.
const (
	OpPreview = "preview"
	OpUp      = "up"
	OpRefresh = "refresh"
	OpDestroy = "destroy"
	OpOutputs = "outputs"
	// OpBackup takes a backup of the stack (Env.Backup); OpBackups lists
	// them.
	OpBackup  = "backup"
	OpBackups = "backups"
	// OpRestore brings the stack's cluster back from a backup
	// (Env.Restore).
	OpRestore = "restore"
)

// Ops lists the operations in the order the usage text shows them.
var Ops = []string{OpPreview, OpUp, OpRefresh, OpDestroy, OpOutputs, OpBackup, OpBackups, OpRestore}

// Options select what to run.
type Options struct {
	Op    string
	Stack string
	// WorkDir holds Pulumi.yaml and the stack files.
	WorkDir string
	// BackendURL is where state lives; "" is the local file backend in
	// <WorkDir>/.pulumi-state.
	BackendURL string
	// SecretsProvider is used when a stack is created ("" = passphrase).
	SecretsProvider string
	// Create makes the stack if it does not exist yet.
	Create bool
	// SummaryFile receives the JSON summary ("" = none).
	SummaryFile string
	// OutDir receives kubeconfig and talosconfig (outputs; "" =
	// <WorkDir>/.access/<stack>).
	OutDir string
	// ExitOnChanges makes a preview with pending changes exit with
	// exitcode.ChangesPending (for pull-request checks).
	ExitOnChanges bool
	// Restore: the backup's name ("" or "latest": the newest) and the age
	// identity file ("": from the environment, see Env.Restore).
	BackupName, Identity string
	// ResetControlPlanes lets a restore into a stack whose cluster runs
	// reset its control planes' EPHEMERAL (their etcd) once etcd has lost
	// its quorum, and recover etcd from the backup, the workers untouched.
	ResetControlPlanes bool
}

// ProgramFunc builds the Pulumi program for a stack's config and the
// operation it runs for (OpPreview, ...), cancelled with ctx: the engine
// tells a program nothing about the operation (a whole-stack destroy must
// take no node out of the cluster) or about a cancellation (the program's
// hooks must stop waiting).
type ProgramFunc func(ctx context.Context, src stacks.Source, op string) pulumi.RunFunc

// Env is what the driver runs with; tests replace parts of it.
type Env struct {
	// Pulumi is the CLI (a fake in tests).
	Pulumi auto.PulumiCommand
	// Program is the Pulumi program, run inline.
	Program ProgramFunc
	// Validate checks the stack's config before anything runs (nil: no
	// check, for programs other than this project's).
	Validate func(stacks.Source) error
	// Access prepares the way to the cluster's nodes for an operation (the
	// ssh-proxy helper): the environment pulumi and its providers get, and
	// what to call when the operation is over. nil: nothing to prepare.
	Access func(ctx context.Context, src stacks.Source) (env map[string]string, stop func(), err error)
	// Backup runs OpBackup and OpBackups with the stack opened and its
	// config validated (nil: they are refused).
	Backup func(ctx context.Context, req BackupRequest) error
	// Restore runs OpRestore with the stack opened (created when told to)
	// and its config validated (nil: it is refused).
	Restore func(ctx context.Context, req RestoreRequest) error
	Stdout  io.Writer
	Stderr  io.Writer
	Getenv  func(string) string
	Now     func() time.Time
}

// Summary is the machine-readable record of one run.
type Summary struct {
	Operation       string         `json:"operation"`
	Stack           string         `json:"stack"`
	Result          string         `json:"result"` // succeeded, failed, cancelled
	ExitCode        int            `json:"exitCode"`
	Changes         map[string]int `json:"changes"`
	ChangesPending  bool           `json:"changesPending"`
	DurationSeconds float64        `json:"durationSeconds"`
	Outputs         []string       `json:"outputs"`
	Error           string         `json:"error,omitempty"`
}

// Results.
const (
	resultSucceeded = "succeeded"
	resultFailed    = "failed"
	resultCancelled = "cancelled"
)

// failure is an error with its exit code and a one-line explanation.
type failure struct {
	code int
	msg  string
	err  error
}

func (f *failure) Error() string { return f.msg }
func (f *failure) Unwrap() error { return f.err }

func fail(code int, err error, format string, args ...any) *failure {
	return &failure{code: code, msg: fmt.Sprintf(format, args...), err: err}
}

// Run performs one operation and returns the exit code. It always writes the
// summary (when asked to), also after a failure.
func Run(ctx context.Context, o Options, env Env) int {
	start := env.Now()
	sum := Summary{Operation: o.Op, Stack: o.Stack, Changes: map[string]int{}, Outputs: []string{}}
	err := run(ctx, o, env, &sum)
	sum.DurationSeconds = env.Now().Sub(start).Round(time.Millisecond).Seconds()
	sum.Result, sum.ExitCode = resultSucceeded, exitcode.OK
	if err != nil {
		var f *failure
		if !errors.As(err, &f) {
			f = classify(ctx, o, err)
		}
		sum.Result, sum.ExitCode, sum.Error = resultFailed, f.code, f.msg
		if f.code == exitcode.Cancelled {
			sum.Result = resultCancelled
		}
		if f.code != exitcode.ChangesPending {
			_, _ = fmt.Fprintf(env.Stderr, "stackctl %s: %s\n", o.Op, f.msg)
		}
	}
	if werr := writeSummaries(o, env, sum); werr != nil {
		_, _ = fmt.Fprintf(env.Stderr, "stackctl %s: %v\n", o.Op, werr)
		if sum.ExitCode == exitcode.OK {
			return exitcode.Failed
		}
	}
	return sum.ExitCode
}

func run(ctx context.Context, o Options, env Env, sum *Summary) error {
	if !slices.Contains(Ops, o.Op) {
		return fail(exitcode.Usage, nil, "unknown operation %q (known: %s)", o.Op, strings.Join(Ops, ", "))
	}
	if o.Stack == "" {
		return fail(exitcode.Usage, nil, "a stack name is required (--stack or STACK)")
	}
	workDir, err := filepath.Abs(o.WorkDir)
	if err != nil {
		return fail(exitcode.Usage, err, "working directory %q: %v", o.WorkDir, err)
	}
	backend := o.BackendURL
	if backend == "" {
		backend = "file://" + filepath.Join(workDir, ".pulumi-state")
	}
	if dir, ok := strings.CutPrefix(backend, "file://"); ok {
		// The state holds secrets (encrypted) and the stack's history.
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fail(exitcode.Failed, err, "cannot create the state directory %s: %v", dir, err)
		}
	}
	if err := checkPassphrase(workDir, o, env.Getenv); err != nil {
		return err
	}

	// The program runs with the config the driver read and validated; it
	// is built before any operation can call it.
	var runFn pulumi.RunFunc
	program := func(ctx *pulumi.Context) error {
		if runFn == nil {
			return errors.New("stackctl: the program ran before its config was read")
		}
		return runFn(ctx)
	}
	wsOpts := []auto.LocalWorkspaceOption{
		auto.WorkDir(workDir),
		auto.Pulumi(env.Pulumi),
		auto.Program(program),
		auto.EnvVars(map[string]string{"PULUMI_BACKEND_URL": backend, "PULUMI_SKIP_UPDATE_CHECK": "true"}),
	}
	if o.SecretsProvider != "" {
		wsOpts = append(wsOpts, auto.SecretsProvider(o.SecretsProvider))
	}
	ws, err := auto.NewLocalWorkspace(ctx, wsOpts...)
	if err != nil {
		return fail(exitcode.Failed, err, "cannot open the Pulumi project in %s: %v", workDir, err)
	}
	stack, err := openStack(ctx, o, ws, backend)
	if err != nil {
		return err
	}

	if o.Op == OpOutputs {
		return writeOutputs(ctx, stack, o, workDir, env, sum)
	}

	cfg, err := stack.GetAllConfig(ctx)
	if err != nil {
		return classify(ctx, o, fmt.Errorf("unable to read the stack's config: %w", err))
	}
	proj, err := ws.ProjectSettings(ctx)
	if err != nil {
		return fail(exitcode.Failed, err, "cannot read Pulumi.yaml in %s: %v", workDir, err)
	}
	src := sourceFromConfig(string(proj.Name), cfg)
	// How each value is stored, so that every credential is checked on its
	// own (best effort: the config may come from elsewhere).
	_ = src.ReadStackFile(workDir, o.Stack)
	if env.Validate != nil {
		if err := env.Validate(src); err != nil {
			return fail(exitcode.BadConfig, err, "%v", err)
		}
	}
	if o.Op == OpBackup || o.Op == OpBackups {
		if env.Backup == nil {
			return fail(exitcode.Usage, nil, "%s is not available in this program", o.Op)
		}
		if err := env.Backup(ctx, BackupRequest{Op: o.Op, Stack: &stack, Source: src, WorkDir: workDir, Name: o.Stack}); err != nil {
			if ctx.Err() != nil {
				return fail(exitcode.Cancelled, err, "cancelled: %v (a backup is one object, written whole or not at all: the target holds no part of this one)", err)
			}
			return classify(ctx, o, err)
		}
		return nil
	}
	if o.Op == OpRestore {
		if env.Restore == nil {
			return fail(exitcode.Usage, nil, "%s is not available in this program", o.Op)
		}
		runFn = env.Program(ctx, src, OpUp)
		req := RestoreRequest{
			Stack: &stack, Source: src, WorkDir: workDir, Name: o.Stack, BackupName: o.BackupName, Identity: o.Identity,
			ResetControlPlanes: o.ResetControlPlanes,
			Up: func(ctx context.Context, exclude []string, vars map[string]string) error {
				return restoreUp(ctx, ws, stack, env, sum, exclude, vars)
			},
		}
		if err := env.Restore(ctx, req); err != nil {
			if ctx.Err() != nil {
				return fail(exitcode.Cancelled, err, "cancelled: %v; run restore again to go on (it does not seed the state twice, and never recovers over a running etcd)", err)
			}
			return classify(ctx, o, err)
		}
		return nil
	}
	runFn = env.Program(ctx, src, o.Op)
	if env.Access != nil {
		vars, stop, err := env.Access(ctx, src)
		if err != nil {
			return fail(exitcode.Failed, err, "cannot reach the cluster's nodes: %v", err)
		}
		if stop != nil {
			defer stop()
		}
		if len(vars) > 0 {
			if err := ws.SetEnvVars(vars); err != nil {
				return fail(exitcode.Failed, err, "%v", err)
			}
		}
	}
	return operate(ctx, o, stack, env, sum)
}

// BackupRequest is an OpBackup or OpBackups of an opened stack whose config
// is valid.
type BackupRequest struct {
	Op      string
	Stack   StackState
	Source  stacks.Source
	WorkDir string
	// Name is the stack's name.
	Name string
}

// RestoreRequest is an OpRestore of an opened stack whose config is valid.
type RestoreRequest struct {
	Stack   RestoreStack
	Source  stacks.Source
	WorkDir string
	// Name is the stack's name; BackupName, Identity and
	// ResetControlPlanes are Options'.
	Name, BackupName, Identity string
	ResetControlPlanes         bool
	// Up runs the program's `up` with the proxy variables vars (nil: none);
	// the resources of exclude and their dependents stay as the state has
	// them.
	Up func(ctx context.Context, exclude []string, vars map[string]string) error
}

// RestoreStack is what a restore does with a stack: auto.Stack.
type RestoreStack interface {
	StackState
	Import(ctx context.Context, state apitype.UntypedDeployment) error
}

// restoreUp is one `up` of a restore, counted in the summary.
func restoreUp(ctx context.Context, ws auto.Workspace, stack auto.Stack, env Env, sum *Summary, exclude []string, vars map[string]string) error {
	if len(vars) > 0 {
		if err := ws.SetEnvVars(vars); err != nil {
			return err
		}
	}
	opts := []optup.Option{optup.ProgressStreams(env.Stdout), optup.ErrorProgressStreams(env.Stderr)}
	if len(exclude) > 0 {
		opts = append(opts, optup.Exclude(exclude), optup.ExcludeDependents())
	}
	res, err := stack.Up(ctx, opts...)
	if err != nil {
		return err
	}
	record(sum, res.Summary, res.Outputs)
	return nil
}

// StackState is what a backup reads of a stack: auto.Stack.
type StackState interface {
	Outputs(ctx context.Context) (auto.OutputMap, error)
	Export(ctx context.Context) (apitype.UntypedDeployment, error)
}

// openStack selects the stack, or creates it when told to.
func openStack(ctx context.Context, o Options, ws auto.Workspace, backend string) (auto.Stack, error) {
	if o.Create {
		s, err := auto.UpsertStack(ctx, o.Stack, ws)
		if err != nil {
			return s, classify(ctx, o, fmt.Errorf("unable to create or select stack %s: %w", o.Stack, err))
		}
		return s, nil
	}
	s, err := auto.SelectStack(ctx, o.Stack, ws)
	if auto.IsSelectStack404Error(err) {
		return s, fail(exitcode.NoStack, err, "stack %s does not exist in %s; create it with --create (or `make init STACK=%s`), or set PULUMI_BACKEND_URL to the backend that has it", o.Stack, backend, o.Stack)
	}
	if err != nil {
		return s, classify(ctx, o, fmt.Errorf("unable to select stack %s: %w", o.Stack, err))
	}
	return s, nil
}

// IsChange reports whether a step of op changes the stack: a resource that
// stays the same, a read of external state (a stack's outputs, say) and a
// refresh of the state change nothing to review.
func IsChange(op apitype.OpType) bool {
	switch op {
	case apitype.OpSame, apitype.OpRead, apitype.OpRefresh:
		return false
	}
	return true
}

func operate(ctx context.Context, o Options, stack auto.Stack, env Env, sum *Summary) error {
	out, errOut := env.Stdout, env.Stderr
	switch o.Op {
	case OpPreview:
		res, err := stack.Preview(ctx, optpreview.ProgressStreams(out), optpreview.ErrorProgressStreams(errOut))
		if err != nil {
			return err
		}
		for op, n := range res.ChangeSummary {
			sum.Changes[string(op)] = n
			if IsChange(op) && n > 0 {
				sum.ChangesPending = true
			}
		}
		if o.ExitOnChanges && sum.ChangesPending {
			return fail(exitcode.ChangesPending, nil, "changes pending: %s", formatChanges(sum.Changes))
		}
		return nil
	case OpUp:
		res, err := stack.Up(ctx, optup.ProgressStreams(out), optup.ErrorProgressStreams(errOut))
		if err != nil {
			return err
		}
		record(sum, res.Summary, res.Outputs)
		return nil
	case OpRefresh:
		res, err := stack.Refresh(ctx, optrefresh.ProgressStreams(out), optrefresh.ErrorProgressStreams(errOut))
		if err != nil {
			return err
		}
		record(sum, res.Summary, nil)
		return nil
	default: // OpDestroy
		state, err := stack.Export(ctx)
		if err != nil {
			return fmt.Errorf("unable to export the stack's state: %w", err)
		}
		withProgram, err := DestroyRunsProgram(state.Deployment)
		if err != nil {
			return err
		}
		res, err := stack.Destroy(ctx, optdestroy.RunProgram(withProgram),
			optdestroy.ProgressStreams(out), optdestroy.ErrorProgressStreams(errOut))
		if err != nil {
			return err
		}
		record(sum, res.Summary, nil)
		return nil
	}
}

func record(sum *Summary, s auto.UpdateSummary, outputs auto.OutputMap) {
	if s.ResourceChanges != nil {
		for op, n := range *s.ResourceChanges {
			sum.Changes[op] += n // a restore runs two
		}
	}
	sum.Outputs = sum.Outputs[:0]
	for name := range outputs {
		sum.Outputs = append(sum.Outputs, name)
	}
	slices.Sort(sum.Outputs)
}

// classify maps an Automation API error to an exit code and one line.
func classify(ctx context.Context, o Options, err error) *failure {
	var f *failure
	switch {
	case errors.As(err, &f):
		return f
	case ctx.Err() != nil:
		return fail(exitcode.Cancelled, err, "cancelled: pulumi was sent one interrupt, finished the steps in flight, saved the state and released the stack's lock; run %s again to continue", o.Op)
	case auto.IsConcurrentUpdateError(err):
		return fail(exitcode.Locked, err, "stack %s is locked by another update; wait for it to finish (if it crashed: `pulumi cancel` on Pulumi Cloud, or remove the lock under .pulumi/locks in a file or bucket backend)", o.Stack)
	case passphraseProblem(err.Error()):
		return fail(exitcode.Passphrase, err, "the secrets passphrase is missing or wrong: set PULUMI_CONFIG_PASSPHRASE (or PULUMI_CONFIG_PASSPHRASE_FILE) to the one the stack was created with")
	default:
		return fail(exitcode.Failed, err, "%s", lastLines(err.Error()))
	}
}

func passphraseProblem(text string) bool {
	for _, s := range []string{"passphrase must be set", "incorrect passphrase", "PULUMI_CONFIG_PASSPHRASE"} {
		if strings.Contains(text, s) {
			return true
		}
	}
	return false
}

// lastLines keeps an Automation API error short: its first line and the
// CLI's last stderr lines (the engine repeats the whole log otherwise).
func lastLines(text string) string {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) <= 8 {
		return strings.Join(lines, "\n")
	}
	return lines[0] + "\n...\n" + strings.Join(lines[len(lines)-6:], "\n")
}

// checkPassphrase fails early, with one line, when a passphrase stack would
// make the CLI fail on its first secret.
func checkPassphrase(workDir string, o Options, getenv func(string) string) error {
	if getenv("PULUMI_CONFIG_PASSPHRASE") != "" || getenv("PULUMI_CONFIG_PASSPHRASE_FILE") != "" {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(workDir, "Pulumi."+o.Stack+".yaml")) //nolint:gosec // the stack file of the operator's project
	usesPassphrase := err == nil && strings.Contains(string(data), "encryptionsalt:")
	newPassphraseStack := errors.Is(err, os.ErrNotExist) && o.Create && (o.SecretsProvider == "" || o.SecretsProvider == "passphrase")
	if usesPassphrase || newPassphraseStack {
		return fail(exitcode.Passphrase, nil, "PULUMI_CONFIG_PASSPHRASE (or PULUMI_CONFIG_PASSPHRASE_FILE) is not set; stack %s keeps its secrets encrypted with a passphrase: pass it from your CI secret store", o.Stack)
	}
	return nil
}

// sourceFromConfig turns the CLI's view of the stack config into the
// program's config source (the same the CLI hands a program it runs).
func sourceFromConfig(project string, cfg auto.ConfigMap) stacks.Source {
	src := stacks.Source{Project: project, Values: map[string]string{}}
	for k, v := range cfg {
		src.Values[k] = v.Value
		if v.Secret {
			src.SecretKeys = append(src.SecretKeys, k)
		}
	}
	slices.Sort(src.SecretKeys)
	return src
}

func formatChanges(c map[string]int) string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d to %s", c[k], k))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// writeSummaries writes the JSON summary and, under GitHub Actions, appends
// a Markdown one to the job summary.
func writeSummaries(o Options, env Env, sum Summary) error {
	if o.SummaryFile != "" {
		data, err := json.MarshalIndent(sum, "", "  ")
		if err != nil {
			return fmt.Errorf("unable to encode the summary: %w", err)
		}
		if err := os.WriteFile(o.SummaryFile, append(data, '\n'), 0o644); err != nil { //nolint:gosec // names and counts only, no secrets
			return fmt.Errorf("unable to write the summary %s: %w", o.SummaryFile, err)
		}
	}
	if path := env.Getenv("GITHUB_STEP_SUMMARY"); path != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644) //nolint:gosec // GitHub's own file
		if err != nil {
			return fmt.Errorf("unable to open the job summary: %w", err)
		}
		_, werr := io.WriteString(f, Markdown(sum))
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return fmt.Errorf("unable to write the job summary: %w", werr)
		}
	}
	return nil
}

// Markdown renders the summary for a GitHub job summary or a PR comment.
func Markdown(s Summary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### `pulumi %s` on stack `%s`: %s\n\n", s.Operation, s.Stack, s.Result)
	fmt.Fprintf(&b, "| Changes | Duration |\n|---|---|\n| %s | %.0f s |\n", formatChanges(s.Changes), s.DurationSeconds)
	if s.Operation == OpPreview {
		if s.ChangesPending {
			b.WriteString("\nChanges are pending; merging runs `up`.\n")
		} else {
			b.WriteString("\nNo changes.\n")
		}
	}
	if len(s.Outputs) > 0 {
		fmt.Fprintf(&b, "\nOutputs: `%s`\n", strings.Join(s.Outputs, "`, `"))
	}
	if s.Error != "" {
		fmt.Fprintf(&b, "\n```\n%s\n```\n", s.Error)
	}
	return b.String() + "\n"
}
