//go:build integration

package talosprovider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/provider/talosprovider"
)

// requireTools skips the test, saying why, unless every tool is on PATH.
func requireTools(t *testing.T, why string, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("SKIPPED: %s is not on PATH (%s)", tool, why)
		}
	}
}

// cliEnv is the environment of the pulumi commands: a local file backend
// in the test's own folder, no update check, no plugin downloads.
func cliEnv(t *testing.T) []string {
	t.Helper()
	state := filepath.Join(t.TempDir(), "state")
	require.NoError(t, os.MkdirAll(state, 0o700))
	return append(os.Environ(),
		"PULUMI_BACKEND_URL=file://"+state,
		"PULUMI_CONFIG_PASSPHRASE=integration",
		"PULUMI_SKIP_UPDATE_CHECK=true",
		"PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true",
		"NO_COLOR=1",
	)
}

// runIn runs a command in dir with env and returns its combined output.
func runIn(t *testing.T, dir string, env []string, timeout time.Duration, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	t.Logf("%s %s (%s)", name, strings.Join(args, " "), cmd.ProcessState)
	return string(out), err
}

// offlinePulumi is the command line that runs pulumi with args with no
// network but loopback (a network namespace of its own), when this machine
// can make one; else the command as it is, and the test says so.
func offlinePulumi(t *testing.T, args ...string) (string, []string) {
	t.Helper()
	const name = "pulumi"
	if exec.Command("unshare", "-rn", "sh", "-c", "ip link set lo up").Run() == nil {
		return "unshare", append([]string{"-rn", "sh", "-c", `ip link set lo up && exec "$@"`, "offline", name}, args...)
	}
	t.Logf("no network namespace here (unshare -rn): %s runs with the network", name)
	return name, args
}

