//go:build e2e

package drainparity_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/kubectl/pkg/drain"
	"k8s.io/utils/ptr"

	"github.com/fluodata/talos-pulumi/internal/kubeapi"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest/realapiserver"
)

// kubectlDrain is `kubectl drain --ignore-daemonsets --delete-emptydir-data
// --force` (the grace period the pod's own, -1; a retry 5 s after a 429,
// pkg/cmd/drain/drain.go:150-160), what Talos's upgrade drain does too.
func kubectlDrain(ctx context.Context, cs kubernetes.Interface, out io.Writer, timeout time.Duration) *drain.Helper {
	return &drain.Helper{
		Ctx: ctx, Client: cs,
		Force: true, IgnoreAllDaemonSets: true, DeleteEmptyDirData: true, GracePeriodSeconds: -1,
		EvictErrorRetryDelay: 5 * time.Second, Timeout: timeout,
		Out: out, ErrOut: out,
	}
}

// The pods internal/kubeapi's drain evicts from a node are those kubectl's
// drain.Helper.GetPodsForDeletion returns, on the real kube-apiserver, for
// a node's worth of pods of every kind kubectl tells apart; and evicted by
// both, they end the same (gone, or terminating with the same grace
// period, or left where a budget or a namespace's deletion refuses).
func TestTheDrainEvictsWhatKubectlDrainEvicts(t *testing.T) {
	ctx := t.Context()
	start := time.Now()
	apiserver := realapiserver.Start(ctx, t, realapiserver.NewCA(t))
	t.Logf("kube-apiserver ready at %s after %s", apiserver.URL(), time.Since(start).Round(time.Millisecond))
	cfg, err := clientcmd.RESTConfigFromKubeConfig(apiserver.Kubeconfig())
	require.NoError(t, err)
	// Not client-go's default 5 requests a second: the scene is large, and
	// its rate limit changes no answer.
	cfg.QPS, cfg.Burst = 100, 200
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	ours, err := kubeapi.New(apiserver.Kubeconfig(), kubeapi.WithTimeout(10*time.Second))
	require.NoError(t, err)
	t.Cleanup(ours.Close)

	// Two twin nodes, the same pods on each (names suffixed -a and -b):
	// ours drains node-a, kubectl node-b. NotReady: no kubelet runs, an
	// evicted pod stays terminating, as on a node whose kubelet is gone.
	for _, twin := range []string{"a", "b"} {
		node := "node-" + twin
		apiserver.AddNode(kubeapitest.NodeSpec{Name: node, NotReady: true})
		t.Logf("twin %s at %s", twin, time.Since(start).Round(time.Millisecond))
		for _, p := range []kubeapitest.PodSpec{
			{Name: "bare"},
			{Name: "web", OwnerKind: "ReplicaSet"},
			{Name: "scratch", OwnerKind: "ReplicaSet", EmptyDir: true},
			{Name: "job-done", OwnerKind: "Job", Phase: "Succeeded"},
			{Name: "job-failed", OwnerKind: "Job", Phase: "Failed"},
			{Name: "guarded", OwnerKind: "StatefulSet", PDBBlocks: kubeapitest.Forever},
			{Name: "pending", OwnerKind: "StatefulSet", Phase: "Pending", NotReady: true},
			{Namespace: "kube-system", Name: "cilium", OwnerKind: "DaemonSet"},
			{Namespace: "kube-system", Name: "cilium-done", OwnerKind: "DaemonSet", Phase: "Succeeded"},
			{Namespace: "kube-system", Name: "cilium-failed", OwnerKind: "DaemonSet", Phase: "Failed"},
			{Namespace: "kube-system", Name: "orphan", OwnerKind: "DaemonSet", OwnerGone: true},
			{Namespace: "kube-system", Name: "adopted", OwnerKind: "DaemonSet", OwnerNotController: true},
			{Namespace: "kube-system", Name: "static", Mirror: true},
			{Namespace: "kube-system", Name: "static-done", Mirror: true, Phase: "Succeeded"},
		} {
			p.Name += "-" + twin
			p.Node = node
			apiserver.AddPod(p)
		}
		// What the fake's descriptions do not say: an old API group's
		// DaemonSet for controller, a grace period of the pod's own, a pod
		// already being deleted, pods of a namespace being deleted.
		addPod(t, cs, "default", "old-ds-"+twin, node, func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "extensions/v1beta1", Kind: "DaemonSet", Name: "old", UID: "6b7a4f0e-0000-4000-8000-000000000001", Controller: ptr.To(true)}}
		})
		addPod(t, cs, "default", "graceful-"+twin, node, func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](7) })
		addPod(t, cs, "default", "deleting-"+twin, node, nil)
		require.NoError(t, cs.CoreV1().Pods("default").Delete(ctx, "deleting-"+twin, metav1.DeleteOptions{}))
		closing := "closing-" + twin
		addNamespace(t, cs, closing)
		addPod(t, cs, closing, "stays-"+twin, node, nil)
		addPod(t, cs, closing, "deleting-"+twin, node, nil)
		require.NoError(t, cs.CoreV1().Pods(closing).Delete(ctx, "deleting-"+twin, metav1.DeleteOptions{}))
		// No namespace controller runs: it stays Terminating, its pods in it.
		require.NoError(t, cs.CoreV1().Namespaces().Delete(ctx, closing, metav1.DeleteOptions{}))
	}
	apiserver.AddNode(kubeapitest.NodeSpec{Name: "node-c"})
	apiserver.AddPod(kubeapitest.PodSpec{Name: "elsewhere", Node: "node-c", OwnerKind: "ReplicaSet"})
	waitNamespaceTerminating(t, cs, "closing-a", "closing-b")
	t.Logf("%d pods on three nodes after %s", 2*19+1, time.Since(start).Round(time.Millisecond))

	// The choice: kubectl's, and ours, before either drains.
	var kubectlLog strings.Builder
	list, errs := kubectlDrain(ctx, cs, &kubectlLog, 0).GetPodsForDeletion("node-a")
	require.Empty(t, errs)
	var kubectlPicks []string
	for _, p := range list.Pods() {
		kubectlPicks = append(kubectlPicks, p.Namespace+"/"+p.Name)
	}
	ourPicks, err := ours.PodsToEvict(ctx, "node-a")
	require.NoError(t, err)
	slices.Sort(kubectlPicks)
	slices.Sort(ourPicks)
	assert.Equal(t, kubectlPicks, ourPicks, "the pods internal/kubeapi evicts (actual), kubectl's GetPodsForDeletion (expected)")
	assert.Equal(t, []string{
		"closing-a/deleting-a", "closing-a/stays-a",
		"default/bare-a", "default/deleting-a", "default/graceful-a", "default/guarded-a", "default/job-done-a", "default/job-failed-a",
		"default/old-ds-a", "default/pending-a", "default/scratch-a", "default/web-a",
		"kube-system/adopted-a", "kube-system/cilium-done-a", "kube-system/cilium-failed-a", "kube-system/orphan-a",
	}, kubectlPicks, "kubectl's choice: every kind but the DaemonSet's running pod and the mirror pods")

	// The drains: ours without waiting (the node's kubelet is gone),
	// kubectl's until its timeout (it waits for the pods to be gone, which
	// no kubelet confirms; it asks again the refused ones every 5 s).
	before := states(t, cs, "node-a")
	began := time.Now()
	res, err := ours.DrainWithResult(ctx, "node-a", kubeapi.DrainOptions{SkipWaitForDelete: true, Timeout: 30 * time.Second})
	require.NoError(t, err)
	t.Logf("our drain took %s; it did not wait for: %s", time.Since(began).Round(time.Millisecond), strings.Join(res.Skipped, ", "))
	listB, errs := kubectlDrain(ctx, cs, &kubectlLog, 0).GetPodsForDeletion("node-b")
	require.Empty(t, errs)
	began = time.Now()
	kerr := kubectlDrain(ctx, cs, &kubectlLog, 7*time.Second).DeleteOrEvictPods(listB.Pods())
	t.Logf("kubectl's drain took %s: %v", time.Since(began).Round(time.Millisecond), kerr)
	t.Logf("kubectl's output:\n%s", kubectlLog.String())
	require.Error(t, kerr, "kubectl waits, in vain, for the pods no kubelet deletes")
	assert.Contains(t, kerr.Error(), "global timeout reached")

	a, b := states(t, cs, "node-a"), states(t, cs, "node-b")
	assert.Equal(t, b, a, "the pods after our drain (actual) and after kubectl's (expected)")
	assert.NotEqual(t, before, a, "the drain changed something")
	assert.Equal(t, "terminating, grace period 7s", a["default/graceful"], "the pod's own grace period")
	assert.Equal(t, "running", a["default/guarded"], "its budget refuses")
	assert.Equal(t, "running", a["closing/stays"], "its namespace's deletion refuses")
	assert.Equal(t, "gone", a["default/job-done"])
}

