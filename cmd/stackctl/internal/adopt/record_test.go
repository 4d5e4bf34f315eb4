package adopt

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/program/programtest"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// The recorded bootstrap has the inputs the program gives it, so that the
// first preview after the adopt shows it unchanged: its node and endpoint
// are the program's, for both example stacks.
func TestBootstrapNodeIsTheProgramsBootstrapNode(t *testing.T) {
	t.Parallel()
	for _, tc := range stackstest.Examples {
		t.Run(tc.Stack, func(t *testing.T) {
			t.Parallel()
			src := stackstest.Example(t, tc.File)
			e, _, _, err := programtest.Run(t, src, tc.Stack, program.Options{})
			require.NoError(t, err)
			boot := e.One(t, componentstest.Bootstrap)
			node, err := BootstrapNode(load(t, src))
			require.NoError(t, err)
			require.Equal(t, boot.Inputs["node"].StringValue(), node)
			require.Equal(t, boot.Inputs["endpoint"].StringValue(), node)
		})
	}
	_, err := BootstrapNode(&stacks.Config{})
	require.ErrorContains(t, err, "no control plane")
}

func TestImportLeavesTheBootstrapOut(t *testing.T) {
	t.Parallel()
	cfg := load(t, stackstest.Example(t, stackstest.ProxmoxExample))
	rs, err := Plan(cfg, PlanOptions{SecretsFile: "secrets.yaml", Bootstrapped: true})
	require.NoError(t, err)
	require.Len(t, rs, 4)
	imports := Import(rs)
	require.Len(t, imports, 3)
	for _, r := range imports {
		require.NotEqual(t, BootstrapType, r.Type)
	}
}

// exported is a stack's state after the import of the secrets, as
// `pulumi stack export` prints it; extra keys are kept as they are.
const exported = `{
  "version": 3,
  "deployment": {
    "manifest": {"time": "t", "magic": "m", "version": "v3.219.0"},
    "secrets_providers": {"type": "passphrase", "state": {"salt": "v1:abc"}},
    "future": {"kept": true},
    "resources": [
      {"urn": "urn:pulumi:s::talos-cluster::pulumi:pulumi:Stack::talos-cluster-s", "custom": false, "type": "pulumi:pulumi:Stack"},
      {"urn": "urn:pulumi:s::talos-cluster::pulumi:providers:talos::default", "custom": true, "id": "p1", "type": "pulumi:providers:talos"},
      {"urn": "urn:pulumi:s::talos-cluster::talos-cluster:index:ProxmoxCluster::homelab", "custom": false, "type": "talos-cluster:index:ProxmoxCluster"},
      {"urn": "urn:pulumi:s::talos-cluster::talos-cluster:index:ProxmoxCluster$talos-cluster:index:TalosCluster::homelab", "custom": false, "type": "talos-cluster:index:TalosCluster"},
      {"urn": "urn:pulumi:s::talos-cluster::talos-cluster:index:ProxmoxCluster$talos-cluster:index:TalosCluster$talos:machine/secrets:Secrets::homelab-secrets",
       "custom": true, "id": "machine_secrets", "type": "talos:machine/secrets:Secrets",
       "provider": "urn:pulumi:s::talos-cluster::pulumi:providers:talos::default::p1",
       "outputs": {"clientConfiguration": {"caCertificate": "Q0E=", "clientCertificate": "Q0VSVA==",
         "clientKey": {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270", "ciphertext": "v1:xyz"}}},
       "futureField": 7},
      {"urn": "urn:pulumi:s::talos-cluster::pulumi:providers:kubernetes::other", "custom": true, "id": "k1", "type": "pulumi:providers:kubernetes"}
    ]
  }
}`

