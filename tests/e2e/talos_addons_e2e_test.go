//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest/realapiserver"
	"github.com/fluodata/talos-pulumi/internal/testkit/e2etest"
)

// redisHAVersion is the redis-ha chart the argo-cd chart of
// DefaultArgoCDVersion depends on (its Chart.yaml).
const redisHAVersion = "4.38.0"

// TestE2EAddonsLoadBalancerPoolsAndGitOpsHandOff brings up a TalosCluster
// with LoadBalancer pools and the GitOps hand-off (ownsAddons) with the
// real CLI and plugins, against the Talos fake, the real kube-apiserver
// and kubesim, and the real Cilium and argo-cd charts: cilium-operator's
// CRDs (the real ones of Cilium's module) appear once its Deployment is
// ready, as the operator registers them. It checks what the first up
// leaves in the API server and that no secret leaks to the state or the
// output; that a second preview shows no change; that Argo CD's own
// changes to Cilium (its ConfigMap, its DaemonSet) and a change of the
// stack's Cilium values are not fought; that the pools grow, and that a
// shrink that takes a Service's address is refused by the guard until the
// Service is gone; then destroys the stack.
func TestE2EAddonsLoadBalancerPoolsAndGitOpsHandOff(t *testing.T) {
	skipOutsideTheNamespace(t)
	crdDir := filepath.Join(e2etest.GoModCache(t), "github.com/cilium/cilium@v"+talos.DefaultCiliumVersion, "pkg/k8s/apis/cilium.io/client/crds")
	var operatorCRDs [][]byte
	for _, f := range []string{"v2/ciliumloadbalancerippools.yaml", "v2alpha1/ciliuml2announcementpolicies.yaml"} {
		data, err := os.ReadFile(filepath.Join(crdDir, f)) //nolint:gosec // the module cache's file
		if err != nil {
			t.Skipf("SKIPPED: no Cilium CRD at %s (go mod download github.com/cilium/cilium@v%s): %v", filepath.Join(crdDir, f), talos.DefaultCiliumVersion, err)
		}
		operatorCRDs = append(operatorCRDs, data)
	}
	argo := e2etest.ArgoCD(t, talos.DefaultArgoCDVersion, redisHAVersion)
	dir := e2etest.Charts(t, talos.DefaultCiliumVersion, talos.DefaultApproverVersion, argo).Dir
	t.Setenv("NO_PROXY", "10.77.0.0/24")
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	_, kube, applied := twoFreshNodes(ctx, t, map[string][][]byte{talos.SystemNamespace + "/cilium-operator": operatorCRDs})

	const token = "tok3n-S3cret"
	identity, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	ageKey := identity.String()

	blocks := []string{"10.77.0.224/28"}
	var ciliumValues map[string]any
	ownsAddons, handOff := true, true
	var previous *talos.Previous
	program := func(ctx *pulumi.Context) error {
		gitops := &talos.GitOpsSettings{
			Repository: talos.GitOpsRepository{
				URL: "https://git.example.com/lab/gitops.git", Revision: "main", Path: "clusters/lab",
				Username: "lab", Password: pulumi.ToSecret(pulumi.String(token)).(pulumi.StringOutput),
			},
			SopsAgeKey:           pulumi.ToSecret(pulumi.String(ageKey)).(pulumi.StringOutput),
			PrivilegedNamespaces: []string{"longhorn-system"},
			OwnsAddons:           ownsAddons,
			// Values of the kind the KSOPS README gives: added to KSOPS's.
			ArgoCD: &talos.ChartSettings{Values: map[string]any{
				"configs":    map[string]any{"cm": map[string]any{"kustomize.buildOptions": "--load-restrictor LoadRestrictionsNone"}},
				"repoServer": map[string]any{"env": []any{map[string]any{"name": "XDG_CONFIG_HOME", "value": "/.config"}}},
			}},
		}
		if !handOff {
			gitops = nil
		}
		c, err := talos.NewCluster(ctx, "lab", &talos.ClusterArgs{
			Cluster: talos.ClusterSettings{
				Name: "lab", Endpoint: "https://" + e2eEndpoint, TalosVersion: "v1.13.9", KubernetesVersion: "1.35.4",
				Cilium:   &talos.ChartSettings{Values: ciliumValues},
				KubeSpan: &talos.KubeSpanSettings{Enabled: true}, // the talos provider patches with its own machinery (v1.12.0): it must take the patch
				LoadBalancer: &talos.LoadBalancerSettings{
					Pools:      []talos.LBPool{{Name: "home", Blocks: blocks}},
					Interfaces: []string{"^eth0$"},
				},
				GitOps: gitops,
			},
			InstallerImage: pulumi.String("factory.talos.dev/installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.13.9"),
			Nodes: []talos.NodeSpec{
				{Name: "cp-0", IP: e2eControlPlaneIP, Role: talos.RoleControlPlane},
				{Name: "worker-0", IP: e2eWorkerIP, Role: talos.RoleWorker, KubeSpanEndpoints: []string{"198.51.100.7:51821"}}, // a NAT's forwarded port
			},
			Machines: talos.Machines{NodeNetwork: netip.MustParsePrefix("10.77.0.0/24"), NodeGateway: netip.MustParseAddr("10.77.0.1")},
			Previous: previous,
		})
		if err != nil {
			return err
		}
		ctx.Export("kubeconfig", c.Kubeconfig)
		return nil
	}
	s, err := auto.UpsertStackInlineSource(ctx, "lab", "addons-e2e", program, auto.WorkDir(dir))
	require.NoError(t, err)

	// The first up: the cluster, Cilium, the pools once cilium-operator
	// registered their CRDs, Argo CD and the hand-off.
	start := time.Now()
	var out bytes.Buffer
	_, err = s.Up(ctx, optup.ProgressStreams(&out))
	require.NoError(t, err, "first up:\n%s", out.String())
	t.Logf("first up: %s", time.Since(start).Round(time.Second))
	assert.Contains(t, out.String(), "load balancer pools: 1 pools, 0 addresses held by Services, none taken away", "the pools' guard ran")
	api, sim := kube.Started()
	require.NotNil(t, api, "the API server started with the control plane's config")
	assert.Empty(t, sim.Errors())

	// KubeSpan, through the real talos provider's patching (its machinery
	// v1.12.0): the worker's config has it on and its NAT endpoint.
	workerConfig := string(applied(e2eWorkerIP))
	assert.Contains(t, workerConfig, "kind: KubeSpanEndpointsConfig", "the worker's extra endpoint document")
	assert.Contains(t, workerConfig, "198.51.100.7:51821")
	assert.Regexp(t, `kubespan:\s+enabled: true`, workerConfig, "KubeSpan on")

	pool := get(ctx, t, api, "/apis/cilium.io/v2/ciliumloadbalancerippools/home")
	assert.Equal(t, []any{map[string]any{"cidr": "10.77.0.224/28"}}, dig(pool, "spec", "blocks"), "the pool's blocks")
	assert.Equal(t, talos.LBManagedByValue, dig(pool, "metadata", "labels", talos.LBManagedByLabel))
	policy := get(ctx, t, api, "/apis/cilium.io/v2alpha1/ciliuml2announcementpolicies/"+talos.L2PolicyName)
	assert.Equal(t, true, dig(policy, "spec", "loadBalancerIPs"))
	assert.Equal(t, false, dig(policy, "spec", "externalIPs"))
	assert.Equal(t, []any{"^eth0$"}, dig(policy, "spec", "interfaces"))

	get(ctx, t, api, "/api/v1/namespaces/"+talos.ArgoCDNamespace)
	ageSecret := get(ctx, t, api, "/api/v1/namespaces/argocd/secrets/"+talos.SopsAgeSecret)
	assert.Equal(t, base64.StdEncoding.EncodeToString([]byte(ageKey)), dig(ageSecret, "data", "keys.txt"), "the age key as keys.txt")
	repo := get(ctx, t, api, "/api/v1/namespaces/argocd/secrets/"+talos.RepoSecret)
	assert.Equal(t, "repository", dig(repo, "metadata", "labels", "argocd.argoproj.io/secret-type"))
	assert.Equal(t, base64.StdEncoding.EncodeToString([]byte(token)), dig(repo, "data", "password"))
	assert.Equal(t, base64.StdEncoding.EncodeToString([]byte("https://git.example.com/lab/gitops.git")), dig(repo, "data", "url"))

	repoServer := get(ctx, t, api, "/apis/apps/v1/namespaces/argocd/deployments/argocd-repo-server")
	podSpec, _ := dig(repoServer, "spec", "template", "spec").(map[string]any)
	var inits []string
	for _, c := range asList(podSpec["initContainers"]) {
		inits = append(inits, str(dig(c, "name")))
	}
	assert.Contains(t, inits, "install-ksops", "the KSOPS init container")
	var envs []string
	for _, c := range asList(podSpec["containers"]) {
		if dig(c, "name") != "repo-server" {
			continue
		}
		for _, e := range asList(dig(c, "env")) {
			envs = append(envs, str(dig(e, "name"))+"="+str(dig(e, "value")))
		}
	}
	assert.Contains(t, envs, "SOPS_AGE_KEY_FILE=/.config/sops/age/keys.txt")
	assert.Contains(t, envs, "XDG_CONFIG_HOME=/.config", "the user's variable beside KSOPS's")
	argoCM := get(ctx, t, api, "/api/v1/namespaces/argocd/configmaps/argocd-cm")
	assert.Equal(t, "--load-restrictor LoadRestrictionsNone --enable-alpha-plugins --enable-exec", dig(argoCM, "data", "kustomize.buildOptions"),
		"the user's build options with KSOPS's flags")

	longhorn := get(ctx, t, api, "/api/v1/namespaces/longhorn-system")
	assert.Equal(t, "privileged", dig(longhorn, "metadata", "labels", "pod-security.kubernetes.io/enforce"))
	app := get(ctx, t, api, "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/"+talos.RootApplicationName)
	assert.Equal(t, "https://git.example.com/lab/gitops.git", dig(app, "spec", "source", "repoURL"))
	assert.Equal(t, "clusters/lab", dig(app, "spec", "source", "path"))
	assert.Empty(t, dig(app, "metadata", "finalizers"), "no resources finalizer")
	ciliumConfig := get(ctx, t, api, "/api/v1/namespaces/kube-system/configmaps/cilium-config")
	assert.Equal(t, "true", dig(ciliumConfig, "data", "enable-l2-announcements"))

	// No secret in clear, in the state or the output. The state as the
	// backend holds it (Export is `pulumi stack export --show-secrets`,
	// which decrypts them: it holds them, so the check is not vacuous).
	secrets := []string{token, ageKey, base64.StdEncoding.EncodeToString([]byte(token)), base64.StdEncoding.EncodeToString([]byte(ageKey))}
	exported, err := s.Export(ctx)
	require.NoError(t, err)
	assert.Contains(t, string(exported.Deployment), base64.StdEncoding.EncodeToString([]byte(ageKey)), "the decrypted export holds the age key (the Secret's data)")
	stateFiles, err := filepath.Glob(filepath.Join(dir, ".pulumi/stacks/*/lab.json"))
	require.NoError(t, err)
	require.Len(t, stateFiles, 1, "the stack's state file in the local backend")
	state, err := os.ReadFile(stateFiles[0])
	require.NoError(t, err)
	assert.Contains(t, string(state), "ciphertext", "the state holds encrypted secrets")
	for what, text := range map[string]string{"the state": string(state), "the up's output": out.String()} {
		for _, secret := range secrets {
			assert.NotContains(t, text, secret, "%s holds a secret in clear", what)
		}
	}

	start = time.Now()
	_, err = s.Preview(ctx, optpreview.ExpectNoChanges())
	require.NoError(t, err, "a second preview shows no change")
	t.Logf("second preview: %s", time.Since(start).Round(time.Second))

	// Argo CD, which owns Cilium now, changes its objects: the stack
	// leaves them.
	mergePatch(ctx, t, api, "/api/v1/namespaces/kube-system/configmaps/cilium-config", map[string]any{"data": map[string]any{"debug": "true"}})
	mergePatch(ctx, t, api, "/apis/apps/v1/namespaces/kube-system/daemonsets/cilium", map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{"argocd.argoproj.io/tracking-id": "cilium:apps/DaemonSet:kube-system/cilium"}},
	})
	start = time.Now()
	_, err = s.Preview(ctx, optpreview.ExpectNoChanges())
	require.NoError(t, err, "a preview after Argo CD changed Cilium shows no change")
	out.Reset()
	res, err := s.Up(ctx, optup.ProgressStreams(&out))
	require.NoError(t, err, "an up after Argo CD changed Cilium:\n%s", out.String())
	t.Logf("preview and up after Argo CD's change: %s", time.Since(start).Round(time.Second))
	assert.Equal(t, []string{"same"}, changeKinds(res.Summary.ResourceChanges), "nothing changed:\n%s", out.String())
	ciliumConfig = get(ctx, t, api, "/api/v1/namespaces/kube-system/configmaps/cilium-config")
	assert.Equal(t, "true", dig(ciliumConfig, "data", "debug"), "Argo CD's change stays")
	ds := get(ctx, t, api, "/apis/apps/v1/namespaces/kube-system/daemonsets/cilium")
	assert.NotNil(t, dig(ds, "metadata", "annotations", "argocd.argoproj.io/tracking-id"), "Argo CD's annotation stays")

	// The stack's Cilium values change: Argo CD owns them, they are ignored.
	ciliumValues = map[string]any{"debug": map[string]any{"enabled": true}}
	start = time.Now()
	_, err = s.Preview(ctx, optpreview.ExpectNoChanges())
	require.NoError(t, err, "a preview after the stack's Cilium values changed shows no change (ownsAddons)")
	t.Logf("preview with new Cilium values: %s", time.Since(start).Round(time.Second))

	// Day 2: the pool grows.
	blocks = []string{"10.77.0.224-10.77.0.250"}
	out.Reset()
	start = time.Now()
	_, err = s.Up(ctx, optup.ProgressStreams(&out))
	require.NoError(t, err, "the pool grows:\n%s", out.String())
	t.Logf("pool grown: %s", time.Since(start).Round(time.Second))
	grown := []any{map[string]any{"start": "10.77.0.224", "stop": "10.77.0.250"}}
	assert.Equal(t, grown, dig(get(ctx, t, api, "/apis/cilium.io/v2/ciliumloadbalancerippools/home"), "spec", "blocks"), "the pool grown")

	// A Service holds 10.77.0.240, as Cilium's LB IPAM would have given it:
	// a shrink that leaves it out is refused, the pool left as it is.
	const svcPath = "/api/v1/namespaces/default/services/web"
	call(ctx, t, api, http.MethodPost, "/api/v1/namespaces/default/services", "", map[string]any{
		"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": "web", "namespace": "default"},
		"spec": map[string]any{"type": "LoadBalancer", "selector": map[string]any{"app": "web"}, "ports": []any{map[string]any{"port": 80, "protocol": "TCP"}}},
	}, http.StatusCreated)
	call(ctx, t, api, http.MethodPatch, svcPath+"/status", "application/merge-patch+json", map[string]any{
		"status": map[string]any{"loadBalancer": map[string]any{"ingress": []any{map[string]any{"ip": "10.77.0.240"}}}},
	}, http.StatusOK)
	assert.Equal(t, "10.77.0.240", dig(asList(dig(get(ctx, t, api, svcPath), "status", "loadBalancer", "ingress"))[0], "ip"))
	blocks = []string{"10.77.0.224-10.77.0.230"}
	out.Reset()
	start = time.Now()
	_, err = s.Up(ctx, optup.ProgressStreams(&out))
	t.Logf("shrink refused: %s", time.Since(start).Round(time.Second))
	require.Error(t, err, "a shrink that takes a Service's address:\n%s", out.String())
	assert.Contains(t, out.String(), "unable to change the load balancer pools")
	assert.Contains(t, out.String(), `Service default/web holds 10.77.0.240 of pool "home"`)
	assert.Equal(t, grown, dig(get(ctx, t, api, "/apis/cilium.io/v2/ciliumloadbalancerippools/home"), "spec", "blocks"), "the pool unchanged")

	call(ctx, t, api, http.MethodDelete, svcPath, "", nil, http.StatusOK)
	out.Reset()
	start = time.Now()
	_, err = s.Up(ctx, optup.ProgressStreams(&out))
	require.NoError(t, err, "the shrink once the Service is gone:\n%s", out.String())
	t.Logf("pool shrunk: %s", time.Since(start).Round(time.Second))
	assert.Equal(t, []any{map[string]any{"start": "10.77.0.224", "stop": "10.77.0.230"}},
		dig(get(ctx, t, api, "/apis/cilium.io/v2/ciliumloadbalancerippools/home"), "spec", "blocks"), "the pool shrunk")
	_, err = s.Preview(ctx, optpreview.ExpectNoChanges())
	require.NoError(t, err, "a preview after the shrink shows no change")

	// No kube-controller-manager runs: from here the test plays its
	// garbage collector for the objects pulumi-kubernetes deletes (in the
	// foreground).
	gcCtx, stopGC := context.WithCancel(ctx)
	gcDone := make(chan struct{})
	go func() {
		defer close(gcDone)
		kube.CollectGarbage(gcCtx, t, "/api/v1/namespaces", "/api/v1/namespaces/argocd/secrets",
			"/apis/argoproj.io/v1alpha1/namespaces/argocd/applications",
			"/apis/cilium.io/v2/ciliumloadbalancerippools", "/apis/cilium.io/v2alpha1/ciliuml2announcementpolicies")
	}()

	// ownsAddons turned off, with the stack's new Cilium values: the stack
	// owns Cilium again and upgrades it; the pools and the policy are not
	// touched by Cilium's upgrade.
	poolVersion := dig(get(ctx, t, api, "/apis/cilium.io/v2/ciliumloadbalancerippools/home"), "metadata", "resourceVersion")
	ownsAddons = false
	out.Reset()
	start = time.Now()
	res, err = s.Up(ctx, optup.ProgressStreams(&out))
	require.NoError(t, err, "ownsAddons off, Cilium upgraded with the pools present:\n%s", out.String())
	t.Logf("Cilium upgraded with pools present: %s", time.Since(start).Round(time.Second))
	assert.Equal(t, 1, (*res.Summary.ResourceChanges)["update"], "Cilium's release alone is updated:\n%s", out.String())
	assert.Equal(t, "true", dig(get(ctx, t, api, "/api/v1/namespaces/kube-system/configmaps/cilium-config"), "data", "debug"), "the stack's values rendered")
	assert.Equal(t, poolVersion, dig(get(ctx, t, api, "/apis/cilium.io/v2/ciliumloadbalancerippools/home"), "metadata", "resourceVersion"), "the pool untouched")

	// The gitops section removed (the program reads the last state's
	// release into Previous.GitOps): the preview says what goes and what
	// stays; the up deletes Argo CD, the root Application and the
	// Secrets, keeps the argocd namespace and the privileged namespace.
	handOff, previous = false, &talos.Previous{GitOps: true, LoadBalancerPools: []string{"home"}}
	out.Reset()
	_, err = s.Preview(ctx, optpreview.ProgressStreams(&out))
	require.NoError(t, err)
	assert.Contains(t, out.String(), "cluster.gitops: the section was removed", "the preview says it")
	out.Reset()
	start = time.Now()
	_, err = s.Up(ctx, optup.ProgressStreams(&out))
	require.NoError(t, err, "the gitops section removed:\n%s", out.String())
	t.Logf("gitops section removed: %s", time.Since(start).Round(time.Second))
	for _, gone := range []string{
		"/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/" + talos.RootApplicationName,
		"/api/v1/namespaces/argocd/secrets/" + talos.SopsAgeSecret, "/api/v1/namespaces/argocd/secrets/" + talos.RepoSecret,
		"/apis/apps/v1/namespaces/argocd/deployments/argocd-repo-server",
	} {
		code, body, err := api.Call(ctx, http.MethodGet, gone, "", nil)
		require.NoError(t, err)
		assert.Equal(t, http.StatusNotFound, code, "%s deleted with the section: %s", gone, body)
	}
	get(ctx, t, api, "/api/v1/namespaces/"+talos.ArgoCDNamespace)
	longhorn = get(ctx, t, api, "/api/v1/namespaces/longhorn-system")
	assert.Nil(t, dig(longhorn, "metadata", "labels", "pod-security.kubernetes.io/enforce"), "the labels go, the namespace stays")
	_, err = s.Preview(ctx, optpreview.ExpectNoChanges())
	require.NoError(t, err, "a preview after the removal shows no change")

	// The section added back: the namespace the removal left is adopted,
	// not created again (a create would fail with AlreadyExists).
	handOff, previous = true, &talos.Previous{LoadBalancerPools: []string{"home"}}
	out.Reset()
	start = time.Now()
	_, err = s.Up(ctx, optup.ProgressStreams(&out))
	require.NoError(t, err, "the gitops section added back:\n%s", out.String())
	t.Logf("gitops section added back: %s", time.Since(start).Round(time.Second))
	get(ctx, t, api, "/apis/apps/v1/namespaces/argocd/deployments/argocd-repo-server")
	get(ctx, t, api, "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/"+talos.RootApplicationName)
	_, err = s.Preview(ctx, optpreview.ExpectNoChanges())
	require.NoError(t, err, "a preview after the section came back shows no change")

	// A whole-stack destroy, as make destroy runs it.
	t.Setenv(talos.DestroyEnv, "1")
	out.Reset()
	start = time.Now()
	_, err = s.Destroy(ctx, optdestroy.ProgressStreams(&out))
	stopGC()
	<-gcDone
	require.NoError(t, err, "destroy:\n%s", out.String())
	t.Logf("destroy: %s", time.Since(start).Round(time.Second))
	for _, gone := range []string{
		"/apis/cilium.io/v2/ciliumloadbalancerippools/home", "/apis/cilium.io/v2alpha1/ciliuml2announcementpolicies/" + talos.L2PolicyName,
	} {
		code, body, err := api.Call(ctx, http.MethodGet, gone, "", nil)
		require.NoError(t, err)
		assert.Equal(t, http.StatusNotFound, code, "%s deleted: %s", gone, body)
	}
}