// A program uses the binary `make provider` built, so that nothing is
// rebuilt on a run: `pulumi package add` of the binary generates the SDK
// (for YAML, the schema in sdks/fluodata-talos-anywhere) and records the
// package by name and version (CLI 3.259 keeps no binary path in
// Pulumi.yaml); the project's plugin path points the engine at the binary,
// and `pulumi preview` of the YAML example runs offline through it, with no
// Go build. Needs make, the pulumi CLI with its YAML language host, and the
// plugins the component registers (proxmoxve, talos, command, kubernetes)
// in PULUMI_HOME.
func TestIntegrationPackageAddOfTheBuiltBinary(t *testing.T) {
	requireTools(t, "needs make, the pulumi CLI and its YAML language host", "make", "pulumi", "pulumi-language-yaml")
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	env := cliEnv(t)
	out, err := runIn(t, root, env, 20*time.Minute, "make", "--no-print-directory", "provider")
	require.NoError(t, err, "make provider:\n%s", out)
	bin := filepath.Join(root, "bin", "pulumi-resource-talos-anywhere")
	require.FileExists(t, bin)

	dir := filepath.Join(t.TempDir(), "proxmox-yaml")
	require.NoError(t, os.CopyFS(dir, os.DirFS(filepath.Join(root, "examples", "proxmox-yaml"))))
	project, err := os.ReadFile(filepath.Join(dir, "Pulumi.yaml"))
	require.NoError(t, err)
	const source = "packages:\n  talos-anywhere: ../../provider\n"
	require.Contains(t, string(project), source, "the example names the package by the provider folder")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), bytes.Replace(project, []byte(source), nil, 1), 0o600))

	out, err = runIn(t, dir, env, 2*time.Minute, "pulumi", "package", "add", bin)
	require.NoError(t, err, "pulumi package add of the binary:\n%s", out)
	project, err = os.ReadFile(filepath.Join(dir, "Pulumi.yaml"))
	require.NoError(t, err)
	recorded := regexp.MustCompile(`(?m)^  talos-anywhere: talos-anywhere@(\S+)$`).FindStringSubmatch(string(project))
	require.NotNil(t, recorded, "the package is recorded by name and version:\n%s", project)
	t.Logf("recorded version %s", recorded[1])
	assert.True(t, strings.HasPrefix(recorded[1], strings.TrimSpace(talosprovider.VersionFile)), "VERSION's version, %s", recorded[1])
	assert.DirExists(t, filepath.Join(dir, "sdks", "fluodata-talos-anywhere"), "the SDK's folder is named after namespace and name")

	plugins := fmt.Sprintf("plugins:\n  providers:\n    - name: talos-anywhere\n      path: %s\n", filepath.Dir(bin))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), append(project, plugins...), 0o600))
	out, err = runIn(t, dir, env, 2*time.Minute, "pulumi", "stack", "init", "it")
	require.NoError(t, err, out)
	out, err = runIn(t, dir, env, 2*time.Minute, "pulumi", "config", "set", "--secret", "proxmoxApiTokenSecret", "not-a-real-token")
	require.NoError(t, err, out)

	name, args := offlinePulumi(t, "preview", "--non-interactive")
	start := time.Now()
	out, err = runIn(t, dir, env, 5*time.Minute, name, args...)
	require.NoError(t, err, "pulumi preview with the built binary:\n%s", out)
	t.Logf("pulumi preview took %s", time.Since(start).Round(100*time.Millisecond))
	for _, want := range []string{
		"talos-anywhere:index:ProxmoxCluster homelab create", "proxmoxve:VM:VirtualMachine homelab-vm-cp-0 create",
		"talos:machine:Secrets homelab-secrets create", "command:local:Command homelab-roster create", "command:local:Command homelab-taints-worker-0 create", "command:local:Command homelab-manifests create", "command:local:Command homelab-placement-cp-0 create", "+ 34 to create",
	} {
		assert.Contains(t, out, want, "the preview constructs the component and its children")
	}
	assert.NotContains(t, out, "not-a-real-token", "the token is a secret")

	renamedPackageKeepsItsStack(t, dir, env, name, args)
	downgradeIsRefused(t, dir, env)
	callersProxmoxProvider(t, dir, env, name, args)
	destroyRunProgramWithNothingInState(t, dir, env)

	// Another resource's output as an input (issue 25): the token from a
	// random:RandomPassword, unknown during the preview and secret.
	installed, err := runIn(t, dir, env, time.Minute, "pulumi", "plugin", "ls")
	if err != nil || !strings.Contains(installed, "random") {
		t.Logf("SKIPPED: the random plugin is not installed, so an output of another resource as an input was not previewed:\n%s", installed)
		return
	}
	project, err = os.ReadFile(filepath.Join(dir, "Pulumi.yaml"))
	require.NoError(t, err)
	withOutput := strings.Replace(string(project), "apiTokenSecret: ${proxmoxApiTokenSecret}", "apiTokenSecret: ${token.result}", 1)
	withOutput = strings.Replace(withOutput, "resources:\n", "resources:\n  token:\n    type: random:RandomPassword\n    properties:\n      length: 36\n", 1)
	require.NotEqual(t, string(project), withOutput)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), []byte(withOutput), 0o600))
	out, err = runIn(t, dir, env, 5*time.Minute, name, args...)
	require.NoError(t, err, "pulumi preview with another resource's output as an input:\n%s", out)
	assert.Contains(t, out, "random:index:RandomPassword token create")
	assert.Contains(t, out, "talos-anywhere:index:ProxmoxCluster homelab create")
	assert.Contains(t, out, "+ 35 to create", "the component's children as before, and the password")
}

