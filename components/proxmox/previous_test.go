package proxmox_test

import (
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// A ProxmoxCluster that a program of its own uses reads its last outputs
// and its VMs from the stack's state: a Talos downgrade and a boot disk
// that shrinks are refused by their paths, as the stack file's keys are,
// and nothing is registered.
func TestProxmoxClusterRefusesAgainstItsOwnLastState(t *testing.T) {
	t.Parallel()
	cfg, d := stacks.Load(stackstest.Example(t, stackstest.ProxmoxExample))
	require.NoError(t, d.Err())
	args := program.ProxmoxArgs(cfg)
	const (
		chain     = "urn:pulumi:test::talos-cluster::talos-cluster:index:ProxmoxCluster"
		component = chain + "::lab"
	)
	nodes := resource.PropertyMap{}
	state := resource.PropertyMap{}
	for _, n := range args.Nodes {
		nodes[resource.PropertyKey(n.Name)] = resource.NewProperty(resource.PropertyMap{
			"role": resource.NewProperty(string(n.Role)), "ip": resource.NewProperty(n.IP),
		})
		state[resource.PropertyKey(chain+"$"+proxmox.VMType+"::lab-vm-"+n.Name)] = resource.NewProperty(resource.PropertyMap{
			"type": resource.NewProperty(proxmox.VMType),
			"outputs": resource.NewProperty(resource.PropertyMap{
				"name": resource.NewProperty(n.Name),
				"disks": resource.NewProperty([]resource.PropertyValue{resource.NewProperty(resource.PropertyMap{
					"interface": resource.NewProperty("scsi0"), "size": resource.NewProperty(float64(100)),
				})}),
			}),
		})
	}
	state[component] = resource.NewProperty(resource.PropertyMap{
		"type": resource.NewProperty("talos-cluster:index:ProxmoxCluster"),
		"outputs": resource.NewProperty(resource.PropertyMap{
			"talosVersion": resource.NewProperty(args.Cluster.TalosVersion), "nodes": resource.NewProperty(nodes),
		}),
	})
	run := func(edit func(*proxmox.ClusterArgs)) (*componentstest.Engine, error) {
		a := program.ProxmoxArgs(cfg)
		edit(a)
		m := &componentstest.Engine{StackResources: state}
		err := pulumi.RunErr(func(ctx *pulumi.Context) error {
			_, err := proxmox.NewClusterWithDeps(ctx, "lab", a, proxmox.Deps{Hooks: &componentstest.Hooks{}, Talos: talos.Deps{Hooks: &componentstest.Hooks{}}})
			return err
		}, pulumi.WithMocks("talos-cluster", "test", m))
		return m, err
	}

	m, err := run(func(a *proxmox.ClusterArgs) {
		a.Cluster.TalosVersion = "v1.12.0"
		for i := range a.Nodes {
			a.Nodes[i].DiskSize = 100
		}
		a.Nodes[1].DiskSize = 99
	})
	var ie *inputs.Error
	require.ErrorAs(t, err, &ie)
	assert.ElementsMatch(t, []string{"cluster.talosVersion", "nodes[1].diskSize"}, ie.Paths(), "%v", err)
	assert.Contains(t, err.Error(), "shrinks the boot disk of "+args.Nodes[1].Name)
	assert.Empty(t, m.Created(), "nothing may be registered")

	_, err = run(func(a *proxmox.ClusterArgs) {
		for i := range a.Nodes {
			a.Nodes[i].DiskSize = 100
		}
	})
	require.NoError(t, err, "unchanged, it runs")
}
