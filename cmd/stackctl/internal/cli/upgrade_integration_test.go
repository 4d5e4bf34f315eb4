//go:build integration

package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi-command/sdk/go/command/local"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/exitcode"
	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/pveapi/pveapitest"
	"github.com/fluodata/talos-pulumi/internal/testkit/pkitest"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// The state of a stack written by the previous release, for the upgrade
// test: testdata/upgrade holds its `pulumi stack export` and its stack file
// (with the passphrase salt its secrets are encrypted with).
const (
	upgradeDir            = "testdata/upgrade"
	integrationPassphrase = "integration-test"
	upgradeStack          = "it"
	upgradeMemberURN      = "urn:pulumi:it::talos-cluster::talos-cluster:index:ProxmoxCluster$talos-cluster:index:TalosCluster$command:local:Command::homelab-member-cp-0"
)

// TestIntegrationAStackOfThePreviousReleaseUpgradesInPlace previews, with
// the real CLI and plugins of this release, a stack whose state the
// previous release wrote with its own CLI and plugins (issue 24): nothing
// it holds is replaced or deleted, and the machine secrets, the bootstrap,
// the ISO and the providers stay as they are.
//
// The fixture (testdata/upgrade) was written at ba3d0df (Pulumi CLI and SDK
// 3.219.0, plugins talos 0.7.1, proxmoxve 7.13.0, command 1.1.3,
// kubernetes 4.25.0, all built by ../shared/harness) by
// TestIntegrationWriteUpgradeFixture below, run there with
// UPGRADE_FIXTURE_WRITE=1. It holds what that release's `up` could create
// on this machine: the secrets and the bootstrap (through `stackctl adopt`),
// the Proxmox provider and the Talos ISO (downloaded into the project's
// Proxmox API fake), the components and the default providers; the VMs and
// everything after them failed (the fake creates no VM), so the preview
// shows them as creates. Before the next dependency upgrade, rewrite it
// the same way from the release of the day.
func TestIntegrationAStackOfThePreviousReleaseUpgradesInPlace(t *testing.T) {
	pulumiPath, err := exec.LookPath("pulumi")
	if err != nil {
		t.Skip("SKIPPED: the pulumi CLI is not on PATH, so the upgrade of a previous release's state was not checked")
	}
	fixtureState, err := filepath.Abs(filepath.Join(upgradeDir, "state.json"))
	require.NoError(t, err)
	fixtureStack, err := os.ReadFile(filepath.Join(upgradeDir, "Pulumi."+upgradeStack+".yaml"))
	require.NoError(t, err)
	dir, cli := realCLIProject(t, pulumiPath)
	cli("stack", "init", upgradeStack, "--secrets-provider", "passphrase")
	// The fixture's own stack file: its salt decrypts its secrets.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi."+upgradeStack+".yaml"), fixtureStack, 0o600))
	cli("stack", "import", "--stack", upgradeStack, "--file", fixtureState)
	before := resourcesOf(t, cli("stack", "export", "--stack", upgradeStack))
	require.NotEmpty(t, before)

	ctx := context.Background()
	s := upgradeStackOf(t, ctx, dir, cli)
	ops, evs := stepOps()
	start := time.Now()
	_, err = s.Preview(ctx, optpreview.EventStreams(evs))
	require.NoError(t, err)
	got := ops()
	t.Logf("preview of the previous release's state: %s", time.Since(start).Round(time.Millisecond))
	kept := map[string]bool{}
	for urn, r := range before {
		op, seen := got[urn]
		t.Logf("  %-8s %s (%s)", op, urn[strings.LastIndex(urn, "::")+2:], r.Type)
		if !seen {
			continue // the stack resource itself, or a default provider nothing uses yet
		}
		if oldDefaultProvider(r) {
			// A default provider of a plugin version the program no longer
			// uses: its resources move to the new one, and it goes.
			assert.Contains(t, []string{"same", "delete"}, op, urn)
			continue
		}
		assert.Contains(t, []string{"same", "update"}, op, "%s: %s of a resource the previous release made", urn, op)
		kept[r.Type] = kept[r.Type] || op == "same"
	}
	for urn, op := range got {
		if r, ok := before[urn]; ok && oldDefaultProvider(r) {
			continue
		}
		assert.NotContains(t, []string{"replace", "create-replacement", "delete-replaced", "delete", "discard", "discard-replaced"}, op, urn)
	}
	for _, typ := range []string{
		"talos:machine/secrets:Secrets", "talos:machine/bootstrap:Bootstrap",
		"proxmoxve:Download/file:File", "pulumi:providers:proxmoxve", "command:local:Command",
	} {
		assert.True(t, kept[typ], "%s: in the fixture and unchanged", typ)
	}
}

