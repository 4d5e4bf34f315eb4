package talos_test

import (
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/talos"
)

// lastTalosCluster is a stack's last state with the TalosCluster "lab" of
// a program in it (its registered outputs: a 3+1 cluster on v1.13.9 and
// Kubernetes 1.35.2) and cp-3's membership, whose removal failed.
func lastTalosCluster(components ...string) resource.PropertyMap {
	node := func(role, ip string) resource.PropertyValue {
		return resource.NewProperty(resource.PropertyMap{"role": resource.NewProperty(role), "ip": resource.NewProperty(ip)})
	}
	state := resource.PropertyMap{}
	if len(components) == 0 {
		components = []string{"urn:pulumi:test::talos-cluster::talos-cluster:index:TalosCluster::lab"}
	}
	for _, urn := range components {
		state[resource.PropertyKey(urn)] = resource.NewProperty(resource.PropertyMap{
			"type": resource.NewProperty("talos-cluster:index:TalosCluster"),
			"outputs": resource.NewProperty(resource.PropertyMap{
				"talosVersion": resource.NewProperty("v1.13.9"), "kubernetesVersion": resource.NewProperty("1.35.2"),
				"clusterName": resource.NewProperty("lab"),
				"nodes": resource.NewProperty(resource.PropertyMap{
					"cp-0": node("controlplane", "10.0.0.10"), "cp-1": node("controlplane", "10.0.0.11"),
					"cp-2": node("controlplane", "10.0.0.12"), "w-0": node("worker", "10.0.0.20"),
				}),
			}),
		})
	}
	state["urn:pulumi:test::talos-cluster::talos-cluster:index:TalosCluster$command:local:Command::lab-member-cp-3"] = resource.NewProperty(resource.PropertyMap{
		"type": resource.NewProperty("command:local:Command"),
		"outputs": resource.NewProperty(resource.PropertyMap{"environment": resource.NewProperty(resource.PropertyMap{
			"NODE_NAME": resource.NewProperty("cp-3"), "NODE_IP": resource.NewProperty("10.0.0.13"), "NODE_ROLE": resource.NewProperty("controlplane"),
		})}),
	})
	return state
}

// runOwn runs a TalosCluster named lab over the last state, as a program
// that uses the package does (the component reads its own last state);
// edit changes the arguments.
func runOwn(t *testing.T, state resource.PropertyMap, deps talos.Deps, edit func(*talos.ClusterArgs)) (*componentstest.Engine, error) {
	t.Helper()
	m := &componentstest.Engine{StackResources: state}
	deps.Hooks = &componentstest.Hooks{}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		args := &talos.ClusterArgs{
			Cluster: talos.ClusterSettings{
				Name: "lab", Endpoint: "https://10.0.0.5:6443", TalosVersion: "v1.13.9", KubernetesVersion: "1.35.2", VIP: "10.0.0.5",
				Cilium: &talos.ChartSettings{Version: "1.18.4"}, CertApprover: &talos.ChartSettings{Version: "1.2.10"},
			},
			InstallerImage: pulumi.String(installer),
			Nodes:          nodes(3, 1),
		}
		args.Nodes[3].Name = "w-0"
		if edit != nil {
			edit(args)
		}
		_, err := talos.NewClusterWithDeps(ctx, "lab", args, deps)
		return err
	}, pulumi.WithMocks("talos-cluster", "test", m))
	return m, err
}

// A program that uses the package gets what the stack-file program
// refuses refused: the component reads its own last outputs and children
// from the stack's state. Nothing is registered then.
func TestTheComponentRefusesAgainstItsOwnLastState(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		edit func(*talos.ClusterArgs)
		want []string
	}{
		"a Talos downgrade": {func(a *talos.ClusterArgs) { a.Cluster.TalosVersion = "v1.13.8" },
			[]string{"cluster.talosVersion: ", "v1.13.8", "v1.13.9"}},
		"a skipped Kubernetes minor": {func(a *talos.ClusterArgs) { a.Cluster.KubernetesVersion = "1.37.0" },
			[]string{"cluster.kubernetesVersion: ", "skips a minor version"}},
		"a new cluster name": {func(a *talos.ClusterArgs) { a.Cluster.Name = "lab2" },
			[]string{"cluster.name: ", `"lab2" renames the running cluster "lab"`}},
		"a role change": {func(a *talos.ClusterArgs) { a.Nodes[3].Role = talos.RoleControlPlane },
			[]string{"nodes[3]: ", "was a worker and is now a control plane"}},
		// cp-3 is still leaving: removing cp-2 makes two in one up.
		"a second control plane leaving": {func(a *talos.ClusterArgs) { a.Nodes = append(a.Nodes[:2:2], a.Nodes[3]) },
			[]string{"nodes: ", "cp-2", "cp-3"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m, err := runOwn(t, lastTalosCluster(), talos.Deps{}, c.edit)
			require.Error(t, err)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.Empty(t, m.Created(), "nothing registered")
			assert.True(t, invoked(m, componentstest.ReadStackResourceOutputs))
		})
	}

	// The same runs are fine where nothing says what the cluster ran: a
	// first up, a caller that read the last state itself (the stack-file
	// program, which refuses by its own keys), and an ambiguous state.
	downgrade := func(a *talos.ClusterArgs) { a.Cluster.TalosVersion = "v1.13.8" }
	_, err := runOwn(t, resource.PropertyMap{}, talos.Deps{}, downgrade)
	require.NoError(t, err, "a first up")
	m, err := runOwn(t, lastTalosCluster(), talos.Deps{LastRead: true}, downgrade)
	require.NoError(t, err, "the caller read it")
	assert.False(t, invoked(m, componentstest.ReadStackResourceOutputs))
	_, err = runOwn(t, lastTalosCluster("urn:pulumi:test::talos-cluster::talos-cluster:index:TalosCluster::lab",
		"urn:pulumi:test::talos-cluster::a:index:Parent$talos-cluster:index:TalosCluster::lab"), talos.Deps{}, downgrade)
	require.NoError(t, err, "two of the same kind and name: neither is known to be this one")

	// Unchanged, it runs.
	_, err = runOwn(t, lastTalosCluster(), talos.Deps{}, nil)
	require.NoError(t, err)
}

func invoked(m *componentstest.Engine, token string) bool {
	for _, i := range m.Invokes() {
		if i.Token == token {
			return true
		}
	}
	return false
}
