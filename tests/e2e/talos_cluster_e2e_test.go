//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubesim"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
	"github.com/fluodata/talos-pulumi/internal/testkit/e2etest"
)

// The e2e cluster's addresses: one control plane, whose API server is the
// endpoint, and one worker.
const e2eEndpoint, e2eControlPlaneIP, e2eWorkerIP = "10.77.0.11:6443", "10.77.0.11", "10.77.0.21"

// skipOutsideTheNamespace skips the test, saying why, where 10.77.0.0/24
// is not local (outside make e2e's network namespace).
func skipOutsideTheNamespace(t *testing.T) {
	t.Helper()
	l, err := net.Listen("tcp", e2eControlPlaneIP+":0")
	if err != nil {
		t.Skipf("SKIPPED: 10.77.0.0/24 is not local here (%v): make e2e runs this test in a network namespace where it is", err)
	}
	_ = l.Close()
}

// twoFreshNodes starts the Talos fake's control plane and worker in
// maintenance mode on their own addresses; the control plane's first
// apply starts the real kube-apiserver with its config, and kubesim with
// operatorCRDs (cilium-operator's, by its Deployment). applied is the last
// config applied to a node, by its IP.
func twoFreshNodes(ctx context.Context, t *testing.T, operatorCRDs map[string][][]byte) (nodes *talosapitest.Cluster, kube *e2etest.Kube, applied func(ip string) []byte) {
	t.Helper()
	nodes = talosapitest.StartFresh(t,
		talosapitest.NodeSpec{IP: e2eControlPlaneIP, Hostname: "cp-0", Role: talosapitest.ControlPlane, Listen: e2eControlPlaneIP + ":50000", Maintenance: true, RebootLatency: 200 * time.Millisecond, Version: "v1.13.9"},
		talosapitest.NodeSpec{IP: e2eWorkerIP, Hostname: "worker-0", Role: talosapitest.Worker, Listen: e2eWorkerIP + ":50000", Maintenance: true, RebootLatency: 200 * time.Millisecond, Version: "v1.13.9"},
	)
	simCtx, stopSim := context.WithCancel(ctx)
	t.Cleanup(stopSim)
	kube = &e2etest.Kube{
		Addr: e2eEndpoint, CNI: talos.SystemNamespace + "/" + talos.CiliumRelease,
		Nodes: []kubesim.Node{
			{Name: "cp-0", IP: e2eControlPlaneIP, ControlPlane: true, KubeletVersion: "v1.35.4"},
			{Name: "worker-0", IP: e2eWorkerIP, KubeletVersion: "v1.35.4"},
		},
		OperatorCRDs: operatorCRDs,
	}
	var mu sync.Mutex
	last := map[string][]byte{}
	nodes.OnApply(func(node string, config []byte) {
		mu.Lock()
		last[node] = config
		mu.Unlock()
		if node == e2eControlPlaneIP {
			kube.Start(simCtx, t, config)
		}
	})
	return nodes, kube, func(ip string) []byte {
		mu.Lock()
		defer mu.Unlock()
		return last[ip]
	}
}