// TestIntegrationWriteUpgradeFixture writes testdata/upgrade from this
// release, for the next upgrade's test (see above). It is skipped unless
// UPGRADE_FIXTURE_WRITE=1.
func TestIntegrationWriteUpgradeFixture(t *testing.T) {
	if os.Getenv("UPGRADE_FIXTURE_WRITE") != "1" {
		t.Skip("writes the upgrade fixture only with UPGRADE_FIXTURE_WRITE=1")
	}
	pulumiPath, err := exec.LookPath("pulumi")
	require.NoError(t, err)
	fixtureDir, err := filepath.Abs(upgradeDir)
	require.NoError(t, err)
	example, err := os.ReadFile(filepath.Join(stackstest.RepoRoot(t), stackstest.ProxmoxExample))
	require.NoError(t, err)
	dir, cli := realCLIProject(t, pulumiPath)

	// The Proxmox example, reached directly at the project's Proxmox API
	// fake, which serves the ISO; a given schematic (the Image Factory is
	// not reachable here); the host's SSH on a closed port, so the dnsmasq
	// reservations fail at once.
	pve := pveapitest.New(t, map[int]*pveapitest.VM{})
	stack := string(example)
	for old, repl := range map[string]string{
		"access: ssh-proxy":            "access: direct",
		"https://192.168.122.70:8006/": pve.URL + "/",
		"insecure: false":              "insecure: true\n    localForward: true",
		"host: 192.168.122.70":         "host: 127.0.0.1",
		"port: 22 ":                    "port: 1 ",
	} {
		require.Contains(t, stack, old)
		stack = strings.Replace(stack, old, repl, 1)
	}
	extensions := regexp.MustCompile(`(?m)^(    schematic:).*\n      extensions:\n(        - .*\n)+`)
	require.Regexp(t, extensions, stack)
	stack = extensions.ReplaceAllString(stack, "$1\n      id: "+componentstest.SchematicID+"\n")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi."+upgradeStack+".yaml"), []byte(stack), 0o600))
	cli("stack", "init", upgradeStack, "--secrets-provider", "passphrase")
	for k, v := range stackstest.ExampleSecrets[stackstest.ProxmoxExample] {
		cli("config", "set", "--secret", "--path", "--stack", upgradeStack, k, v)
	}

	// adopt: the secrets and the bootstrap, as a running cluster's.
	b := pkitest.TalosBundle(t)
	env := filepath.Join(dir, "environments", upgradeStack)
	require.NoError(t, os.MkdirAll(env, 0o700))
	secretsFile := pkitest.WriteTalosSecrets(t, b, env)
	pkitest.WriteTalosconfig(t, b, env, "homelab", "10.10.0.10")
	var out, errOut syncBuffer
	e := defaultAccessEnv(strings.NewReader(""), &out, &errOut)
	e.ReadConfig = nil
	code := adoptCmd(context.Background(), []string{"--stack", upgradeStack, "--pulumi", pulumiPath, "--secrets", secretsFile, "--yes"}, e)
	require.Equal(t, exitcode.OK, code, out.String()+errOut.String())

	// up: whatever can be created here, the rest fails.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s := upgradeStackOf(t, ctx, dir, cli)
	isoURL := "https://factory.talos.dev/image/" + componentstest.SchematicID + "/v1.12.4/metal-amd64.iso"
	pve.Serve(isoURL, 100<<20)
	ops, evs := stepOps()
	_, upErr := s.Up(ctx, optup.ContinueOnError(), optup.EventStreams(evs))
	t.Logf("up: %v; steps %v", upErr, ops())

	// A node's membership (command:local:Command, no script) as the program
	// registers it: the program's own waits for the node's config apply, so
	// it failed above; it is the resource whose replacement would take the
	// node out of the cluster, and the command plugin's version changes.
	member := func(ctx *pulumi.Context) error {
		var platform, cluster pulumi.ResourceState
		if err := ctx.RegisterComponentResource(proxmox.ClusterType, "homelab", &platform); err != nil {
			return err
		}
		if err := ctx.RegisterComponentResource(talos.ClusterType, "homelab", &cluster, pulumi.Parent(&platform)); err != nil {
			return err
		}
		_, err := local.NewCommand(ctx, "homelab-member-cp-0", &local.CommandArgs{Environment: pulumi.StringMap{
			"NODE_IP": pulumi.String("10.10.0.10"), "NODE_NAME": pulumi.String("cp-0"), "NODE_ROLE": pulumi.String("controlplane"),
		}}, pulumi.Parent(&cluster))
		return err
	}
	chain, err := auto.SelectStackInlineSource(ctx, upgradeStack, "talos-cluster", member, auto.WorkDir(dir))
	require.NoError(t, err)
	_, err = chain.Up(ctx, optup.Target([]string{upgradeMemberURN}))
	require.NoError(t, err)

	export := cli("stack", "export", "--stack", upgradeStack)
	for _, r := range resourcesOf(t, export) {
		t.Logf("in the state: %s %s", r.Type, r.URN)
	}
	saved, err := os.ReadFile(filepath.Join(dir, "Pulumi."+upgradeStack+".yaml"))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(fixtureDir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(fixtureDir, "state.json"), []byte(export), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(fixtureDir, "Pulumi."+upgradeStack+".yaml"), saved, 0o600))
}

