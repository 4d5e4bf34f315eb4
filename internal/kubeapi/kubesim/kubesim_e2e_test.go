//go:build e2e

package kubesim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest/realapiserver"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubesim"
	"github.com/fluodata/talos-pulumi/internal/testkit/e2etest"
)

// ciliumVersion is the Cilium release whose operator's CRD the test
// registers (components/talos DefaultCiliumVersion).
const ciliumVersion = "1.18.4"

// TestSimStatefulSetsJobsAndOperatorCRDsAgainstTheRealAPIServer holds what
// the sim writes for StatefulSets, Jobs and an operator's CRDs to a real
// kube-apiserver (the one `make kube-apiserver` builds; its validation of
// the statuses is the real one) and to what Helm v3.20 reads of them
// (pkg/kube/ready.go and client.go, replicated below: Helm is no
// dependency of this module).
func TestSimStatefulSetsJobsAndOperatorCRDsAgainstTheRealAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	ca := realapiserver.NewCA(t)
	api := realapiserver.Start(ctx, t, ca)
	sim := kubesim.New(api.URL(), e2etest.SimClient(t, api, ca))

	crdFile := filepath.Join(e2etest.GoModCache(t), "github.com/cilium/cilium@v"+ciliumVersion, "pkg/k8s/apis/cilium.io/client/crds/v2/ciliumloadbalancerippools.yaml")
	crdYAML, err := os.ReadFile(crdFile) //nolint:gosec // the module cache's file
	if err != nil {
		t.Skipf("SKIPPED: no Cilium CRD at %s (go mod download github.com/cilium/cilium@v%s): %v", crdFile, ciliumVersion, err)
	}
	sim.OperatorCRDs = map[string][][]byte{"kube-system/cilium-operator": {crdYAML}}

	t.Run("StatefulSets", func(t *testing.T) {
		partition := 2
		for _, sts := range []map[string]any{
			statefulSet("web", map[string]any{"replicas": 3}),
			statefulSet("default-replicas", map[string]any{}),
			statefulSet("partitioned", map[string]any{"replicas": 3, "updateStrategy": map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"partition": partition}}}),
			statefulSet("on-delete", map[string]any{"replicas": 2, "updateStrategy": map[string]any{"type": "OnDelete"}}),
			statefulSet("none", map[string]any{"replicas": 0}),
		} {
			create(ctx, t, api, "/apis/apps/v1/namespaces/default/statefulsets", sts)
		}
		web := get[statefulSetJSON](ctx, t, api, "/apis/apps/v1/namespaces/default/statefulsets/web")
		ready, why := helmStatefulSetReady(web)
		assert.False(t, ready, "not ready before the sim: %s", why)

		require.NoError(t, sim.Reconcile(ctx))
		for _, name := range []string{"web", "default-replicas", "partitioned", "on-delete", "none"} {
			sts := get[statefulSetJSON](ctx, t, api, "/apis/apps/v1/namespaces/default/statefulsets/"+name)
			ready, why := helmStatefulSetReady(sts)
			assert.True(t, ready, "%s: %s", name, why)
			assert.Equal(t, sts.Status.UpdateRevision, sts.Status.CurrentRevision, name)
			assert.Regexp(t, "^"+name+"-[0-9a-f]+$", sts.Status.UpdateRevision, name)
			assert.Equal(t, derefOr(sts.Spec.Replicas, 1), sts.Status.AvailableReplicas, name)
			assert.Equal(t, derefOr(sts.Spec.Replicas, 1), sts.Status.CurrentReplicas, name)
		}
		web = get[statefulSetJSON](ctx, t, api, "/apis/apps/v1/namespaces/default/statefulsets/web")
		first := web.Status.UpdateRevision

		// A new template: a new generation, not ready until the sim has
		// rolled it out, at a new revision.
		patch(ctx, t, api, "/apis/apps/v1/namespaces/default/statefulsets/web", map[string]any{"spec": map[string]any{"template": map[string]any{
			"spec": map[string]any{"containers": []any{map[string]any{"name": "web", "image": "registry.k8s.io/pause:3.10.1"}}}}}})
		web = get[statefulSetJSON](ctx, t, api, "/apis/apps/v1/namespaces/default/statefulsets/web")
		require.Equal(t, int64(2), web.Metadata.Generation)
		ready, why = helmStatefulSetReady(web)
		assert.False(t, ready, "an update is not ready before the sim: %s", why)
		require.NoError(t, sim.Reconcile(ctx))
		web = get[statefulSetJSON](ctx, t, api, "/apis/apps/v1/namespaces/default/statefulsets/web")
		ready, why = helmStatefulSetReady(web)
		assert.True(t, ready, why)
		assert.NotEqual(t, first, web.Status.UpdateRevision, "a new template is a new revision")

		// Nothing more to write: the sim leaves the object as it is.
		require.NoError(t, sim.Reconcile(ctx))
		again := get[statefulSetJSON](ctx, t, api, "/apis/apps/v1/namespaces/default/statefulsets/web")
		assert.Equal(t, web.Metadata.ResourceVersion, again.Metadata.ResourceVersion)
	})

	t.Run("Jobs", func(t *testing.T) {
		for _, job := range []map[string]any{
			jobObject("hook", map[string]any{}),
			jobObject("indexed", map[string]any{"completions": 3, "parallelism": 3, "completionMode": "Indexed"}),
			jobObject("pair", map[string]any{"completions": 2, "parallelism": 2, "completionMode": "Indexed"}),
			jobObject("work-queue", map[string]any{"parallelism": 2}),
			jobObject("suspended", map[string]any{"suspend": true}),
			jobObject("elsewhere", map[string]any{"managedBy": "example.com/other-controller"}),
		} {
			create(ctx, t, api, "/apis/batch/v1/namespaces/default/jobs", job)
		}
		hook := get[jobJSON](ctx, t, api, "/apis/batch/v1/namespaces/default/jobs/hook")
		done, err := helmWaitForJob(hook)
		require.NoError(t, err)
		assert.False(t, done, "not complete before the sim")

		require.NoError(t, sim.Reconcile(ctx))
		for name, succeeded := range map[string]int32{"hook": 1, "indexed": 3, "pair": 2, "work-queue": 1} {
			job := get[jobJSON](ctx, t, api, "/apis/batch/v1/namespaces/default/jobs/"+name)
			done, err := helmWaitForJob(job)
			require.NoError(t, err, name)
			assert.True(t, done, "%s: Helm's hook wait ends: %+v", name, job.Status)
			ready, err := helmJobReady(job)
			require.NoError(t, err, name)
			assert.True(t, ready, "%s: Helm's --wait-for-jobs ends", name)
			assert.Equal(t, succeeded, job.Status.Succeeded, name)
			assert.True(t, conditionTrue(job.Status.Conditions, "SuccessCriteriaMet"), name)
			require.NotNil(t, job.Status.StartTime, name)
			require.NotNil(t, job.Status.CompletionTime, name)
			assert.False(t, job.Status.CompletionTime.Before(*job.Status.StartTime), name)
		}
		assert.Equal(t, "0-2", get[jobJSON](ctx, t, api, "/apis/batch/v1/namespaces/default/jobs/indexed").Status.CompletedIndexes)
		assert.Equal(t, "0,1", get[jobJSON](ctx, t, api, "/apis/batch/v1/namespaces/default/jobs/pair").Status.CompletedIndexes)
		for _, name := range []string{"suspended", "elsewhere"} {
			job := get[jobJSON](ctx, t, api, "/apis/batch/v1/namespaces/default/jobs/"+name)
			assert.Empty(t, job.Status.Conditions, "%s: left alone", name)
			assert.Zero(t, job.Status.Succeeded, name)
		}

		// A finished Job is left as it is.
		hook = get[jobJSON](ctx, t, api, "/apis/batch/v1/namespaces/default/jobs/hook")
		require.NoError(t, sim.Reconcile(ctx))
		again := get[jobJSON](ctx, t, api, "/apis/batch/v1/namespaces/default/jobs/hook")
		assert.Equal(t, hook.Metadata.ResourceVersion, again.Metadata.ResourceVersion)
	})

	// A Deployment deleted and made again under its name (a Helm release
	// uninstalled and installed again): no controller manager deletes the
	// old one's ReplicaSet, whose name the new template hashes to, so the
	// sim plays its garbage collector; else the new Deployment would own
	// no ReplicaSet (Helm's deploymentutil.GetNewReplicaSet) and never be
	// ready.
	t.Run("DeploymentMadeAgain", func(t *testing.T) {
		const path = "/apis/apps/v1/namespaces/default/deployments"
		create(ctx, t, api, path, deployment("again", 1))
		require.NoError(t, sim.Reconcile(ctx))
		first := get[map[string]any](ctx, t, api, path+"/again")
		code, body, err := api.Call(ctx, http.MethodDelete, path+"/again", "", nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code, "%s", body)
		create(ctx, t, api, path, deployment("again", 1))
		second := get[map[string]any](ctx, t, api, path+"/again")
		uid := second["metadata"].(map[string]any)["uid"]
		require.NotEqual(t, first["metadata"].(map[string]any)["uid"], uid)
		require.NoError(t, sim.Reconcile(ctx))
		require.NoError(t, sim.Reconcile(ctx))
		sets := get[map[string]any](ctx, t, api, "/apis/apps/v1/namespaces/default/replicasets")
		var owners []any
		for _, rs := range sets["items"].([]any) {
			for _, o := range rs.(map[string]any)["metadata"].(map[string]any)["ownerReferences"].([]any) {
				owners = append(owners, o.(map[string]any)["uid"])
			}
		}
		assert.Equal(t, []any{uid}, owners, "one ReplicaSet, the new Deployment's")
	})

	t.Run("OperatorCRDs", func(t *testing.T) {
		const operator = "/apis/apps/v1/namespaces/kube-system/deployments/cilium-operator"
		require.NoError(t, sim.Reconcile(ctx))
		assert.Equal(t, http.StatusNotFound, crdStatus(ctx, t, api), "no operator Deployment: no CRD")

		// The Deployment exists, not yet ready: no CRD; scaled to zero
		// and reported so: no operator runs, no CRD.
		create(ctx, t, api, "/apis/apps/v1/namespaces/kube-system/deployments", deployment("cilium-operator", 0))
		assert.Equal(t, http.StatusNotFound, crdStatus(ctx, t, api), "a Deployment not ready: no CRD")
		require.NoError(t, sim.Reconcile(ctx))
		d := get[deploymentJSON](ctx, t, api, operator)
		require.Equal(t, d.Metadata.Generation, d.Status.ObservedGeneration, "the sim reported the Deployment")
		assert.Equal(t, http.StatusNotFound, crdStatus(ctx, t, api), "no replica: no CRD")

		// One replica: the sim reports it ready, then registers the CRD.
		patch(ctx, t, api, operator, map[string]any{"spec": map[string]any{"replicas": 1}})
		assert.Equal(t, http.StatusNotFound, crdStatus(ctx, t, api), "not ready yet: no CRD")
		require.NoError(t, sim.Reconcile(ctx))
		d = get[deploymentJSON](ctx, t, api, operator)
		assert.Equal(t, d.Metadata.Generation, d.Status.ObservedGeneration)
		assert.Equal(t, int32(1), d.Status.ReadyReplicas, "ready")
		require.Equal(t, http.StatusOK, crdStatus(ctx, t, api), "the CRD once the operator is ready")
		require.Eventually(t, func() bool {
			return helmCRDReady(get[crdJSON](ctx, t, api, crdPath))
		}, 30*time.Second, 100*time.Millisecond, "the API server establishes the CRD")
		create(ctx, t, api, "/apis/cilium.io/v2/ciliumloadbalancerippools", map[string]any{
			"apiVersion": "cilium.io/v2", "kind": "CiliumLoadBalancerIPPool", "metadata": map[string]any{"name": "lab"},
			"spec": map[string]any{"blocks": []any{map[string]any{"cidr": "10.10.0.192/27"}}},
		})

		// Deleted, it stays deleted while the same operator runs; a new
		// pod template (a restarted operator) registers it again.
		code, body, err := api.Call(ctx, http.MethodDelete, crdPath, "", nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code, "%s", body)
		require.Eventually(t, func() bool { return crdStatus(ctx, t, api) == http.StatusNotFound }, time.Minute, 100*time.Millisecond)
		require.NoError(t, sim.Reconcile(ctx))
		assert.Equal(t, http.StatusNotFound, crdStatus(ctx, t, api), "the same operator does not register it again")
		patch(ctx, t, api, operator, map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{"annotations": map[string]any{"restartedAt": "now"}}}}})
		require.NoError(t, sim.Reconcile(ctx))
		assert.Equal(t, http.StatusOK, crdStatus(ctx, t, api), "a restarted operator registers it again")
	})
}

