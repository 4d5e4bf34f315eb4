//go:build integration

package talosprovider_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIntegrationTypeScriptExampleWithTheRealCLI does what a new user of
// the package does with examples/proxmox-typescript, with the real pulumi
// CLI, its Node.js language host, node and npm: in a copy of the example
// (its `packages:` entry pointed at this provider folder), `pulumi install`
// builds the provider from source, generates the TypeScript SDK from its
// schema and compiles it (the SDK's postinstall runs tsc), then installs
// the example's own dependencies; `tsc --noEmit` compiles the example
// against that SDK. The example passes a secret Output (config.requireSecret)
// where the schema keeps an input, so that stays allowed; the same program
// passing an Output where the component takes a plain value (cluster.name)
// no longer compiles. Finally `pulumi preview` runs the program through the
// provider on a local file backend: nothing but the plugins the component
// registers (proxmoxve, talos, command, kubernetes, from PULUMI_HOME or
// downloaded) is needed, no Proxmox host. Skipped, saying so, where pulumi,
// node or npm is not on PATH. The first run builds the provider: minutes.
func TestIntegrationTypeScriptExampleWithTheRealCLI(t *testing.T) {
	for _, tool := range []string{"pulumi", "node", "npm", "npx"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("SKIPPED: %s is not on PATH, so the TypeScript example was not installed and compiled "+
				"(needs the pulumi CLI with its Node.js language host, node and npm)", tool)
		}
	}
	providerDir, err := filepath.Abs("..")
	require.NoError(t, err)
	example := filepath.Join(providerDir, "..", "examples", "proxmox-typescript")
	dir := filepath.Join(t.TempDir(), "proxmox-typescript")
	require.NoError(t, os.CopyFS(dir, os.DirFS(example)))

	project, err := os.ReadFile(filepath.Join(dir, "Pulumi.yaml"))
	require.NoError(t, err)
	const local = "talos-anywhere: ../../provider"
	require.Contains(t, string(project), local, "the example's Pulumi.yaml names the package by the provider folder")
	project = bytes.Replace(project, []byte(local), []byte("talos-anywhere: "+providerDir), 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), project, 0o600))
	// npm would take the newest @pulumi/kubernetes 4.x, and `pulumi
	// install` then fetches that release's plugin for the program's
	// k8s.Provider. This machine is offline with only the plugin this
	// repository pins, so the copy asks for that version; a user online
	// gets the newest release's plugin downloaded.
	k8s := strings.TrimPrefix(pinnedModule(t, filepath.Join(providerDir, "..", "go.mod"), "github.com/pulumi/pulumi-kubernetes/sdk/v4"), "v")
	manifest, err := os.ReadFile(filepath.Join(dir, "package.json"))
	require.NoError(t, err)
	const wanted = `"@pulumi/kubernetes": "^4.32.0"`
	require.Contains(t, string(manifest), wanted, "the example takes any newer 4.x")
	manifest = bytes.Replace(manifest, []byte(wanted), []byte(`"@pulumi/kubernetes": "`+k8s+`"`), 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "package.json"), manifest, 0o600))
	program, err := os.ReadFile(filepath.Join(dir, "index.ts"))
	require.NoError(t, err)
	require.Contains(t, string(program), `apiTokenSecret: config.requireSecret("proxmoxApiTokenSecret")`,
		"the example passes a secret Output where the schema keeps an input")

	home := t.TempDir()
	env := append(os.Environ(),
		"PULUMI_BACKEND_URL=file://"+filepath.Join(home, "state"),
		"PULUMI_CONFIG_PASSPHRASE=integration",
		"PULUMI_SKIP_UPDATE_CHECK=true",
		"NO_COLOR=1",
	)
	require.NoError(t, os.MkdirAll(filepath.Join(home, "state"), 0o700))
	run := func(timeout time.Duration, name string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		t.Logf("%s %s (%s)", name, strings.Join(args, " "), cmd.ProcessState)
		return string(out), err
	}

	start := time.Now()
	out, err := run(20*time.Minute, "pulumi", "install")
	require.NoError(t, err, "pulumi install (SDK generation and its postinstall tsc):\n%s", out)
	t.Logf("pulumi install took %s", time.Since(start).Round(time.Second))
	assert.FileExists(t, filepath.Join(dir, "sdks", "fluodata-talos-anywhere", "bin", "index.js"), "the SDK's postinstall compiled it")
	assert.FileExists(t, filepath.Join(dir, "sdks", "fluodata-talos-anywhere", "bin", "types", "input.d.ts"))

	out, err = run(5*time.Minute, "npx", "--no-install", "tsc", "--noEmit", "--pretty", "false")
	require.NoError(t, err, "the example does not compile against the generated SDK:\n%s", out)

	// An Output where the component needs a plain value is a compile error.
	require.Contains(t, string(program), `name: "homelab",`)
	bad := strings.Replace(string(program), `name: "homelab",`, `name: pulumi.output("homelab"),`, 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "index.ts"), []byte(bad), 0o600))
	out, err = run(5*time.Minute, "npx", "--no-install", "tsc", "--noEmit", "--pretty", "false")
	require.Error(t, err, "an Output given for cluster.name, which the component takes plain, must not compile")
	assert.Contains(t, out, "): error TS2322: Type 'Output<string>' is not assignable to type 'string'.",
		"tsc refuses the Output for a plain string:\n%s", out)
	assert.Equal(t, 1, strings.Count(out, "error TS"), "that is the only error:\n%s", out)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "index.ts"), program, 0o600))

	out, err = run(2*time.Minute, "pulumi", "stack", "init", "it")
	require.NoError(t, err, out)
	out, err = run(2*time.Minute, "pulumi", "config", "set", "--secret", "proxmoxApiTokenSecret", "not-a-real-token")
	require.NoError(t, err, out)
	out, err = run(10*time.Minute, "pulumi", "preview", "--non-interactive")
	require.NoError(t, err, "pulumi preview of the example:\n%s", out)
	for _, want := range []string{
		"talos-anywhere:index:ProxmoxCluster homelab create", "proxmoxve:VM:VirtualMachine homelab-vm-cp-0 create",
		"talos:machine:Secrets homelab-secrets create",
	} {
		assert.Contains(t, out, want, "the preview constructs the component and its children")
	}
	assert.NotContains(t, out, "not-a-real-token", "the token is a secret")
}

// pinnedModule is the version go.mod (at path) requires of module.
func pinnedModule(t *testing.T, path, module string) string {
	t.Helper()
	data, err := os.ReadFile(path) //nolint:gosec // the repository's own go.mod
	require.NoError(t, err)
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == module {
			return f[1]
		}
	}
	t.Fatalf("%s does not require %s", path, module)
	return ""
}
