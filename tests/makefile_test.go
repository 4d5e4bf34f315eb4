package tests

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluodata/talos-pulumi/internal/testkit/scripttest"

	"go.yaml.in/yaml/v4"

	"github.com/pulumi/pulumi/sdk/v3/go/common/diag"
	"github.com/pulumi/pulumi/sdk/v3/go/common/diag/colors"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/testkit/pkitest"
	"github.com/fluodata/talos-pulumi/internal/testkit/sshtest"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// fakePulumi answers `config --json` with FAKE_CONFIG (or fails: no such
// stack), logs other commands with their backend (and passphrase file),
// records the proxy it was given and fetches FAKE_CURL as a provider would,
// and answers `stack output` with a fixed document unless FAKE_FAIL names the
// output. Given --cwd, it goes there as pulumi does and keeps a copy of the
// project file it finds (pulumi fails without one). `stack export --stack S
// --file F` writes an empty state to F, or FAKE_IMPORTED_STATE once an
// `import` ran; without --file it prints FAKE_STATE, or a state holding a
// VM.
const fakePulumi = `#!/bin/bash
if [ "$1" = "config" ]; then
  if [ -n "$FAKE_CONFIG" ]; then cat "$FAKE_CONFIG"; exit 0; fi
  echo "error: no stack named '$4'" >&2; exit 255
fi
echo "$* | backend=$PULUMI_BACKEND_URL" >> "$FAKE_LOG"
if [ -n "$PULUMI_CONFIG_PASSPHRASE_FILE" ]; then echo "passphrase-file=$PULUMI_CONFIG_PASSPHRASE_FILE" >> "$FAKE_LOG.env"; fi
if [ -n "$TALOS_CLUSTER_DESTROY" ]; then echo "$1 with TALOS_CLUSTER_DESTROY=$TALOS_CLUSTER_DESTROY" >> "$FAKE_LOG.env"; fi
args=("$@")
for ((i = 0; i < $#; i++)); do
  if [ "${args[i]}" = "--cwd" ]; then
    cd "${args[i+1]}" || exit 255
    if [ ! -f Pulumi.yaml ]; then echo "error: no Pulumi.yaml project file found in $PWD" >&2; exit 255; fi
    cp Pulumi.yaml "$FAKE_LOG.project.yaml"
  fi
done
if [ -n "$HTTPS_PROXY" ]; then echo "proxy=$HTTPS_PROXY" >> "$FAKE_LOG.access"; fi
if [ -n "$FAKE_CURL" ]; then curl -sSk --fail --max-time 10 "$FAKE_CURL" >> "$FAKE_LOG.access" 2>&1; fi
if [ "$1 $2" = "stack export" ]; then
  file=
  for ((i = 0; i < $#; i++)); do if [ "${args[i]}" = "--file" ]; then file=${args[i+1]}; fi; done
  if [ -z "$file" ]; then
    if [ -n "$FAKE_STATE" ]; then cat "$FAKE_STATE"
    else echo '{"version":3,"deployment":{"resources":[{"urn":"urn:pulumi:test::talos-cluster::proxmoxve:VM/virtualMachine:VirtualMachine::vm","custom":true}]}}'; fi
  elif [ -n "$FAKE_IMPORTED_STATE" ] && grep -q '^import ' "$FAKE_LOG"; then cp "$FAKE_IMPORTED_STATE" "$file"
  else echo '{"version":3,"deployment":{"manifest":{}}}' > "$file"; fi
fi
if [ "$1 $2" = "stack output" ]; then
  if [ "$3" = "$FAKE_FAIL" ]; then echo "error: no output $3" >&2; exit 1; fi
  if [ "$3" = machineConfigurations ]; then echo '{"cp-0":"# machine config of cp-0\n","worker-0":"# machine config of worker-0\n"}'; exit 0; fi
  echo "# $3 of the stack"
fi
`

// makeIn runs the repository's Makefile in a scratch project directory with
// a fake pulumi, so nothing touches the repository or a real backend.
func makeIn(t *testing.T, env []string, args ...string) (dir, log, out string, err error) {
	t.Helper()
	dir = t.TempDir()
	for _, name := range []string{"Makefile", "Pulumi.yaml"} {
		b, readErr := os.ReadFile(filepath.Join(stackstest.RepoRoot(t), name))
		require.NoError(t, readErr)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o600))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.test.yaml"), []byte("config: {}\n"), 0o600))
	// The program: these tests do not build it (TestMakeBuildsOncePerSourceChange does).
	program := filepath.Join(dir, "program")
	scripttest.Write(t, program, "#!/bin/sh\n")
	log = filepath.Join(dir, "pulumi.log")
	out, err = runMake(t, dir, log, env, append([]string{"STACKCTL=" + stackctl(t), "PROGRAM=" + program}, args...)...)
	return dir, log, out, err
}

