package talos_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/talos"
)

const (
	tPool      = "kubernetes:cilium.io/v2:CiliumLoadBalancerIPPool"
	tL2Policy  = "kubernetes:cilium.io/v2alpha1:CiliumL2AnnouncementPolicy"
	tNamespace = "kubernetes:core/v1:Namespace"
	tNsPatch   = "kubernetes:core/v1:NamespacePatch"
	tApp       = "kubernetes:argoproj.io/v1alpha1:Application"
)

// homePools are two announced pools and a routed one on 10.0.0.0/24.
func homePools() *talos.LoadBalancerSettings {
	return &talos.LoadBalancerSettings{
		Pools: []talos.LBPool{
			{Name: "home", Blocks: []string{"10.0.0.224/28"}},
			{Name: "web", Blocks: []string{"10.0.0.240-10.0.0.245"}, ServiceSelector: map[string]string{"pool": "web"}},
			{Name: "routed", Blocks: []string{"192.168.50.0/24"}, Routed: true},
		},
		Interfaces: []string{"^eth[0-9]+"},
		Nodes:      []string{"w-1", "w-0"},
	}
}

func withNetwork(a *talos.ClusterArgs) {
	a.NodeNetwork = netip.MustParsePrefix("10.0.0.0/24")
	a.NodeGateway = netip.MustParseAddr("10.0.0.1")
}

// TestLoadBalancerPoolsComeAfterCiliumAndItsCRDs: with pools, Cilium's
// values turn L2 announcements on with a higher client rate limit; after
// the Cilium release, a guard waits (in its before-create hook) for the
// CRDs cilium-operator registers and re-runs whenever the pools change;
// then one CiliumLoadBalancerIPPool per pool and one announcement policy,
// each labelled as this cluster's.
func TestLoadBalancerPoolsComeAfterCiliumAndItsCRDs(t *testing.T) {
	t.Parallel()
	m, out := runClusterWith(t, nodes(1, 2), func(a *talos.ClusterArgs) {
		withNetwork(a)
		a.Cluster.LoadBalancer = homePools()
	})
	cilium := m.Named(t, tRelease, "lab-cilium")
	values := cilium.Inputs["values"].Mappable().(map[string]any)
	assert.Equal(t, map[string]any{"enabled": true}, values["l2announcements"])
	assert.Equal(t, map[string]any{"qps": float64(30), "burst": float64(60)}, values["k8sClientRateLimit"])
	assert.Equal(t, true, values["kubeProxyReplacement"], "L2 announcements need the kube-proxy replacement")

	guard := m.Named(t, componentstest.LocalCommand, "lab"+talos.LBPoolsSuffix)
	assert.True(t, m.After(guard, cilium), "the guard after Cilium")
	env := guard.Inputs["environment"].ObjectValue()
	assert.Equal(t, "pools", env["WAIT_FOR"].StringValue())
	assert.JSONEq(t, `[{"name":"home","ranges":["10.0.0.224-10.0.0.239"]},{"name":"web","ranges":["10.0.0.240-10.0.0.245"]},{"name":"routed","ranges":["192.168.50.0-192.168.50.255"]}]`,
		env["POOLS"].StringValue())
	assert.Equal(t, env["POOLS"].StringValue(), guard.Inputs["triggers"].ArrayValue()[0].StringValue(), "a change of the pools runs the guard again")
	bound := out.hooks.On(guard.Name)
	require.Len(t, bound, 1)
	assert.Equal(t, talos.BeforeCreate, bound[0].Point)

	pools := m.ByType(tPool)
	require.Len(t, pools, 3)
	specs := map[string]any{}
	for _, p := range pools {
		assert.True(t, m.After(p, guard), "%s after the guard", p.Name)
		assert.True(t, m.After(p, cilium), "%s after Cilium", p.Name)
		meta := p.Inputs["metadata"].Mappable().(map[string]any)
		assert.Equal(t, map[string]any{"app.kubernetes.io/managed-by": "talos-cluster"}, meta["labels"])
		assert.True(t, strings.HasSuffix(p.DeletedWith, "::vm-cp-0"), "%s goes with the cluster", p.Name)
		specs[meta["name"].(string)] = p.Inputs["spec"].Mappable()
	}
	assert.Equal(t, map[string]any{
		"home": map[string]any{"blocks": []any{map[string]any{"cidr": "10.0.0.224/28"}}},
		"web": map[string]any{"blocks": []any{map[string]any{"start": "10.0.0.240", "stop": "10.0.0.245"}},
			"serviceSelector": map[string]any{"matchLabels": map[string]any{"pool": "web"}}},
		"routed": map[string]any{"blocks": []any{map[string]any{"cidr": "192.168.50.0/24"}}},
	}, specs)
	policy := m.One(t, tL2Policy)
	assert.True(t, m.After(policy, guard))
	assert.Equal(t, map[string]any{
		"loadBalancerIPs": true, "externalIPs": false, "interfaces": []any{"^eth[0-9]+"},
		"nodeSelector": map[string]any{"matchExpressions": []any{map[string]any{
			"key": "kubernetes.io/hostname", "operator": "In", "values": []any{"w-0", "w-1"},
		}}},
	}, policy.Inputs["spec"].Mappable())
	nodesReady := m.Named(t, componentstest.LocalCommand, "lab-nodes-ready")
	assert.False(t, m.After(nodesReady, pools[0]), "nothing of the bootstrap waits on the pools")
}

