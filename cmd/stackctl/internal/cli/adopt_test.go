package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/adopt"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/exitcode"
	"github.com/fluodata/talos-pulumi/internal/testkit/pkitest"
	"github.com/fluodata/talos-pulumi/internal/testkit/scripttest"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// fakePulumi is a pulumi CLI stand-in: `config` prints the stack's config
// (from the file the script names: it is started without the test's
// environment), `import` logs its arguments and a copy of the import file
// and exits with $FAKE_IMPORT_EXIT; on success the stack's state
// ($FAKE_STATE) becomes $FAKE_STATE.imported, what the real import leaves.
// `stack export` copies the state to its --file, `stack import` keeps a copy
// of its --file as the state and exits with $FAKE_STACK_IMPORT_EXIT. Every
// call but `config` (run without the test's environment) is logged, one
// line each, in $FAKE_LOG.calls.
const fakePulumi = `#!/bin/sh
[ -z "$FAKE_LOG" ] || echo "$1 $2" >> "$FAKE_LOG.calls"
case "$1" in
config) cat %q ;;
import)
	echo "$@" > "$FAKE_LOG"
	echo "proxy=$HTTPS_PROXY" > "$FAKE_LOG.env"
	while [ $# -gt 0 ]; do
		if [ "$1" = --file ]; then cp "$2" "$FAKE_LOG.import"; ls -l "$2" | cut -c1-10 > "$FAKE_LOG.mode"; fi
		shift
	done
	[ "${FAKE_IMPORT_EXIT:-0}" = 0 ] && [ -f "$FAKE_STATE.imported" ] && cp "$FAKE_STATE.imported" "$FAKE_STATE"
	exit "${FAKE_IMPORT_EXIT:-0}" ;;
stack)
	[ "$3 $5" = "--stack --file" ] || { echo "unexpected: $*" >&2; exit 98; }
	case "$2" in
	export) cp "$FAKE_STATE" "$6" ;;
	import)
		ls -l "$6" | cut -c1-10 > "$FAKE_LOG.statemode"
		[ "${FAKE_STACK_IMPORT_EXIT:-0}" = 0 ] || exit "$FAKE_STACK_IMPORT_EXIT"
		cp "$6" "$FAKE_STATE" ;;
	*) echo "unexpected: $*" >&2; exit 99 ;;
	esac ;;
*) echo "unexpected: $*" >&2; exit 99 ;;
esac
`

type adoptRun struct {
	dir, pulumi, log, config, state string
	env                             accessEnv
	out, errOut                     *syncBuffer
}

// newAdoptRun prepares an Ansible-like environment folder with secrets.yaml
// and its talosconfig, and the fake pulumi answering the example Proxmox
// stack's config.
func newAdoptRun(t *testing.T, importExit string) (*adoptRun, string) {
	t.Helper()
	return newAdoptRunWith(t, importExit, stackstest.ConfigJSON(t, stackstest.Example(t, stackstest.ProxmoxExample)))
}

func newAdoptRunWith(t *testing.T, importExit string, config []byte) (*adoptRun, string) {
	t.Helper()
	dir := t.TempDir()
	env := filepath.Join(dir, "environments", "proxmox-homelab")
	require.NoError(t, os.MkdirAll(env, 0o700))
	b := pkitest.TalosBundle(t)
	secretsFile := pkitest.WriteTalosSecrets(t, b, env)
	pkitest.WriteTalosconfig(t, b, env, "homelab", "10.10.0.10")

	r := &adoptRun{dir: dir, pulumi: filepath.Join(dir, "pulumi"), log: filepath.Join(dir, "log")}
	r.config = filepath.Join(dir, "config.json")
	scripttest.Write(t, r.pulumi, fmt.Sprintf(fakePulumi, r.config))
	require.NoError(t, os.WriteFile(r.config, config, 0o600))
	r.env, r.out, r.errOut = accessEnvFor(nil, nil)
	r.env.ReadConfig = nil
	r.state = filepath.Join(dir, "state.json")
	require.NoError(t, os.WriteFile(r.state, []byte(`{"version":3,"deployment":{"manifest":{"magic":"m","version":"v3.219.0"},"secrets_providers":{"type":"passphrase","state":{"salt":"s"}}}}`), 0o600))
	require.NoError(t, os.WriteFile(r.state+".imported", importedState(t, config), 0o600))
	r.env.Environ = []string{"PATH=" + os.Getenv("PATH"), "FAKE_LOG=" + r.log, "FAKE_IMPORT_EXIT=" + importExit, "FAKE_STATE=" + r.state}
	return r, secretsFile
}