// runMake runs make in dir with the fake pulumi (written there) logging to log.
func runMake(t *testing.T, dir, log string, env []string, args ...string) (string, error) {
	t.Helper()
	if _, lookErr := exec.LookPath("make"); lookErr != nil {
		t.Skip("make is not installed")
	}
	fake := filepath.Join(dir, "fake-pulumi")
	scripttest.Write(t, fake, fakePulumi)
	cmd := exec.Command("make", append([]string{"--no-print-directory", "PULUMI=" + fake}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), append([]string{"FAKE_LOG=" + log}, env...)...)
	b, err := cmd.CombinedOutput()
	return string(b), err
}

// stackctlBuild builds cmd/stackctl once for the Makefile tests (the
// Makefile's default, bin/stackctl, is built from the repository's sources).
var stackctlBuild = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "stackctl-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "stackctl")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/fluodata/talos-pulumi/cmd/stackctl").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %w: %s", err, out)
	}
	return bin, nil
})

func stackctl(t *testing.T) string {
	t.Helper()
	bin, err := stackctlBuild()
	require.NoError(t, err)
	return bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bin, err := stackctlBuild(); err == nil && strings.Contains(bin, "stackctl-") {
		_ = os.RemoveAll(filepath.Dir(bin))
	}
	os.Exit(code)
}

// cleanEnv drops what an outer `make test` or the user's shell exports
// (PULUMI_BACKEND_URL among them, MAKEFLAGS), so the scratch make sees only
// what the test sets.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		key, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(key, "PULUMI_") || strings.HasPrefix(key, "MAKE") || key == "MFLAGS" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func readLog(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

func TestMakeOutputsWritesPrivateAccessFiles(t *testing.T) {
	t.Parallel()
	dir, log, out, err := makeIn(t, nil, "outputs", "STACK=test")
	require.NoError(t, err, out)

	for _, name := range []string{"kubeconfig", "talosconfig"} {
		path := filepath.Join(dir, ".access", "test", name)
		info, statErr := os.Stat(path)
		require.NoError(t, statErr)
		assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), name)
		assert.Equal(t, "# "+name+" of the stack\n", string(must(os.ReadFile(path))))
		assert.Contains(t, readLog(t, log), "stack output "+name+" --show-secrets --stack test")
	}
	for _, d := range []string{".access", ".access/test"} {
		info, statErr := os.Stat(filepath.Join(dir, d))
		require.NoError(t, statErr)
		assert.Equal(t, os.FileMode(0o700), info.Mode().Perm(), d)
	}
	assert.Contains(t, out, "export KUBECONFIG=")

	// Each node's machine config, for talosctl apply-config without Pulumi.
	assert.Contains(t, readLog(t, log), "stack output machineConfigurations --show-secrets --json --stack test")
	configs := filepath.Join(dir, ".access", "test", "machineconfig")
	info, err := os.Stat(configs)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), info.Mode().Perm())
	for _, node := range []string{"cp-0", "worker-0"} {
		path := filepath.Join(configs, node+".yaml")
		info, err := os.Stat(path)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), node)
		assert.Equal(t, "# machine config of "+node+"\n", string(must(os.ReadFile(path))))
	}
	assert.Contains(t, out, "machineconfig/NODE.yaml")
}

// A stack whose last up ran a version without the machineConfigurations
// output still gets its kubeconfig and talosconfig, and a note.
func TestMakeOutputsOfAStackWithoutMachineConfigs(t *testing.T) {
	t.Parallel()
	dir, _, out, err := makeIn(t, []string{"FAKE_FAIL=machineConfigurations"}, "outputs", "STACK=test")
	require.NoError(t, err, out)
	assert.FileExists(t, filepath.Join(dir, ".access", "test", "talosconfig"))
	assert.NoDirExists(t, filepath.Join(dir, ".access", "test", "machineconfig"))
	assert.Contains(t, out, "has no machineConfigurations output yet (the next make up adds it)")
}

func TestMakeOutputsKeepsThePreviousFileOnFailure(t *testing.T) {
	t.Parallel()
	dir, _, out, err := makeIn(t, []string{"FAKE_FAIL=talosconfig"}, "outputs", "STACK=test")
	require.Error(t, err)
	assert.Contains(t, out, "talosconfig is unchanged")
	entries, readErr := os.ReadDir(filepath.Join(dir, ".access", "test"))
	require.NoError(t, readErr)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{"kubeconfig"}, names, "no half-written or temporary file is left")
}

// A stack that holds no resource of a provider (destroyed already) is
// destroyed without the program: pulumi 3.259 would record the program's
// components and keep them (the real CLI's case is in the driver's
// integration test).
func TestMakeDestroyOfADestroyedStackRunsNoProgram(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state.json")
	require.NoError(t, os.WriteFile(state, []byte(`{"version":3,"deployment":{"resources":[{"urn":"urn:pulumi:test::talos-cluster::talos-cluster:index:DockerCluster::c","custom":false}]}}`), 0o600))
	_, log, out, err := makeIn(t, []string{"FAKE_STATE=" + state}, "destroy", "STACK=test", "YES=1")
	require.NoError(t, err, out)
	lines := strings.Split(strings.TrimSpace(readLog(t, log)), "\n")
	line, _, _ := strings.Cut(lines[len(lines)-1], " | ")
	assert.Equal(t, "destroy --cwd bin/project --yes --stack test", line)
}

