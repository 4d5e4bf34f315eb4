package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluodata/talos-pulumi/internal/testkit/scripttest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// argLogger is a fake pulumi or stackctl: it writes its name and then each
// argument on a line of its own, NUL-terminated, to $ARG_LOG, prints what
// `stack output` would and succeeds.
const argLogger = `#!/bin/bash
{ printf '%s\0' "$(basename "$0")"; for a in "$@"; do printf '%s\0' "$a"; done; printf '\n'; } >> "$ARG_LOG"
if [ "$1 $2" = "stack output" ]; then echo "# $3"; fi
`

// makeQuoted runs the repository's Makefile in a scratch project with the
// argument-logging pulumi and stackctl, and returns the scratch directory,
// the calls (each the program name and its arguments) and make's output.
func makeQuoted(t *testing.T, args ...string) (dir string, calls [][]string, out string, err error) {
	t.Helper()
	if _, lookErr := exec.LookPath("make"); lookErr != nil {
		t.Skip("make is not installed")
	}
	dir = t.TempDir()
	for _, name := range []string{"Makefile", "Pulumi.yaml"} {
		b, readErr := os.ReadFile(filepath.Join(stackstest.RepoRoot(t), name)) //nolint:gosec // the repository's own files
		require.NoError(t, readErr)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o600))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.test.yaml"), []byte("config: {}\n"), 0o600))
	bin := filepath.Join(dir, "fakes")
	require.NoError(t, os.Mkdir(bin, 0o700))
	for _, name := range []string{"pulumi", "stackctl", "program"} {
		scripttest.Write(t, filepath.Join(bin, name), argLogger)
	}
	log := filepath.Join(dir, "args.log")
	cmd := exec.Command("make", append([]string{"--no-print-directory", "PULUMI=" + filepath.Join(bin, "pulumi"),
		"STACKCTL=" + filepath.Join(bin, "stackctl"), "PROGRAM=" + filepath.Join(bin, "program")}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), "ARG_LOG="+log)
	b, err := cmd.CombinedOutput()
	raw, readErr := os.ReadFile(log) //nolint:gosec // the test's scratch file
	if readErr == nil {
		for _, line := range strings.Split(strings.TrimSuffix(string(raw), "\n"), "\x00\n") {
			calls = append(calls, strings.Split(strings.TrimSuffix(line, "\x00"), "\x00"))
		}
	}
	return dir, calls, string(b), err
}

// Values with shell breakouts, as given to make (make reads $$ as $) and as
// they must reach pulumi or stackctl.
var makeBreakouts = []struct{ make, want string }{
	{`a'b"c`, `a'b"c`},
	{`x'; touch pwned; '`, `x'; touch pwned; '`},
	{`$$(touch pwned)`, `$(touch pwned)`},
	{"`touch pwned`", "`touch pwned`"},
	{`; touch pwned`, `; touch pwned`},
	{`x && touch pwned #`, `x && touch pwned #`},
	{"x\ntouch pwned", "x\ntouch pwned"},
	{`\'; touch pwned; #`, `\'; touch pwned; #`},
	{`"; touch pwned; "`, `"; touch pwned; "`},
}

const lineBreakRefused = "A value with a line break cannot be passed on"

