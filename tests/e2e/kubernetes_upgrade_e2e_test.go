//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest/realapiserver"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubesim"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
	"github.com/fluodata/talos-pulumi/internal/testkit/e2etest"
)

// The Kubernetes versions of the upgrade test: 1.31 to 1.32 removes
// PodSchedulingContext v1alpha3 (rollout.RemovedAPIs, upstream's table),
// the newest removal Talos v1.13 can upgrade across (it runs 1.31 to 1.36).
const upgradeFrom, upgradeTo = "1.31.14", "1.32.13"

// upgradeAPIServer is the real kube-apiserver of a version's minor, built
// by make e2e into bin/ (kube-apiserver-1.31), or the test is skipped.
func upgradeAPIServer(t *testing.T, version string) string {
	t.Helper()
	bin, err := realapiserver.Binary()
	if err != nil {
		t.Skipf("SKIPPED: %v", err)
	}
	minor := version[:strings.LastIndex(version, ".")]
	p := filepath.Join(filepath.Dir(bin), "kube-apiserver-"+minor)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("SKIPPED: no %s: make kube-apiserver-upgrades builds it", p)
	}
	return p
}

// TestE2EAKubernetesUpgradeAcrossARemovedAPI upgrades a TalosCluster (one
// control plane, one worker) from Kubernetes 1.31 to 1.32 with the real
// CLI and plugins, the Talos fake's nodes and the real kube-apiserver of
// each version: the 1.32 binary replaces the 1.31 one on the same etcd
// when the control plane's config names it, as Talos replaces the static
// pod. With an object of PodSchedulingContext v1alpha3 in the cluster the
// upgrade is refused by cluster.kubernetesVersion, naming it, before any
// node is touched; without it every node pre-pulls the new images, the API
// server moves before any kubelet, then the kubelets, then the bootstrap
// manifests the control plane renders for 1.32 are applied to the 1.32 API
// server; a preview after shows no change.
func TestE2EAKubernetesUpgradeAcrossARemovedAPI(t *testing.T) {
	skipOutsideTheNamespace(t)
	from, to := upgradeAPIServer(t, upgradeFrom), upgradeAPIServer(t, upgradeTo)
	dir := e2etest.Charts(t, talos.DefaultCiliumVersion, talos.DefaultApproverVersion).Dir
	t.Setenv("NO_PROXY", "10.77.0.0/24")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	nodes := talosapitest.StartFresh(t,
		talosapitest.NodeSpec{IP: e2eControlPlaneIP, Hostname: "cp-0", Role: talosapitest.ControlPlane, Listen: e2eControlPlaneIP + ":50000", Maintenance: true, RebootLatency: 200 * time.Millisecond, Version: "v1.13.9"},
		talosapitest.NodeSpec{IP: e2eWorkerIP, Hostname: "worker-0", Role: talosapitest.Worker, Listen: e2eWorkerIP + ":50000", Maintenance: true, RebootLatency: 200 * time.Millisecond, Version: "v1.13.9"},
	)
	simCtx, stopSim := context.WithCancel(ctx)
	t.Cleanup(stopSim)
	kube := &e2etest.Kube{
		Addr: e2eEndpoint, CNI: talos.SystemNamespace + "/" + talos.CiliumRelease,
		Nodes: []kubesim.Node{
			{Name: "cp-0", IP: e2eControlPlaneIP, ControlPlane: true, KubeletVersion: "v" + upgradeFrom},
			{Name: "worker-0", IP: e2eWorkerIP, KubeletVersion: "v" + upgradeFrom},
		},
		// 1.31 serves PodSchedulingContext only with DRA's gate and its
		// API group version turned on.
		APIServer: realapiserver.Options{Binary: from, Args: []string{
			"--feature-gates=DynamicResourceAllocation=true", "--runtime-config=resource.k8s.io/v1alpha3=true",
		}},
		Upgrades: map[string]realapiserver.Options{"v" + upgradeTo: {Binary: to}},
	}
	// The control plane renders its bootstrap manifests from its config,
	// as Talos's manifest controller does: here a CoreDNS whose image
	// names the config's API server version, so that the sync after the
	// upgrade has something new to apply.
	nodes.OnApply(func(node string, config []byte) {
		kube.Apply(simCtx, t, node, config)
		cfg, err := configloader.NewFromBytes(config)
		if err != nil || node != e2eControlPlaneIP {
			return
		}
		nodes.SetManifestsOf(node, append(talosapitest.DefaultManifests, coreDNSManifest(renderedCoreDNS(cfg.Cluster().APIServer().Image())))...)
	})

	kubernetesVersion := upgradeFrom
	program := func(ctx *pulumi.Context) error {
		c, err := talos.NewCluster(ctx, "lab", &talos.ClusterArgs{
			Cluster: talos.ClusterSettings{
				Name: "lab", Endpoint: "https://" + e2eEndpoint, TalosVersion: "v1.13.9", KubernetesVersion: kubernetesVersion,
			},
			InstallerImage: pulumi.String("factory.talos.dev/installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.13.9"),
			Nodes: []talos.NodeSpec{
				{Name: "cp-0", IP: e2eControlPlaneIP, Role: talos.RoleControlPlane},
				{Name: "worker-0", IP: e2eWorkerIP, Role: talos.RoleWorker},
			},
		})
		if err != nil {
			return err
		}
		ctx.Export("kubeconfig", c.Kubeconfig)
		return nil
	}
	s, err := auto.UpsertStackInlineSource(ctx, "lab", "kubernetes-upgrade-e2e", program, auto.WorkDir(dir))
	require.NoError(t, err)

	var out bytes.Buffer
	start := time.Now()
	_, err = s.Up(ctx, optup.ProgressStreams(&out))
	require.NoError(t, err, "first up:\n%s", out.String())
	t.Logf("first up on Kubernetes %s: %s", upgradeFrom, time.Since(start).Round(time.Second))
	api, _ := kube.Started()
	require.NotNil(t, api)
	assert.Equal(t, "v"+upgradeFrom, serverVersion(ctx, t, api))

	// An object of the API 1.32 removes: the upgrade is refused, nothing
	// touched.
	obj := map[string]any{
		"apiVersion": "resource.k8s.io/v1alpha3", "kind": "PodSchedulingContext",
		"metadata": map[string]any{"name": "leftover", "namespace": "default"},
		"spec":     map[string]any{"selectedNode": "worker-0"},
	}
	code, body, err := api.Call(ctx, http.MethodPost, "/apis/resource.k8s.io/v1alpha3/namespaces/default/podschedulingcontexts", "application/json", obj)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code, "%s", body)
	applies, pulls := len(nodes.Events("ApplyConfiguration")), len(nodes.Events("ImagePull"))
	kubernetesVersion = upgradeTo
	out.Reset()
	_, err = s.Up(ctx, optup.ProgressStreams(&out))
	require.Error(t, err, "refused:\n%s", out.String())
	assert.Contains(t, out.String(), "cluster.kubernetesVersion", "the refusal names the key")
	assert.Contains(t, out.String(), "default/leftover", "and the object")
	assert.Contains(t, out.String(), "podschedulingcontexts.v1alpha3.resource.k8s.io (gone in 1.32)", "of the removed API")
	assert.Len(t, nodes.Events("ApplyConfiguration"), applies, "no node touched")
	assert.Len(t, nodes.Events("ImagePull"), pulls, "nothing pulled")
	assert.Equal(t, "v"+upgradeFrom, serverVersion(ctx, t, api))

	// Without it: pre-pull, the API server, the kubelets, the manifests.
	code, body, err = api.Call(ctx, http.MethodDelete, "/apis/resource.k8s.io/v1alpha3/namespaces/default/podschedulingcontexts/leftover", "", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "%s", body)
	out.Reset()
	start = time.Now()
	_, err = s.Up(ctx, optup.ProgressStreams(&out))
	require.NoError(t, err, "the upgrade:\n%s", out.String())
	t.Logf("Kubernetes %s to %s: %s", upgradeFrom, upgradeTo, time.Since(start).Round(time.Second))
	assert.Equal(t, "v"+upgradeTo, serverVersion(ctx, t, api), "the 1.32 API server runs")

	events := nodes.Events("ImagePull", "ApplyConfiguration")
	firstApply := -1
	pulled := map[string][]string{}
	for i, e := range events[applies+pulls:] {
		switch e.Call {
		case "ImagePull":
			assert.Equal(t, -1, firstApply, "every pull before the first apply: %v", e)
			pulled[e.Node] = append(pulled[e.Node], e.Args)
		case "ApplyConfiguration":
			if firstApply < 0 {
				firstApply = i
			}
		}
	}
	assert.Len(t, pulled[e2eControlPlaneIP], 4, "the control plane pulls its API server, controller manager, scheduler and kubelet: %v", pulled)
	assert.Len(t, pulled[e2eWorkerIP], 1, "the worker its kubelet: %v", pulled)
	for _, args := range append(pulled[e2eControlPlaneIP], pulled[e2eWorkerIP]...) {
		assert.Contains(t, args, ":v"+upgradeTo)
	}
	for _, n := range []string{"cp-0", "worker-0"} {
		assert.Equal(t, "v"+upgradeTo, kubeletVersion(ctx, t, api, n), "%s's kubelet moved", n)
	}
	assert.Equal(t, renderedCoreDNS("registry.k8s.io/kube-apiserver:v"+upgradeTo), deploymentImage(ctx, t, api, "kube-system", "coredns"),
		"the CoreDNS the control plane renders for 1.32, applied to the 1.32 API server")

	_, err = s.Preview(ctx, optpreview.ExpectNoChanges())
	require.NoError(t, err, "a preview after the upgrade shows no change")
}

