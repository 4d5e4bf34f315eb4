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
	"github.com/fluodata/talos-pulumi/internal/pkitest"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// fakePulumi is a pulumi CLI stand-in: `config` prints the stack's config
// (from the file the script names: it is started without the test's
// environment), `import` logs its arguments and a copy of the import file
// and exits with $FAKE_IMPORT_EXIT.
const fakePulumi = `#!/bin/sh
case "$1" in
config) cat %q ;;
import)
	echo "$@" > "$FAKE_LOG"
	echo "proxy=$HTTPS_PROXY" > "$FAKE_LOG.env"
	while [ $# -gt 0 ]; do
		if [ "$1" = --file ]; then cp "$2" "$FAKE_LOG.import"; ls -l "$2" | cut -c1-10 > "$FAKE_LOG.mode"; fi
		shift
	done
	exit "${FAKE_IMPORT_EXIT:-0}" ;;
*) echo "unexpected: $*" >&2; exit 99 ;;
esac
`

type adoptRun struct {
	dir, pulumi, log, config string
	env                      accessEnv
	out, errOut              *syncBuffer
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
	require.NoError(t, os.WriteFile(r.pulumi, []byte(fmt.Sprintf(fakePulumi, r.config)), 0o700)) //nolint:gosec // an executable test script
	require.NoError(t, os.WriteFile(r.config, config, 0o600))
	r.env, r.out, r.errOut = accessEnvFor(nil, nil)
	r.env.ReadConfig = nil
	r.env.Environ = []string{"PATH=" + os.Getenv("PATH"), "FAKE_LOG=" + r.log, "FAKE_IMPORT_EXIT=" + importExit}
	return r, secretsFile
}

func (r *adoptRun) run(t *testing.T, args ...string) int {
	t.Helper()
	return adoptCmd(context.Background(), append([]string{"--stack", "proxmox-homelab", "--pulumi", r.pulumi}, args...), r.env)
}

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
	require.Len(t, file.Resources, 4)
	sec, boot := file.Resources[2], file.Resources[3]
	require.Equal(t, adopt.SecretsType, sec.Type)
	require.Equal(t, secretsFile, sec.ID, "the provider reads this path")
	require.Equal(t, adopt.BootstrapType, boot.Type)
	require.Equal(t, "homelab-bootstrap", boot.LogicalName)
	require.NotContains(t, string(raw), "BEGIN", "the import file names the secrets file, it does not copy it")

	stderr := r.errOut.String()
	require.Contains(t, stderr, "belong to the same cluster")
	require.Contains(t, stderr, "talosVersion v1.3 -> v1.12")
	require.Contains(t, stderr, "homelab-bootstrap")
	_, err = os.Stat(filepath.Dir(strings.Fields(string(args))[4]))
	require.ErrorIs(t, err, os.ErrNotExist, "the import file is removed afterwards")
}

func TestAdoptNewClusterSkipsBootstrapAndDryRunPrints(t *testing.T) {
	t.Parallel()
	r, secretsFile := newAdoptRun(t, "0")
	require.Equal(t, exitcode.OK, r.run(t, "--secrets", secretsFile, "--new-cluster", "--dry-run"), r.errOut.String())
	require.NotContains(t, r.out.String(), adopt.BootstrapType)
	require.Contains(t, r.out.String(), adopt.SecretsType)
	_, err := os.Stat(r.log)
	require.ErrorIs(t, err, os.ErrNotExist, "a dry run does not import")
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