// importedState is `pulumi stack export` after the import of the secrets
// (the Proxmox example's stack proxmox-homelab): the stack, the default
// Talos provider, the component placeholders and the secrets, the client key
// encrypted.
func importedState(t *testing.T, config []byte) []byte {
	t.Helper()
	src, err := stacks.SourceFromConfigJSON(config)
	require.NoError(t, err)
	cfg, diags := stacks.Load(src)
	if diags.HasErrors() {
		return nil // a test of a broken stack: nothing is imported
	}
	rs, err := adopt.Plan(cfg, adopt.PlanOptions{SecretsFile: "secrets.yaml", Bootstrapped: true})
	require.NoError(t, err)
	urns, err := adopt.URNs("proxmox-homelab", src.Project, rs)
	require.NoError(t, err)
	stackURN := "urn:pulumi:proxmox-homelab::" + src.Project + "::pulumi:pulumi:Stack::" + src.Project + "-proxmox-homelab"
	provider := "urn:pulumi:proxmox-homelab::" + src.Project + "::pulumi:providers:talos::default_0_7_1_github_/api.github.com/pulumiverse"
	state := map[string]any{"version": 3, "deployment": map[string]any{
		"manifest":          map[string]any{"magic": "m", "version": "v3.219.0"},
		"secrets_providers": map[string]any{"type": "passphrase", "state": map[string]any{"salt": "s"}},
		"resources": []map[string]any{
			{"urn": stackURN, "custom": false, "type": "pulumi:pulumi:Stack"},
			{"urn": provider, "custom": true, "id": "a1", "type": "pulumi:providers:talos", "inputs": map[string]any{"version": "0.7.1"}},
			{"urn": string(urns["platform"]), "custom": false, "type": "talos-cluster:index:ProxmoxCluster", "parent": stackURN},
			{"urn": string(urns["cluster"]), "custom": false, "type": "talos-cluster:index:TalosCluster", "parent": string(urns["platform"])},
			{"urn": string(urns["secrets"]), "custom": true, "id": "machine_secrets", "type": adopt.SecretsType, "parent": string(urns["cluster"]),
				"provider": provider + "::a1", "inputs": map[string]any{"talosVersion": "v1.3"},
				"outputs": map[string]any{"talosVersion": "v1.3", "clientConfiguration": map[string]any{
					"caCertificate": "Q0E=", "clientCertificate": "Q0VSVA==",
					"clientKey": map[string]any{"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270", "ciphertext": "v1:c2VjcmV0"},
				}}},
		},
	}}
	raw, err := json.Marshal(state)
	require.NoError(t, err)
	return raw
}

func (r *adoptRun) run(t *testing.T, args ...string) int {
	t.Helper()
	return adoptCmd(context.Background(), append([]string{"--stack", "proxmox-homelab", "--pulumi", r.pulumi}, args...), r.env)
}

