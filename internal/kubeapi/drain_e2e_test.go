//go:build e2e

package kubeapi_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/kubeapi"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest/realapiserver"
)

// The pods a drain picks, and what it does with them, are the same on the
// fake and on the real kube-apiserver for pods of every kind the drain
// tells apart: a DaemonSet's with its DaemonSet, an orphan one, one whose
// DaemonSet owner is not its controller, finished ones, a mirror pod, an
// emptyDir one (tools/drainparity holds the choice to kubectl's own).
func TestTheFakeDrainsEveryKindOfPodAsTheRealAPIServer(t *testing.T) {
	ctx := t.Context()
	start := time.Now()
	apiserver := realapiserver.Start(ctx, t, realapiserver.NewCA(t))
	t.Logf("kube-apiserver ready at %s after %s", apiserver.URL(), time.Since(start).Round(time.Millisecond))
	fake := kubeapitest.Start(t)
	fake.SetVersion(pinnedVersion(t))
	servers := []scene{apiserver, fake}

	for _, s := range servers {
		// NotReady: no kubelet confirms an eviction beside the real
		// server, the fake's pods of such a node stay terminating too.
		s.AddNode(kubeapitest.NodeSpec{Name: "drain-1", NotReady: true})
		s.AddNode(kubeapitest.NodeSpec{Name: "drain-2"})
		for _, p := range []kubeapitest.PodSpec{
			{Name: "bare"},
			{Name: "web", OwnerKind: "ReplicaSet"},
			{Name: "scratch", OwnerKind: "ReplicaSet", EmptyDir: true},
			{Name: "job-done", OwnerKind: "Job", Phase: "Succeeded"},
			{Name: "job-failed", OwnerKind: "Job", Phase: "Failed"},
			{Namespace: "kube-system", Name: "cilium", OwnerKind: "DaemonSet"},
			{Namespace: "kube-system", Name: "cilium-done", OwnerKind: "DaemonSet", Phase: "Succeeded"},
			{Namespace: "kube-system", Name: "orphan", OwnerKind: "DaemonSet", OwnerGone: true},
			{Namespace: "kube-system", Name: "adopted", OwnerKind: "DaemonSet", OwnerNotController: true},
			{Namespace: "kube-system", Name: "static", Mirror: true},
		} {
			p.Node = "drain-1"
			s.AddPod(p)
		}
		s.AddPod(kubeapitest.PodSpec{Name: "elsewhere", Node: "drain-2", OwnerKind: "ReplicaSet"})
	}

	var answers [][]answer
	for _, s := range servers {
		c, err := kubeapi.New(s.Kubeconfig(), kubeapi.WithTimeout(10*time.Second))
		require.NoError(t, err)
		pods, err := c.PodsToEvict(ctx, "drain-1")
		picked := answerOf(s.URL(), pods, err)
		res, err := c.DrainWithResult(ctx, "drain-1", kubeapi.DrainOptions{SkipWaitForDelete: true, Timeout: 10 * time.Second, Poll: 20 * time.Millisecond})
		drained := answerOf(s.URL(), res, err)
		pods, err = c.PodsToEvict(ctx, "drain-1")
		after := answerOf(s.URL(), pods, err)
		c.Close()
		answers = append(answers, []answer{picked, drained, after})
	}
	assert.Equal(t, answers[0], answers[1], "kubeapitest (actual) answers otherwise than kube-apiserver (expected): PodsToEvict, DrainWithResult, PodsToEvict after it")
	assert.Equal(t, []string{
		"default/bare", "default/job-done", "default/job-failed", "default/scratch", "default/web",
		"kube-system/adopted", "kube-system/cilium-done", "kube-system/orphan",
	}, answers[0][0].Value)
	assert.Equal(t, kubeapi.DrainResult{Skipped: []string{
		"default/bare (evicted, still terminating)", "default/scratch (evicted, still terminating)", "default/web (evicted, still terminating)",
		"kube-system/adopted (evicted, still terminating)", "kube-system/orphan (evicted, still terminating)",
	}}, answers[0][1].Value, "the finished pods are deleted at once")
}
