package driver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/driver"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/driver/drivertest"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/exitcode"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// project is a scratch project directory: the repo's Pulumi.yaml and a
// passphrase stack file.
func project(t *testing.T, stack string) string {
	t.Helper()
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(stackstest.RepoRoot(t), "Pulumi.yaml"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), data, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi."+stack+".yaml"), []byte("encryptionsalt: v1:abc\nconfig: {}\n"), 0o600))
	return dir
}

type harness struct {
	fake           *drivertest.Pulumi
	opts           driver.Options
	access         func(context.Context, stacks.Source) (map[string]string, func(), error)
	env            map[string]string
	stdout, stderr bytes.Buffer
	programSrc     *stacks.Source
	programOp      string
}

func newHarness(t *testing.T, op string) *harness {
	t.Helper()
	dir := project(t, "prod")
	return &harness{
		fake: &drivertest.Pulumi{
			Stacks: []string{"prod"}, Config: stackstest.ConfigJSON(t, stackstest.Example(t, stackstest.VPSExample)),
			Changes: map[string]int{"create": 3, "same": 2},
			Outputs: map[string]any{"kubeconfig": "apiVersion: v1\nkind: Config\n", "talosconfig": "context: prod\n", "endpoint": "https://203.0.113.10:6443",
				"machineConfigurations": map[string]any{"cp-0": "version: v1alpha1 # cp-0\n", "worker-0": "version: v1alpha1 # worker-0\n"}},
			Secret: []string{"kubeconfig", "talosconfig", "machineConfigurations"},
		},
		opts: driver.Options{Op: op, Stack: "prod", WorkDir: dir, SummaryFile: filepath.Join(dir, "summary.json")},
		env:  map[string]string{"PULUMI_CONFIG_PASSPHRASE": "correct horse"},
	}
}

func (h *harness) run(ctx context.Context) int {
	return driver.Run(ctx, h.opts, driver.Env{
		Pulumi: h.fake,
		Program: func(_ context.Context, src stacks.Source, op string) pulumi.RunFunc {
			h.programSrc, h.programOp = &src, op
			return func(*pulumi.Context) error { return nil }
		},
		Validate: func(src stacks.Source) error {
			_, d := program.Validate(src) // as stackctl's own
			return d.Err()
		},
		Access: h.access,
		Stdout: &h.stdout, Stderr: &h.stderr,
		Getenv: func(k string) string { return h.env[k] },
		Now:    time.Now,
	})
}

func (h *harness) summary(t *testing.T) driver.Summary {
	t.Helper()
	raw, err := os.ReadFile(h.opts.SummaryFile)
	require.NoError(t, err)
	var s driver.Summary
	require.NoError(t, json.Unmarshal(raw, &s))
	return s
}

// opCall is the invocation of the operation itself.
func (h *harness) opCall(t *testing.T, op string) []string {
	t.Helper()
	c, ok := h.fake.Find(op)
	require.True(t, ok, "pulumi %s was run: %v", op, h.fake.Calls())
	return c.Args
}

// A destroy runs the program only while the stack holds a resource of a
// provider: on a stack destroyed already, Pulumi's destroy --run-program
// would record the program's components and leave them (DestroyRunsProgram).
func TestADestroyOfAnEmptyStackDoesNotRunTheProgram(t *testing.T) {
	t.Parallel()
	h := newHarness(t, driver.OpDestroy)
	h.fake.State = []byte(`{"version":3,"deployment":{"resources":[{"urn":"urn:pulumi:prod::talos-cluster::talos-cluster:index:ProxmoxCluster::homelab","custom":false}]}}`)
	require.Equal(t, exitcode.OK, h.run(context.Background()), h.stderr.String())
	args := h.opCall(t, driver.OpDestroy)
	assert.Contains(t, args, "--run-program=false")
	assert.NotContains(t, args, "--run-program=true")
}

