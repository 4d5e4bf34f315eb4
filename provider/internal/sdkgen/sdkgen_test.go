package sdkgen_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/provider/internal/kubeschema"
	"github.com/fluodata/talos-pulumi/provider/internal/sdkgen"
	"github.com/fluodata/talos-pulumi/provider/talosprovider"
)

// goldenSchema is the package's schema (talosprovider's
// TestSchemaIsCurrent holds it to the provider).
func goldenSchema(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "talosprovider", "testdata", "schema.json"))
	require.NoError(t, err)
	return data
}

// generate writes the language's SDK into a new folder and returns it.
func generate(t *testing.T, language string) string {
	t.Helper()
	files, err := sdkgen.Generate(goldenSchema(t), language)
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), language)
	require.NoError(t, sdkgen.Write(dir, files))
	return dir
}

// run runs a command in dir and fails the test with its output when it
// fails.
func run(t *testing.T, dir string, env []string, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("%s %s (%s)", name, strings.Join(args, " "), time.Since(start).Round(100*time.Millisecond))
	require.NoError(t, err, "%s %s:\n%s", name, strings.Join(args, " "), out)
}

// Each SDK the CLI's generators write, under the package's names.
func TestTheSDKsGenerateFromTheSchema(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ language, file, says string }{
		{"nodejs", "package.json", `"name": "` + talosprovider.NPMPackage + `"`},
		{"go", talosprovider.Name + "/proxmoxCluster.go", "func NewProxmoxCluster("},
		{"python", talosprovider.PythonPackage + "/proxmox_cluster.py", "class ProxmoxCluster("},
	} {
		files, err := sdkgen.Generate(goldenSchema(t), c.language)
		require.NoError(t, err, c.language)
		require.Contains(t, files, c.file, c.language)
		assert.Contains(t, string(files[c.file]), c.says, c.language)
	}
	_, err := sdkgen.Generate(goldenSchema(t), "cobol")
	assert.ErrorContains(t, err, `unable to generate an SDK for "cobol"`)
}

