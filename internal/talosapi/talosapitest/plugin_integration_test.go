//go:build integration

package talosapitest_test

import (
	"context"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumiverse/pulumi-talos/sdk/go/talos/cluster"
	"github.com/pulumiverse/pulumi-talos/sdk/go/talos/machine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
	"github.com/fluodata/talos-pulumi/internal/testkit/clitest"
)

// TestIntegrationTheTalosPluginInstallsFreshMachines runs the real talos
// plugin (pulumi-talos v0.7.1, terraform-provider-talos v0.10.1) against
// nodes of the fake booted from the ISO, as components/talos registers its
// resources: machine secrets, each role's config, an apply per node, the
// bootstrap of the first control plane and the kubeconfig. The plugin
// finds each node in maintenance mode (its insecure Disks call answers),
// applies the config there; the node installs, reboots and serves with the
// secrets' OS CA, and the bootstrap and kubeconfig go over mTLS. A second
// preview shows no change; a changed config is applied over mTLS to the
// configured node. The nodes listen on their own addresses (127.0.77.x,
// port 50000) since the plugin dials the node's address. Skipped, saying
// so, without pulumi on PATH.
func TestIntegrationTheTalosPluginInstallsFreshMachines(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := clitest.Backend(t, "the fake was not run with the real talos plugin")
	const cp, worker = "127.0.77.11", "127.0.77.21"
	nodes := talosapitest.StartFresh(t,
		talosapitest.NodeSpec{IP: cp, Hostname: "cp-0", Role: talosapitest.ControlPlane, Listen: cp + ":50000", Maintenance: true, RebootLatency: 200 * time.Millisecond},
		talosapitest.NodeSpec{IP: worker, Hostname: "worker-0", Role: talosapitest.Worker, Listen: worker + ":50000", Maintenance: true, RebootLatency: 200 * time.Millisecond},
	)
	patch := `{"machine": {"time": {"servers": ["time.cloudflare.com"]}}}`
	program := func(ctx *pulumi.Context) error {
		secrets, err := machine.NewSecrets(ctx, "secrets", &machine.SecretsArgs{TalosVersion: pulumi.String("v1.13.9")})
		if err != nil {
			return err
		}
		cc := secrets.ClientConfiguration
		var applies []pulumi.Resource
		for _, n := range []struct{ ip, role string }{{cp, "controlplane"}, {worker, "worker"}} {
			cfg := machine.GetConfigurationOutput(ctx, machine.GetConfigurationOutputArgs{
				ClusterName: pulumi.String("lab"), ClusterEndpoint: pulumi.String("https://" + cp + ":6443"),
				MachineType: pulumi.String(n.role), MachineSecrets: secrets.MachineSecrets,
				TalosVersion: pulumi.String("v1.13.9"), KubernetesVersion: pulumi.String("1.34.1"),
				Docs: pulumi.Bool(false), Examples: pulumi.Bool(false),
			})
			a, err := machine.NewConfigurationApply(ctx, "apply-"+n.role, &machine.ConfigurationApplyArgs{
				ClientConfiguration:       cc,
				MachineConfigurationInput: cfg.MachineConfiguration(),
				Node:                      pulumi.String(n.ip), Endpoint: pulumi.String(n.ip),
				ConfigPatches: pulumi.ToStringArray([]string{patch}),
			})
			if err != nil {
				return err
			}
			applies = append(applies, a)
		}
		bootstrap, err := machine.NewBootstrap(ctx, "bootstrap", &machine.BootstrapArgs{
			ClientConfiguration: cc, Node: pulumi.String(cp), Endpoint: pulumi.String(cp),
		}, pulumi.DependsOn(applies[:1]))
		if err != nil {
			return err
		}
		kc, err := cluster.NewKubeconfig(ctx, "kubeconfig", &cluster.KubeconfigArgs{
			ClientConfiguration: cluster.KubeconfigClientConfigurationArgs{
				CaCertificate: cc.CaCertificate(), ClientCertificate: cc.ClientCertificate(), ClientKey: cc.ClientKey(),
			},
			Node: pulumi.String(cp), Endpoint: pulumi.String(cp),
		}, pulumi.DependsOn([]pulumi.Resource{bootstrap}))
		if err != nil {
			return err
		}
		ctx.Export("kubeconfig", kc.KubeconfigRaw)
		ctx.Export("osCA", cc.CaCertificate())
		return nil
	}
	s, err := auto.UpsertStackInlineSource(ctx, "fresh", "talos-fake-it", program, auto.WorkDir(dir))
	require.NoError(t, err)

	res, err := s.Up(ctx)
	require.NoError(t, err, "first up")
	for _, ip := range []string{cp, worker} {
		assert.False(t, nodes.Node(ip).InMaintenance(), "%s took its config", ip)
	}
	assert.True(t, nodes.Bootstrapped(), "the first control plane is bootstrapped")
	kc := res.Outputs["kubeconfig"].Value.(string)
	assert.Contains(t, kc, "server: https://"+cp+":6443", "the config's cluster endpoint")
	assert.Contains(t, kc, "client-certificate-data: ", "an admin certificate of the config's Kubernetes CA")
	var inMaintenance, configured int
	for _, e := range nodes.Events("ApplyConfiguration") {
		if e.Err == "" {
			inMaintenance++
		}
	}
	assert.Equal(t, 2, inMaintenance, "each node took its config once: %v", nodes.Events("ApplyConfiguration"))

	_, err = s.Preview(ctx, optpreview.ExpectNoChanges())
	require.NoError(t, err, "a second preview shows no change")

	patch = `{"machine": {"time": {"servers": ["time.google.com"]}}}`
	_, err = s.Up(ctx)
	require.NoError(t, err, "a changed config")
	for _, e := range nodes.Events("ApplyConfiguration") {
		if e.Err == "" {
			configured++
		}
	}
	assert.Equal(t, 4, configured, "applied again, over mTLS, to the configured nodes: %v", nodes.Events("ApplyConfiguration"))
}