// A state the stack cannot export stops make destroy before pulumi
// destroys anything.
func TestMakeDestroyStopsWhenTheStateCannotBeRead(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state.json")
	require.NoError(t, os.WriteFile(state, nil, 0o600))
	_, log, out, err := makeIn(t, []string{"FAKE_STATE=" + state}, "destroy", "STACK=test", "YES=1")
	require.Error(t, err)
	assert.Contains(t, out, "stackctl destroy-flags: unable to read the stack's state")
	assert.NotContains(t, readLog(t, log), "destroy --cwd")
}

func TestMakeDestroyRunsTheProgramOnTheLocalBackend(t *testing.T) {
	t.Parallel()
	dir, log, out, err := makeIn(t, nil, "destroy", "STACK=test")
	require.NoError(t, err, out)
	assert.Equal(t, []string{
		"stack export --cwd bin/project --stack test | backend=file://" + dir + "/.pulumi-state",
		"destroy --cwd bin/project --run-program --stack test | backend=file://" + dir + "/.pulumi-state",
	}, strings.Split(strings.TrimSpace(readLog(t, log)), "\n"))
	assert.DirExists(t, filepath.Join(dir, ".pulumi-state"))
	// The program learns that the whole stack goes: it takes no node out
	// of the cluster and reads nothing from the nodes.
	env, err := os.ReadFile(log + ".env")
	require.NoError(t, err)
	assert.Contains(t, string(env), "destroy with TALOS_CLUSTER_DESTROY=1")
}

// Only a destroy tells the program so.
func TestMakeUpIsNoDestroy(t *testing.T) {
	t.Parallel()
	_, log, out, err := makeIn(t, nil, "up", "STACK=test")
	require.NoError(t, err, out)
	env, _ := os.ReadFile(log + ".env")
	assert.NotContains(t, string(env), "TALOS_CLUSTER_DESTROY")
}

func TestMakeHonoursABackendURL(t *testing.T) {
	t.Parallel()
	dir, log, out, err := makeIn(t, []string{"PULUMI_BACKEND_URL=s3://bucket/state"}, "up", "STACK=test")
	require.NoError(t, err, out)
	assert.Equal(t, "up --cwd bin/project --stack test | backend=s3://bucket/state", strings.TrimSpace(readLog(t, log)))
	assert.NoDirExists(t, filepath.Join(dir, ".pulumi-state"))
}

func TestMakeRefusesAMissingStack(t *testing.T) {
	t.Parallel()
	_, _, out, err := makeIn(t, nil, "up")
	require.Error(t, err)
	assert.Contains(t, out, "STACK is required")

	_, _, out, err = makeIn(t, nil, "up", "STACK=nope")
	require.Error(t, err)
	assert.Contains(t, out, "Pulumi.nope.yaml does not exist")
}

func TestMakeUpStartsTheSSHProxyWhenTheStackSaysSo(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed (installed by .ci/run)")
	}
	// The Proxmox host: it alone reaches the VIP's API server.
	_, pub, pemKey := sshtest.Key(t)
	host := sshtest.New(t, sshtest.Options{AuthorizedKey: pub, Routes: map[string]string{"10.10.0.5:6443": sshtest.APIServer(t)}})
	scratch := t.TempDir()
	keyFile := filepath.Join(scratch, "id_ed25519")
	require.NoError(t, os.WriteFile(keyFile, pemKey, 0o600))
	src := stackstest.EditSection(t, stackstest.Example(t, stackstest.ProxmoxExample), "proxmox", func(px map[string]any) {
		px["localForward"] = true // the test's SSH host listens on loopback
		px["ssh"] = map[string]any{"host": host.Host, "port": host.Port, "user": "root", "privateKeyFile": keyFile}
	})
	configFile := filepath.Join(scratch, "config.json")
	require.NoError(t, os.WriteFile(configFile, stackstest.ConfigJSON(t, src), 0o600))

	_, log, out, err := makeIn(t, []string{"FAKE_CONFIG=" + configFile, "FAKE_CURL=https://10.10.0.5:6443/version"}, "up", "STACK=test")
	require.NoError(t, err, out)
	assert.Contains(t, out, "ssh-proxy: Talos and Kubernetes traffic goes through root@127.0.0.1:")
	access := readLog(t, log+".access")
	assert.Regexp(t, `proxy=http://127\.0\.0\.1:\d+`, access)
	assert.Contains(t, access, "kube-apiserver /version", "pulumi's children reach the VIP through the host")
	assert.Equal(t, 1, host.Forwarded())

	// A direct stack: pulumi runs as it is.
	direct := stackstest.EditSection(t, src, "proxmox", func(px map[string]any) { px["access"] = stacks.AccessDirect })
	require.NoError(t, os.WriteFile(configFile, stackstest.ConfigJSON(t, direct), 0o600))
	_, log, out, err = makeIn(t, []string{"FAKE_CONFIG=" + configFile}, "preview", "STACK=test")
	require.NoError(t, err, out)
	assert.Contains(t, readLog(t, log), "preview --cwd bin/project --diff --stack test")
	assert.NoFileExists(t, log+".access")
}

