package talos_test

import (
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/internals"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/talos"
)

// The machineConfigurations output is, per node, the config its apply
// applied (base and patches merged, as the provider merges them): a secret,
// loadable and valid as `talosctl apply-config` takes it, with the node's
// own patches (its hostname, the installer) in it.
func TestMachineConfigurationsAreTheAppliedConfigs(t *testing.T) {
	t.Parallel()
	m := &componentstest.Engine{MachineConfiguration: func(args resource.PropertyMap) (string, error) {
		return generatedConfig(t, args)
	}}
	var configs internals.UnsafeAwaitOutputResult
	ns := nodes(1, 1)
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		var vm pulumi.ResourceState
		if err := ctx.RegisterComponentResource("test:index:Vm", "vm-cp-0", &vm); err != nil {
			return err
		}
		c, err := talos.NewClusterWithDeps(ctx, "lab", &talos.ClusterArgs{
			Cluster: talos.ClusterSettings{
				Name: "lab", Endpoint: "https://10.0.0.5:6443", TalosVersion: "v1.13.9", KubernetesVersion: "1.36.0", VIP: "10.0.0.5",
				Cilium: &talos.ChartSettings{Version: "1.18.4"}, CertApprover: &talos.ChartSettings{Version: "1.2.10"},
			},
			InstallerImage: pulumi.String(installer),
			Nodes:          ns,
			Machines:       talos.Machines{DeletedWith: &vm},
		}, talos.Deps{Hooks: &componentstest.Hooks{}})
		if err != nil {
			return err
		}
		require.Equal(t, c.MachineConfigurations, c.Outputs()["machineConfigurations"])
		configs, err = internals.UnsafeAwaitOutput(ctx.Context(), c.MachineConfigurations)
		return err
	}, pulumi.WithMocks("talos-cluster", "test", m))
	require.NoError(t, err)

	assert.True(t, configs.Secret, "machine configs hold the cluster's keys")
	byNode, ok := configs.Value.(map[string]string)
	require.True(t, ok, "%T", configs.Value)
	require.Len(t, byNode, len(ns))
	for _, n := range ns {
		text := byNode[n.Name]
		cfg, err := configloader.NewFromBytes([]byte(text))
		require.NoError(t, err, n.Name)
		require.NoError(t, validateFor(t, cfg, metal), n.Name)
		assert.Equal(t, string(n.Role), cfg.Machine().Type().String(), n.Name)
		assert.Equal(t, installer, cfg.Machine().Install().Image(), "%s: its patches are in it", n.Name)
		assertHostname(t, docs(t, cfg), n)
	}
}