func TestOperationsRunWithTheRightArguments(t *testing.T) {
	t.Parallel()
	cases := []struct {
		op   string
		want []string // arguments that must be there
		not  []string
	}{
		{driver.OpPreview, []string{"preview", "--exec-kind=auto.inline", "--stack", "prod"}, []string{"--yes"}},
		{driver.OpUp, []string{"up", "--yes", "--skip-preview", "--exec-kind=auto.inline", "--stack", "prod"}, nil},
		{driver.OpRefresh, []string{"refresh", "--yes", "--skip-preview", "--stack", "prod"}, nil},
		{driver.OpDestroy, []string{"destroy", "--yes", "--skip-preview", "--run-program=true", "--exec-kind=auto.inline", "--stack", "prod"}, nil},
	}
	for _, c := range cases {
		t.Run(c.op, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, c.op)
			require.Equal(t, exitcode.OK, h.run(context.Background()), h.stderr.String())
			args := h.opCall(t, c.op)
			for _, w := range c.want {
				assert.Contains(t, args, w)
			}
			for _, n := range c.not {
				assert.NotContains(t, args, n)
			}
			if c.op != driver.OpRefresh {
				assert.True(t, slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--client=") }),
					"the program runs inline in the driver (built once), not compiled by the CLI: %v", args)
			}
			// The stack was selected, not created, and the backend is the
			// local file backend in the project by default.
			sel, ok := h.fake.Find("stack", "select")
			require.True(t, ok)
			assert.Contains(t, sel.Env, "PULUMI_BACKEND_URL=file://"+filepath.Join(h.opts.WorkDir, ".pulumi-state"))
			_, created := h.fake.Find("stack", "init")
			assert.False(t, created)
			info, err := os.Stat(filepath.Join(h.opts.WorkDir, ".pulumi-state"))
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o700), info.Mode().Perm())

			require.NotNil(t, h.programSrc, "the program gets the stack's config")
			assert.Equal(t, "talos-cluster", h.programSrc.Project)
			assert.Contains(t, h.programSrc.SecretKeys, "talos-cluster:nodes")
			assert.Equal(t, c.op, h.programOp, "the program knows its operation: a destroy takes no node out")

			s := h.summary(t)
			assert.Equal(t, c.op, s.Operation)
			assert.Equal(t, "prod", s.Stack)
			assert.Equal(t, "succeeded", s.Result)
			assert.Equal(t, 0, s.ExitCode)
			assert.Equal(t, map[string]int{"create": 3, "same": 2}, s.Changes)
			assert.GreaterOrEqual(t, s.DurationSeconds, 0.0)
			assert.Contains(t, h.stdout.String(), "Resources:", "pulumi's progress is streamed")
			if c.op == driver.OpUp {
				assert.Equal(t, []string{"endpoint", "kubeconfig", "machineConfigurations", "talosconfig"}, s.Outputs)
			}
			if c.op == driver.OpPreview {
				assert.True(t, s.ChangesPending)
			}
		})
	}
}

func TestBackendAndCreate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, driver.OpUp)
	h.fake.Stacks = nil
	h.opts.Create = true
	h.opts.BackendURL = "s3://bucket/state"
	h.opts.SecretsProvider = "awskms://alias/ci"
	require.Equal(t, exitcode.OK, h.run(context.Background()), h.stderr.String())
	initCall, ok := h.fake.Find("stack", "init")
	require.True(t, ok, "the stack is created on first use with --create")
	assert.Equal(t, []string{"stack", "init", "prod", "--secrets-provider", "awskms://alias/ci"}, initCall.Args[:5])
	assert.Contains(t, initCall.Env, "PULUMI_BACKEND_URL=s3://bucket/state")
	assert.NoDirExists(t, filepath.Join(h.opts.WorkDir, ".pulumi-state"))
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		op    string
		setup func(h *harness)
		code  int
		msg   string
	}{
		{"unknown stack", driver.OpUp, func(h *harness) { h.fake.Stacks = nil }, exitcode.NoStack, "stack prod does not exist in file://"},
		{"locked stack", driver.OpUp, func(h *harness) {
			h.fake.Fail, h.fake.Stderr = "up", "error: the stack is currently locked by 1 lock(s). Either wait for the other process(es) to end or delete the lock file"
		}, exitcode.Locked, "stack prod is locked by another update"},
		{"missing passphrase", driver.OpUp, func(h *harness) { delete(h.env, "PULUMI_CONFIG_PASSPHRASE") },
			exitcode.Passphrase, "PULUMI_CONFIG_PASSPHRASE (or PULUMI_CONFIG_PASSPHRASE_FILE) is not set"},
		{"wrong passphrase", driver.OpPreview, func(h *harness) {
			h.fake.Fail, h.fake.Stderr = "preview", "error: getting secrets manager: incorrect passphrase"
		}, exitcode.Passphrase, "passphrase is missing or wrong"},
		{"invalid config", driver.OpUp, func(h *harness) {
			h.fake.Config = []byte(`{"talos-cluster:platform":{"value":"vps","secret":false}}`)
		}, exitcode.BadConfig, "cluster.name: is required"},
		{"failing update", driver.OpUp, func(h *harness) {
			h.fake.Fail, h.fake.Stderr = "up", "error: talos-install: refused: install disk /dev/sda is in use"
		}, exitcode.Failed, "install disk /dev/sda is in use"},
		{"pending changes in a PR check", driver.OpPreview, func(h *harness) { h.opts.ExitOnChanges = true },
			exitcode.ChangesPending, "changes pending: 3 to create, 2 to same"},
		{"no stack name", driver.OpUp, func(h *harness) { h.opts.Stack = "" }, exitcode.Usage, "a stack name is required"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, c.op)
			c.setup(h)
			code := h.run(context.Background())
			assert.Equal(t, c.code, code, "stderr: %s", h.stderr.String())
			s := h.summary(t)
			assert.Equal(t, c.code, s.ExitCode)
			assert.Contains(t, s.Error, c.msg)
			assert.Equal(t, "failed", s.Result)
			if c.code != exitcode.ChangesPending {
				firstLine, _, _ := strings.Cut(h.stderr.String(), "\n")
				if c.code != exitcode.Failed && c.code != exitcode.BadConfig {
					assert.Contains(t, firstLine, c.msg, "one line says what happened")
				}
			}
		})
	}
}

