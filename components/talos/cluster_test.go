package talos_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/internals"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/talos"
)

// registered is one resource as the mock engine saw it.
type registered struct {
	Type, Name, URN string
	Inputs          resource.PropertyMap
	Deps            []string // explicit, property and provider dependencies
	DeletedWith     string
	Parent          string
}

// graphMocks answers registrations and invokes like the Talos, Kubernetes and
// Helm providers would, and records every registration.
type graphMocks struct {
	mu  sync.Mutex
	res []registered
}

func (m *graphMocks) NewResource(args pulumi.MockResourceArgs) (string, resource.PropertyMap, error) {
	r := registered{Type: args.TypeToken, Name: args.Name, Inputs: args.Inputs}
	if rpc := args.RegisterRPC; rpc != nil {
		r.Deps = append(r.Deps, rpc.GetDependencies()...)
		for _, pd := range rpc.GetPropertyDependencies() {
			r.Deps = append(r.Deps, pd.GetUrns()...)
		}
		if p := rpc.GetProvider(); p != "" {
			r.Deps = append(r.Deps, p[:strings.LastIndex(p, "::")]) // a provider reference is URN::ID
		}
		r.DeletedWith = rpc.GetDeletedWith()
		r.Parent = rpc.GetParent()
	}
	m.mu.Lock()
	m.res = append(m.res, r)
	m.mu.Unlock()

	out := args.Inputs.Copy()
	switch args.TypeToken {
	case "talos:machine/secrets:Secrets":
		out["clientConfiguration"] = resource.NewObjectProperty(resource.PropertyMap{
			"caCertificate": resource.NewStringProperty("ca"), "clientCertificate": resource.NewStringProperty("crt"),
			"clientKey": resource.NewStringProperty("key"),
		})
		out["machineSecrets"] = resource.NewObjectProperty(resource.PropertyMap{})
	case "talos:cluster/kubeconfig:Kubeconfig":
		out["kubeconfigRaw"] = resource.NewStringProperty("apiVersion: v1\nkind: Config\n")
	case "kubernetes:helm.sh/v3:Release":
		out["status"] = resource.NewObjectProperty(resource.PropertyMap{"status": resource.NewStringProperty("deployed")})
	}
	return args.Name + "-id", out, nil
}

func (m *graphMocks) Call(args pulumi.MockCallArgs) (resource.PropertyMap, error) {
	switch args.Token {
	case "talos:machine/getConfiguration:getConfiguration":
		return resource.PropertyMap{"machineConfiguration": resource.NewStringProperty("version: v1alpha1 # " + args.Args["machineType"].StringValue())}, nil
	case "talos:client/getConfiguration:getConfiguration":
		return resource.PropertyMap{"talosConfig": resource.NewStringProperty("context: test\n")}, nil
	}
	return resource.PropertyMap{}, nil
}

func (m *graphMocks) byType(typ string) []registered {
	var out []registered
	for _, r := range m.res {
		if r.Type == typ {
			out = append(out, r)
		}
	}
	return out
}

func (m *graphMocks) one(t *testing.T, typ string) registered {
	t.Helper()
	rs := m.byType(typ)
	require.Len(t, rs, 1, typ)
	return rs[0]
}

// after reports whether a depends, directly or transitively, on b.
func (m *graphMocks) after(a, b registered) bool {
	seen := map[string]bool{}
	var walk func(r registered) bool
	walk = func(r registered) bool {
		for _, d := range r.Deps {
			if strings.HasSuffix(d, "::"+b.Name) {
				return true
			}
			if seen[d] {
				continue
			}
			seen[d] = true
			for _, next := range m.res {
				if strings.HasSuffix(d, "::"+next.Name) && walk(next) {
					return true
				}
			}
		}
		return false
	}
	return walk(a)
}

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
}