// make adopt checks the environment folder's secrets.yaml and hands the
// import to pulumi; without SECRETS it says what is missing.
func TestMakeAdoptImportsTheSecretsFile(t *testing.T) {
	t.Parallel()
	scratch := t.TempDir()
	configFile := filepath.Join(scratch, "config.json")
	require.NoError(t, os.WriteFile(configFile, stackstest.ConfigJSON(t, stackstest.Example(t, stackstest.ProxmoxExample)), 0o600))
	env := filepath.Join(scratch, "environments", "proxmox-homelab")
	require.NoError(t, os.MkdirAll(env, 0o700))
	secretsFile := pkitest.WriteTalosSecrets(t, pkitest.TalosBundle(t), env)

	// The state after the import: the secrets under the cluster's component.
	cluster := "urn:pulumi:test::talos-cluster::talos-cluster:index:ProxmoxCluster$talos-cluster:index:TalosCluster"
	imported := filepath.Join(scratch, "imported.json")
	require.NoError(t, os.WriteFile(imported, []byte(`{"version":3,"deployment":{"manifest":{},"resources":[
	  {"urn":"`+cluster+`::homelab","type":"talos-cluster:index:TalosCluster"},
	  {"urn":"`+cluster+`$talos:machine/secrets:Secrets::homelab-secrets","custom":true,"id":"machine_secrets","provider":"p::1",
	   "outputs":{"clientConfiguration":{"caCertificate":"Q0E=","clientCertificate":"Q0VSVA==","clientKey":"S0VZ"}}}]}}`), 0o600))
	_, log, out, err := makeIn(t, []string{"FAKE_CONFIG=" + configFile, "FAKE_IMPORTED_STATE=" + imported}, "adopt", "STACK=test", "SECRETS="+secretsFile, "YES=1")
	require.NoError(t, err, out)
	// The state read, the secrets imported, the bootstrap recorded (see
	// cmd/stackctl/internal/cli's adopt tests), all on the stack's backend.
	assert.Regexp(t, `^stack export --stack test --file \S+ \| backend=file://\S+
import --stack test --file \S+/import\.json --protect=false --generate-code=false --yes \| backend=file://\S+
stack export --stack test --file \S+ \| backend=file://\S+
stack import --stack test --file \S+ \| backend=file://\S+
$`, readLog(t, log))
	assert.Contains(t, out, "Imported. Next: make preview STACK=test")

	_, _, out, err = makeIn(t, []string{"FAKE_CONFIG=" + configFile}, "adopt", "STACK=test")
	require.Error(t, err)
	assert.Contains(t, out, "SECRETS (or, after the first up, RELEASES) is required")

	// The second step, after the first up: the releases (on a stack that
	// reaches the VMs directly; the helper's part is tested in stackctl).
	direct := stackstest.EditSection(t, stackstest.Example(t, stackstest.ProxmoxExample), "proxmox", func(px map[string]any) {
		px["access"] = stacks.AccessDirect
	})
	require.NoError(t, os.WriteFile(configFile, stackstest.ConfigJSON(t, direct), 0o600))
	_, log, out, err = makeIn(t, []string{"FAKE_CONFIG=" + configFile}, "adopt", "STACK=test", "RELEASES=cilium kubelet-csr-approver", "ADOPT_FLAGS=--yes")
	require.NoError(t, err, out)
	assert.Contains(t, readLog(t, log), "import --stack test --file ")
	assert.Contains(t, out, "helm upgrade")
}

// fakeGo stands in for `go build -o OUT PKG` in a copy of the repository, so
// that the test sees which binaries make builds and when: stackctl runs the
// test's real build, the program is a script naming its build.
const fakeGo = `#!/bin/bash
echo "$*" >> "$FAKE_GO_LOG"
if [ "$1 $2" != "build -o" ] || [ $# -ne 4 ]; then echo "fake go: unexpected arguments: $*" >&2; exit 2; fi
case "$4" in
  ./cmd/stackctl) printf '#!/bin/sh\nexec %q "$@"\n' "$REAL_STACKCTL" > "$3"; chmod 755 "$3" ;;
  .) printf '#!/bin/sh\necho "program of build %s"\n' "$(wc -l < "$FAKE_GO_LOG")" > "$3"; chmod 755 "$3" ;;
  *) echo "fake go: unexpected package $4" >&2; exit 2 ;;
esac
`