// Reads (of a stack's outputs, a data source) and sames are no changes: an
// unchanged stack passes a PR check, a changed one does not (item 20 of
// issue 23: a read counted as a change, so every PR check failed).
func TestPreviewExitCodeOnChanges(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		changes map[string]int
		code    int
	}{
		"unchanged, with a read":  {map[string]int{"read": 1, "same": 34}, exitcode.OK},
		"unchanged, refreshed":    {map[string]int{"refresh": 2, "same": 3}, exitcode.OK},
		"one update":              {map[string]int{"update": 1, "same": 34}, exitcode.ChangesPending},
		"a read discarded":        {map[string]int{"discard": 1, "same": 34}, exitcode.ChangesPending},
		"a replacement and reads": {map[string]int{"replace": 1, "read": 1}, exitcode.ChangesPending},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, driver.OpPreview)
			h.opts.ExitOnChanges = true
			h.fake.Changes = tc.changes
			assert.Equal(t, tc.code, h.run(context.Background()), "stderr: %s", h.stderr.String())
			assert.Equal(t, tc.code != exitcode.OK, h.summary(t).ChangesPending)
		})
	}
}

// Ctrl-C during an update cancels the operation's context: the CLI (here the
// fake) is stopped, the run says so and exits 130.
func TestCancellation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, driver.OpUp)
	h.fake.Block, h.fake.Started = "up", make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() { done <- h.run(ctx) }()
	<-h.fake.Started
	cancel()
	select {
	case code := <-done:
		assert.Equal(t, exitcode.Cancelled, code)
	case <-time.After(30 * time.Second):
		t.Fatal("the driver did not return after cancellation")
	}
	s := h.summary(t)
	assert.Equal(t, "cancelled", s.Result)
	assert.Contains(t, s.Error, "released the stack's lock")
}