// call makes a request as the API server's admin and fails the test on
// another status than want; it returns the answer's body.
func call(ctx context.Context, t *testing.T, api *realapiserver.Server, method, path, contentType string, body any, want int) []byte {
	t.Helper()
	code, data, err := api.Call(ctx, method, path, contentType, body)
	require.NoError(t, err)
	require.Equal(t, want, code, "%s %s: %s", method, path, data)
	return data
}

// get reads an object of the API server, which must exist.
func get(ctx context.Context, t *testing.T, api *realapiserver.Server, path string) map[string]any {
	t.Helper()
	var obj map[string]any
	require.NoError(t, json.Unmarshal(call(ctx, t, api, http.MethodGet, path, "", nil, http.StatusOK), &obj))
	return obj
}

// mergePatch changes an object as a JSON merge patch.
func mergePatch(ctx context.Context, t *testing.T, api *realapiserver.Server, path string, patch map[string]any) {
	t.Helper()
	call(ctx, t, api, http.MethodPatch, path, "application/merge-patch+json", patch, http.StatusOK)
}

// dig is the value at the keys' path in a decoded JSON object (nil when
// missing).
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// changeKinds are the kinds of change of an update's summary, sorted,
// without their counts.
func changeKinds(changes *map[string]int) []string {
	var out []string
	if changes == nil {
		return out
	}
	for k, n := range *changes {
		if n > 0 {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