func statefulSet(name string, spec map[string]any) map[string]any {
	labels := map[string]any{"app": name}
	spec["serviceName"] = name
	spec["selector"] = map[string]any{"matchLabels": labels}
	spec["template"] = map[string]any{"metadata": map[string]any{"labels": labels}, "spec": map[string]any{
		"containers": []any{map[string]any{"name": name, "image": "registry.k8s.io/pause:3.10"}}}}
	return map[string]any{"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": map[string]any{"name": name}, "spec": spec}
}

func jobObject(name string, spec map[string]any) map[string]any {
	spec["template"] = map[string]any{"spec": map[string]any{"restartPolicy": "Never",
		"containers": []any{map[string]any{"name": name, "image": "registry.k8s.io/pause:3.10"}}}}
	return map[string]any{"apiVersion": "batch/v1", "kind": "Job", "metadata": map[string]any{"name": name}, "spec": spec}
}

func deployment(name string, replicas int) map[string]any {
	labels := map[string]any{"app": name}
	return map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": name}, "spec": map[string]any{
		"replicas": replicas, "selector": map[string]any{"matchLabels": labels},
		"template": map[string]any{"metadata": map[string]any{"labels": labels}, "spec": map[string]any{
			"containers": []any{map[string]any{"name": name, "image": "quay.io/cilium/operator-generic:v" + ciliumVersion}}}},
	}}
}