// renamedPackageKeepsItsStack imports the state the package made under
// its old name, talos-cluster (the component and its nested TalosCluster,
// as the engine records them), and previews the same program with the
// package under its new name: the engine finds both through their aliases
// (the type's, and the parent's carried on to the child), so neither is
// created anew nor its old state deleted. Without the aliases the preview
// creates both and deletes the old ones.
func renamedPackageKeepsItsStack(t *testing.T, dir string, env []string, name string, args []string) {
	t.Helper()
	defer otherStack(t, dir, env, "renamed")()
	const prefix = "urn:pulumi:renamed::talos-proxmox-yaml::"
	root := prefix + "pulumi:pulumi:Stack::talos-proxmox-yaml-renamed"
	oldCluster := prefix + "talos-cluster:index:ProxmoxCluster::homelab"
	oldTalos := prefix + "talos-cluster:index:ProxmoxCluster$talos-cluster:index:TalosCluster::homelab"
	importState(t, dir, env, []map[string]any{
		{"urn": root, "custom": false, "type": "pulumi:pulumi:Stack"},
		{"urn": oldCluster, "custom": false, "type": "talos-cluster:index:ProxmoxCluster", "parent": root},
		{"urn": oldTalos, "custom": false, "type": "talos-cluster:index:TalosCluster", "parent": oldCluster},
	})

	out, err := runIn(t, dir, env, 5*time.Minute, name, append(slices.Clone(args), "--json", "--show-sames")...)
	require.NoError(t, err, "pulumi preview after the rename:\n%s", out)
	var preview struct {
		Steps []struct {
			Op  string `json:"op"`
			URN string `json:"urn"`
		} `json:"steps"`
	}
	require.NoError(t, json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &preview), out)
	ops := map[string]string{}
	for _, s := range preview.Steps {
		ops[s.URN] = s.Op
	}
	assert.Equal(t, "same", ops[prefix+"talos-anywhere:index:ProxmoxCluster::homelab"], "the component, found by its alias: %v", ops)
	assert.Equal(t, "same", ops[prefix+"talos-anywhere:index:ProxmoxCluster$talos-anywhere:index:TalosCluster::homelab"], "its TalosCluster, by its own and its parent's alias")
	for _, old := range []string{oldCluster, oldTalos} {
		assert.Empty(t, ops[old], "the old state of %s is not deleted", old)
	}
}