// The secrets are imported; the bootstrap is not (the Talos plugin 0.7.1
// cannot import one, see adopt.Import) but recorded in the state as `up`
// records it, with pulumi stack export and import.
func TestAdoptImportsSecretsAndBootstrap(t *testing.T) {
	t.Parallel()
	r, secretsFile := newAdoptRun(t, "0")
	code := r.run(t, "--secrets", secretsFile, "--yes")
	require.Equal(t, exitcode.OK, code, r.errOut.String())

	args, err := os.ReadFile(r.log)
	require.NoError(t, err)
	require.Regexp(t, `^import --stack proxmox-homelab --file \S+/import.json --protect=false --generate-code=false --yes\n$`, string(args))
	mode, err := os.ReadFile(r.log + ".mode")
	require.NoError(t, err)
	require.Equal(t, "-rw-------\n", string(mode))

	var file struct {
		Resources []struct {
			Type, Name, LogicalName, ID, Parent, Version string
			Component                                    bool
		}
	}
	raw, err := os.ReadFile(r.log + ".import")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &file))
	require.Len(t, file.Resources, 3, "the components and the secrets; the bootstrap is recorded, not imported")
	sec := file.Resources[2]
	require.Equal(t, adopt.SecretsType, sec.Type)
	require.Equal(t, secretsFile, sec.ID, "the provider reads this path")
	require.NotContains(t, string(raw), adopt.BootstrapType)
	require.NotContains(t, string(raw), "BEGIN", "the import file names the secrets file, it does not copy it")

	// The state read before (what is there already) and after the import,
	// and written back with the bootstrap, privately.
	require.Equal(t, "stack export\nimport --stack\nstack export\nstack import\n", r.calls(t))
	mode, err = os.ReadFile(r.log + ".statemode")
	require.NoError(t, err)
	require.Equal(t, "-rw-------\n", string(mode))
	res := r.resources(t)
	require.Len(t, res, 6)
	secrets, boot := res[4], res[5]
	require.Equal(t, adopt.SecretsType, secrets["type"], "the bootstrap comes right after the secrets it depends on")
	require.Equal(t, adopt.BootstrapType, boot["type"])
	require.Equal(t, "urn:pulumi:proxmox-homelab::talos-cluster::talos-cluster:index:ProxmoxCluster$talos-cluster:index:TalosCluster$talos:machine/bootstrap:Bootstrap::homelab-bootstrap", boot["urn"])
	require.Equal(t, res[3]["urn"], boot["parent"])
	require.Equal(t, adopt.BootstrapID, boot["id"])
	require.Equal(t, true, boot["custom"])
	require.Equal(t, secrets["provider"], boot["provider"])
	require.Equal(t, []any{secrets["urn"]}, boot["dependencies"])
	cc := secrets["outputs"].(map[string]any)["clientConfiguration"]
	require.Equal(t, map[string]any{"clientConfiguration": cc, "node": "10.10.0.10", "endpoint": "10.10.0.10"}, boot["inputs"],
		"the inputs the program gives it: the first control plane, the secrets' client configuration (its key encrypted as they hold it)")
	require.Equal(t, map[string]any{"clientConfiguration": cc, "node": "10.10.0.10", "endpoint": "10.10.0.10", "id": adopt.BootstrapID, "__meta": `{"schema_version":"1"}`}, boot["outputs"])
	// What was there is written back as it was.
	var before, after map[string]any
	require.NoError(t, json.Unmarshal(importedState(t, stackstest.ConfigJSON(t, stackstest.Example(t, stackstest.ProxmoxExample))), &before))
	state, err := os.ReadFile(r.state)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(state, &after))
	require.Equal(t, before["deployment"].(map[string]any)["secrets_providers"], after["deployment"].(map[string]any)["secrets_providers"])
	for i, r := range before["deployment"].(map[string]any)["resources"].([]any) {
		require.Equal(t, r, res[i])
	}

	stderr := r.errOut.String()
	require.Contains(t, stderr, "belong to the same cluster")
	require.Contains(t, stderr, "homelab-bootstrap as done (node 10.10.0.10")
	require.Contains(t, stderr, "homelab-secrets    unchanged (the provider records talosVersion v1.3 on import")
	require.Contains(t, stderr, "homelab-bootstrap  unchanged (recorded as done")
	_, err = os.Stat(filepath.Dir(strings.Fields(string(args))[4]))
	require.ErrorIs(t, err, os.ErrNotExist, "the import file is removed afterwards")
}