type meta struct {
	Name            string `json:"name"`
	Namespace       string `json:"namespace"`
	Generation      int64  `json:"generation"`
	ResourceVersion string `json:"resourceVersion"`
}

// statefulSetJSON is what Helm's statefulSetReady reads of an
// apps/v1 StatefulSet.
type statefulSetJSON struct {
	Metadata meta `json:"metadata"`
	Spec     struct {
		Replicas       *int32 `json:"replicas"`
		UpdateStrategy struct {
			Type          string `json:"type"`
			RollingUpdate *struct {
				Partition *int32 `json:"partition"`
			} `json:"rollingUpdate"`
		} `json:"updateStrategy"`
	} `json:"spec"`
	Status struct {
		ObservedGeneration int64  `json:"observedGeneration"`
		Replicas           int32  `json:"replicas"`
		ReadyReplicas      int32  `json:"readyReplicas"`
		CurrentReplicas    int32  `json:"currentReplicas"`
		UpdatedReplicas    int32  `json:"updatedReplicas"`
		AvailableReplicas  int32  `json:"availableReplicas"`
		CurrentRevision    string `json:"currentRevision"`
		UpdateRevision     string `json:"updateRevision"`
	} `json:"status"`
}

// helmStatefulSetReady is Helm v3.20.2's ReadyChecker.statefulSetReady
// (pkg/kube/ready.go), on the JSON.
func helmStatefulSetReady(sts statefulSetJSON) (bool, string) {
	if sts.Status.ObservedGeneration != sts.Metadata.Generation {
		return false, fmt.Sprintf("observedGeneration (%d) does not match spec generation (%d)", sts.Status.ObservedGeneration, sts.Metadata.Generation)
	}
	if sts.Spec.UpdateStrategy.Type != "RollingUpdate" {
		return true, "updateStrategy is " + sts.Spec.UpdateStrategy.Type
	}
	partition, replicas := 0, 1
	if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		partition = int(*ru.Partition)
	}
	if sts.Spec.Replicas != nil {
		replicas = int(*sts.Spec.Replicas)
	}
	if expected := replicas - partition; int(sts.Status.UpdatedReplicas) < expected {
		return false, fmt.Sprintf("%d out of %d expected pods have been scheduled", sts.Status.UpdatedReplicas, expected)
	}
	if int(sts.Status.ReadyReplicas) != replicas {
		return false, fmt.Sprintf("%d out of %d expected pods are ready", sts.Status.ReadyReplicas, replicas)
	}
	if partition == 0 && sts.Status.CurrentRevision != sts.Status.UpdateRevision {
		return false, fmt.Sprintf("currentRevision %s does not yet match updateRevision %s", sts.Status.CurrentRevision, sts.Status.UpdateRevision)
	}
	return true, "ready"
}