// downgradeIsRefused (issue 51, item 1): a stack whose last up left the
// example's ProxmoxCluster on Talos v1.14.0 under another cluster name
// (its registered outputs, as the engine records them). The example's
// v1.13.9 is then a downgrade, and its name a rename: `pulumi up` fails in
// the component's construct, naming both inputs, and the state is as it
// was (nothing created, updated or deleted).
func downgradeIsRefused(t *testing.T, dir string, env []string) {
	t.Helper()
	defer otherStack(t, dir, env, "downgrade")()
	const prefix = "urn:pulumi:downgrade::talos-proxmox-yaml::"
	root := prefix + "pulumi:pulumi:Stack::talos-proxmox-yaml-downgrade"
	node := func(role, ip string) map[string]any {
		return map[string]any{"role": role, "ip": ip, "talosVersion": "v1.14.0"}
	}
	importState(t, dir, env, []map[string]any{
		{"urn": root, "custom": false, "type": "pulumi:pulumi:Stack"},
		{"urn": prefix + "talos-anywhere:index:ProxmoxCluster::homelab", "custom": false, "type": "talos-anywhere:index:ProxmoxCluster", "parent": root,
			"outputs": map[string]any{"clusterName": "lab-before", "talosVersion": "v1.14.0", "kubernetesVersion": "1.36.0", "nodes": map[string]any{
				"cp-0": node("controlplane", "10.10.0.10"), "worker-0": node("worker", "10.10.0.20"), "worker-1": node("worker", "10.10.0.21"),
			}}},
	})

	name, args := offlinePulumi(t, "up", "--yes", "--non-interactive")
	out, err := runIn(t, dir, env, 5*time.Minute, name, args...)
	require.Error(t, err, "a downgrade must be refused:\n%s", out)
	assert.Contains(t, out, `invalid arguments of ProxmoxCluster "homelab" (nothing was created)`)
	assert.Contains(t, out, "cluster.talosVersion: v1.13.9 is lower than v1.14.0, which the nodes run")
	assert.Contains(t, out, `cluster.name: "homelab" renames the running cluster "lab-before"`)

	out, err = runIn(t, dir, env, time.Minute, "pulumi", "stack", "export")
	require.NoError(t, err, out)
	var after struct {
		Deployment struct {
			Resources []struct {
				URN string `json:"urn"`
			} `json:"resources"`
		} `json:"deployment"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &after), out)
	var urns []string
	for _, r := range after.Deployment.Resources {
		urns = append(urns, r.URN)
	}
	assert.Equal(t, []string{root, prefix + "talos-anywhere:index:ProxmoxCluster::homelab"}, urns, "nothing touched")
}

// importState replaces the selected stack's state with these resources
// (`pulumi stack import` of its export with them).
func importState(t *testing.T, dir string, env []string, resources []map[string]any) {
	t.Helper()
	out, err := runIn(t, dir, env, time.Minute, "pulumi", "stack", "export")
	require.NoError(t, err, out)
	var exported map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &exported))
	deployment, _ := exported["deployment"].(map[string]any)
	require.NotNil(t, deployment, out)
	deployment["resources"] = resources
	state, err := json.Marshal(exported)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "state.json")
	require.NoError(t, os.WriteFile(file, state, 0o600))
	out, err = runIn(t, dir, env, time.Minute, "pulumi", "stack", "import", "--file", file)
	require.NoError(t, err, "pulumi stack import:\n%s", out)
}

// otherStack makes a stack of that name with the example's secret and
// selects it; the function it returns selects the test's "it" again.
func otherStack(t *testing.T, dir string, env []string, name string) func() {
	t.Helper()
	for _, cmd := range [][]string{
		{"stack", "init", name},
		{"config", "set", "--secret", "proxmoxApiTokenSecret", "not-a-real-token"},
	} {
		out, err := runIn(t, dir, env, time.Minute, "pulumi", cmd...)
		require.NoError(t, err, out)
	}
	return func() {
		out, err := runIn(t, dir, env, time.Minute, "pulumi", "stack", "select", "it")
		require.NoError(t, err, out)
	}
}

// destroyRunProgramWithNothingInState (issue 48, item 17): a stack whose
// last `up` had no cluster, destroyed with `--run-program` by a program
// that declares it again. The engine skips the children's creates and
// hands them unknown outputs outside a preview; the component's secret
// outputs (kubeconfig) then reached the engine as secrets without a value
// and the destroy failed in construct ("malformed RPC secret: missing
// value for kubeconfig"). It must construct, delete what it made, and
// leave an empty state.
func destroyRunProgramWithNothingInState(t *testing.T, dir string, env []string) {
	t.Helper()
	file := filepath.Join(dir, "Pulumi.yaml")
	project, err := os.ReadFile(file)
	require.NoError(t, err)
	defer func() { require.NoError(t, os.WriteFile(file, project, 0o600)) }()
	defer otherStack(t, dir, env, "emptied")()
	// The project without its resources and outputs blocks (top-level keys).
	var kept []string
	skipping := false
	for _, line := range strings.SplitAfter(string(project), "\n") {
		if line != "" && line[0] != ' ' && line[0] != '#' && line[0] != '\n' {
			skipping = strings.HasPrefix(line, "resources:") || strings.HasPrefix(line, "outputs:")
		}
		if !skipping {
			kept = append(kept, line)
		}
	}
	require.NotEqual(t, string(project), strings.Join(kept, ""))
	require.NoError(t, os.WriteFile(file, []byte(strings.Join(kept, "")), 0o600))
	name, args := offlinePulumi(t, "up", "--yes", "--non-interactive")
	out, err := runIn(t, dir, env, 5*time.Minute, name, args...)
	require.NoError(t, err, "pulumi up without the cluster:\n%s", out)

	require.NoError(t, os.WriteFile(file, project, 0o600))
	name, args = offlinePulumi(t, "destroy", "--run-program", "--yes", "--non-interactive")
	out, err = runIn(t, dir, env, 5*time.Minute, name, args...)
	require.NoError(t, err, "pulumi destroy --run-program with the cluster declared again:\n%s", out)
	assert.NotContains(t, out, "malformed RPC secret")
	out, err = runIn(t, dir, env, time.Minute, "pulumi", "stack", "export")
	require.NoError(t, err, out)
	var exported struct {
		Deployment struct {
			Resources []any `json:"resources"`
		} `json:"deployment"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &exported), out)
	assert.Empty(t, exported.Deployment.Resources, "nothing left in the state")
}