// TestE2ETheClusterComesUpWithTheRealPlugins is the first `up` of a
// TalosCluster (one control plane, one worker) with the real CLI and the
// real talos, kubernetes and command plugins: the nodes are the Talos
// fake's, booted from the ISO (maintenance mode) on their own addresses
// (127.0.77.x:50000, as the Talos provider dials a node's address); the
// first control plane's config starts a real kube-apiserver at the
// cluster endpoint with the config's Kubernetes CA, as the bootstrap does;
// kubesim plays the kubelets and controllers; the charts are the real
// ones. The component's own waits and hooks run in the program. A second
// preview shows no change. The program refuses loopback node addresses, so
// the nodes sit on 10.77.0.0/24, local only inside the network namespace
// make e2e runs the test in (skipped, saying so, elsewhere).
func TestE2ETheClusterComesUpWithTheRealPlugins(t *testing.T) {
	skipOutsideTheNamespace(t)
	dir := e2etest.Charts(t, talos.DefaultCiliumVersion, talos.DefaultApproverVersion).Dir
	// gRPC honours HTTPS_PROXY too: the Talos provider and the program's
	// hooks reach the nodes and the API directly.
	t.Setenv("NO_PROXY", "10.77.0.0/24")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	nodes, kube, _ := twoFreshNodes(ctx, t, nil)

	talosVersion := "v1.13.9"
	program := func(ctx *pulumi.Context) error {
		c, err := talos.NewCluster(ctx, "lab", &talos.ClusterArgs{
			Cluster: talos.ClusterSettings{
				Name: "lab", Endpoint: "https://" + e2eEndpoint, TalosVersion: talosVersion, KubernetesVersion: "1.35.4", // what bin/kube-apiserver runs
			},
			InstallerImage: pulumi.String("factory.talos.dev/installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:" + talosVersion),
			Nodes: []talos.NodeSpec{
				{Name: "cp-0", IP: e2eControlPlaneIP, Role: talos.RoleControlPlane},
				{Name: "worker-0", IP: e2eWorkerIP, Role: talos.RoleWorker},
			},
		})
		if err != nil {
			return err
		}
		ctx.Export("kubeconfig", c.Kubeconfig)
		ctx.Export("nodes", c.Nodes)
		return nil
	}
	s, err := auto.UpsertStackInlineSource(ctx, "lab", "cluster-e2e", program, auto.WorkDir(dir))
	require.NoError(t, err)

	start := time.Now()
	var out bytes.Buffer
	res, err := s.Up(ctx, optup.ProgressStreams(&out))
	require.NoError(t, err, "first up:\n%s", out.String())
	t.Logf("first up: %s", time.Since(start).Round(time.Second))
	assert.True(t, nodes.Bootstrapped(), "the first control plane is bootstrapped")
	assert.Contains(t, out.String(), "all 2 nodes are Ready")
	for _, ip := range []string{e2eControlPlaneIP, e2eWorkerIP} {
		assert.False(t, nodes.Node(ip).InMaintenance(), "%s installed", ip)
	}
	kc, _ := res.Outputs["kubeconfig"].Value.(string)
	assert.Contains(t, kc, "server: https://"+e2eEndpoint, "the kubeconfig the cluster gives, for its endpoint")
	assert.True(t, res.Outputs["kubeconfig"].Secret, "a secret output")
	api, sim := kube.Started()
	require.NotNil(t, api, "the API server started with the control plane's config")
	assert.Empty(t, sim.Errors())

	_, err = s.Preview(ctx, optpreview.ExpectNoChanges())
	require.NoError(t, err, "a second preview shows no change")

	// A Talos upgrade rolls through the nodes, one at a time, control
	// plane first, each waited for as the rollout waits for it.
	talosVersion = "v1.13.10"
	out.Reset()
	start = time.Now()
	_, err = s.Up(ctx, optup.ProgressStreams(&out))
	require.NoError(t, err, "the upgrade:\n%s", out.String())
	t.Logf("upgrade: %s", time.Since(start).Round(time.Second))
	for _, ip := range []string{e2eControlPlaneIP, e2eWorkerIP} {
		assert.Equal(t, "v1.13.10", nodes.Node(ip).Version(), "%s upgraded", ip)
	}
	ups := nodes.Events("Upgrade")
	require.Len(t, ups, 2, "one upgrade per node")
	assert.Equal(t, e2eControlPlaneIP, ups[0].Node, "the control plane first")
	_, err = s.Preview(ctx, optpreview.ExpectNoChanges())
	require.NoError(t, err, "a preview after the upgrade shows no change")

	// A whole-stack destroy, as make destroy runs it (the program knows it
	// is one: no node leaves the cluster one by one).
	t.Setenv(talos.DestroyEnv, "1")
	out.Reset()
	start = time.Now()
	_, err = s.Destroy(ctx, optdestroy.ProgressStreams(&out))
	require.NoError(t, err, "destroy:\n%s", out.String())
	t.Logf("destroy: %s", time.Since(start).Round(time.Second))
}
