//go:build integration

package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/adopt"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/exitcode"
	"github.com/fluodata/talos-pulumi/internal/pkitest"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// TestIntegrationAdoptWithTheRealCLI imports a secrets.yaml into a new
// stack of the Proxmox example with the real pulumi CLI and Talos plugin
// (downloaded on first use), on a local file backend, and checks the
// state: the secrets under the URN the program uses, read from the file,
// kept secret. Run it with `make integration`; it is skipped, saying so,
// where pulumi is not on PATH.
func TestIntegrationAdoptWithTheRealCLI(t *testing.T) {
	pulumiPath, err := exec.LookPath("pulumi")
	if err != nil {
		t.Skip("SKIPPED: the pulumi CLI is not on PATH, so the adopt integration test did not run")
	}
	dir := t.TempDir()
	root := stackstest.RepoRoot(t)
	for _, f := range []string{"Pulumi.yaml"} {
		raw, err := os.ReadFile(filepath.Join(root, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), raw, 0o600))
	}
	example, err := os.ReadFile(filepath.Join(root, stackstest.ProxmoxExample))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.it.yaml"), example, 0o600))
	t.Chdir(dir)
	t.Setenv("PULUMI_CONFIG_PASSPHRASE", "integration-test")
	t.Setenv("PULUMI_BACKEND_URL", "file://"+filepath.Join(dir, "state"))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "state"), 0o700))

	pulumi := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(pulumiPath, args...).CombinedOutput()
		require.NoError(t, err, "pulumi %s: %s", strings.Join(args, " "), out)
		return string(out)
	}
	pulumi("stack", "init", "it", "--secrets-provider", "passphrase")
	for k, v := range stackstest.ExampleSecrets[stackstest.ProxmoxExample] {
		pulumi("config", "set", "--secret", "--path", "--stack", "it", k, v)
	}

	b := pkitest.TalosBundle(t)
	env := filepath.Join(dir, "environments", "it")
	require.NoError(t, os.MkdirAll(env, 0o700))
	secretsFile := pkitest.WriteTalosSecrets(t, b, env)
	pkitest.WriteTalosconfig(t, b, env, "homelab", "10.10.0.10")

	var out, errOut syncBuffer
	e := defaultAccessEnv(strings.NewReader(""), &out, &errOut)
	e.ReadConfig = nil
	code := adoptCmd(context.Background(), []string{"--stack", "it", "--pulumi", pulumiPath, "--secrets", secretsFile, "--yes"}, e)
	require.Equal(t, exitcode.OK, code, out.String()+errOut.String())

	var state struct {
		Deployment struct {
			Resources []struct {
				URN, Type, ID string
				Outputs       map[string]any
			}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(pulumi("stack", "export", "--stack", "it")), &state))
	src, err := stacks.SourceFromConfigJSON([]byte(pulumi("config", "--show-secrets", "--json", "--stack", "it")))
	require.NoError(t, err)
	cfg, diags := stacks.Load(src)
	require.NoError(t, diags.Err())
	rs, err := adopt.Plan(cfg, adopt.PlanOptions{SecretsFile: secretsFile, Bootstrapped: true})
	require.NoError(t, err)
	urns, err := adopt.URNs("it", src.Project, rs)
	require.NoError(t, err)

	found := map[string]bool{}
	for _, r := range state.Deployment.Resources {
		switch string(r.URN) {
		case string(urns["secrets"]):
			found["secrets"] = true
			require.Contains(t, r.Outputs, "machineSecrets")
		case string(urns["bootstrap"]):
			found["bootstrap"] = true
		}
	}
	require.True(t, found["secrets"] && found["bootstrap"], "state: %+v", state.Deployment.Resources)
	// The provider marks the keys and tokens sensitive; the state keeps
	// them encrypted.
	export := pulumi("stack", "export", "--stack", "it")
	for what, v := range map[string]string{
		"bootstrap token": b.Secrets.BootstrapToken, "cluster secret": b.Cluster.Secret,
		"Talos CA key": base64.StdEncoding.EncodeToString(b.Certs.OS.Key),
	} {
		require.NotContains(t, export, v, "%s in plain text in the state", what)
	}
}