func TestOutputsWritesAccessFiles(t *testing.T) {
	t.Parallel()
	h := newHarness(t, driver.OpOutputs)
	out := filepath.Join(h.opts.WorkDir, "access")
	require.NoError(t, os.MkdirAll(out, 0o755)) // an existing, too open directory is tightened
	h.opts.OutDir = out
	require.Equal(t, exitcode.OK, h.run(context.Background()), h.stderr.String())
	info, err := os.Stat(out)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), info.Mode().Perm())
	for name, want := range map[string]string{"kubeconfig": "apiVersion: v1\nkind: Config\n", "talosconfig": "context: prod\n"} {
		p := filepath.Join(out, name)
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		assert.Equal(t, want, string(data), "the secret value itself, not [secret]")
		info, err := os.Stat(p)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), name)
	}
	assert.Contains(t, h.stdout.String(), "export KUBECONFIG="+filepath.Join(out, "kubeconfig"))
	for _, node := range []string{"cp-0", "worker-0"} {
		p := filepath.Join(out, driver.MachineConfigDir, node+".yaml")
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		assert.Equal(t, "version: v1alpha1 # "+node+"\n", string(data))
		info, err := os.Stat(p)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), node)
	}
	entries, _ := os.ReadDir(out)
	assert.Len(t, entries, 3, "no temporary files left")

	// A stack without outputs yet: an error, and the previous files stay.
	h2 := newHarness(t, driver.OpOutputs)
	h2.opts.OutDir = out
	h2.fake.Outputs = map[string]any{"endpoint": "x"}
	assert.Equal(t, exitcode.Failed, h2.run(context.Background()))
	assert.Contains(t, h2.stderr.String(), "has no kubeconfig output yet: run up first")
	data, err := os.ReadFile(filepath.Join(out, "kubeconfig"))
	require.NoError(t, err)
	assert.Equal(t, "apiVersion: v1\nkind: Config\n", string(data))
}

// The machine configs' directory is the cluster as the last up left it: a
// node that left loses its file, a name that is no node name is refused
// before anything is written.
func TestWriteMachineConfigs(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "machineconfig")
	require.NoError(t, driver.WriteMachineConfigs(dir, map[string]string{"cp-0": "a\n", "worker-0": "b\n"}))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("the operator's"), 0o600))
	require.NoError(t, driver.WriteMachineConfigs(dir, map[string]string{"cp-0": "c\n"}))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{"cp-0.yaml", "notes.txt"}, names, "worker-0 left; other files stay")
	data, err := os.ReadFile(filepath.Join(dir, "cp-0.yaml"))
	require.NoError(t, err)
	assert.Equal(t, "c\n", string(data))

	for _, bad := range []string{"../x", ".hidden", "a/b", ""} {
		err := driver.WriteMachineConfigs(dir, map[string]string{"cp-0": "d\n", bad: "e\n"})
		require.ErrorContains(t, err, "is no node name", "%q", bad)
	}
	require.ErrorContains(t, driver.WriteMachineConfigs(dir, map[string]string{"cp-0": ""}), "node cp-0 has none")
	data, err = os.ReadFile(filepath.Join(dir, "cp-0.yaml"))
	require.NoError(t, err)
	assert.Equal(t, "c\n", string(data), "a refused document writes nothing")
}

func TestGitHubJobSummary(t *testing.T) {
	t.Parallel()
	h := newHarness(t, driver.OpPreview)
	path := filepath.Join(h.opts.WorkDir, "step-summary.md")
	h.env["GITHUB_STEP_SUMMARY"] = path
	require.Equal(t, exitcode.OK, h.run(context.Background()))
	md, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(md), "### `pulumi preview` on stack `prod`: succeeded")
	assert.Contains(t, string(md), "3 to create, 2 to same")
	assert.Contains(t, string(md), "Changes are pending")
}

func TestAccessHelperRunsAroundTheOperation(t *testing.T) {
	t.Parallel()
	for _, op := range []string{driver.OpPreview, driver.OpUp, driver.OpRefresh, driver.OpDestroy, driver.OpOutputs} {
		t.Run(op, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, op)
			var started, stopped bool
			var callsAtStop int
			h.access = func(_ context.Context, src stacks.Source) (map[string]string, func(), error) {
				require.Equal(t, "talos-cluster", src.Project, "the helper gets the stack's config")
				started = true
				return map[string]string{"HTTPS_PROXY": "http://127.0.0.1:4242", "NO_PROXY": "pve.lan"}, func() {
					stopped, callsAtStop = true, len(h.fake.Calls())
				}, nil
			}
			require.Equal(t, exitcode.OK, h.run(context.Background()), h.stderr.String())
			if op == driver.OpOutputs {
				assert.False(t, started, "reading outputs needs no way to the nodes")
				return
			}
			require.True(t, started)
			assert.True(t, stopped, "stopped when the operation is over")
			call, ok := h.fake.Find(op)
			require.True(t, ok)
			assert.Contains(t, call.Env, "HTTPS_PROXY=http://127.0.0.1:4242")
			assert.Contains(t, call.Env, "NO_PROXY=pve.lan")
			assert.GreaterOrEqual(t, callsAtStop, slices.IndexFunc(h.fake.Calls(), func(c drivertest.Call) bool { return c.Args[0] == op })+1,
				"stopped only after pulumi %s ran", op)
		})
	}

	h := newHarness(t, driver.OpUp)
	h.access = func(context.Context, stacks.Source) (map[string]string, func(), error) {
		return nil, nil, errors.New("unable to start the ssh-proxy (SSH to root@pve:22): unable to authenticate")
	}
	assert.Equal(t, exitcode.Failed, h.run(context.Background()))
	assert.Contains(t, h.stderr.String(), "cannot reach the cluster's nodes: unable to start the ssh-proxy (SSH to root@pve:22): unable to authenticate")
	_, ran := h.fake.Find(driver.OpUp)
	assert.False(t, ran, "no update without the way to the nodes")
}

