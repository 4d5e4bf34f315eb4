//go:build integration

package talosprovider_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/provider/talosprovider"
)

// composeProgram is a Go program that makes a server (a local command
// that prints its address, standing for a cloud provider's server) and a
// VpsCluster on it, from the server's output: the address is not known
// before the server is made. Config "stage" server makes the server alone.
const composeProgram = `package main

import (
	"github.com/pulumi/pulumi-command/sdk/go/command/local"
	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	corev1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/core/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"

	ta "` + talosprovider.GoImportBase + `"
)

func main() {
	pulumi.Run(func(ctx *pulumi.Context) error {
		server, err := local.NewCommand(ctx, "server", &local.CommandArgs{
			Create: pulumi.String("printf %s " + config.Require(ctx, "serverIp")),
		})
		if err != nil {
			return err
		}
		if config.Get(ctx, "stage") == "server" {
			return nil
		}
		c, err := ta.NewVpsCluster(ctx, "edge", &ta.VpsClusterArgs{
			Cluster: ta.TalosClusterSettingsArgs{Name: "edge", TalosVersion: "v1.13.9"},
			Vps:     ta.VpsSettingsArgs{Gateway: pulumi.StringRef("203.0.113.254")},
			Nodes: []ta.VpsNodeArgs{{
				Name: "cp-0", Role: ta.RoleControlplane, Ip: server.Stdout,
				Rescue: ta.VpsRescueArgs{Password: config.RequireSecret(ctx, "rescuePassword")},
			}},
		})
		if err != nil {
			return err
		}
		ctx.Export("endpoint", c.Endpoint)
		// A Namespace on the new cluster, through its kubernetesProvider
		// output: an Output of the provider, which a resource option
		// cannot take (pulumi/pulumi#7012), so it is made in an apply.
		c.KubernetesProvider.ApplyT(func(p *kubernetes.Provider) (string, error) {
			_, err := corev1.NewNamespace(ctx, "apps", &corev1.NamespaceArgs{}, pulumi.Provider(p))
			return "", err
		})
		return nil
	})
}
`

// A Go program composes a VpsCluster from another resource's output (the
// issue's "done when"), through the generated Go SDK, the real CLI and
// its Go language host, and the plugin `make provider` builds:
//
//  1. in a preview of the up that makes the server, the address is
//     unknown: the preview shows the cluster component alone, with the
//     warning naming nodes[0].ip, and no child made from a guess;
//  2. an up waits for the server, then checks the address with the
//     component's rules: an invalid one fails by its path, nothing of the
//     cluster made;
//  3. once the server exists, a preview shows the cluster's resources,
//     made from its address.
//
// Offline: the Go program is built in the network namespace with
// GOPROXY=off from the module cache, which go mod tidy fills first.
func TestIntegrationGoProgramComposesAVpsCluster(t *testing.T) {
	requireTools(t, "needs make, go, the pulumi CLI and its Go language host", "make", "go", "pulumi", "pulumi-language-go")
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	env := cliEnv(t)
	out, err := runIn(t, root, env, 20*time.Minute, "make", "--no-print-directory", "provider")
	require.NoError(t, err, "make provider:\n%s", out)
	bin := filepath.Join(root, "bin", "pulumi-resource-talos-anywhere")

	prog := goProgram(t, "compose", composeProgram, "github.com/pulumi/pulumi-command/sdk", "github.com/pulumi/pulumi-kubernetes/sdk/v4")
	require.NoError(t, os.WriteFile(filepath.Join(prog, "Pulumi.yaml"), []byte(fmt.Sprintf("name: compose\nruntime: go\nplugins:\n  providers:\n    - name: %s\n      path: %s\n",
		talosprovider.Name, filepath.Dir(bin))), 0o600))
	env = append(env, "GOPROXY=off", "GOFLAGS=-mod=mod")

	pulumi := func(args ...string) (string, error) {
		t.Helper()
		name, args := offlinePulumi(t, args...)
		return runIn(t, prog, env, 10*time.Minute, name, args...)
	}
	stack := func(name, ip, stage string) {
		t.Helper()
		for _, cmd := range [][]string{
			{"stack", "init", name},
			{"config", "set", "serverIp", ip},
			{"config", "set", "stage", stage},
			{"config", "set", "--secret", "rescuePassword", "not-a-real-password"},
		} {
			out, err := runIn(t, prog, env, time.Minute, "pulumi", cmd...)
			require.NoError(t, err, out)
		}
	}

	// 1 and 2: a server with an invalid address, made in the same up.
	stack("invalid", "203.0.113.300", "cluster")
	out, err = pulumi("preview", "--non-interactive")
	require.NoError(t, err, "the preview with the address unknown:\n%s", out)
	t.Logf("the preview with the address unknown:\n%s", out)
	assert.Contains(t, out, "talos-anywhere:index:VpsCluster edge create")
	assert.Contains(t, out, "command:local:Command server create")
	assert.Contains(t, out, "inputs unknown until the up (outputs of resources it makes or replaces): nodes[0].ip")
	assert.Contains(t, out, "+ 3 to create", "the stack, the server and the component: no child")
	assert.NotContains(t, out, "not-a-real-password")

	out, err = pulumi("up", "--yes", "--non-interactive", "--skip-preview")
	require.Error(t, err, "the invalid address is refused:\n%s", out)
	assert.Contains(t, out, `nodes[0].ip: "203.0.113.300" is not an IPv4 address`, "checked by the component's rule, by path")
	out, err = runIn(t, prog, env, time.Minute, "pulumi", "stack", "--show-urns")
	require.NoError(t, err, out)
	assert.Contains(t, out, "command:local:Command", "the server was made first")
	assert.NotContains(t, out, "talos:machine:Secrets", "nothing of the cluster")

	// 3: the server exists; the preview shows the cluster made from it.
	stack("valid", "203.0.113.7", "server")
	out, err = pulumi("up", "--yes", "--non-interactive", "--skip-preview")
	require.NoError(t, err, "the server alone:\n%s", out)
	out, err = runIn(t, prog, env, time.Minute, "pulumi", "config", "set", "stage", "cluster")
	require.NoError(t, err, out)
	out, err = pulumi("preview", "--non-interactive")
	require.NoError(t, err, "the preview with the address known:\n%s", out)
	t.Logf("the preview with the address known:\n%s", out[max(0, strings.Index(out, "Resources:")):])
	assert.NotContains(t, out, "inputs unknown")
	for _, want := range []string{
		"talos-anywhere:index:VpsCluster edge create", "talos:machine:Secrets edge-secrets create", "command:remote:Command",
		"kubernetes:core/v1:Namespace apps create", // through the cluster's provider
	} {
		assert.Contains(t, out, want)
	}
}