// callersProxmoxProvider previews the YAML example with a proxmoxve
// provider of the program's own passed to the cluster (`options:
// providers`): every Proxmox resource of the preview uses it, and the
// component makes no <name>-pve. The project file is put back after.
func callersProxmoxProvider(t *testing.T, dir string, env []string, name string, args []string) {
	t.Helper()
	file := filepath.Join(dir, "Pulumi.yaml")
	project, err := os.ReadFile(file)
	require.NoError(t, err)
	defer func() { require.NoError(t, os.WriteFile(file, project, 0o600)) }()
	const cluster = "  homelab:\n    type: talos-anywhere:index:ProxmoxCluster\n"
	require.Contains(t, string(project), cluster)
	withProvider := strings.Replace(string(project), cluster, "  pve:\n    type: pulumi:providers:proxmoxve\n    properties:\n"+
		"      endpoint: https://192.168.122.70:8006/\n      apiToken: root@pam!pulumi=${proxmoxApiTokenSecret}\n"+
		cluster+"    options:\n      providers:\n        - ${pve}\n", 1)
	require.NoError(t, os.WriteFile(file, []byte(withProvider), 0o600))
	out, err := runIn(t, dir, env, 5*time.Minute, name, append(slices.Clone(args), "--json")...)
	require.NoError(t, err, "pulumi preview with the caller's proxmoxve provider:\n%s", out)
	var preview struct {
		Steps []struct {
			URN      string `json:"urn"`
			NewState struct {
				Type     string `json:"type"`
				Provider string `json:"provider"`
			} `json:"newState"`
		} `json:"steps"`
	}
	require.NoError(t, json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &preview), out)
	proxmox := 0
	for _, s := range preview.Steps {
		if strings.HasSuffix(s.URN, "::homelab-pve") {
			t.Errorf("the component made its own provider: %s", s.URN)
		}
		if strings.HasPrefix(s.NewState.Type, "proxmoxve:") {
			proxmox++
			assert.Contains(t, s.NewState.Provider, "pulumi:providers:proxmoxve::pve::", "%s uses the program's provider", s.URN)
		}
	}
	t.Logf("%d Proxmox resources previewed with the program's provider", proxmox)
	assert.GreaterOrEqual(t, proxmox, 4, "the ISO and the three VMs")
}

// releasedGoSDK generates the Go SDK from the golden schema as `make
// release` does (provider/cmd/sdkgen, the kubernetes package loaded from
// kubeschema) and returns its folder. Not `pulumi package gen-sdk`: the
// CLI loads the kubernetes package the schema refers to from the
// kubernetes plugin, and the harness's (../shared/harness) answers
// GetSchema with a minimal schema without the Go import path, so the
// CLI's Go SDK imported example.com/pulumi-kubernetes/...; with the
// published plugin the CLI's SDK imports what this one does.
func releasedGoSDK(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "sdk")
	schema, err := filepath.Abs(filepath.Join("testdata", "schema.json"))
	require.NoError(t, err)
	msg, err := runIn(t, "..", os.Environ(), 5*time.Minute, "go", "run", "./cmd/sdkgen", schema, out)
	require.NoError(t, err, "sdkgen:\n%s", msg)
	return filepath.Join(out, "go")
}

// genSDK generates the SDK of one language from the golden schema (the
// provider's, TestSchemaIsCurrent) with the real CLI and returns its folder.
func genSDK(t *testing.T, language string) string {
	t.Helper()
	out := t.TempDir()
	schema, err := filepath.Abs(filepath.Join("testdata", "schema.json"))
	require.NoError(t, err)
	msg, err := runIn(t, out, cliEnv(t), 5*time.Minute, "pulumi", "package", "gen-sdk", schema, "--language", language, "--out", out)
	require.NoError(t, err, "pulumi package gen-sdk --language %s:\n%s", language, msg)
	return filepath.Join(out, language)
}

// python is the Python that byte-compiles and imports the SDK:
// PULUMI_PYTHON_CMD when set (the variable the CLI's Python language host
// reads too), else the harness's ($HARNESS_DIR/python/venv/bin/python,
// in which scripts/harness-python.sh makes the pulumi package importable
// without PyPI) when it is there, else python3.
func python() string {
	if cmd := os.Getenv("PULUMI_PYTHON_CMD"); cmd != "" {
		return cmd
	}
	if dir := os.Getenv("HARNESS_DIR"); dir != "" {
		venv := filepath.Join(dir, "python", "venv", "bin", "python")
		if _, err := os.Stat(venv); err == nil {
			return venv
		}
	}
	return "python3"
}