// The stack targets build bin/stackctl and the program from the sources
// once, reuse them while no source changes, and rebuild the one whose
// sources changed; pulumi runs in bin/project, whose project file is
// Pulumi.yaml with the prebuilt program as the Go runtime's binary.
func TestMakeBuildsOncePerSourceChange(t *testing.T) {
	t.Parallel()
	dir := copyRepo(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.test.yaml"), []byte("config: {}\n"), 0o600))
	scratch := t.TempDir()
	fakeGoPath, goLog, log := filepath.Join(scratch, "go"), filepath.Join(scratch, "go.log"), filepath.Join(scratch, "pulumi.log")
	scripttest.Write(t, fakeGoPath, fakeGo)
	env := []string{"FAKE_GO_LOG=" + goLog, "REAL_STACKCTL=" + stackctl(t)}
	run := func(args ...string) string {
		t.Helper()
		out, err := runMake(t, dir, log, env, append([]string{"GO=" + fakeGoPath}, args...)...)
		require.NoError(t, err, out)
		return out
	}
	builds := 0
	newBuilds := func() []string {
		t.Helper()
		b, err := os.ReadFile(goLog)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		out := lines[builds:]
		builds = len(lines)
		return out
	}
	lastPulumi := func() string {
		t.Helper()
		lines := strings.Split(strings.TrimSpace(readLog(t, log)), "\n")
		return lines[len(lines)-1]
	}
	const (
		buildStackctl = "build -o bin/stackctl.tmp ./cmd/stackctl"
		buildProgram  = "build -o bin/talos-cluster.tmp ."
	)
	backend := " | backend=file://" + dir + "/.pulumi-state"

	// A fresh clone: both are built, then pulumi runs with the project file.
	run("preview", "STACK=test")
	assert.Equal(t, []string{buildStackctl, buildProgram}, newBuilds())
	assert.Equal(t, "preview --cwd bin/project --diff --stack test"+backend, lastPulumi())
	program := filepath.Join(dir, "bin", "talos-cluster")
	assert.Equal(t, "program of build 2\n", string(must(exec.Command(program).Output())))
	checkProject(t, dir, log+".project.yaml", program)

	// Another target, nothing changed: nothing is built; destroy still runs
	// the program (for the fast-delete hooks), the prebuilt one.
	out := run("destroy", "STACK=test")
	assert.Empty(t, newBuilds())
	assert.NotContains(t, out, "go build")
	assert.Equal(t, "destroy --cwd bin/project --run-program --stack test"+backend, lastPulumi())
	checkProject(t, dir, log+".project.yaml", program)
	run("up", "STACK=test")
	assert.Empty(t, newBuilds())
	assert.Equal(t, "program of build 2\n", string(must(exec.Command(program).Output())))

	// Each change rebuilds what depends on it, once.
	for _, change := range []struct {
		name string
		do   func(root string)
		want []string
	}{
		{"a test file", func(root string) { appendTo(t, filepath.Join(root, "stacks", anyFile(t, root, "stacks", "_test.go"))) }, nil},
		{"main.go", func(root string) { appendTo(t, filepath.Join(root, "main.go")) }, []string{buildProgram}},
		{"cmd/stackctl", func(root string) { appendTo(t, filepath.Join(root, "cmd", "stackctl", "main.go")) }, []string{buildStackctl}},
		{"a package of stackctl's own", func(root string) {
			appendTo(t, filepath.Join(root, "cmd", "stackctl", "internal", "doctor", anyFile(t, root, "cmd/stackctl/internal/doctor", ".go")))
		}, []string{buildStackctl}},
		{"a package", func(root string) {
			appendTo(t, filepath.Join(root, "program", anyFile(t, root, "program", ".go")))
		}, []string{buildStackctl, buildProgram}},
		{"an embedded script", func(root string) {
			appendTo(t, filepath.Join(root, "components", anyFile(t, root, "components", ".sh")))
		}, []string{buildStackctl, buildProgram}},
		{"a new file", func(root string) {
			require.NoError(t, os.WriteFile(filepath.Join(root, "program", "zz_new.go"), []byte("package program\n"), 0o600))
		}, []string{buildStackctl, buildProgram}},
		{"a deleted file", func(root string) {
			require.NoError(t, os.Remove(filepath.Join(root, "program", "zz_new.go")))
		}, []string{buildStackctl, buildProgram}},
		{"go.sum", func(root string) { appendTo(t, filepath.Join(root, "go.sum")) }, []string{buildStackctl, buildProgram}},
	} {
		// The sources two hours old, the binaries one, so the change is
		// newer than them whatever the file system's time resolution.
		setTimes(t, dir, time.Now().Add(-2*time.Hour))
		setTimes(t, filepath.Join(dir, "bin"), time.Now().Add(-time.Hour))
		change.do(dir)
		run("build")
		if got := newBuilds(); len(change.want) == 0 {
			assert.Empty(t, got, change.name)
		} else {
			assert.Equal(t, change.want, got, change.name)
		}
		run("build")
		assert.Empty(t, newBuilds(), "%s: built once", change.name)
	}
	run("preview", "STACK=test")
	assert.Empty(t, newBuilds())
	assert.Equal(t, "program of build 15\n", string(must(exec.Command(program).Output())), "pulumi runs the newest build")
	checkProject(t, dir, log+".project.yaml", program)
}

// checkProject reads the project file pulumi found in bin/project (the copy
// the fake kept) as pulumi does, and checks that it is Pulumi.yaml's project
// running the prebuilt program in the repository, with the repository's
// stack files.
func checkProject(t *testing.T, dir, snapshot, program string) {
	t.Helper()
	// Pulumi's loader checks the file against the project schema.
	proj, err := workspace.LoadProject(snapshot)
	require.NoError(t, err)
	orig, err := workspace.LoadProject(filepath.Join(dir, "Pulumi.yaml"))
	require.NoError(t, err)
	root := filepath.Join(dir, "bin", "project")

	// The Go language host (pulumi-language-go, Run) runs
	// runtime.options.binary instead of compiling the program when it is
	// set; an absolute path is found wherever the host runs.
	assert.Equal(t, "go", proj.Runtime.Name())
	assert.Equal(t, map[string]any{"binary": program}, proj.Runtime.Options())
	// The program's folder: `main` relative to the project's (the engine's
	// getPwdMain); the program, the providers and the language host run there.
	assert.Equal(t, dir, filepath.Join(root, proj.Main))
	// The stack file: workspace.DetectProjectStackPath puts it in
	// stackConfigDir, relative to the project file's folder.
	stackFile := filepath.Join(root, proj.StackConfigDir, "Pulumi.test.yaml")
	assert.Equal(t, filepath.Join(dir, "Pulumi.test.yaml"), stackFile)
	_, err = workspace.LoadProjectStack(diag.DefaultSink(io.Discard, io.Discard, diag.FormatOptions{Color: colors.Never}), proj, stackFile)
	require.NoError(t, err)

	// Everything else is Pulumi.yaml's: the name (the state's project), the
	// config types, the description.
	proj.Runtime, proj.Main, proj.StackConfigDir = orig.Runtime, orig.Main, orig.StackConfigDir
	assert.JSONEq(t, string(must(json.Marshal(orig))), string(must(json.Marshal(proj))))
}

// copyRepo copies what make builds from (the Go packages' folders, go.mod,
// go.sum, the root's Go files, the Makefile and Pulumi.yaml) into a scratch
// folder, every file and folder two hours old.
func copyRepo(t *testing.T) string {
	t.Helper()
	src, dst := stackstest.RepoRoot(t), t.TempDir()
	var names []string
	for _, pattern := range []string{"*.go", "go.mod", "go.sum", "Makefile", "Pulumi.yaml"} {
		names = append(names, must(filepath.Glob(filepath.Join(src, pattern)))...)
	}
	for _, name := range names {
		require.NoError(t, os.WriteFile(filepath.Join(dst, filepath.Base(name)), must(os.ReadFile(name)), 0o600))
	}
	for _, top := range []string{"cmd", "components", "internal", "program", "stacks"} {
		err := filepath.WalkDir(filepath.Join(src, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel := must(filepath.Rel(src, path))
			switch {
			case d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")):
				return filepath.SkipDir
			case d.IsDir():
				return os.MkdirAll(filepath.Join(dst, rel), 0o700)
			case d.Type().IsRegular():
				b, err := os.ReadFile(path) //nolint:gosec // the repository's own files
				if errors.Is(err, fs.ErrNotExist) {
					return nil // removed meanwhile
				}
				if err != nil {
					return err
				}
				return os.WriteFile(filepath.Join(dst, rel), b, 0o600)
			}
			return nil
		})
		require.NoError(t, err)
	}
	setTimes(t, dst, time.Now().Add(-2*time.Hour))
	return dst
}

// setTimes sets the times of root and everything under it.
func setTimes(t *testing.T, root string, when time.Time) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(root, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(path, when, when)
	}))
}