// A run after a failed record of the bootstrap (or a second run) imports
// nothing twice: the secrets in the state are not imported again, a
// recorded bootstrap is not recorded again.
func TestAdoptRunAgainImportsNothingTwice(t *testing.T) {
	t.Parallel()
	r, secretsFile := newAdoptRun(t, "0")
	imported, err := os.ReadFile(r.state + ".imported")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(r.state, imported, 0o600))
	require.Equal(t, exitcode.OK, r.run(t, "--secrets", secretsFile, "--yes"), r.errOut.String())
	require.Equal(t, "stack export\nstack import\n", r.calls(t))
	require.Contains(t, r.errOut.String(), "not imported again")
	require.Len(t, r.resources(t), 6)

	require.NoError(t, os.Remove(r.log+".calls"))
	require.Equal(t, exitcode.OK, r.run(t, "--secrets", secretsFile, "--yes"), r.errOut.String())
	require.Equal(t, "stack export\n", r.calls(t))
	require.Len(t, r.resources(t), 6)
}

// The secrets imported but the bootstrap not recorded: `up` would bootstrap
// etcd again, and adopt says so.
func TestAdoptSaysWhenTheBootstrapIsNotRecorded(t *testing.T) {
	t.Parallel()
	r, secretsFile := newAdoptRun(t, "0")
	r.env.Environ = append(r.env.Environ, "FAKE_STACK_IMPORT_EXIT=3")
	require.Equal(t, exitcode.Failed, r.run(t, "--secrets", secretsFile, "--yes"))
	stderr := r.errOut.String()
	require.Contains(t, stderr, "the secrets are imported, but the bootstrap could not be recorded as done: pulumi stack import failed (exit 3)")
	require.Contains(t, stderr, "Do not run up on stack proxmox-homelab")
	require.Contains(t, stderr, "Run this adopt again")
	require.NotContains(t, stderr, "Imported.")
	require.Len(t, r.resources(t), 5, "the state as the import left it")
}

func (r *adoptRun) calls(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(r.log + ".calls")
	require.NoError(t, err)
	return string(raw)
}

// resources are the fake stack's resources.
func (r *adoptRun) resources(t *testing.T) []map[string]any {
	t.Helper()
	raw, err := os.ReadFile(r.state)
	require.NoError(t, err)
	var state struct {
		Deployment struct{ Resources []map[string]any }
	}
	require.NoError(t, json.Unmarshal(raw, &state))
	return state.Deployment.Resources
}

func TestAdoptNewClusterSkipsBootstrapAndDryRunPrints(t *testing.T) {
	t.Parallel()
	r, secretsFile := newAdoptRun(t, "0")
	require.Equal(t, exitcode.OK, r.run(t, "--secrets", secretsFile, "--new-cluster", "--dry-run"), r.errOut.String())
	require.NotContains(t, r.out.String(), adopt.BootstrapType)
	require.Contains(t, r.out.String(), adopt.SecretsType)
	require.NotContains(t, r.errOut.String(), "bootstrap")
	_, err := os.Stat(r.log)
	require.ErrorIs(t, err, os.ErrNotExist, "a dry run does not import")

	// Without --new-cluster, the dry run says that the bootstrap is
	// recorded; it reads and writes no state.
	require.Equal(t, exitcode.OK, r.run(t, "--secrets", secretsFile, "--dry-run"), r.errOut.String())
	require.Contains(t, r.errOut.String(), "Then homelab-bootstrap is recorded in the stack's state as done (node and endpoint 10.10.0.10, id machine_bootstrap)")
	_, err = os.Stat(r.log + ".calls")
	require.ErrorIs(t, err, os.ErrNotExist, "no call to pulumi but the config's")

	// A new cluster: the secrets are imported, no bootstrap is recorded.
	require.Equal(t, exitcode.OK, r.run(t, "--secrets", secretsFile, "--new-cluster", "--yes"), r.errOut.String())
	require.Equal(t, "stack export\nimport --stack\n", r.calls(t))
	require.Len(t, r.resources(t), 5)
}

