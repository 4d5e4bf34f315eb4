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
		Interfaces: []string{"^ens[0-9]+"},
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
		"loadBalancerIPs": true, "externalIPs": false, "interfaces": []any{"^ens[0-9]+"},
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

// gitops is a hand-off over https with a token, an age key and one
// privileged namespace.
func gitops(owns bool) *talos.GitOpsSettings {
	return &talos.GitOpsSettings{
		Repository: talos.GitOpsRepository{
			URL: "https://git.example.com/lab/gitops.git", Revision: "main", Path: "clusters/lab",
			Username: "lab", Password: pulumi.ToSecret(pulumi.String("tok3n-S3cret")).(pulumi.StringOutput),
		},
		SopsAgeKey:           pulumi.ToSecret(pulumi.String("AGE-SECRET-KEY-1TEST")).(pulumi.StringOutput),
		PrivilegedNamespaces: []string{"longhorn-system"},
		OwnsAddons:           owns,
	}
}

// TestGitOpsHandOffGraph: after Cilium, the approver and the pools, the
// argocd namespace (kept on delete), the age key and repository Secrets
// (secret), Argo CD with KSOPS in its repository server, the privileged
// namespaces as label patches, then the root Application, without a
// resources finalizer.
func TestGitOpsHandOffGraph(t *testing.T) {
	t.Parallel()
	m, _ := runClusterWith(t, nodes(1, 1), func(a *talos.ClusterArgs) {
		withNetwork(a)
		a.Cluster.LoadBalancer = &talos.LoadBalancerSettings{Pools: []talos.LBPool{{Name: "home", Blocks: []string{"10.0.0.224/28"}}}}
		a.Cluster.GitOps = gitops(false)
	})
	cilium, approver := m.Named(t, tRelease, "lab-cilium"), m.Named(t, tRelease, "lab-cert-approver")
	pool := m.One(t, tPool)
	ns := m.Named(t, tNsPatch, "lab-gitops-namespace")
	assert.Equal(t, "argocd", ns.Inputs["metadata"].ObjectValue()["name"].StringValue())
	assert.Equal(t, "true", ns.Inputs["metadata"].ObjectValue()["annotations"].ObjectValue()["pulumi.com/patchForce"].StringValue(),
		"a patch that adopts the namespace left by an earlier removal")
	assert.Empty(t, m.ByType(tNamespace), "no Namespace resource: its create fails on the namespace a removal left")
	secrets := map[string]componentstest.Registered{}
	for _, s := range m.ByType(tSecret) {
		secrets[s.Inputs["metadata"].ObjectValue()["name"].StringValue()] = s
		assert.True(t, m.After(s, ns), "%s in the namespace", s.Name)
		assert.True(t, s.Inputs["stringData"].ContainsSecrets(), "%s holds a secret", s.Name)
	}
	require.Contains(t, secrets, "sops-age")
	require.Contains(t, secrets, "gitops-repository")
	repo := secrets["gitops-repository"]
	assert.Equal(t, "repository", repo.Inputs["metadata"].ObjectValue()["labels"].ObjectValue()["argocd.argoproj.io/secret-type"].StringValue())
	require.True(t, repo.Inputs["stringData"].IsSecret(), "the repository Secret's data is secret as a whole")
	data := repo.Inputs["stringData"].SecretValue().Element.ObjectValue()
	assert.Equal(t, "https://git.example.com/lab/gitops.git", data["url"].StringValue())
	assert.Equal(t, "lab", data["username"].StringValue())
	assert.Equal(t, "tok3n-S3cret", data["password"].StringValue())
	assert.NotContains(t, data, "sshPrivateKey")
	require.True(t, secrets["sops-age"].Inputs["stringData"].IsSecret(), "the age key is secret")
	assert.Equal(t, "AGE-SECRET-KEY-1TEST", secrets["sops-age"].Inputs["stringData"].SecretValue().Element.ObjectValue()["keys.txt"].StringValue())

	argocd := m.Named(t, tRelease, "lab-argocd")
	for _, before := range []componentstest.Registered{cilium, approver, pool, ns, repo, secrets["sops-age"]} {
		assert.True(t, m.After(argocd, before), "Argo CD after %s", before.Name)
	}
	assert.Equal(t, "argo-cd", argocd.Inputs["chart"].StringValue())
	assert.Equal(t, "10.1.1", argocd.Inputs["version"].StringValue())
	assert.Equal(t, "argocd", argocd.Inputs["namespace"].StringValue())
	values := argocd.Inputs["values"].Mappable().(map[string]any)
	assert.Equal(t, "--enable-alpha-plugins --enable-exec", values["configs"].(map[string]any)["cm"].(map[string]any)["kustomize.buildOptions"])
	rs := values["repoServer"].(map[string]any)
	init := rs["initContainers"].([]any)[0].(map[string]any)
	assert.Equal(t, "viaductoss/ksops:v4.5.1", init["image"])
	assert.Equal(t, []any{"/usr/local/bin/ksops", "install", "--with-kustomize", "/custom-tools"}, init["command"])
	assert.Equal(t, []any{map[string]any{"name": "SOPS_AGE_KEY_FILE", "value": "/.config/sops/age/keys.txt"}}, rs["env"])
	assert.Contains(t, rs["volumeMounts"], map[string]any{"mountPath": "/.config/sops/age", "name": "sops-age", "readOnly": true})

	patch := m.Named(t, tNsPatch, "lab-privileged-ns-longhorn-system")
	meta := patch.Inputs["metadata"].ObjectValue()
	assert.Equal(t, "longhorn-system", meta["name"].StringValue())
	assert.Equal(t, "privileged", meta["labels"].ObjectValue()["pod-security.kubernetes.io/enforce"].StringValue())
	app := m.One(t, tApp)
	assert.True(t, m.After(app, argocd), "the root Application after Argo CD (its CRD)")
	assert.True(t, m.After(app, patch), "the root Application after the privileged namespaces")
	appMeta := app.Inputs["metadata"].ObjectValue()
	assert.Equal(t, "root", appMeta["name"].StringValue())
	assert.False(t, appMeta.HasValue("finalizers"), "no resources finalizer: deleting the root leaves the workloads")
	source := app.Inputs["spec"].ObjectValue()["source"].ObjectValue()
	assert.Equal(t, "main", source["targetRevision"].StringValue())
	assert.Equal(t, "clusters/lab", source["path"].StringValue())
	for _, r := range []componentstest.Registered{cilium, approver} {
		assert.Empty(t, r.IgnoreChanges, "without ownsAddons the stack manages %s", r.Name)
	}
	for _, r := range []componentstest.Registered{ns, repo, argocd, patch, app} {
		assert.True(t, strings.HasSuffix(r.DeletedWith, "::vm-cp-0"), "%s goes with the cluster", r.Name)
	}
}

