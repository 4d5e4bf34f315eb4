package talos_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/internals"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/talos"
)

func nodes(cps, workers int) []talos.NodeSpec {
	var out []talos.NodeSpec
	for i := range cps {
		out = append(out, talos.NodeSpec{Name: "cp-" + string(rune('0'+i)), IP: "10.0.0.1" + string(rune('0'+i)),
			Role: talos.RoleControlPlane, InstallDisk: "/dev/sda", Network: talos.NodeNetwork{DHCP: true}})
	}
	for i := range workers {
		out = append(out, talos.NodeSpec{Name: "w-" + string(rune('0'+i)), IP: "10.0.0.2" + string(rune('0'+i)),
			Role: talos.RoleWorker, InstallDisk: "/dev/sda", Network: talos.NodeNetwork{DHCP: true}})
	}
	return out
}

type outputs struct {
	kubeconfig, talosconfig, endpoint internals.UnsafeAwaitOutputResult
	hooks                             *componentstest.Hooks
}

func runCluster(t *testing.T, ns []talos.NodeSpec) (*componentstest.Engine, outputs) {
	t.Helper()
	return runClusterWith(t, ns, nil)
}

// runClusterWith is runCluster with the arguments changed by edit first.
func runClusterWith(t *testing.T, ns []talos.NodeSpec, edit func(*talos.ClusterArgs)) (*componentstest.Engine, outputs) {
	t.Helper()
	m := &componentstest.Engine{}
	hooks := &componentstest.Hooks{}
	out := outputs{hooks: hooks}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		var vm pulumi.ResourceState
		if err := ctx.RegisterComponentResource("test:index:Vm", "vm-cp-0", &vm); err != nil {
			return err
		}
		args := &talos.ClusterArgs{
			Cluster: talos.ClusterSettings{
				Name:         "lab",
				Endpoint:     "https://10.0.0.5:6443",
				TalosVersion: "v1.12.4",
				VIP:          "10.0.0.5",
				Cilium:       &talos.ChartSettings{Version: "1.18.4"},
				CertApprover: &talos.ChartSettings{Version: "1.2.10"},
			},
			InstallerImage: pulumi.String("factory.talos.dev/metal-installer/abc:v1.12.4"),
			Nodes:          ns,
			Machines:       talos.Machines{DeletedWith: &vm},
		}
		if edit != nil {
			edit(args)
		}
		c, err := talos.NewClusterWithDeps(ctx, "lab", args, talos.Deps{Hooks: hooks})
		if err != nil {
			return err
		}
		if out.kubeconfig, err = internals.UnsafeAwaitOutput(ctx.Context(), c.Kubeconfig); err != nil {
			return err
		}
		if out.talosconfig, err = internals.UnsafeAwaitOutput(ctx.Context(), c.Talosconfig); err != nil {
			return err
		}
		out.endpoint, err = internals.UnsafeAwaitOutput(ctx.Context(), c.Endpoint)
		return err
	}, pulumi.WithMocks("talos-cluster", "test", m))
	require.NoError(t, err)
	return m, out
}

const (
	tSecrets   = componentstest.Secrets
	tApply     = componentstest.Apply
	tBootstrap = componentstest.Bootstrap
	tKubecfg   = componentstest.Kubeconfig
	tRelease   = componentstest.Release
)