// oldDefaultProvider says whether r is a default provider of a plugin
// version other than the one this release's SDK asks for: its name carries
// the version (default_1_1_3).
func oldDefaultProvider(r stateResource) bool {
	name := r.URN[strings.LastIndex(r.URN, "::")+2:]
	return strings.HasPrefix(r.Type, "pulumi:providers:") && strings.HasPrefix(name, "default_") &&
		r.Type != "pulumi:providers:talos" && r.Type != "pulumi:providers:proxmoxve" // same versions in both releases
}

// realCLIProject is a project directory, the working directory from now on,
// with this release's Pulumi.yaml, a file backend and the tests'
// passphrase, and a runner of the real pulumi in it.
func realCLIProject(t *testing.T, pulumiPath string) (string, func(args ...string) string) {
	t.Helper()
	dir := t.TempDir()
	raw, err := os.ReadFile(filepath.Join(stackstest.RepoRoot(t), "Pulumi.yaml"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), raw, 0o600))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "state"), 0o700))
	t.Chdir(dir) // adopt runs pulumi in the working directory
	t.Setenv("PULUMI_CONFIG_PASSPHRASE", integrationPassphrase)
	t.Setenv("PULUMI_BACKEND_URL", "file://"+filepath.Join(dir, "state"))
	return dir, func(args ...string) string {
		t.Helper()
		cmd := exec.Command(pulumiPath, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "pulumi %s: %s", strings.Join(args, " "), out)
		return string(out)
	}
}

// upgradeStackOf is the stack in dir with the real program as stackctl
// runs it, on the stack's own config.
func upgradeStackOf(t *testing.T, ctx context.Context, dir string, cli func(args ...string) string) auto.Stack {
	t.Helper()
	src, err := stacks.SourceFromConfigJSON([]byte(cli("config", "--show-secrets", "--json", "--stack", upgradeStack)))
	require.NoError(t, err)
	run := func(ctx *pulumi.Context) error { return program.Run(ctx, src, program.Options{}) }
	s, err := auto.SelectStackInlineSource(ctx, upgradeStack, src.Project, run, auto.WorkDir(dir))
	require.NoError(t, err)
	return s
}