// addPod creates a pod bound to node, Running.
func addPod(t *testing.T, cs kubernetes.Interface, namespace, name, node string, edit func(*corev1.Pod)) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}}},
	}
	if edit != nil {
		edit(p)
	}
	created, err := cs.CoreV1().Pods(namespace).Create(t.Context(), p, metav1.CreateOptions{})
	require.NoError(t, err)
	created.Status.Phase = corev1.PodRunning
	created.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	_, err = cs.CoreV1().Pods(namespace).UpdateStatus(t.Context(), created, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// addNamespace creates the namespace and its default ServiceAccount, which
// only kube-controller-manager would make and the ServiceAccount admission
// wants for a pod.
func addNamespace(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.CoreV1().ServiceAccounts(name).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// waitNamespaceTerminating waits until the API server's NamespaceLifecycle
// admission sees the namespaces Terminating (its informer).
func waitNamespaceTerminating(t *testing.T, cs kubernetes.Interface, names ...string) {
	t.Helper()
	for _, name := range names {
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, err := cs.CoreV1().ServiceAccounts(name).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{})
			if apierrors.IsForbidden(err) {
				break
			}
			require.True(t, time.Now().Before(deadline), "namespace %s not refusing creates after 30 s: %v", name, err)
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// states are the pods that were on the node, by namespace/name without
// the twin's suffix (namespace too), with what became of them: "running",
// "terminating, grace period Ns" or "gone".
func states(t *testing.T, cs kubernetes.Interface, node string) map[string]string {
	t.Helper()
	suffix := "-" + strings.TrimPrefix(node, "node-")
	out := map[string]string{}
	for _, ns := range []string{"default", "kube-system", "closing" + suffix} {
		for _, name := range []string{
			"bare", "web", "scratch", "job-done", "job-failed", "guarded", "pending", "cilium", "cilium-done", "cilium-failed",
			"orphan", "adopted", "static", "static-done", "old-ds", "graceful", "deleting", "stays",
		} {
			p, err := cs.CoreV1().Pods(ns).Get(t.Context(), name+suffix, metav1.GetOptions{})
			key := strings.TrimSuffix(ns, suffix) + "/" + name
			switch {
			case apierrors.IsNotFound(err):
				out[key] = "gone"
			case err != nil:
				t.Fatalf("unable to read pod %s/%s: %v", ns, name+suffix, err)
			case p.Spec.NodeName != node:
				t.Fatalf("pod %s/%s is on %s", ns, p.Name, p.Spec.NodeName)
			case p.DeletionTimestamp != nil:
				out[key] = fmt.Sprintf("terminating, grace period %ds", ptr.Deref(p.DeletionGracePeriodSeconds, -1))
			default:
				out[key] = "running"
			}
		}
	}
	// The names a namespace does not hold are gone in both twins alike.
	return out
}