// anyFile names a file of root/dir whose name ends in suffix (and that is
// not a test unless suffix says so), relative to root/dir.
func anyFile(t *testing.T, root, dir, suffix string) string {
	t.Helper()
	var found string
	require.NoError(t, filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
		if err != nil || found != "" || d.IsDir() || !strings.HasSuffix(d.Name(), suffix) ||
			(!strings.HasSuffix(suffix, "_test.go") && strings.HasSuffix(d.Name(), "_test.go")) {
			return err
		}
		found = must(filepath.Rel(filepath.Join(root, dir), path))
		return nil
	}))
	require.NotEmpty(t, found, "no %s file under %s", suffix, dir)
	return found
}

// appendTo changes a file in place, as an editor saving it would.
func appendTo(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0) //nolint:gosec // a scratch copy
	require.NoError(t, err)
	_, err = f.WriteString("\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// YES=1 passes --yes to the operations that ask for confirmation, which
// pulumi refuses to do outside a terminal; without it they prompt as ever.
func TestMakeYesSkipsTheConfirmationPrompt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"up", "YES=1"}, "up --cwd bin/project --yes --stack test"},
		{[]string{"destroy", "YES=1"}, "destroy --cwd bin/project --run-program --yes --stack test"},
		{[]string{"refresh", "YES=1"}, "refresh --cwd bin/project --yes --stack test"},
		{[]string{"up"}, "up --cwd bin/project --stack test"},
		{[]string{"destroy"}, "destroy --cwd bin/project --run-program --stack test"},
		{[]string{"refresh"}, "refresh --cwd bin/project --stack test"},
		{[]string{"up", "YES=0"}, "up --cwd bin/project --stack test"},
		{[]string{"preview", "YES=1"}, "preview --cwd bin/project --diff --stack test"},
	} {
		_, log, out, err := makeIn(t, nil, append(tc.args, "STACK=test")...)
		require.NoError(t, err, out)
		lines := strings.Split(strings.TrimSpace(readLog(t, log)), "\n")
		line, _, _ := strings.Cut(lines[len(lines)-1], " | ")
		assert.Equal(t, tc.want, line, tc.args)
	}
}

