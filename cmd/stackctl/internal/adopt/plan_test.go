package adopt

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/auto/optimport"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/program/programtest"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

func load(t *testing.T, src stacks.Source) *stacks.Config {
	t.Helper()
	cfg, diags := stacks.Load(src)
	require.NoError(t, diags.Err())
	return cfg
}

// The import must give the secrets and the bootstrap the very URNs the
// program registers them under; otherwise the next `up` creates new
// secrets (a new PKI the running nodes reject) and bootstraps again. The
// program runs under the SDK's mock engine, which names resources by the
// engine's rule, for both example stacks.
func TestPlanMatchesProgramURNs(t *testing.T) {
	t.Parallel()
	for _, tc := range stackstest.Examples {
		t.Run(tc.Stack, func(t *testing.T) {
			t.Parallel()
			src := stackstest.Example(t, tc.File)
			e, _, _, err := programtest.Run(t, src, tc.Stack, program.Options{})
			require.NoError(t, err)

			rs, err := Plan(load(t, src), PlanOptions{SecretsFile: "secrets.yaml", Bootstrapped: true})
			require.NoError(t, err)
			urns, err := URNs(tc.Stack, src.Project, rs)
			require.NoError(t, err)

			byName := map[string]*optimport.ImportResource{}
			for _, r := range rs {
				byName[r.Name] = r
			}
			for _, pair := range []struct{ entry, typ string }{
				{"secrets", componentstest.Secrets},
				{"bootstrap", componentstest.Bootstrap},
			} {
				got := e.One(t, pair.typ)
				r := byName[pair.entry]
				require.Equal(t, got.Type, r.Type, pair.entry)
				require.Equal(t, got.Name, r.LogicalName, pair.entry)
				require.Equal(t, got.Parent, string(urns[r.Parent]), "%s: parent URN", pair.entry)
			}
			// The releases a second import takes over sit under the same
			// component, with the cluster's own Kubernetes provider.
			nameTable, rels, err := ReleasesPlan(load(t, src), tc.Stack, src.Project, []string{"cilium", "kubelet-csr-approver"})
			require.NoError(t, err)
			require.Len(t, rels, 2)
			for _, r := range rels {
				got := e.Named(t, componentstest.Release, r.LogicalName)
				require.Equal(t, got.Parent, nameTable[r.Parent], r.Name)
				require.Equal(t, got.Provider, nameTable[r.Provider], r.Name)
				require.Equal(t, "kube-system/"+got.Inputs["name"].StringValue(), r.ID, "helm release import id is namespace/name")
			}

			// And the component chain above them.
			cluster := e.One(t, componentstest.TalosCluster)
			require.Equal(t, string(urns["cluster"]), e.One(t, componentstest.Secrets).Parent)
			require.Equal(t, cluster.Name, byName["cluster"].LogicalName)
			require.Equal(t, string(urns["platform"]), cluster.Parent)
		})
	}
}

func TestPlanEntries(t *testing.T) {
	t.Parallel()
	cfg := load(t, stackstest.Example(t, stackstest.ProxmoxExample))
	rs, err := Plan(cfg, PlanOptions{SecretsFile: "env/secrets.yaml"})
	require.NoError(t, err)
	require.Len(t, rs, 3, "no bootstrap entry unless the cluster is bootstrapped")
	s := rs[2]
	abs, err := filepath.Abs("env/secrets.yaml")
	require.NoError(t, err)
	require.Equal(t, abs, s.ID, "the provider reads the file from its own working directory, so the id is absolute")
	require.Equal(t, TalosPluginVersion, s.Version)
	require.Equal(t, talosPluginServer, s.PluginDownloadURL)
	for _, r := range rs[:2] {
		require.True(t, r.Component)
		require.Empty(t, r.ID, "a component placeholder takes no id")
	}

	// The file `pulumi import --file` reads: its field names are the CLI's.
	raw, err := json.Marshal(map[string]any{"resources": rs})
	require.NoError(t, err)
	for _, want := range []string{`"logicalName":"homelab-secrets"`, `"parent":"cluster"`, `"component":true`, `"pluginDownloadUrl":"github://api.github.com/pulumiverse"`} {
		require.Contains(t, string(raw), want)
	}

	_, err = Plan(cfg, PlanOptions{})
	require.Error(t, err)

	_, _, err = ReleasesPlan(cfg, "s", "p", []string{"traefik"})
	require.ErrorContains(t, err, `release "traefik": the program installs only cilium and kubelet-csr-approver`)
	_, _, err = ReleasesPlan(cfg, "s", "p", nil)
	require.Error(t, err)

	_, err = URNs("s", "p", []*optimport.ImportResource{{Name: "a", Type: "x:y:Z", Parent: "nobody"}})
	require.ErrorContains(t, err, `unknown parent "nobody"`)
}

// The plugin named in the import must be the one the program registers its
// Talos resources with: the SDK of go.mod, as its pulumi-plugin.json says.
func TestTalosPluginIsTheSDKs(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}} {{.Dir}}", "github.com/pulumiverse/pulumi-talos/sdk").Output()
	require.NoError(t, err)
	version, dir, ok := strings.Cut(strings.TrimSpace(string(out)), " ")
	require.True(t, ok, string(out))
	require.Equal(t, "v"+TalosPluginVersion, version, "go.mod's Talos SDK")

	raw, err := os.ReadFile(filepath.Join(dir, "go", "talos", "pulumi-plugin.json"))
	require.NoError(t, err)
	var plugin struct{ Version, Server string }
	require.NoError(t, json.Unmarshal(raw, &plugin))
	require.Equal(t, TalosPluginVersion, plugin.Version)
	require.Equal(t, talosPluginServer, plugin.Server)
}