// TestOnlyRoutedPoolsAnnounceNothing: routed pools need neither the L2
// announcements nor their policy.
func TestOnlyRoutedPoolsAnnounceNothing(t *testing.T) {
	t.Parallel()
	m, _ := runClusterWith(t, nodes(1, 0), func(a *talos.ClusterArgs) {
		withNetwork(a)
		a.Cluster.LoadBalancer = &talos.LoadBalancerSettings{Pools: []talos.LBPool{{Name: "routed", Blocks: []string{"192.168.50.0/24"}, Routed: true}}}
	})
	assert.Len(t, m.ByType(tPool), 1)
	assert.Empty(t, m.ByType(tL2Policy))
	values := m.Named(t, tRelease, "lab-cilium").Inputs["values"].Mappable().(map[string]any)
	assert.NotContains(t, values, "l2announcements")
}

// TestWithoutTheSectionsNothingChanges: a cluster without pools and gitops
// registers none of their resources and keeps Cilium's values.
func TestWithoutTheSectionsNothingChanges(t *testing.T) {
	t.Parallel()
	m, _ := runCluster(t, nodes(1, 1))
	for _, typ := range []string{tPool, tL2Policy, tNamespace, tNsPatch, tSecret, tApp} {
		assert.Empty(t, m.ByType(typ), typ)
	}
	assert.Len(t, m.ByType(tRelease), 2)
	values := m.Named(t, tRelease, "lab-cilium").Inputs["values"].Mappable().(map[string]any)
	assert.NotContains(t, values, "l2announcements")
	assert.NotContains(t, values, "k8sClientRateLimit")
	for _, r := range m.ByType(tRelease) {
		assert.Empty(t, r.IgnoreChanges, r.Name)
		assert.False(t, r.RetainOnDelete, r.Name)
	}
}

