//go:build e2e

package talos

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest/realapiserver"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubesim"
	"github.com/fluodata/talos-pulumi/internal/testkit/e2etest"
)

// TestE2ETheReleasesInstallWithTheRealPluginAndAPIServer registers the
// Cilium and kubelet-csr-approver releases as TalosCluster registers them
// (newRelease, CiliumValues, ApproverValues, their versions and timeouts,
// Helm's --wait) and runs them with the real kubernetes plugin (v4.32,
// Helm v3.20) against a real kube-apiserver, with kubesim playing the
// kubelets and controllers. The charts are the real ones: Cilium 1.18.4
// from the github.com/cilium/cilium module (its values.schema.json checks
// our values), the approver's from its repository at the release tag,
// served under their public repositories' names through an HTTPS proxy.
// It walks: first up (both releases ready, the nodes Ready once Cilium
// is), a preview with no change, a values change (an upgrade), destroy.
func TestE2ETheReleasesInstallWithTheRealPluginAndAPIServer(t *testing.T) {
	dir := e2etest.Charts(t, DefaultCiliumVersion, DefaultApproverVersion).Dir
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	kubeCA := realapiserver.NewCA(t)
	api := realapiserver.Start(ctx, t, kubeCA)

	sim := kubesim.New(api.URL(), e2etest.SimClient(t, api, kubeCA))
	sim.CNI = SystemNamespace + "/" + CiliumRelease
	nodes := []NodeSpec{{Name: "cp-0", IP: "10.10.0.10", Role: RoleControlPlane}, {Name: "worker-0", IP: "10.10.0.20", Role: RoleWorker}}
	for _, n := range nodes {
		sim.Join(kubesim.Node{Name: n.Name, IP: n.IP, ControlPlane: n.Role == RoleControlPlane, KubeletVersion: "v1.34.1"})
	}
	simCtx, stopSim := context.WithCancel(ctx)
	defer stopSim()
	go sim.Run(simCtx)

	operatorReplicas := 1
	program := func(ctx *pulumi.Context) error {
		k8s, err := kubernetes.NewProvider(ctx, "k8s", &kubernetes.ProviderArgs{Kubeconfig: pulumi.String(string(api.Kubeconfig()))})
		if err != nil {
			return err
		}
		user := map[string]any{"operator": map[string]any{"replicas": operatorReplicas}}
		cilium, err := newRelease(ctx, "lab-cilium", release{
			name: CiliumRelease, chart: CiliumChart, repo: CiliumRepo, version: DefaultCiliumVersion,
			values: CiliumValues(len(nodes), user), timeoutSeconds: ciliumTimeoutSeconds,
		}, pulumi.Provider(k8s))
		if err != nil {
			return err
		}
		_, err = newRelease(ctx, "lab-cert-approver", release{
			name: ApproverRelease, chart: ApproverChart, repo: ApproverRepo, version: DefaultApproverVersion,
			values: ApproverValues(nodes, []string{"10.10.0.5"}, nil), timeoutSeconds: approverTimeoutSecs,
		}, pulumi.Provider(k8s), pulumi.DependsOn([]pulumi.Resource{cilium}))
		return err
	}
	s, err := auto.UpsertStackInlineSource(ctx, "releases", "releases-e2e", program, auto.WorkDir(dir))
	require.NoError(t, err)

	start := time.Now()
	_, err = s.Up(ctx)
	require.NoError(t, err, "first up; kubesim: %v", sim.Errors())
	t.Logf("first up: %s", time.Since(start).Round(time.Second))
	code, body, err := api.Call(ctx, http.MethodGet, "/apis/apps/v1/namespaces/kube-system/daemonsets/cilium", "", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "the real chart's agent DaemonSet: %s", body)
	assert.True(t, strings.Contains(string(body), `{"name":"KUBERNETES_SERVICE_PORT","value":"7445"}`), "rendered with our values: the API through KubePrism")
	code, _, err = api.Call(ctx, http.MethodGet, "/apis/apps/v1/namespaces/kube-system/deployments/kubelet-csr-approver", "", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "the approver's Deployment")
	code, body, err = api.Call(ctx, http.MethodGet, "/api/v1/nodes/worker-0", "", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	assert.True(t, strings.Contains(string(body), `"type":"Ready","status":"True"`), "Ready once Cilium is")

	_, err = s.Preview(ctx, optpreview.ExpectNoChanges())
	require.NoError(t, err, "a second preview shows no change")
	t.Logf("second preview: no change")

	operatorReplicas = 2
	start = time.Now()
	_, err = s.Up(ctx)
	require.NoError(t, err, "a values change upgrades the release; kubesim: %v", sim.Errors())
	t.Logf("upgrade: %s", time.Since(start).Round(time.Second))
	code, body, err = api.Call(ctx, http.MethodGet, "/apis/apps/v1/namespaces/kube-system/deployments/cilium-operator", "", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	assert.True(t, strings.Contains(string(body), `"replicas":2`), "two operators")

	start = time.Now()
	_, err = s.Destroy(ctx)
	t.Logf("destroy: %s", time.Since(start).Round(time.Second))
	require.NoError(t, err)
	code, _, err = api.Call(ctx, http.MethodGet, "/apis/apps/v1/namespaces/kube-system/daemonsets/cilium", "", nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusNotFound, code, "destroy uninstalls the release")
}