func TestAdoptStopsBeforeImporting(t *testing.T) {
	t.Parallel()
	t.Run("secrets of another cluster than its talosconfig", func(t *testing.T) {
		t.Parallel()
		r, secretsFile := newAdoptRun(t, "0")
		pkitest.WriteTalosSecrets(t, pkitest.TalosBundle(t), filepath.Dir(secretsFile))
		require.Equal(t, exitcode.Failed, r.run(t, "--secrets", secretsFile))
		require.Contains(t, r.errOut.String(), "different clusters")
		require.Contains(t, r.errOut.String(), "Nothing was imported")
		_, err := os.Stat(r.log)
		require.ErrorIs(t, err, os.ErrNotExist)
	})
	t.Run("broken secrets file", func(t *testing.T) {
		t.Parallel()
		r, secretsFile := newAdoptRun(t, "0")
		require.NoError(t, os.WriteFile(secretsFile, []byte("cluster:\n  id: x\n"), 0o600))
		require.Equal(t, exitcode.Failed, r.run(t, "--secrets", secretsFile))
		require.Contains(t, r.errOut.String(), "certs is required")
		_, err := os.Stat(r.log)
		require.ErrorIs(t, err, os.ErrNotExist)
	})
	t.Run("unreadable stack", func(t *testing.T) {
		t.Parallel()
		r, secretsFile := newAdoptRun(t, "0")
		require.NoError(t, os.Remove(r.config))
		require.Equal(t, exitcode.BadConfig, r.run(t, "--secrets", secretsFile))
		_, err := os.Stat(r.log)
		require.ErrorIs(t, err, os.ErrNotExist)
	})
	t.Run("usage", func(t *testing.T) {
		t.Parallel()
		r, _ := newAdoptRun(t, "0")
		require.Equal(t, exitcode.Usage, r.run(t))
	})
}

func TestAdoptPassesOnAFailedImport(t *testing.T) {
	t.Parallel()
	r, secretsFile := newAdoptRun(t, "4")
	require.Equal(t, 4, r.run(t, "--secrets", secretsFile))
	require.Contains(t, r.errOut.String(), "state is as it was")
	require.NotContains(t, r.errOut.String(), "Imported.")
}

// The second step, after an up made the Kubernetes provider: the Cilium
// release the playbooks installed is imported under it, through the
// ssh-proxy helper when the stack uses it (the provider reads the release
// from the API server).
func TestAdoptImportsReleasesThroughTheHelper(t *testing.T) {
	t.Parallel()
	config, host := behindHost(t)
	r, _ := newAdoptRunWith(t, "0", config)
	code := r.run(t, "--release", "cilium", "--yes")
	require.Equal(t, exitcode.OK, code, r.errOut.String())

	env, err := os.ReadFile(r.log + ".env")
	require.NoError(t, err)
	require.Regexp(t, `^proxy=http://127\.0\.0\.1:\d+\n$`, string(env))
	require.Equal(t, 1, host.Logins())

	var file struct {
		NameTable map[string]string
		Resources []struct{ Type, Name, LogicalName, ID, Parent, Provider string }
	}
	raw, err := os.ReadFile(r.log + ".import")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &file))
	require.Len(t, file.Resources, 1)
	rel := file.Resources[0]
	require.Equal(t, "kube-system/cilium", rel.ID)
	require.Equal(t, "homelab-cilium", rel.LogicalName)
	require.Equal(t, "urn:pulumi:proxmox-homelab::talos-cluster::talos-cluster:index:ProxmoxCluster$talos-cluster:index:TalosCluster$pulumi:providers:kubernetes::homelab-k8s", file.NameTable[rel.Provider])
	require.Contains(t, r.errOut.String(), "helm upgrade")

	// Secrets and releases are separate steps; an unknown release is refused.
	require.Equal(t, exitcode.Usage, r.run(t, "--release", "cilium", "--secrets", "x.yaml"))
	require.Equal(t, exitcode.Usage, r.run(t, "--release", "traefik"))
}