// Every value the Makefile hands to a command reaches it as one argument,
// unchanged, and none of it runs.
func TestMakePassesValuesAsData(t *testing.T) {
	t.Parallel()
	for _, b := range makeBreakouts {
		cases := map[string]struct {
			args []string
			// want is the call expected: the program and its arguments.
			want []string
		}{
			"KEY": {[]string{"secret", "STACK=test", "KEY=" + b.make},
				[]string{"pulumi", "config", "set", "--secret", "--path", "--stack", "test", b.want}},
			"SECRETS": {[]string{"adopt", "STACK=test", "SECRETS=" + b.make},
				[]string{"stackctl", "adopt", "--stack", "test", "--pulumi", "", "--secrets", b.want}},
			"SECRETS_PROVIDER": {[]string{"init", "STACK=test", "SECRETS_PROVIDER=" + b.make},
				[]string{"pulumi", "stack", "select", "--create", "--secrets-provider", b.want, "--stack", "test"}},
		}
		if !strings.ContainsAny(b.want, " \n") { // RELEASES is a list of words
			cases["RELEASES"] = struct {
				args []string
				want []string
			}{[]string{"adopt", "STACK=test", "RELEASES=cilium " + b.make},
				[]string{"stackctl", "adopt", "--stack", "test", "--pulumi", "", "--release", "cilium", "--release", b.want}}
		}
		for name, c := range cases {
			dir, calls, out, err := makeQuoted(t, c.args...)
			assert.NoFileExists(t, filepath.Join(dir, "pwned"), "%s=%q ran as code: %s", name, b.want, out)
			if strings.Contains(b.want, "\n") {
				// make cuts recipe lines at line breaks: it stops instead.
				require.Error(t, err, out)
				assert.Contains(t, out, lineBreakRefused)
				assert.Empty(t, calls)
				continue
			}
			require.NoError(t, err, "%s=%q: %s", name, b.want, out)
			require.Len(t, calls, 1, out)
			got := calls[0]
			if len(got) > 5 && got[4] == "--pulumi" {
				got[5] = "" // the fake's path
			}
			assert.Equal(t, c.want, got, "%s=%q", name, b.want)
		}

		// outputs writes into ACCESS_DIR/STACK whatever ACCESS_DIR holds.
		dir, calls, out, err := makeQuoted(t, "outputs", "STACK=test", "ACCESS_DIR="+b.make)
		assert.NoFileExists(t, filepath.Join(dir, "pwned"), "ACCESS_DIR=%q ran as code: %s", b.want, out)
		if strings.Contains(b.want, "\n") {
			require.Error(t, err, out)
			assert.Contains(t, out, lineBreakRefused)
			continue
		}
		require.NoError(t, err, "ACCESS_DIR=%q: %s", b.want, out)
		require.Len(t, calls, 4, out)
		assert.FileExists(t, filepath.Join(dir, b.want, "test", "kubeconfig"), "ACCESS_DIR=%q", b.want)
		assert.Equal(t, []string{"stackctl", "machine-configs", "--out", b.want + "/test/machineconfig"}, calls[3], "ACCESS_DIR=%q", b.want)
	}
}

// A STACK that is no stack name is refused before anything runs, and a
// breakout in it or in the goals runs nothing.
func TestMakeRefusesAStackThatIsNoName(t *testing.T) {
	t.Parallel()
	for _, b := range makeBreakouts {
		for _, target := range []string{"up", "outputs", "secret", "doctor"} {
			dir, calls, out, err := makeQuoted(t, target, "STACK="+b.make, "KEY=k")
			require.Error(t, err, out)
			if !strings.Contains(out, lineBreakRefused) {
				assert.Contains(t, out, "is not a stack name: letters, digits, '.', '_' and '-' only", "STACK=%q", b.want)
			}
			assert.Empty(t, calls, "nothing runs")
			assert.NoFileExists(t, filepath.Join(dir, "pwned"), "STACK=%q ran as code: %s", b.want, out)
		}
	}
	dir, _, out, err := makeQuoted(t, "up", "x'; touch pwned; '")
	require.Error(t, err)
	assert.Contains(t, out, "STACK is required, e.g. make up x'; touch pwned; ' STACK=proxmox-homelab")
	assert.NoFileExists(t, filepath.Join(dir, "pwned"))
}

// make pulumi passes ARGS to pulumi as the shell splits them, on this
// project's backend; make env prints the line that gives a shell the same
// backend (issue 25: plain pulumi commands from the docs work).
func TestMakePulumiAndEnvUseTheProjectsBackend(t *testing.T) {
	t.Parallel()
	dir, calls, out, err := makeQuoted(t, "pulumi", "ARGS=stack ls --json 'a b'")
	require.NoError(t, err, out)
	require.Equal(t, [][]string{{"pulumi", "stack", "ls", "--json", "a b"}}, calls)
	assert.DirExists(t, filepath.Join(dir, ".pulumi-state"), "the local backend exists before pulumi runs")

	dir, _, out, err = makeQuoted(t, "-s", "env")
	require.NoError(t, err, out)
	cmd := exec.Command("bash", "-c", out+`printf %s "$PULUMI_BACKEND_URL"`)
	cmd.Env = cleanEnv()
	got, err := cmd.Output()
	require.NoError(t, err)
	assert.Equal(t, "file://"+filepath.Join(dir, ".pulumi-state"), string(got))
}