type condition struct {
	Type   string `json:"type"`
	Status string `json:"status"`
	Reason string `json:"reason"`
}

func conditionTrue(cs []condition, t string) bool {
	for _, c := range cs {
		if c.Type == t && c.Status == "True" {
			return true
		}
	}
	return false
}

// jobJSON is what Helm reads of a batch/v1 Job, and the times.
type jobJSON struct {
	Metadata meta `json:"metadata"`
	Spec     struct {
		Completions  *int32 `json:"completions"`
		BackoffLimit *int32 `json:"backoffLimit"`
	} `json:"spec"`
	Status struct {
		Succeeded        int32       `json:"succeeded"`
		Failed           int32       `json:"failed"`
		Conditions       []condition `json:"conditions"`
		StartTime        *time.Time  `json:"startTime"`
		CompletionTime   *time.Time  `json:"completionTime"`
		CompletedIndexes string      `json:"completedIndexes"`
	} `json:"status"`
}

// helmWaitForJob is Helm v3.20.2's Client.waitForJob (pkg/kube/client.go),
// what a hook's wait (watchUntilReady) asks of each event of a Job.
func helmWaitForJob(job jobJSON) (bool, error) {
	for _, c := range job.Status.Conditions {
		if c.Type == "Complete" && c.Status == "True" {
			return true, nil
		} else if c.Type == "Failed" && c.Status == "True" {
			return true, fmt.Errorf("job %s failed: %s", job.Metadata.Name, c.Reason)
		}
	}
	return false, nil
}