// TestOwnedAddonsAreLeftAlone: with ownsAddons, the Cilium and approver
// releases ignore every change of their inputs and are never deleted.
func TestOwnedAddonsAreLeftAlone(t *testing.T) {
	t.Parallel()
	m, _ := runClusterWith(t, nodes(1, 1), func(a *talos.ClusterArgs) { a.Cluster.GitOps = gitops(true) })
	for _, name := range []string{"lab-cilium", "lab-cert-approver"} {
		r := m.Named(t, tRelease, name)
		assert.ElementsMatch(t, []string{"name", "chart", "version", "namespace", "repositoryOpts", "values", "timeout", "maxHistory"}, r.IgnoreChanges, name)
		assert.True(t, r.RetainOnDelete, name)
	}
	assert.Empty(t, m.Named(t, tRelease, "lab-argocd").IgnoreChanges, "Argo CD itself stays the stack's")
}

// TestRemovedSectionsAreGuardedAndSaid: a stack whose last run made pools
// and the hand-off and that now has neither runs the pools' guard once
// more, for no pool (it refuses while a Service holds one of their
// addresses), registers no pool, and says what the hand-off's removal does.
func TestRemovedSectionsAreGuardedAndSaid(t *testing.T) {
	t.Parallel()
	prev := &talos.Previous{LoadBalancerPools: []string{"home"}, GitOps: true}
	m, _ := runClusterWith(t, nodes(1, 1), func(a *talos.ClusterArgs) { a.Previous = prev })
	guard := m.Named(t, componentstest.LocalCommand, "lab"+talos.LBPoolsSuffix)
	assert.Equal(t, "[]", guard.Inputs["environment"].ObjectValue()["POOLS"].StringValue())
	assert.Empty(t, m.ByType(tPool))
	assert.Empty(t, m.ByType(tRelease+"x"))
	warnings := (&talos.ClusterArgs{Previous: prev}).ChangeWarnings()
	require.Len(t, warnings, 1)
	assert.Contains(t, warnings[0], "cluster.gitops: the section was removed")
	assert.Contains(t, warnings[0], "what Argo CD deployed stays")
	assert.Empty(t, (&talos.ClusterArgs{Previous: prev, Cluster: talos.ClusterSettings{GitOps: gitops(false)}}).ChangeWarnings())
}

