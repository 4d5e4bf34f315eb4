package adopt

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v4"
)

// newBundle makes a bundle the way `talosctl gen secrets` does.
func newBundle(t *testing.T) *secrets.Bundle {
	t.Helper()
	b, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), config.TalosVersionCurrent)
	require.NoError(t, err)
	return b
}

// writeBundle writes b as talosctl does (YAML) into a fresh folder and
// returns the file's path; edit changes the YAML tree first.
func writeBundle(t *testing.T, b *secrets.Bundle, edit func(m map[string]any)) string {
	t.Helper()
	raw, err := yaml.Marshal(b)
	require.NoError(t, err)
	if edit != nil {
		var m map[string]any
		require.NoError(t, yaml.Unmarshal(raw, &m))
		edit(m)
		raw, err = yaml.Marshal(m)
		require.NoError(t, err)
	}
	p := filepath.Join(t.TempDir(), "secrets.yaml")
	require.NoError(t, os.WriteFile(p, raw, 0o600))
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
	b := newBundle(t)
	got, err := LoadSecrets(writeBundle(t, b, nil))
	require.NoError(t, err)
	require.Equal(t, b.Cluster.ID, got.Cluster.ID)
	require.Equal(t, b.Certs.OS.Crt, got.Certs.OS.Crt)
}

func TestLoadSecretsNamesEveryProblem(t *testing.T) {
	t.Parallel()
	other := newBundle(t)
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
			p := writeBundle(t, newBundle(t), tc.edit)
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

// talosconfigFor writes the talosconfig talosctl gen config makes from b.
func talosconfigFor(t *testing.T, b *secrets.Bundle, dir string) string {
	t.Helper()
	in, err := generate.NewInput("homelab", "https://10.10.0.2:6443", "", generate.WithSecretsBundle(b))
	require.NoError(t, err)
	tc, err := in.Talosconfig()
	require.NoError(t, err)
	raw, err := tc.Bytes()
	require.NoError(t, err)
	p := filepath.Join(dir, "talosconfig")
	require.NoError(t, os.WriteFile(p, raw, 0o600))
	return p
}

func TestCheckTalosconfig(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	secretsPath := writeBundle(t, b, nil)
	dir := filepath.Dir(secretsPath)
	require.Empty(t, SiblingTalosconfig(secretsPath), "no talosconfig yet")

	tc := talosconfigFor(t, b, dir)
	require.Equal(t, tc, SiblingTalosconfig(secretsPath))
	require.NoError(t, CheckTalosconfig(b, tc))

	// The talosconfig of another environment's cluster.
	wrong := talosconfigFor(t, newBundle(t), t.TempDir())
	err := CheckTalosconfig(b, wrong)
	require.Error(t, err)
	require.Contains(t, err.Error(), "different clusters")

	_, err = os.Stat(filepath.Join(dir, "nothing"))
	require.True(t, errors.Is(err, fs.ErrNotExist))
	err = CheckTalosconfig(b, filepath.Join(dir, "nothing"))
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, err = os.Stat(filepath.Join(dir, "nothing"))
	require.ErrorIs(t, err, fs.ErrNotExist, "checking must not create the file")

	garbage := filepath.Join(t.TempDir(), "talosconfig")
	require.NoError(t, os.WriteFile(garbage, []byte("context: x\ncontexts: {}\n"), 0o600))
	err = CheckTalosconfig(b, garbage)
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "no contexts"), err.Error())
}