// A restore (driver.Env.Restore) runs its two ups as the program's `up`:
// the first with --exclude <bootstrap> --exclude-dependents and the proxy
// variables the restore gives, the second whole; the summary counts both.
// Cancelled, it says that a new run goes on where this one stopped.
func TestRestoreRunsItsUpsWithTheExcludes(t *testing.T) {
	h := newHarness(t, driver.OpRestore)
	h.opts.Identity, h.opts.BackupName = "/keys/age.txt", "prod/20261126T101010Z.tar.age"
	const boot = "urn:pulumi:prod::talos-cluster::talos:machine/bootstrap:Bootstrap::prod-bootstrap"
	var req driver.RestoreRequest
	restore := func(ctx context.Context, r driver.RestoreRequest) error {
		req = r
		if err := r.Up(ctx, []string{boot}, map[string]string{"HTTPS_PROXY": "http://127.0.0.1:3128"}); err != nil {
			return err
		}
		return r.Up(ctx, nil, nil)
	}
	code := driver.Run(t.Context(), h.opts, driver.Env{
		Pulumi: h.fake,
		Program: func(_ context.Context, _ stacks.Source, op string) pulumi.RunFunc {
			h.programOp = op
			return func(*pulumi.Context) error { return nil }
		},
		Restore: restore,
		Stdout:  &h.stdout, Stderr: &h.stderr, Getenv: func(k string) string { return h.env[k] }, Now: time.Now,
	})
	require.Equal(t, exitcode.OK, code, h.stderr.String())
	assert.Equal(t, driver.OpUp, h.programOp, "the program runs as for up")
	assert.Equal(t, "prod", req.Name)
	assert.Equal(t, "/keys/age.txt", req.Identity)
	assert.Equal(t, "prod/20261126T101010Z.tar.age", req.BackupName)

	var ups []drivertest.Call
	for _, c := range h.fake.Calls() {
		if c.Args[0] == "up" {
			ups = append(ups, c)
		}
	}
	require.Len(t, ups, 2)
	assert.Contains(t, ups[0].Args, "--exclude="+boot)
	assert.Contains(t, ups[0].Args, "--exclude-dependents")
	assert.Contains(t, ups[0].Env, "HTTPS_PROXY=http://127.0.0.1:3128")
	assert.NotContains(t, strings.Join(ups[1].Args, " "), "--exclude")
	var sum driver.Summary
	raw, err := os.ReadFile(h.opts.SummaryFile)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &sum))
	assert.Equal(t, map[string]int{"create": 6, "same": 4}, sum.Changes, "both ups counted")

	// Without the hook, the operation is refused.
	h = newHarness(t, driver.OpRestore)
	assert.Equal(t, exitcode.Usage, h.run(t.Context()))
	assert.Contains(t, h.stderr.String(), "restore is not available")

	// Cancelled during its first up.
	h = newHarness(t, driver.OpRestore)
	h.fake.Block, h.fake.Started = "up", make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-h.fake.Started; cancel() }()
	code = driver.Run(ctx, h.opts, driver.Env{
		Pulumi: h.fake,
		Program: func(context.Context, stacks.Source, string) pulumi.RunFunc {
			return func(*pulumi.Context) error { return nil }
		},
		Restore: restore,
		Stdout:  &h.stdout, Stderr: &h.stderr, Getenv: func(k string) string { return h.env[k] }, Now: time.Now,
	})
	assert.Equal(t, exitcode.Cancelled, code)
	assert.Contains(t, h.stderr.String(), "run restore again to go on")
}