// helmJobReady is Helm v3.20.2's ReadyChecker.jobReady (--wait-for-jobs).
func helmJobReady(job jobJSON) (bool, error) {
	if job.Status.Failed > *job.Spec.BackoffLimit {
		return false, fmt.Errorf("job is failed: %s/%s", job.Metadata.Namespace, job.Metadata.Name)
	}
	if job.Spec.Completions != nil && job.Status.Succeeded < *job.Spec.Completions {
		return false, nil
	}
	return true, nil
}

type deploymentJSON struct {
	Metadata meta `json:"metadata"`
	Status   struct {
		ObservedGeneration int64 `json:"observedGeneration"`
		ReadyReplicas      int32 `json:"readyReplicas"`
	} `json:"status"`
}

type crdJSON struct {
	Status struct {
		Conditions []condition `json:"conditions"`
	} `json:"status"`
}

// helmCRDReady is Helm v3.20.2's ReadyChecker.crdReady.
func helmCRDReady(crd crdJSON) bool {
	for _, c := range crd.Status.Conditions {
		switch {
		case c.Type == "Established" && c.Status == "True":
			return true
		case c.Type == "NamesAccepted" && c.Status == "False":
			return true
		}
	}
	return false
}

func derefOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

func create(ctx context.Context, t *testing.T, api *realapiserver.Server, path string, obj map[string]any) {
	t.Helper()
	code, body, err := api.Call(ctx, http.MethodPost, path, "", obj)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code, "POST %s: %s", path, body)
}

func patch(ctx context.Context, t *testing.T, api *realapiserver.Server, path string, p map[string]any) {
	t.Helper()
	code, body, err := api.Call(ctx, http.MethodPatch, path, "application/merge-patch+json", p)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "PATCH %s: %s", path, body)
}

// crdPath is the pools' CRD, which Cilium's operator registers.
const crdPath = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/ciliumloadbalancerippools.cilium.io"

// crdStatus is the status code of a GET of the pools' CRD.
func crdStatus(ctx context.Context, t *testing.T, api *realapiserver.Server) int {
	t.Helper()
	code, _, err := api.Call(ctx, http.MethodGet, crdPath, "", nil)
	require.NoError(t, err)
	return code
}

func get[T any](ctx context.Context, t *testing.T, api *realapiserver.Server, path string) T {
	t.Helper()
	code, body, err := api.Call(ctx, http.MethodGet, path, "", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "GET %s: %s", path, body)
	var out T
	require.NoError(t, json.Unmarshal(body, &out), "%s", body)
	return out
}
