package adopt

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v4"

	"github.com/fluodata/talos-pulumi/internal/testkit/pkitest"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// writeBundle writes b as talosctl does (YAML) into a fresh folder and
// returns the file's path; edit changes the YAML tree first.
func writeBundle(t *testing.T, b *secrets.Bundle, edit func(m map[string]any)) string {
	t.Helper()
	p := pkitest.WriteTalosSecrets(t, b, t.TempDir())
	if edit != nil {
		raw, err := os.ReadFile(p)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, yaml.Unmarshal(raw, &m))
		edit(m)
		raw, err = yaml.Marshal(m)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p, raw, 0o600))
	}
	return p
}

func section(m map[string]any, path ...string) map[string]any {
	for _, k := range path {
		m = m[k].(map[string]any)
	}
	return m
}

func TestLoadSecretsAcceptsTalosctlBundle(t *testing.T) {
	t.Parallel()
	b := pkitest.TalosBundle(t)
	got, err := LoadSecrets(writeBundle(t, b, nil))
	require.NoError(t, err)
	require.Equal(t, b.Cluster.ID, got.Cluster.ID)
	require.Equal(t, b.Certs.OS.Crt, got.Certs.OS.Crt)
}

func TestLoadSecretsNamesEveryProblem(t *testing.T) {
	t.Parallel()
	other := pkitest.TalosBundle(t)
	cases := []struct {
		name string
		edit func(m map[string]any)
		want []string
	}{
		{
			name: "missing sections, all reported",
			edit: func(m map[string]any) { delete(m, "cluster"); delete(m, "trustdinfo") },
			want: []string{"cluster is required", "trustdinfo is required"},
		},
		{
			name: "empty bootstrap token",
			edit: func(m map[string]any) { section(m, "secrets")["bootstraptoken"] = "" },
			want: []string{"secrets.bootstraptoken is required"},
		},
		{
			// The provider's import would dereference it and crash.
			name: "no certs.os",
			edit: func(m map[string]any) { delete(section(m, "certs"), "os") },
			want: []string{"certs.os is required"},
		},
		{
			name: "corrupt certificate",
			edit: func(m map[string]any) { section(m, "certs", "k8s")["crt"] = "bm90IGEgY2VydA==" },
			want: []string{"certs.k8s is invalid"},
		},
		{
			// Both halves parse, but they do not belong together: configs
			// signed with this key would not be trusted by the nodes.
			name: "key of another cluster",
			edit: func(m map[string]any) {
				raw, err := yaml.Marshal(other)
				if err != nil {
					panic(err)
				}
				var o map[string]any
				if err := yaml.Unmarshal(raw, &o); err != nil {
					panic(err)
				}
				section(m, "certs", "os")["key"] = section(o, "certs", "os")["key"]
			},
			want: []string{"certs.os: the key does not belong to the certificate"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := writeBundle(t, pkitest.TalosBundle(t), tc.edit)
			_, err := LoadSecrets(p)
			require.ErrorIs(t, err, ErrInvalidSecrets)
			require.Contains(t, err.Error(), p)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestLoadSecretsRejectsOtherFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	_, err := LoadSecrets(filepath.Join(dir, "missing.yaml"))
	require.ErrorIs(t, err, fs.ErrNotExist)

	empty := filepath.Join(dir, "empty.yaml")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	_, err = LoadSecrets(empty)
	require.ErrorIs(t, err, ErrInvalidSecrets)

	// A talosconfig or a machine config passed by mistake.
	notBundle := filepath.Join(dir, "controlplane.yaml")
	require.NoError(t, os.WriteFile(notBundle, []byte("version: v1alpha1\nmachine:\n  type: controlplane\n"), 0o600))
	_, err = LoadSecrets(notBundle)
	require.ErrorIs(t, err, ErrInvalidSecrets)
	require.Contains(t, err.Error(), "cluster is required")
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

func TestCheckTalosconfig(t *testing.T) {
	t.Parallel()
	cfg := load(t, stackstest.Example(t, stackstest.ProxmoxExample))
	b := pkitest.TalosBundle(t)
	secretsPath := writeBundle(t, b, nil)
	dir := filepath.Dir(secretsPath)
	require.Empty(t, SiblingTalosconfig(secretsPath), "no talosconfig yet")

	tc := pkitest.WriteTalosconfig(t, b, dir, "homelab", "10.10.0.10", "10.10.0.5")
	require.Equal(t, tc, SiblingTalosconfig(secretsPath))
	warnings, err := CheckTalosconfig(cfg, b, tc)
	require.NoError(t, err)
	require.Empty(t, warnings)

	// Same cluster, but the stack names it differently and misses a node.
	other := pkitest.WriteTalosconfig(t, b, t.TempDir(), "home", "10.10.0.10", "10.10.0.99")
	warnings, err = CheckTalosconfig(cfg, b, other)
	require.NoError(t, err)
	require.Len(t, warnings, 2)
	require.Contains(t, warnings[0], `context "home" is not cluster.name "homelab"`)
	require.Contains(t, warnings[1], "10.10.0.99")

	// A talosconfig holding this cluster's context among others'.
	merged := filepath.Join(t.TempDir(), "talosconfig")
	mine, err := clientconfig.FromBytes(mustRead(t, tc))
	require.NoError(t, err)
	theirs, err := clientconfig.FromBytes(mustRead(t, pkitest.WriteTalosconfig(t, pkitest.TalosBundle(t), t.TempDir(), "prod", "192.0.2.1")))
	require.NoError(t, err)
	mine.Contexts["prod"] = theirs.Contexts["prod"]
	require.NoError(t, mine.Save(merged))
	warnings, err = CheckTalosconfig(cfg, b, merged)
	require.NoError(t, err)
	require.Empty(t, warnings, "the other cluster's context is not this one's business")

	// The talosconfig of another environment's cluster.
	wrong := pkitest.WriteTalosconfig(t, pkitest.TalosBundle(t), t.TempDir(), "homelab")
	_, err = CheckTalosconfig(cfg, b, wrong)
	require.ErrorContains(t, err, "different clusters")

	missing := filepath.Join(dir, "nothing")
	_, err = CheckTalosconfig(cfg, b, missing)
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, err = os.Stat(missing)
	require.ErrorIs(t, err, fs.ErrNotExist, "checking must not create the file")

	garbage := filepath.Join(t.TempDir(), "talosconfig")
	require.NoError(t, os.WriteFile(garbage, []byte("context: x\ncontexts: {}\n"), 0o600))
	_, err = CheckTalosconfig(cfg, b, garbage)
	require.ErrorContains(t, err, "no contexts")
}