// TestRolloutOrderGraph: the graph of a 3+2 cluster sets the order in which
// a change reaches running nodes, one control plane at a time, then the
// workers one at a time: each apply waits for the one before it, and each
// carries the gate and settle hooks. Each node has a membership that waits
// for its apply and goes with the secrets (so a whole-stack destroy skips
// it), with no delete hook; the roster waits for every membership, so its
// update (its hook taking the departed nodes out of etcd and Kubernetes)
// comes after the rollout and before the engine deletes what departed.
func TestRolloutOrderGraph(t *testing.T) {
	t.Parallel()
	m, out := runCluster(t, nodes(3, 2))
	order := []string{"cp-0", "cp-1", "cp-2", "w-0", "w-1"}
	secrets := m.One(t, tSecrets)
	roster := m.Named(t, componentstest.LocalCommand, "lab"+talos.RosterSuffix)
	for i, n := range order {
		apply := m.Named(t, tApply, "lab-apply-"+n)
		for j, other := range order {
			if j == i {
				continue
			}
			assert.Equal(t, j < i, m.After(apply, m.Named(t, tApply, "lab-apply-"+other)), "apply of %s after apply of %s: %v", n, other, j < i)
		}
		var points []string
		for _, b := range out.hooks.On(apply.Name) {
			points = append(points, b.Hook+" "+b.Point.String())
		}
		assert.Equal(t, []string{"lab-rollout-gate before update", "lab-rollout-settle after update", "lab-node-rejoin before create", "lab-node-rejoined after create"}, points, apply.Name)

		member := m.Named(t, componentstest.LocalCommand, "lab-member-"+n)
		assert.True(t, m.After(member, apply), "the membership of %s after its apply", n)
		assert.True(t, secrets.Is(member.DeletedWith), "the membership of %s goes with the secrets, not %q", n, member.DeletedWith)
		assert.Nil(t, member.Inputs["create"].V, "the membership runs nothing")
		env := member.Inputs["environment"].ObjectValue()
		assert.Equal(t, n, env["NODE_NAME"].StringValue())
		assert.Empty(t, out.hooks.On(member.Name), "no delete hook: a program that drops the cluster can delete it")
		assert.Contains(t, roster.Deps, member.URN, "the roster after the membership of %s", n)
		assert.True(t, m.After(roster, apply), "the roster (its departures) after the apply of %s", n)
	}
	assert.Equal(t, map[string]any{"cp-0": "controlplane 10.0.0.10", "cp-1": "controlplane 10.0.0.11", "cp-2": "controlplane 10.0.0.12", "w-0": "worker 10.0.0.20", "w-1": "worker 10.0.0.21"},
		roster.Inputs["environment"].Mappable(), "one entry per node: its role and address")
	assert.True(t, secrets.Is(roster.DeletedWith), "the roster goes with the secrets: never replaced with a VM")
	bindings := out.hooks.On(roster.Name)
	require.Len(t, bindings, 1)
	assert.Equal(t, "lab-node-depart before update", bindings[0].Hook+" "+bindings[0].Point.String())
	assert.NotNil(t, out.hooks.Hook("lab-node-remove"), "the earlier versions' removal hook stays registered: their state names it")
	assert.Equal(t, "controlplane", m.Named(t, componentstest.LocalCommand, "lab-member-cp-1").Inputs["environment"].ObjectValue()["NODE_ROLE"].StringValue())
	assert.Equal(t, "worker", m.Named(t, componentstest.LocalCommand, "lab-member-w-1").Inputs["environment"].ObjectValue()["NODE_ROLE"].StringValue())
}

func TestRolloutOrderBatchesWorkers(t *testing.T) {
	t.Parallel()
	names := func(batches [][]talos.NodeSpec) [][]string {
		var out [][]string
		for _, b := range batches {
			var bn []string
			for _, n := range b {
				bn = append(bn, n.Name)
			}
			out = append(out, bn)
		}
		return out
	}
	ns := append(nodes(3, 5), nodes(0, 0)...)
	assert.Equal(t, [][]string{{"cp-0"}, {"cp-1"}, {"cp-2"}, {"w-0"}, {"w-1"}, {"w-2"}, {"w-3"}, {"w-4"}}, names(talos.RolloutPolicy{WorkerParallelism: 0}.Batches(ns)))
	assert.Equal(t, [][]string{{"cp-0"}, {"cp-1"}, {"cp-2"}, {"w-0", "w-1"}, {"w-2", "w-3"}, {"w-4"}}, names(talos.RolloutPolicy{WorkerParallelism: 2}.Batches(ns)))
	assert.Equal(t, [][]string{{"cp-0"}, {"cp-1"}, {"cp-2"}, {"w-0", "w-1", "w-2", "w-3", "w-4"}}, names(talos.RolloutPolicy{WorkerParallelism: 9}.Batches(ns)))
	// The removals' turns: as many at once as a batch holds.
	for _, wp := range []int{0, 2, 9} {
		p := talos.RolloutPolicy{WorkerParallelism: wp}
		assert.Equal(t, 1, p.AtOnce(true))
		assert.Equal(t, max(wp, 1), p.AtOnce(false))
	}
	assert.Equal(t, talos.RolloutPolicy{WorkerParallelism: 3}, talos.ClusterSettings{Rollout: &talos.RolloutSettings{WorkerParallelism: 3}}.Policy())
}