// pulumi runs in bin/project, and resolves a relative file backend or
// passphrase file against its working directory: make hands it absolute
// ones, the same files a pulumi run in the repository uses.
func TestMakeKeepsRelativeStatePathsForPulumiInTheProjectFolder(t *testing.T) {
	t.Parallel()
	dir, log, out, err := makeIn(t, []string{"PULUMI_BACKEND_URL=file://state", "PULUMI_CONFIG_PASSPHRASE_FILE=.pulumi-passphrase"}, "up", "STACK=test")
	require.NoError(t, err, out)
	assert.Equal(t, "up --cwd bin/project --stack test | backend=file://"+dir+"/state", strings.TrimSpace(readLog(t, log)))
	assert.Equal(t, "passphrase-file="+dir+"/.pulumi-passphrase\n", readLog(t, log+".env"))

	// Absolute ones and ~ are left as they are.
	_, log, out, err = makeIn(t, []string{"PULUMI_BACKEND_URL=file://~/state", "PULUMI_CONFIG_PASSPHRASE_FILE=/etc/passphrase"}, "up", "STACK=test")
	require.NoError(t, err, out)
	assert.Equal(t, "up --cwd bin/project --stack test | backend=file://~/state", strings.TrimSpace(readLog(t, log)))
	assert.Equal(t, "passphrase-file=/etc/passphrase\n", readLog(t, log+".env"))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// fakeGoList answers `go list -m -f '{{.Version}}' <module>[@latest]` as a
// module proxy would: the pinned version, the newest of the major, a new
// major for proxmoxve, and no listing for talos (as the proxy of this
// project's machines refuses some).
const fakeGoList = `#!/bin/bash
m="${@: -1}"
case "$m" in
  github.com/pulumi/pulumi/sdk/v3) echo v3.219.0 ;;
  github.com/pulumi/pulumi/sdk/v3@latest) echo v3.274.1 ;;
  github.com/muhlba91/pulumi-proxmoxve/sdk/v7) echo v7.13.0 ;;
  github.com/muhlba91/pulumi-proxmoxve/sdk/v7@latest) echo v7.13.0 ;;
  github.com/muhlba91/pulumi-proxmoxve/sdk/v8@latest) echo v8.3.0 ;;
  github.com/pulumiverse/pulumi-talos/sdk) echo v0.7.1 ;;
  github.com/pulumi/pulumi-go-provider|github.com/pulumi/pulumi-go-provider@latest) echo v1.5.0 ;;
  *) echo "go: 403 Forbidden" >&2; exit 1 ;;
esac
`

// make deps-check lists each pinned module with the newest version served,
// a new major version included, and never fails (issue 24: drift shown in
// CI's output, not refused).
func TestMakeDepsCheckShowsDrift(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fakeGo := filepath.Join(dir, "go")
	scripttest.Write(t, fakeGo, fakeGoList)
	_, _, out, err := makeIn(t, nil, "deps-check", "GO="+fakeGo,
		"DEPS_PINNED=github.com/pulumi/pulumi/sdk/v3 github.com/muhlba91/pulumi-proxmoxve/sdk/v7 github.com/pulumiverse/pulumi-talos/sdk",
		"DEPS_PINNED_PROVIDER=github.com/pulumi/pulumi-go-provider")
	require.NoError(t, err, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 5, out)
	assert.Regexp(t, `^github.com/pulumi/pulumi/sdk/v3\s+v3.219.0\s+v3.274.1$`, lines[1])
	assert.Regexp(t, `^github.com/muhlba91/pulumi-proxmoxve/sdk/v7\s+v7.13.0\s+v8.3.0 \(github.com/muhlba91/pulumi-proxmoxve/sdk/v8\)$`, lines[2])
	assert.Regexp(t, `^github.com/pulumiverse/pulumi-talos/sdk\s+v0.7.1\s+not listed by the proxy$`, lines[3])
	assert.Regexp(t, `^github.com/pulumi/pulumi-go-provider \(provider/\)\s+v1.5.0\s+v1.5.0$`, lines[4])
}

// CONTROL_PLANES=1 reaches the restore (it was on backup-get's line, and
// make restore CONTROL_PLANES=1 seeded a whole new cluster instead).
func TestMakeRestoreControlPlanesResetsOnlyThem(t *testing.T) {
	t.Parallel()
	run := func(args ...string) string {
		cmd := exec.Command("make", append([]string{"-n", "-o", "bin/stackctl"}, args...)...)
		cmd.Dir = ".."
		cmd.Env = cleanEnv()
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	assert.Contains(t, run("restore", "STACK=test", "IDENTITY=key.txt", "CONTROL_PLANES=1"), "--name 'latest' --reset-control-planes")
	assert.NotContains(t, run("restore", "STACK=test", "IDENTITY=key.txt"), "--reset-control-planes")
	assert.NotContains(t, run("backup-get", "STACK=test", "TARGET=file:///b", "IDENTITY=key.txt", "OUT=o", "CONTROL_PLANES=1"), "--reset-control-planes")
}

// The release workflow runs on a pushed tag v*, with the tags fetched
// (make release checks the commit's), runs make release, and publishes
// every file make release writes (RELEASE_DIR, dist/) to the tag's GitHub
// release, with the permission to.
func TestTheReleaseWorkflowPublishesMakeRelease(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", ".github", "workflows", "release.yml"))
	require.NoError(t, err)
	var wf struct {
		On struct {
			Push struct {
				Tags []string `yaml:"tags"`
			} `yaml:"push"`
		} `yaml:"on"`
		Permissions map[string]string `yaml:"permissions"`
		Jobs        map[string]struct {
			Steps []struct {
				Uses string            `yaml:"uses"`
				With map[string]any    `yaml:"with"`
				Run  string            `yaml:"run"`
				Env  map[string]string `yaml:"env"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &wf))
	assert.Equal(t, []string{"v*"}, wf.On.Push.Tags)
	assert.Equal(t, "write", wf.Permissions["contents"], "to create the release")
	job, ok := wf.Jobs["release"]
	require.True(t, ok)
	var runs []string
	for _, s := range job.Steps {
		if strings.HasPrefix(s.Uses, "actions/checkout") {
			assert.EqualValues(t, 0, s.With["fetch-depth"], "the tags")
		}
		if s.Run != "" {
			runs = append(runs, s.Run)
		}
	}
	require.Len(t, runs, 3)
	assert.Equal(t, "make release", runs[0])
	makefile, err := os.ReadFile(filepath.Join("..", "Makefile"))
	require.NoError(t, err)
	assert.Contains(t, string(makefile), "RELEASE_DIR ?= dist\n", "where make release writes")
	assert.Contains(t, runs[1], "gh release create \"$GITHUB_REF_NAME\" dist/*")
	// Go resolves a module in a folder of the repository by the folder's
	// tag: sdk/go/talos-anywhere/v<version>.
	assert.Contains(t, runs[2], "git push origin \"sdk/go/talos-anywhere/$GITHUB_REF_NAME\"")
}

// A stack's own passphrase file (`make local` writes the local stack's) is
// found by every later target in a new shell, unless a passphrase is set.
func TestMakeFindsTheStacksOwnPassphraseFile(t *testing.T) {
	t.Parallel()
	config := t.TempDir()
	file := filepath.Join(config, "talos-cluster", "test-passphrase")
	require.NoError(t, os.MkdirAll(filepath.Dir(file), 0o700))
	require.NoError(t, os.WriteFile(file, []byte("secret"), 0o600))

	_, log, out, err := makeIn(t, []string{"XDG_CONFIG_HOME=" + config}, "destroy", "STACK=test")
	require.NoError(t, err, out)
	assert.Contains(t, readLog(t, log+".env"), "passphrase-file="+file)

	for _, set := range []string{"PULUMI_CONFIG_PASSPHRASE=given", "PULUMI_CONFIG_PASSPHRASE_FILE=/elsewhere"} {
		_, log, out, err = makeIn(t, []string{"XDG_CONFIG_HOME=" + config, set}, "destroy", "STACK=test")
		require.NoError(t, err, out)
		assert.NotContains(t, readLog(t, log+".env"), "passphrase-file="+file, "a passphrase the user set wins: %s", set)
	}
	_, log, out, err = makeIn(t, []string{"XDG_CONFIG_HOME=" + t.TempDir()}, "destroy", "STACK=test")
	require.NoError(t, err, out)
	assert.NotContains(t, readLog(t, log+".env"), "passphrase-file=", "no file, no passphrase file")
}