// The Go SDK builds and vets as a module of its own, its dependencies at
// the provider's versions (no download), with a program that makes a
// ProxmoxCluster from a secret, and a VpsCluster from the outputs of a
// server made in the same program (its address, the endpoint built from
// it, a secret patch).
func TestTheGoSDKBuildsWithAProgram(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(generate(t, "go"), talosprovider.Name)
	mod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	require.NoError(t, err)
	var lines []string
	for _, line := range strings.Split(string(mod), "\n") {
		switch {
		case strings.HasPrefix(line, "module "):
			line = "module " + talosprovider.GoImportBase
		case strings.Contains(line, "github.com/fluodata/talos-pulumi"):
			continue // the provider's own module and its replace: not the SDK's
		}
		lines = append(lines, line)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(strings.Join(lines, "\n")), 0o600))
	sum, err := os.ReadFile(filepath.Join("..", "..", "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o600))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "example"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "example", "main.go"), []byte(`package main

import (
	"github.com/pulumi/pulumi-command/sdk/go/command/local"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	ta "`+talosprovider.GoImportBase+`"
)

func main() {
	pulumi.Run(func(ctx *pulumi.Context) error {
		c, err := ta.NewProxmoxCluster(ctx, "homelab", &ta.ProxmoxClusterArgs{
			Cluster:   ta.TalosClusterSettingsArgs{Name: "homelab", TalosVersion: "v1.13.9", Vip: pulumi.StringRef("10.10.0.5")},
			Schematic: ta.ImageSchematicArgs{Extensions: []string{"siderolabs/qemu-guest-agent"}},
			Proxmox: ta.ProxmoxHostSettingsArgs{
				Endpoint: pulumi.String("https://192.168.122.70:8006/"), ApiTokenId: pulumi.String("root@pam!pulumi"),
				ApiTokenSecret: pulumi.ToSecret(pulumi.String("token")).(pulumi.StringOutput),
			},
			Nodes: []ta.ProxmoxNodeArgs{{Name: "cp-0", Role: ta.RoleControlplane, Ip: "10.10.0.10", ProxmoxNode: pulumi.StringRef("pve"), VmId: pulumi.IntRef(110)}},
		})
		if err != nil {
			return err
		}
		ctx.Export("kubeconfig", c.Kubeconfig)
		// A VpsCluster on a server made in the same program: its address
		// is the server's output.
		server, err := local.NewCommand(ctx, "server", &local.CommandArgs{Create: pulumi.String("printf 203.0.113.7")})
		if err != nil {
			return err
		}
		edge, err := ta.NewVpsCluster(ctx, "edge", &ta.VpsClusterArgs{
			Cluster: ta.TalosClusterSettingsArgs{Name: "edge", TalosVersion: "v1.13.9", Endpoint: pulumi.Sprintf("https://%s:6443", server.Stdout)},
			Vps:     ta.VpsSettingsArgs{Gateway: pulumi.StringRef("203.0.113.254")},
			Nodes: []ta.VpsNodeArgs{{
				Name: "cp-0", Role: ta.RoleControlplane, Ip: server.Stdout,
				Patches: pulumi.ToSecret(pulumi.StringArray{pulumi.String("machine: {}")}).(pulumi.StringArrayOutput),
				Rescue:  ta.VpsRescueArgs{Password: pulumi.ToSecret(pulumi.String("rescue")).(pulumi.StringOutput)},
			}},
		})
		if err != nil {
			return err
		}
		ctx.Export("edgeEndpoint", edge.Endpoint)
		return nil
	})
}
`), 0o600))
	env := append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod", "GOWORK=off")
	run(t, dir, env, "go", "build", "./...")
	run(t, dir, env, "go", "vet", "./...")
}

// The Python SDK byte-compiles (its import needs the pulumi package from
// PyPI: make integration's TestIntegrationPythonSDK).
func TestThePythonSDKCompiles(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("SKIPPED: python3 is not on PATH (.ci/run installs it)")
	}
	dir := generate(t, "python")
	run(t, dir, os.Environ(), python, "-m", "compileall", "-q", talosprovider.PythonPackage)
}

// The TypeScript SDK compiles with tsc, and the TypeScript example
// compiles against it: @pulumi/pulumi, TypeScript 5 and Node's types from
// npm, @pulumi/kubernetes of the version the components use (the
// kubernetesProvider outputs are its Provider), the SDK where the example
// imports it from (node_modules/@fluodata/talos-anywhere).
func TestTheTypeScriptSDKAndExampleCompile(t *testing.T) {
	t.Parallel()
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("SKIPPED: npm is not on PATH (.ci/run installs nodejs and npm)")
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name": "sdk-check", "private": true}`), 0o600))
	// TypeScript 6 refuses the example's moduleResolution "node"; the
	// example's package.json asks for ^5.6.
	run(t, dir, os.Environ(), npm, "install", "--no-audit", "--no-fund", "--ignore-scripts", "--save-exact",
		"@pulumi/pulumi@^3.259.0", "typescript@^5.6.0", "@types/node@^22", "@pulumi/kubernetes@"+kubernetesVersion(t))
	tsc := filepath.Join(dir, "node_modules", ".bin", "tsc")

	sdk := filepath.Join(dir, "sdk")
	files, err := sdkgen.Generate(goldenSchema(t), "nodejs")
	require.NoError(t, err)
	require.NoError(t, sdkgen.Write(sdk, files))
	run(t, sdk, os.Environ(), tsc, "-p", ".")
	// As npm installs the SDK: its package.json beside the compiled files.
	require.NoError(t, os.WriteFile(filepath.Join(sdk, "bin", "package.json"), files["package.json"], 0o600))
	scope := filepath.Join(dir, "node_modules", strings.Split(talosprovider.NPMPackage, "/")[0])
	require.NoError(t, os.MkdirAll(scope, 0o700))
	require.NoError(t, os.Symlink(filepath.Join(sdk, "bin"), filepath.Join(dir, "node_modules", talosprovider.NPMPackage)))

	for _, name := range []string{"proxmox-typescript", "local-typescript"} {
		example := filepath.Join(dir, name)
		require.NoError(t, os.CopyFS(example, os.DirFS(filepath.Join("..", "..", "..", "examples", name))))
		run(t, example, os.Environ(), tsc, "-p", ".", "--noEmit")
	}
}

// kubernetesVersion is the version of the kubernetes package the schema
// refers to, which the SDK's package.json asks for.
func kubernetesVersion(t *testing.T) string {
	t.Helper()
	var spec struct{ Version string }
	require.NoError(t, json.Unmarshal(kubeschema.JSON(), &spec))
	require.NotEmpty(t, spec.Version)
	return spec.Version
}