func TestClusterGraph(t *testing.T) {
	t.Parallel()
	for name, ns := range map[string][]talos.NodeSpec{
		"1 control plane":              nodes(1, 0),
		"3 control planes + 2 workers": nodes(3, 2),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m, out := runCluster(t, ns)

			m.One(t, tSecrets)
			applies := m.ByType(tApply)
			require.Len(t, applies, len(ns), "one apply per node")
			bootstrap := m.One(t, tBootstrap)
			kubeconfig := m.One(t, tKubecfg)
			releases := m.ByType(tRelease)
			require.Len(t, releases, 2)
			cilium, approver := releases[0], releases[1]
			require.Equal(t, "cilium", cilium.Inputs["name"].StringValue())
			require.Equal(t, "kubelet-csr-approver", approver.Inputs["name"].StringValue())

			assert.Equal(t, "10.0.0.10", bootstrap.Inputs["node"].StringValue(), "bootstrap on the first control plane")
			for _, a := range applies {
				if a.Name == "lab-apply-cp-0" {
					assert.True(t, m.After(bootstrap, a), "bootstrap after the first control plane's apply")
				} else {
					assert.False(t, m.After(bootstrap, a), "bootstrap does not wait for %s", a.Name)
				}
				assert.False(t, m.After(a, bootstrap))
				assert.False(t, a.Inputs["configPatches"].ContainsSecrets(), "patches are readable in diffs")
				assert.True(t, a.Inputs["machineConfigurationInput"].ContainsSecrets(), "the base config holds keys")
				assert.Contains(t, a.Inputs["configPatches"].ArrayValue()[1].StringValue(), "factory.talos.dev/metal-installer/abc:v1.12.4")
			}
			assert.True(t, m.After(kubeconfig, bootstrap), "kubeconfig after bootstrap")
			assert.True(t, m.After(cilium, kubeconfig), "cilium after kubeconfig")
			assert.True(t, m.After(approver, cilium), "approver after cilium")

			var waits []componentstest.Registered
			for _, w := range m.ByType(componentstest.LocalCommand) {
				if !strings.HasPrefix(w.Name, "lab"+talos.MemberSuffix) && !strings.HasPrefix(w.Name, "lab"+talos.TaintsSuffix) && w.Name != "lab"+talos.RosterSuffix && w.Name != "lab"+talos.ManifestsSuffix {
					waits = append(waits, w)
				}
			}
			// The bootstrap manifests after every apply, going with the
			// secrets; their hook before their create and update.
			manifests := m.Named(t, componentstest.LocalCommand, "lab"+talos.ManifestsSuffix)
			for _, a := range m.ByType(componentstest.Apply) {
				assert.True(t, m.After(manifests, a), "the manifests after %s", a.Name)
			}
			assert.Contains(t, manifests.DeletedWith, "lab-secrets")
			require.Len(t, waits, 2, "the API wait and the nodes-ready wait")
			apiReady, ready := m.Named(t, componentstest.LocalCommand, "lab-api-ready"), m.Named(t, componentstest.LocalCommand, "lab-nodes-ready")

			// The first `up`: the Kubernetes provider decides at configure
			// time whether the cluster is reachable, so it (and through it
			// every release) comes after the API wait, which comes after
			// the bootstrap.
			provider := m.One(t, componentstest.K8sProvider)
			assert.True(t, m.After(apiReady, bootstrap), "the API wait after the bootstrap")
			assert.True(t, m.After(apiReady, kubeconfig), "the API wait uses the kubeconfig")
			assert.True(t, m.After(provider, apiReady), "the Kubernetes provider after the API wait")
			for _, rel := range []componentstest.Registered{cilium, approver} {
				assert.True(t, provider.Is(rel.Provider), "%s uses the cluster's provider, not %q", rel.Name, rel.Provider)
				assert.True(t, m.After(rel, apiReady), "%s after the API wait", rel.Name)
			}
			assert.False(t, apiReady.Inputs.HasValue("create"), "the wait runs no command: its hook waits, in the program")
			apiEnv := apiReady.Inputs["environment"].ObjectValue()
			assert.Equal(t, "api", apiEnv["WAIT_FOR"].StringValue())
			assert.Equal(t, "900", apiEnv["WAIT_TIMEOUT"].StringValue())
			assert.True(t, apiReady.Inputs["environment"].ContainsSecrets(), "the kubeconfig in its environment stays secret")

			assert.True(t, m.After(ready, approver), "the nodes-ready wait after the approver")
			for _, w := range waits {
				assert.False(t, w.Inputs.HasValue("create"), "%s runs no command", w.Name)
				assert.True(t, w.Inputs["environment"].ContainsSecrets(), "the kubeconfig in its environment stays secret")
				assert.Equal(t, []string{"environment"}, w.IgnoreChanges, "a renewed kubeconfig does not re-run %s", w.Name)
				bound := out.hooks.On(w.Name)
				require.Len(t, bound, 1, "%s waits in its before-create hook", w.Name)
				assert.Equal(t, "lab"+talos.KubeWaitHookSuffix, bound[0].Hook)
				assert.Equal(t, talos.BeforeCreate, bound[0].Point, "a failed wait fails the create, so the next up waits again")
			}
			env := ready.Inputs["environment"].ObjectValue()
			assert.Equal(t, "nodes", env["WAIT_FOR"].StringValue())
			assert.Equal(t, strconv.Itoa(len(ns)), env["NODE_COUNT"].StringValue())
			assert.Equal(t, "600", env["WAIT_TIMEOUT"].StringValue())

			for _, r := range []componentstest.Registered{bootstrap, kubeconfig, apiReady, cilium, approver, ready} {
				assert.True(t, strings.HasSuffix(r.DeletedWith, "::vm-cp-0"), "%s DeletedWith the platform's resource, got %q", r.Name, r.DeletedWith)
			}
			for _, r := range m.All() {
				if r.Type != "talos-cluster:index:TalosCluster" && r.Type != "test:index:Vm" {
					assert.Contains(t, r.Parent, "TalosCluster::lab", "%s is the component's child", r.Name)
				}
			}

			assert.True(t, out.kubeconfig.Secret, "kubeconfig is secret")
			assert.True(t, out.talosconfig.Secret, "talosconfig is secret")
			assert.False(t, out.endpoint.Secret)
			assert.Equal(t, "https://10.0.0.5:6443", out.endpoint.Value)
		})
	}
}