// The Python SDK: `pulumi package gen-sdk --language python` (which needs
// the CLI's Python language host, pulumi-language-python) writes the
// package fluodata_talos_cluster, every file of which byte-compiles; with
// the pulumi Python package importable (and pip and setuptools), pip
// installs the SDK into a folder of its own (no network, no dependencies:
// an SDK is meant to be installed, its _utilities reads the package's
// version from its metadata at import) and the SDK imports and offers the
// components and the enums. Without them (pulumi comes from PyPI; here
// scripts/harness-python.sh) the test says so and skips the import.
func TestIntegrationPythonSDK(t *testing.T) {
	py := python()
	requireTools(t, "needs the pulumi CLI, its Python language host and Python", "pulumi", "pulumi-language-python", py)
	t.Logf("Python: %s", py)
	sdk := genSDK(t, "python")
	pkg := filepath.Join(sdk, talosprovider.PythonPackage)
	require.DirExists(t, pkg, "the package is named after namespace and name")
	pyproject, err := os.ReadFile(filepath.Join(sdk, "pyproject.toml"))
	require.NoError(t, err)
	assert.Contains(t, string(pyproject), `name = "`+talosprovider.PythonPackage+`"`)

	out, err := runIn(t, sdk, os.Environ(), 2*time.Minute, py, "-m", "compileall", "-q", talosprovider.PythonPackage)
	require.NoError(t, err, "the SDK byte-compiles:\n%s", out)

	for _, check := range [][]string{{"-c", "import pulumi, setuptools"}, {"-m", "pip", "--version"}} {
		out, err := runIn(t, sdk, os.Environ(), time.Minute, py, check...)
		if err == nil {
			continue
		}
		t.Skipf("SKIPPED the import: %s cannot import the pulumi Python package, pip or setuptools (pip install pulumi; "+
			"without PyPI, scripts/harness-python.sh, or PULUMI_PYTHON_CMD naming a Python that has them): %s", py, strings.TrimSpace(out))
	}
	site := t.TempDir()
	pip := append(os.Environ(), "PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_INPUT=1")
	out, err = runIn(t, sdk, pip, 5*time.Minute, py, "-m", "pip", "install", "--no-deps", "--no-index", "--no-build-isolation",
		"--target", site, ".")
	require.NoError(t, err, "pip install of the SDK:\n%s", out)
	// The installed SDK first, before a PYTHONPATH that may be where pulumi is.
	pythonPath := site
	if p := os.Getenv("PYTHONPATH"); p != "" {
		pythonPath += string(os.PathListSeparator) + p
	}
	out, err = runIn(t, site, append(os.Environ(), "PYTHONPATH="+pythonPath), time.Minute, py, "-c",
		"import "+talosprovider.PythonPackage+" as tc; print(tc.ProxmoxCluster, tc.VpsCluster, tc.TalosCluster, tc.Role.WORKER.value)")
	require.NoError(t, err, "the SDK imports:\n%s", out)
	assert.Contains(t, out, "worker")
}

// goCheckProgram uses the Go SDK as a program would: a ProxmoxCluster
// with plain inputs where the schema makes them plain, the enums, and a
// secret input. name is the Go expression given to cluster.name.
const goCheckProgram = `package main

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"

	tc "github.com/fluodata/talos-pulumi/sdk/go/talos-anywhere"
)

func main() {
	pulumi.Run(func(ctx *pulumi.Context) error {
		c, err := tc.NewProxmoxCluster(ctx, "homelab", &tc.ProxmoxClusterArgs{
			Cluster:   tc.TalosClusterSettingsArgs{Name: %s, TalosVersion: "v1.13.9", Vip: pulumi.StringRef("10.10.0.5")},
			Schematic: tc.ImageSchematicArgs{Extensions: []string{"siderolabs/qemu-guest-agent"}},
			Proxmox: tc.ProxmoxHostSettingsArgs{
				Endpoint: pulumi.String("https://192.168.122.70:8006/"), ApiTokenId: pulumi.String("root@pam!pulumi"),
				ApiTokenSecret: config.RequireSecret(ctx, "proxmoxApiTokenSecret"),
				Bridge: pulumi.StringRef("vmbr1"), Bios: func() *tc.ProxmoxBios { b := tc.ProxmoxBiosOvmf; return &b }(),
			},
			Nodes: []tc.ProxmoxNodeArgs{
				{Name: "cp-0", Role: tc.RoleControlplane, Ip: "10.10.0.10", ProxmoxNode: pulumi.StringRef("pve"), VmId: pulumi.IntRef(110), Memory: pulumi.Int(6144)},
			},
		})
		if err != nil {
			return err
		}
		ctx.Export("kubeconfig", c.Kubeconfig)
		return nil
	})
}
`