// TestLoadBalancerPoolsAreChecked: every bad pool is refused by its path,
// with what is wrong, before anything is registered.
func TestLoadBalancerPoolsAreChecked(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		lb   talos.LoadBalancerSettings
		path string
		msg  string
	}{
		"no pool":             {talos.LoadBalancerSettings{}, "cluster.loadBalancer.pools", "at least one pool"},
		"no name":             {talos.LoadBalancerSettings{Pools: []talos.LBPool{{Blocks: []string{"10.0.0.240/28"}}}}, "cluster.loadBalancer.pools[0].name", "is required"},
		"bad name":            {talos.LoadBalancerSettings{Pools: []talos.LBPool{{Name: "Home", Blocks: []string{"10.0.0.240/28"}}}}, "cluster.loadBalancer.pools[0].name", "DNS label"},
		"no blocks":           {talos.LoadBalancerSettings{Pools: []talos.LBPool{{Name: "a"}}}, "cluster.loadBalancer.pools[0].blocks", "at least one"},
		"not a block":         {talos.LoadBalancerSettings{Pools: []talos.LBPool{{Name: "a", Blocks: []string{"10.0.0.240"}}}}, "cluster.loadBalancer.pools[0].blocks[0]", "not an IPv4 CIDR"},
		"range backwards":     {talos.LoadBalancerSettings{Pools: []talos.LBPool{{Name: "a", Blocks: []string{"10.0.0.250-10.0.0.240"}}}}, "cluster.loadBalancer.pools[0].blocks[0]", "the first not after the last"},
		"host bits":           {talos.LoadBalancerSettings{Pools: []talos.LBPool{{Name: "a", Blocks: []string{"10.0.0.241/28"}}}}, "cluster.loadBalancer.pools[0].blocks[0]", "did you mean 10.0.0.240/28"},
		"IPv6":                {talos.LoadBalancerSettings{Pools: []talos.LBPool{{Name: "a", Blocks: []string{"fd00::/120"}}}}, "cluster.loadBalancer.pools[0].blocks[0]", "not an IPv4 CIDR"},
		"off the network":     {talos.LoadBalancerSettings{Pools: []talos.LBPool{{Name: "a", Blocks: []string{"10.0.1.0/28"}}}}, "cluster.loadBalancer.pools[0].blocks[0]", "not inside the node network 10.0.0.0/24"},
		"routed on network":   {talos.LoadBalancerSettings{Pools: []talos.LBPool{{Name: "a", Blocks: []string{"10.0.0.240/28"}, Routed: true}}}, "cluster.loadBalancer.pools[0].blocks[0]", "on the node network"},
		"holds a node":        {talos.LoadBalancerSettings{Pools: []talos.LBPool{{Name: "a", Blocks: []string{"10.0.0.16/28"}}}}, "cluster.loadBalancer.pools[0].blocks[0]", "holds 10.0.0.20, the IP of nodes[1] (w-0)"},
		"holds the VIP":       {talos.LoadBalancerSettings{Pools: []talos.LBPool{{Name: "a", Blocks: []string{"10.0.0.5-10.0.0.6"}}}}, "cluster.loadBalancer.pools[0].blocks[0]", "the VIP"},
		"holds the gateway":   {talos.LoadBalancerSettings{Pools: []talos.LBPool{{Name: "a", Blocks: []string{"10.0.0.1-10.0.0.3"}}}}, "cluster.loadBalancer.pools[0].blocks[0]", "the nodes' gateway"},
		"holds the broadcast": {talos.LoadBalancerSettings{Pools: []talos.LBPool{{Name: "a", Blocks: []string{"10.0.0.248-10.0.0.255"}}}}, "cluster.loadBalancer.pools[0].blocks[0]", "broadcast address"},
		"pools overlap": {talos.LoadBalancerSettings{Pools: []talos.LBPool{{Name: "a", Blocks: []string{"10.0.0.240/28"}}, {Name: "b", Blocks: []string{"10.0.0.250-10.0.0.252"}}}},
			"cluster.loadBalancer.pools[1].blocks[0]", "overlaps 10.0.0.240/28 (cluster.loadBalancer.pools[0].blocks[0])"},
		"same name": {talos.LoadBalancerSettings{Pools: []talos.LBPool{{Name: "a", Blocks: []string{"10.0.0.240/29"}}, {Name: "a", Blocks: []string{"10.0.0.248/30"}}}},
			"cluster.loadBalancer.pools[1].name", "already the name of cluster.loadBalancer.pools[0]"},
		"bad selector":  {talos.LoadBalancerSettings{Pools: []talos.LBPool{{Name: "a", Blocks: []string{"10.0.0.240/29"}, ServiceSelector: map[string]string{"a b": "c"}}}}, "cluster.loadBalancer.pools[0].serviceSelector", "not a Kubernetes label name"},
		"bad interface": {talos.LoadBalancerSettings{Pools: []talos.LBPool{{Name: "a", Blocks: []string{"10.0.0.240/29"}}}, Interfaces: []string{"eth("}}, "cluster.loadBalancer.interfaces[0]", "not a regular expression"},
		"unknown node":  {talos.LoadBalancerSettings{Pools: []talos.LBPool{{Name: "a", Blocks: []string{"10.0.0.240/29"}}}, Nodes: []string{"w-9"}}, "cluster.loadBalancer.nodes[0]", "not a node of the cluster"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := talos.ClusterArgs{
				Cluster: talos.ClusterSettings{Name: "lab", TalosVersion: "v1.12.4", VIP: "10.0.0.5", LoadBalancer: &c.lb},
				Nodes:   nodes(1, 1), InstallerImage: pulumi.String("x"),
			}
			withNetwork(&a)
			err := a.Validate("lab")
			require.Error(t, err)
			var ie *inputs.Error
			require.ErrorAs(t, err, &ie)
			found := false
			for _, p := range ie.Problems {
				if p.Path == c.path && strings.Contains(p.Message, c.msg) {
					found = true
				}
			}
			assert.True(t, found, "want %s: ...%s..., got %v", c.path, c.msg, ie.Problems)
		})
	}
	ok := talos.ClusterArgs{
		Cluster: talos.ClusterSettings{Name: "lab", TalosVersion: "v1.12.4", VIP: "10.0.0.5", LoadBalancer: homePools()},
		Nodes:   nodes(1, 2), InstallerImage: pulumi.String("x"),
	}
	withNetwork(&ok)
	require.NoError(t, ok.Validate("lab"), "the pools of the graph test hold")
}