// renderedCoreDNS is the CoreDNS image the test's control plane renders
// for an API server image.
func renderedCoreDNS(apiServerImage string) string {
	_, tag, _ := strings.Cut(apiServerImage, ":")
	return "registry.k8s.io/coredns/coredns:rendered-for-" + tag
}

// coreDNSManifest is a bootstrap manifest with CoreDNS's Deployment of
// image, as Talos renders it (trimmed to what the test reads).
func coreDNSManifest(image string) talosapitest.Manifest {
	return talosapitest.Manifest{ID: "11-core-dns", Objects: []map[string]any{{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "coredns", "namespace": "kube-system", "labels": map[string]any{"k8s-app": "kube-dns"}},
		"spec": map[string]any{
			"replicas": 1,
			"selector": map[string]any{"matchLabels": map[string]any{"k8s-app": "kube-dns"}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"k8s-app": "kube-dns"}},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "coredns", "image": image}}},
			},
		},
	}}}
}

func serverVersion(ctx context.Context, t *testing.T, api *realapiserver.Server) string {
	t.Helper()
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	getJSON(ctx, t, api, "/version", &v)
	return v.GitVersion
}

func kubeletVersion(ctx context.Context, t *testing.T, api *realapiserver.Server, node string) string {
	t.Helper()
	var n struct {
		Status struct {
			NodeInfo struct {
				KubeletVersion string `json:"kubeletVersion"`
			} `json:"nodeInfo"`
		} `json:"status"`
	}
	getJSON(ctx, t, api, "/api/v1/nodes/"+node, &n)
	return n.Status.NodeInfo.KubeletVersion
}

func deploymentImage(ctx context.Context, t *testing.T, api *realapiserver.Server, namespace, name string) string {
	t.Helper()
	var d struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Image string `json:"image"`
					} `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	getJSON(ctx, t, api, "/apis/apps/v1/namespaces/"+namespace+"/deployments/"+name, &d)
	var images []string
	for _, c := range d.Spec.Template.Spec.Containers {
		images = append(images, c.Image)
	}
	return strings.Join(images, ",")
}

func getJSON(ctx context.Context, t *testing.T, api *realapiserver.Server, path string, out any) {
	t.Helper()
	code, body, err := api.Call(ctx, http.MethodGet, path, "", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "%s: %s", path, body)
	require.NoError(t, json.Unmarshal(body, out))
}