// TestGitOpsSettingsAreChecked: bad settings are refused by path.
func TestGitOpsSettingsAreChecked(t *testing.T) {
	t.Parallel()
	key := pulumi.ToSecret(pulumi.String("k")).(pulumi.StringOutput)
	for name, c := range map[string]struct {
		g        talos.GitOpsSettings
		path, in string
	}{
		"no url":            {talos.GitOpsSettings{}, "cluster.gitops.repository.url", "is required"},
		"not a url":         {talos.GitOpsSettings{Repository: talos.GitOpsRepository{URL: "gitops"}}, "cluster.gitops.repository.url", "not a Git URL"},
		"http":              {talos.GitOpsSettings{Repository: talos.GitOpsRepository{URL: "http://git.lan/x.git"}}, "cluster.gitops.repository.url", "not a Git URL"},
		"credential inline": {talos.GitOpsSettings{Repository: talos.GitOpsRepository{URL: "https://me:tok@git.lan/x.git"}}, "cluster.gitops.repository.url", "holds a credential"},
		"ssh key on https":  {talos.GitOpsSettings{Repository: talos.GitOpsRepository{URL: "https://git.lan/x.git", SSHPrivateKey: key}}, "cluster.gitops.repository.sshPrivateKey", "is for an SSH URL"},
		"token on ssh":      {talos.GitOpsSettings{Repository: talos.GitOpsRepository{URL: "git@git.lan:x.git", Username: "me", Password: key}}, "cluster.gitops.repository.password", "SSH"},
		"user alone":        {talos.GitOpsSettings{Repository: talos.GitOpsRepository{URL: "https://git.lan/x.git", Username: "me"}}, "cluster.gitops.repository.password", "is required with repository.username"},
		"path escapes":      {talos.GitOpsSettings{Repository: talos.GitOpsRepository{URL: "https://git.lan/x.git", Path: "../x"}}, "cluster.gitops.repository.path", "inside the repository"},
		"chart v":           {talos.GitOpsSettings{Repository: talos.GitOpsRepository{URL: "https://git.lan/x.git"}, ArgoCD: &talos.ChartSettings{Version: "v10.1.1"}}, "cluster.gitops.argoCd.version", "no v prefix"},
		"kube-system":       {talos.GitOpsSettings{Repository: talos.GitOpsRepository{URL: "https://git.lan/x.git"}, PrivilegedNamespaces: []string{"kube-system"}}, "cluster.gitops.privilegedNamespaces[0]", "Kubernetes' own"},
		"twice":             {talos.GitOpsSettings{Repository: talos.GitOpsRepository{URL: "https://git.lan/x.git"}, PrivilegedNamespaces: []string{"a", "a"}}, "cluster.gitops.privilegedNamespaces[1]", "listed twice"},
		"ksops volume":      {argoValues(map[string]any{"repoServer": map[string]any{"volumes": []any{map[string]any{"name": "x"}, map[string]any{"name": "custom-tools"}}}}), "cluster.gitops.argoCd.values.repoServer.volumes[1].name", "KSOPS's own"},
		"ksops mount":       {argoValues(map[string]any{"repoServer": map[string]any{"volumeMounts": []any{map[string]any{"name": "y", "mountPath": "/usr/local/bin/ksops"}}}}), "cluster.gitops.argoCd.values.repoServer.volumeMounts[0].mountPath", "KSOPS's own"},
		"ksops init":        {argoValues(map[string]any{"repoServer": map[string]any{"initContainers": []any{map[string]any{"name": "install-ksops"}}}}), "cluster.gitops.argoCd.values.repoServer.initContainers[0].name", "KSOPS's own"},
		"env not a list":    {argoValues(map[string]any{"repoServer": map[string]any{"env": map[string]any{"A": "b"}}}), "cluster.gitops.argoCd.values.repoServer.env", "must be a list"},
		"build options":     {argoValues(map[string]any{"configs": map[string]any{"cm": map[string]any{"kustomize.buildOptions": []any{"--x"}}}}), "cluster.gitops.argoCd.values.configs.cm.kustomize.buildOptions", "must be a string"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := talos.ClusterArgs{Cluster: talos.ClusterSettings{Name: "lab", TalosVersion: "v1.12.4", GitOps: &c.g}, Nodes: nodes(1, 0), InstallerImage: pulumi.String("x")}
			err := a.Validate("lab")
			var ie *inputs.Error
			require.ErrorAs(t, err, &ie)
			assert.True(t, slicesContainsProblem(ie.Problems, c.path, c.in), "want %s: ...%s..., got %v", c.path, c.in, ie.Problems)
		})
	}
	for _, url := range []string{"https://github.com/me/gitops.git", "git@github.com:me/gitops.git", "ssh://git@git.lan:2222/me/gitops.git"} {
		a := talos.ClusterArgs{Cluster: talos.ClusterSettings{Name: "lab", TalosVersion: "v1.12.4", GitOps: &talos.GitOpsSettings{Repository: talos.GitOpsRepository{URL: url}}}, Nodes: nodes(1, 0), InstallerImage: pulumi.String("x")}
		assert.NoError(t, a.Validate("lab"), url)
	}
}