func TestRecordBootstrap(t *testing.T) {
	t.Parallel()
	cfg := load(t, stackstest.Example(t, stackstest.ProxmoxExample))
	rs, err := Plan(cfg, PlanOptions{SecretsFile: "secrets.yaml", Bootstrapped: true})
	require.NoError(t, err)
	urns, err := URNs("s", "talos-cluster", rs)
	require.NoError(t, err)

	s, err := ParseStackState([]byte(exported))
	require.NoError(t, err)
	require.True(t, s.Has(string(urns["secrets"])))
	require.False(t, s.Has(string(urns["bootstrap"])))
	ok, err := RecordBootstrap(s, "s", "talos-cluster", rs, "10.10.0.10")
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, s.Has(string(urns["bootstrap"])))

	raw, err := s.Marshal()
	require.NoError(t, err)
	var got struct {
		Version    int
		Deployment map[string]json.RawMessage
	}
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Equal(t, 3, got.Version)
	require.JSONEq(t, `{"kept": true}`, string(got.Deployment["future"]), "what the state has beyond the resources is kept")
	var res []map[string]any
	require.NoError(t, json.Unmarshal(got.Deployment["resources"], &res))
	require.Len(t, res, 7)
	require.Equal(t, string(urns["secrets"]), res[4]["urn"])
	require.EqualValues(t, 7, res[4]["futureField"], "the other resources are kept as they were")
	boot := res[5]
	require.Equal(t, string(urns["bootstrap"]), boot["urn"], "right after the secrets, before what followed them")
	require.Equal(t, "urn:pulumi:s::talos-cluster::pulumi:providers:kubernetes::other", res[6]["urn"])
	require.Equal(t, string(urns["cluster"]), boot["parent"])
	require.Equal(t, "urn:pulumi:s::talos-cluster::pulumi:providers:talos::default::p1", boot["provider"])
	require.Equal(t, BootstrapID, boot["id"])
	cc := map[string]any{"caCertificate": "Q0E=", "clientCertificate": "Q0VSVA==",
		"clientKey": map[string]any{"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270", "ciphertext": "v1:xyz"}}
	require.Equal(t, map[string]any{"clientConfiguration": cc, "node": "10.10.0.10", "endpoint": "10.10.0.10"}, boot["inputs"])
	require.Equal(t, `{"schema_version":"1"}`, boot["outputs"].(map[string]any)["__meta"])
	require.Equal(t, map[string]any{"clientConfiguration": []any{string(urns["secrets"])}, "endpoint": []any{}, "node": []any{}}, boot["propertyDependencies"])

	// Recorded once.
	s2, err := ParseStackState(raw)
	require.NoError(t, err)
	ok, err = RecordBootstrap(s2, "s", "talos-cluster", rs, "10.10.0.10")
	require.NoError(t, err)
	require.False(t, ok, "a bootstrap in the state is left as it is")
}

func TestRecordBootstrapRefuses(t *testing.T) {
	t.Parallel()
	cfg := load(t, stackstest.Example(t, stackstest.ProxmoxExample))
	rs, err := Plan(cfg, PlanOptions{SecretsFile: "secrets.yaml", Bootstrapped: true})
	require.NoError(t, err)

	empty, err := ParseStackState([]byte(`{"version":3,"deployment":{"manifest":{}}}`))
	require.NoError(t, err)
	_, err = RecordBootstrap(empty, "s", "talos-cluster", rs, "10.10.0.10")
	require.ErrorContains(t, err, "the secrets must be imported first")

	s, err := ParseStackState([]byte(exported))
	require.NoError(t, err)
	_, err = RecordBootstrap(s, "other-stack", "talos-cluster", rs, "10.10.0.10")
	require.ErrorContains(t, err, "the secrets must be imported first")

	noCC, err := ParseStackState([]byte(`{"version":3,"deployment":{"resources":[
	  {"urn":"urn:pulumi:s::talos-cluster::talos-cluster:index:ProxmoxCluster$talos-cluster:index:TalosCluster::homelab"},
	  {"urn":"urn:pulumi:s::talos-cluster::talos-cluster:index:ProxmoxCluster$talos-cluster:index:TalosCluster$talos:machine/secrets:Secrets::homelab-secrets","provider":"p"}]}}`))
	require.NoError(t, err)
	_, err = RecordBootstrap(noCC, "s", "talos-cluster", rs, "10.10.0.10")
	require.ErrorContains(t, err, "no provider or no clientConfiguration output")

	_, err = RecordBootstrap(s, "s", "talos-cluster", Import(rs), "10.10.0.10")
	require.ErrorContains(t, err, "no bootstrap")

	for _, bad := range []string{`{`, `{"version":2,"deployment":{}}`, `{"version":5,"deployment":{}}`, `{"version":3,"deployment":{"resources":{}}}`} {
		_, err := ParseStackState([]byte(bad))
		require.Error(t, err, bad)
	}
}

// The CLI writes version 4, with the features it needs, for a state with
// resource hooks or replaceWith: every stack of this program (issue 35,
// item 0.2). It is read, and written back with its features.
func TestAVersion4StateIsReadAndKeepsItsFeatures(t *testing.T) {
	t.Parallel()
	s, err := ParseStackState([]byte(`{"version":4,"features":["hooks","replaceWith"],"deployment":{"manifest":{},"resources":[{"urn":"urn:pulumi:s::p::pulumi:pulumi:Stack::p-s","type":"pulumi:pulumi:Stack"}]}}`))
	require.NoError(t, err)
	require.True(t, s.Has("urn:pulumi:s::p::pulumi:pulumi:Stack::p-s"))
	out, err := s.Marshal()
	require.NoError(t, err)
	var top struct {
		Version  int      `json:"version"`
		Features []string `json:"features"`
	}
	require.NoError(t, json.Unmarshal(out, &top))
	require.Equal(t, 4, top.Version)
	require.Equal(t, []string{"hooks", "replaceWith"}, top.Features)
}