func runCluster(t *testing.T, ns []talos.NodeSpec) (*graphMocks, outputs) {
	t.Helper()
	m := &graphMocks{}
	var out outputs
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		var vm pulumi.ResourceState
		if err := ctx.RegisterComponentResource("test:index:Vm", "vm-cp-0", &vm); err != nil {
			return err
		}
		c, err := talos.NewCluster(ctx, "lab", &talos.ClusterArgs{
			ClusterName:    "lab",
			Endpoint:       "https://10.0.0.5:6443",
			TalosVersion:   "v1.12.4",
			InstallerImage: pulumi.String("factory.talos.dev/metal-installer/abc:v1.12.4"),
			Patches:        talos.PatchSpec{TalosVersion: "v1.12.4", VIP: "10.0.0.5"},
			Nodes:          ns,
			Cilium:         talos.ChartSettings{Version: "1.18.4"},
			CertApprover:   talos.ChartSettings{Version: "1.2.10"},
			DeletedWith:    &vm,
		})
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
	tSecrets   = "talos:machine/secrets:Secrets"
	tApply     = "talos:machine/configurationApply:ConfigurationApply"
	tBootstrap = "talos:machine/bootstrap:Bootstrap"
	tKubecfg   = "talos:cluster/kubeconfig:Kubeconfig"
	tRelease   = "kubernetes:helm.sh/v3:Release"
)

func TestClusterGraph(t *testing.T) {
	t.Parallel()
	for name, ns := range map[string][]talos.NodeSpec{
		"1 control plane":              nodes(1, 0),
		"3 control planes + 2 workers": nodes(3, 2),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m, out := runCluster(t, ns)

			m.one(t, tSecrets)
			applies := m.byType(tApply)
			require.Len(t, applies, len(ns), "one apply per node")
			bootstrap := m.one(t, tBootstrap)
			kubeconfig := m.one(t, tKubecfg)
			releases := m.byType(tRelease)
			require.Len(t, releases, 2)
			cilium, approver := releases[0], releases[1]
			require.Equal(t, "cilium", cilium.Inputs["name"].StringValue())
			require.Equal(t, "kubelet-csr-approver", approver.Inputs["name"].StringValue())

			assert.Equal(t, "10.0.0.10", bootstrap.Inputs["node"].StringValue(), "bootstrap on the first control plane")
			for _, a := range applies {
				if a.Name == "lab-apply-cp-0" {
					assert.True(t, m.after(bootstrap, a), "bootstrap after the first control plane's apply")
				} else {
					assert.False(t, m.after(bootstrap, a), "bootstrap does not wait for %s", a.Name)
				}
				assert.False(t, m.after(a, bootstrap))
				assert.False(t, a.Inputs["configPatches"].ContainsSecrets(), "patches are readable in diffs")
				assert.True(t, a.Inputs["machineConfigurationInput"].ContainsSecrets(), "the base config holds keys")
				assert.Contains(t, a.Inputs["configPatches"].ArrayValue()[1].StringValue(), "factory.talos.dev/metal-installer/abc:v1.12.4")
			}
			assert.True(t, m.after(kubeconfig, bootstrap), "kubeconfig after bootstrap")
			assert.True(t, m.after(cilium, kubeconfig), "cilium after kubeconfig")
			assert.True(t, m.after(approver, cilium), "approver after cilium")

			for _, r := range []registered{bootstrap, kubeconfig, cilium, approver} {
				assert.True(t, strings.HasSuffix(r.DeletedWith, "::vm-cp-0"), "%s DeletedWith the platform's resource, got %q", r.Name, r.DeletedWith)
			}
			for _, r := range m.res {
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
	cilium := m.byType(tRelease)[0].Inputs["values"].ObjectValue()
	assert.Equal(t, "localhost", cilium["k8sServiceHost"].StringValue())
	assert.Equal(t, float64(talos.KubePrismPort), cilium["k8sServicePort"].NumberValue())
	assert.True(t, cilium["kubeProxyReplacement"].BoolValue())
	assert.Equal(t, float64(1), cilium["operator"].ObjectValue()["replicas"].NumberValue(), "one node: one operator replica")

	approver := m.byType(tRelease)[1].Inputs["values"].ObjectValue()
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

func TestClusterArgsAreChecked(t *testing.T) {
	t.Parallel()
	ws := nodes(0, 1)
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		_, err := talos.NewCluster(ctx, "lab", &talos.ClusterArgs{ClusterName: "lab", Endpoint: "https://x:6443", TalosVersion: "v1.12.4",
			InstallerImage: pulumi.String("img"), Nodes: ws})
		return err
	}, pulumi.WithMocks("talos-cluster", "test", &graphMocks{}))
	require.ErrorContains(t, err, "first node must be a control plane")
}