// The Go SDK: `pulumi package gen-sdk --language go` writes the package
// (no go.mod: a Go SDK is published as a module of the repository, here
// its importBasePath); in a module of its own beside a program that uses it
// (a replace to the generated folder), `go build` compiles both, with the
// pulumi Go SDK the provider is built with. The same program passing an
// Output where the schema makes cluster.name plain does not compile. Needs
// the module proxy or a module cache holding the pulumi SDK.
func TestIntegrationGoSDK(t *testing.T) {
	requireTools(t, "needs the pulumi CLI and go", "pulumi", "go")
	prog := goProgram(t, "program", fmt.Sprintf(goCheckProgram, `"homelab"`))
	sdk := filepath.Join(filepath.Dir(prog), "sdk")
	require.FileExists(t, filepath.Join(sdk, "proxmoxCluster.go"))
	env := append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := runIn(t, sdk, env, 5*time.Minute, "go", "vet", "./...")
	assert.NoError(t, err, "go vet of the SDK:\n%s", out)

	require.NoError(t, os.WriteFile(filepath.Join(prog, "main.go"), []byte(fmt.Sprintf(goCheckProgram, `pulumi.String("homelab")`)), 0o600))
	out, err = runIn(t, prog, env, 10*time.Minute, "go", "build", "-o", os.DevNull, ".")
	require.Error(t, err, "an Output for cluster.name, which the schema makes plain, must not compile")
	assert.Contains(t, out, "cannot use pulumi.String(\"homelab\")", out)
}

// goProgram writes a Go program of its own module beside the Go SDK
// `make release` ships (releasedGoSDK, a module of its own too, reached by
// a replace), requiring the SDK, the pulumi Go SDK and the modules given,
// each at this module's version, then tidies and builds it; it returns the
// program's folder, whose sibling sdk is the SDK's.
func goProgram(t *testing.T, name, main string, modules ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	sdk := filepath.Join(filepath.Dir(dir), "sdk")
	require.NoError(t, os.Rename(filepath.Join(releasedGoSDK(t), talosprovider.Name), sdk))
	write := func(path, text string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
		require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	}
	const pulumiSDK = "github.com/pulumi/pulumi/sdk/v3"
	write(filepath.Join(sdk, "go.mod"), fmt.Sprintf("module %s\n\ngo 1.24\n\nrequire %s %s\n",
		talosprovider.GoImportBase, pulumiSDK, goModVersion(t, pulumiSDK)))
	requires := fmt.Sprintf("\t%s v0.0.0\n", talosprovider.GoImportBase)
	for _, m := range append(modules, pulumiSDK) {
		requires += fmt.Sprintf("\t%s %s\n", m, goModVersion(t, m))
	}
	write(filepath.Join(dir, "go.mod"), fmt.Sprintf("module example.com/%s\n\ngo 1.24\n\nrequire (\n%s)\n\nreplace %s => %s\n",
		name, requires, talosprovider.GoImportBase, sdk))
	write(filepath.Join(dir, "main.go"), main)
	env := append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := runIn(t, dir, env, 10*time.Minute, "go", "mod", "tidy")
	require.NoError(t, err, "go mod tidy:\n%s", out)
	out, err = runIn(t, dir, env, 15*time.Minute, "go", "build", "-o", os.DevNull, ".")
	require.NoError(t, err, "the program and the Go SDK compile:\n%s", out)
	return dir
}

// goModVersion is the version of module in this module's go.mod.
func goModVersion(t *testing.T, module string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", module).Output()
	require.NoError(t, err)
	return strings.TrimSpace(string(out))
}