func TestHelmValuesForTalos(t *testing.T) {
	t.Parallel()
	m, _ := runCluster(t, nodes(1, 0))
	cilium := m.ByType(tRelease)[0].Inputs["values"].ObjectValue()
	assert.Equal(t, "localhost", cilium["k8sServiceHost"].StringValue())
	assert.Equal(t, float64(talos.KubePrismPort), cilium["k8sServicePort"].NumberValue())
	assert.True(t, cilium["kubeProxyReplacement"].BoolValue())
	assert.Equal(t, float64(1), cilium["operator"].ObjectValue()["replicas"].NumberValue(), "one node: one operator replica")

	approver := m.ByType(tRelease)[1].Inputs["values"].ObjectValue()
	assert.Equal(t, "^(cp-0)$", approver["providerRegex"].StringValue())
	var prefixes []string
	for _, p := range approver["providerIpPrefixes"].ArrayValue() {
		prefixes = append(prefixes, p.StringValue())
	}
	assert.Equal(t, []string{"10.0.0.10/32", "10.0.0.5/32"}, prefixes)
}

func TestMergeValues(t *testing.T) {
	t.Parallel()
	base := map[string]any{"a": map[string]any{"b": 1, "c": 2}, "d": []any{1}}
	got := talos.MergeValues(base, map[string]any{"a": map[string]any{"c": 3}, "d": []any{2}, "e": true})
	assert.Equal(t, map[string]any{"a": map[string]any{"b": 1, "c": 3}, "d": []any{2}, "e": true}, got)
	assert.Equal(t, 2, base["a"].(map[string]any)["c"], "base untouched")
	v := talos.CiliumValues(5, map[string]any{"operator": map[string]any{"replicas": 3}, "hubble": map[string]any{"enabled": true}})
	assert.Equal(t, 3, v["operator"].(map[string]any)["replicas"], "user values win")
	assert.Equal(t, "localhost", v["k8sServiceHost"])
}