// argoValues are settings with Argo CD values.
func argoValues(v map[string]any) talos.GitOpsSettings {
	return talos.GitOpsSettings{Repository: talos.GitOpsRepository{URL: "https://git.lan/x.git"}, ArgoCD: &talos.ChartSettings{Values: v}}
}

// TestUserArgoCDValuesKeepKSOPS: the user's entries of the repository
// server's lists are added to KSOPS's (Helm alone would replace the list,
// and the KSOPS README itself tells users to set repoServer.env), the
// user's build options keep KSOPS's flags, and SOPS_AGE_KEY_FILE is the
// user's to set when there is no age key.
func TestUserArgoCDValuesKeepKSOPS(t *testing.T) {
	t.Parallel()
	user := map[string]any{
		"configs": map[string]any{"cm": map[string]any{"kustomize.buildOptions": "--load-restrictor LoadRestrictionsNone --enable-exec"}},
		"repoServer": map[string]any{
			"env":            []any{map[string]any{"name": "XDG_CONFIG_HOME", "value": "/.config"}},
			"volumes":        []any{map[string]any{"name": "gpg", "emptyDir": map[string]any{}}},
			"volumeMounts":   []any{map[string]any{"name": "gpg", "mountPath": "/gpg"}},
			"initContainers": []any{map[string]any{"name": "fetch-keys", "image": "busybox"}},
			"replicas":       2,
		},
	}
	v := talos.ArgoCDValues("viaductoss/ksops:v4.5.1", true, user)
	assert.Equal(t, "--load-restrictor LoadRestrictionsNone --enable-exec --enable-alpha-plugins", v["configs"].(map[string]any)["cm"].(map[string]any)["kustomize.buildOptions"])
	rs := v["repoServer"].(map[string]any)
	names := func(key, by string) []any {
		var out []any
		for _, e := range rs[key].([]any) {
			out = append(out, e.(map[string]any)[by])
		}
		return out
	}
	assert.Equal(t, []any{"SOPS_AGE_KEY_FILE", "XDG_CONFIG_HOME"}, names("env", "name"))
	assert.Equal(t, []any{"custom-tools", "sops-age", "gpg"}, names("volumes", "name"))
	assert.Equal(t, []any{"/usr/local/bin/kustomize", "/usr/local/bin/ksops", "/.config/sops/age", "/gpg"}, names("volumeMounts", "mountPath"))
	assert.Equal(t, []any{"install-ksops", "fetch-keys"}, names("initContainers", "name"))
	assert.Equal(t, 2, rs["replicas"], "other values merge as Helm merges them")
	assert.Len(t, user["repoServer"].(map[string]any)["env"], 1, "the user's values are not modified")

	own := map[string]any{"repoServer": map[string]any{"env": []any{map[string]any{"name": "SOPS_AGE_KEY_FILE", "value": "/keys/age.txt"}}}}
	rs = talos.ArgoCDValues("viaductoss/ksops:v4.5.1", false, own)["repoServer"].(map[string]any)
	assert.Equal(t, own["repoServer"].(map[string]any)["env"], rs["env"], "without an age key the variable is the user's")
	a := talos.ClusterArgs{Cluster: talos.ClusterSettings{Name: "lab", TalosVersion: "v1.12.4", GitOps: new(argoValues(own))}, Nodes: nodes(1, 0), InstallerImage: pulumi.String("x")}
	assert.NoError(t, a.Validate("lab"))
	withKey := argoValues(own)
	withKey.SopsAgeKey = pulumi.String("AGE-SECRET-KEY-1")
	a.Cluster.GitOps = &withKey
	var ie *inputs.Error
	require.ErrorAs(t, a.Validate("lab"), &ie)
	assert.True(t, slicesContainsProblem(ie.Problems, "cluster.gitops.argoCd.values.repoServer.env[0].name", "KSOPS's own"), "%v", ie.Problems)
}