// Every invalid input is reported at once, by its path in the component's
// schema, and nothing is registered.
func TestClusterArgsAreChecked(t *testing.T) {
	t.Parallel()
	valid := func() talos.ClusterArgs {
		return talos.ClusterArgs{
			Cluster:        talos.ClusterSettings{Name: "lab", TalosVersion: "v1.12.4"},
			InstallerImage: pulumi.String("img"),
			Nodes:          nodes(1, 1),
		}
	}
	for _, tc := range []struct {
		name  string
		edit  func(a *talos.ClusterArgs)
		paths []string
	}{
		{"first node a worker", func(a *talos.ClusterArgs) { a.Nodes = nodes(0, 1) }, []string{"nodes[0].role"}},
		{"no nodes", func(a *talos.ClusterArgs) { a.Nodes = nil }, []string{"nodes"}},
		{"missing name and version", func(a *talos.ClusterArgs) { a.Cluster.Name, a.Cluster.TalosVersion = "", "" },
			[]string{"cluster.name", "cluster.talosVersion"}},
		{"bad versions and endpoint", func(a *talos.ClusterArgs) {
			a.Cluster.TalosVersion, a.Cluster.KubernetesVersion, a.Cluster.Endpoint = "1.12", "latest", "http://x:6443/api"
		}, []string{"cluster.talosVersion", "cluster.kubernetesVersion", "cluster.endpoint"}},
		{"no installer image", func(a *talos.ClusterArgs) { a.InstallerImage = nil }, []string{"installerImage"}},
		{"addresses of no machine", func(a *talos.ClusterArgs) {
			a.Cluster.VIP, a.Cluster.Nameservers = "224.0.0.1", []string{"127.0.0.53"}
			a.Nodes[1].IP = "169.254.10.2"
		}, []string{"cluster.vip", "cluster.nameservers[0]", "nodes[1].ip"}},
		{"a long name and chart versions with a v", func(a *talos.ClusterArgs) {
			a.Cluster.Name = strings.Repeat("lab", 14)
			a.Cluster.Cilium = &talos.ChartSettings{Version: "v1.18.4"}
			a.Cluster.CertApprover = &talos.ChartSettings{Version: "latest"}
		}, []string{"cluster.name", "cluster.cilium.version", "cluster.certApprover.version"}},
		{"bad addresses", func(a *talos.ClusterArgs) {
			a.Cluster.VIP, a.Cluster.Nameservers = "10.0.0", []string{"1.1.1.1", "dns"}
			a.Nodes[1].IP = "::1"
			a.Nodes[1].Network.Routes = []talos.Route{{Network: "default", Gateway: "gw"}}
		}, []string{"cluster.vip", "cluster.nameservers[1]", "nodes[1].ip", "nodes[1].network.routes[0].network", "nodes[1].network.routes[0].gateway"}},
		{"a VIP that is a node's IP", func(a *talos.ClusterArgs) { a.Cluster.VIP = a.Nodes[1].IP }, []string{"cluster.vip"}},
		// Talos's machinery rules for machine.nodeLabels, and the API
		// server's NodeRestriction for what a worker sets on itself.
		{"labels", func(a *talos.ClusterArgs) {
			a.Nodes[0].Labels = map[string]string{"node-role.kubernetes.io/infra": "", "Bad Key": "x", "example.com/ok": "not ok!"}
			a.Nodes[1].Labels = map[string]string{
				"node-role.kubernetes.io/worker": "", "node.kubernetes.io/pool": "a", "topology.kubernetes.io/zone": "z1", "example.com/tier": "batch",
				"x.node.kubernetes.io/y": "", "kubernetes.io/os": "linux", "x.k8s.io/y": "",
			}
		}, []string{`nodes[0].labels["Bad Key"]`, `nodes[0].labels["example.com/ok"]`, `nodes[1].labels["node-role.kubernetes.io/worker"]`, `nodes[1].labels["x.k8s.io/y"]`}},
		// Talos's machinery rules for machine.nodeTaints.
		{"taints", func(a *talos.ClusterArgs) {
			a.Nodes[0].Taints = map[string]string{"example.com/dedicated": "db:NoSchedule", "example.com/soft": "PreferNoSchedule", "Bad Key": "NoSchedule"}
			a.Nodes[1].Taints = map[string]string{"example.com/gpu": "NoExecute", "example.com/effect": "Sometimes", "example.com/value": "not ok!:NoSchedule", "example.com/empty": ""}
		}, []string{`nodes[0].taints["Bad Key"]`, `nodes[1].taints["example.com/effect"]`, `nodes[1].taints["example.com/empty"]`, `nodes[1].taints["example.com/value"]`}},
		{"duplicate and invalid names", func(a *talos.ClusterArgs) {
			a.Nodes[1].Name, a.Nodes[1].IP = a.Nodes[0].Name, a.Nodes[0].IP
			a.Nodes = append(a.Nodes, talos.NodeSpec{Name: "Node_3", IP: "10.0.0.30", Role: "master"})
		}, []string{"nodes[1].name", "nodes[1].ip", "nodes[2].name", "nodes[2].role"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := valid()
			tc.edit(&args)
			m := &componentstest.Engine{}
			err := pulumi.RunErr(func(ctx *pulumi.Context) error {
				_, err := talos.NewClusterWithDeps(ctx, "lab", &args, talos.Deps{Hooks: &componentstest.Hooks{}})
				return err
			}, pulumi.WithMocks("talos-cluster", "test", m))
			var ie *inputs.Error
			require.ErrorAs(t, err, &ie)
			assert.ElementsMatch(t, tc.paths, ie.Paths(), "%v", err)
			assert.Contains(t, err.Error(), `invalid arguments of TalosCluster "lab"`)
			assert.Empty(t, m.All(), "nothing may be registered")
		})
	}
}

// The program's components keep their type tokens; the package's name
// theirs after its own and alias the program's, its old name.
func TestComponentTypeAliasesThePackagesOldName(t *testing.T) {
	t.Parallel()
	typ, opts := talos.ComponentType("", "ProxmoxCluster")
	assert.Equal(t, "talos-cluster:index:ProxmoxCluster", typ)
	assert.Empty(t, opts)
	typ, opts = talos.ComponentType(talos.ProgramPackage, "TalosCluster")
	assert.Equal(t, talos.ClusterType, typ)
	assert.Empty(t, opts)
	typ, opts = talos.ComponentType("talos-anywhere", "VpsCluster")
	assert.Equal(t, "talos-anywhere:index:VpsCluster", typ)
	assert.Len(t, opts, 1, "the alias of talos-cluster:index:VpsCluster (the engine's own test: make integration, TestIntegrationPackageAddOfTheBuiltBinary)")
}