func slicesContainsProblem(ps []inputs.Problem, path, in string) bool {
	for _, p := range ps {
		if p.Path == path && strings.Contains(p.Message, in) {
			return true
		}
	}
	return false
}

// TestOwnedCiliumWithPoolsIsWarned: with ownsAddons, the L2 values the
// pools need are the repository's to set: said at every run.
func TestOwnedCiliumWithPoolsIsWarned(t *testing.T) {
	t.Parallel()
	a := &talos.ClusterArgs{Cluster: talos.ClusterSettings{
		LoadBalancer: &talos.LoadBalancerSettings{Pools: []talos.LBPool{{Name: "home", Blocks: []string{"10.0.0.224/28"}}}},
		GitOps:       gitops(true),
	}}
	w := a.AddonWarnings()
	require.Len(t, w, 1)
	assert.Contains(t, w[0], "cluster.gitops.ownsAddons: Argo CD owns Cilium")
	assert.Contains(t, w[0], "l2announcements.enabled: true")
	a.Cluster.GitOps = gitops(false)
	assert.Empty(t, a.AddonWarnings(), "the stack keeps Cilium: it sets the values itself")
	a.Cluster.GitOps = gitops(true)
	a.Cluster.LoadBalancer.Pools[0].Routed = true
	assert.Empty(t, a.AddonWarnings(), "routed pools need no L2 values")
}

// TestAnEthInterfaceRegexpIsWarned (issue 48, item 1): Talos names NICs
// predictably on installs of 1.5 and later (a Proxmox VM's virtio NIC is
// ens18; net.ifnames=0 only on upgrades from before, Talos's
// cmd/installer/pkg/install/errata.go), and Cilium takes a policy that
// matches no NIC without complaint. A regexp of the kernel's old names
// alone is warned, by key.
func TestAnEthInterfaceRegexpIsWarned(t *testing.T) {
	t.Parallel()
	a := &talos.ClusterArgs{Cluster: talos.ClusterSettings{LoadBalancer: homePools()}}
	assert.Empty(t, a.LoadBalancerWarnings(), "^ens[0-9]+")
	a.Cluster.LoadBalancer.Interfaces = []string{"^e", "^eth[0-9]+", "^ens18$|^eth0$", "eth1"}
	w := a.LoadBalancerWarnings()
	require.Len(t, w, 2, "%q", w)
	assert.Contains(t, w[0], `cluster.loadBalancer.interfaces[1]: "^eth[0-9]+" matches the kernel's eth names, not a predictable one like ens18: Talos names NICs predictably`)
	assert.Contains(t, w[1], `cluster.loadBalancer.interfaces[3]: "eth1" matches the kernel's eth names`)
	a.Cluster.LoadBalancer.Interfaces = nil
	assert.Empty(t, a.LoadBalancerWarnings(), "every NIC Cilium manages")
}

// TestTheLoadBalancerNeedsCilium1182 (issue 48, item 2): the pools are
// cilium.io/v2 from Cilium 1.18, and 1.18.2 stops reassigning addresses on
// a widened pool or an operator restart (Cilium's v1.18.2 release notes):
// an older cluster.cilium.version with the section is refused, by key.
func TestTheLoadBalancerNeedsCilium1182(t *testing.T) {
	t.Parallel()
	for version, refused := range map[string]bool{"1.17.9": true, "1.18.1": true, "1.18.2": false, "1.18.4": false, "1.19.0-pre.1": false, "1.18.2-rc.1": true} {
		a := &talos.ClusterArgs{Cluster: talos.ClusterSettings{LoadBalancer: homePools(), Cilium: &talos.ChartSettings{Version: version}}}
		msg, found := problemAt(a, "cluster.cilium.version")
		assert.Equal(t, refused, found, "%s: %s", version, msg)
		if refused {
			assert.Contains(t, msg, version+": the load balancer needs Cilium 1.18.2 or later")
		}
	}
	a := &talos.ClusterArgs{Cluster: talos.ClusterSettings{Cilium: &talos.ChartSettings{Version: "1.17.9"}}}
	_, found := problemAt(a, "cluster.cilium.version")
	assert.False(t, found, "without the section any version")
}

// problemAt is the message CheckNodes records at path, if any.
func problemAt(a *talos.ClusterArgs, path string) (string, bool) {
	p := &inputs.Problems{}
	a.CheckNodes(p, "")
	for _, pr := range p.List() {
		if pr.Path == path {
			return pr.Message, true
		}
	}
	return "", false
}
