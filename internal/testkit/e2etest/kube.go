package e2etest

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"

	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest/realapiserver"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubesim"
)

// Kube is a cluster's Kubernetes side in an e2e test: the real
// kube-apiserver, started from the first control plane's machine config
// with that config's Kubernetes CA (as Talos's bootstrap starts it), and
// kubesim playing the kubelets and controllers.
type Kube struct {
	// Addr is where the API server listens (host:port); More are the
	// hosts it answers on besides (each control plane's own address).
	Addr string
	More []string
	// CNI is the DaemonSet (namespace/name) kubesim waits for before the
	// nodes are Ready; Nodes are the nodes it joins.
	CNI   string
	Nodes []kubesim.Node
	// OperatorCRDs are the CRDs an operator registers once its Deployment
	// is ready (kubesim.Sim.OperatorCRDs), e.g. Cilium's LB IPAM CRDs
	// under "kube-system/cilium-operator".
	OperatorCRDs map[string][][]byte
	// APIServer is how the API server first runs (the repository's
	// bin/kube-apiserver when zero).
	APIServer realapiserver.Options
	// Upgrades are how it runs at each other version ("v1.32.13"), for
	// Apply: a control plane's config that names another API server
	// version restarts it so.
	Upgrades map[string]realapiserver.Options

	mu  sync.Mutex
	api *realapiserver.Server
	sim *kubesim.Sim
	// apiVersion is the version the running API server was started for
	// (from its config), "" when not known.
	apiVersion string
}

// Start starts the API server and kubesim from a control plane's machine
// config, once: a second call does nothing. kubesim runs until ctx ends.
// It is a Talos fake's OnApply for the first control plane.
func (k *Kube) Start(ctx context.Context, t *testing.T, config []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.api != nil {
		return
	}
	cfg, err := configloader.NewFromBytes(config)
	if err != nil {
		t.Errorf("the control plane's config: %v", err)
		return
	}
	k8sCA := cfg.Cluster().IssuingCA()
	ca := realapiserver.CA{Cert: k8sCA.Crt, Key: k8sCA.Key}
	k.api = realapiserver.StartAtWith(ctx, t, ca, k.APIServer, k.Addr, k.More...)
	k.apiVersion = imageTag(cfg.Cluster().APIServer().Image())
	k.sim = kubesim.New(k.api.URL(), SimClient(t, k.api, ca))
	k.sim.CNI = k.CNI
	k.sim.OperatorCRDs = k.OperatorCRDs
	for _, n := range k.Nodes {
		k.sim.Join(n)
	}
	go k.sim.Run(ctx)
}

// Apply plays what a node's new machine config restarts, as a Talos fake's
// OnApply for every node: the first call for the control plane at Addr's
// host starts the API server and kubesim (Start). A control plane's config
// naming another API server version restarts the API server with that
// version's Upgrades entry (its etcd kept), as Talos replaces the static
// pod; a version without one fails the test. Every node's kubelet, and a
// control plane's pods, take the versions its config names.
func (k *Kube) Apply(ctx context.Context, t *testing.T, node string, config []byte) {
	host, _, _ := strings.Cut(k.Addr, ":")
	if node == host {
		k.Start(ctx, t, config)
	}
	cfg, err := configloader.NewFromBytes(config)
	if err != nil {
		t.Errorf("the config of %s: %v", node, err)
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.api == nil {
		return
	}
	i := slices.IndexFunc(k.Nodes, func(n kubesim.Node) bool { return n.IP == node })
	if i < 0 {
		return
	}
	kubelet, controlPlane := imageTag(cfg.Machine().Kubelet().Image()), ""
	if k.Nodes[i].ControlPlane {
		controlPlane = imageTag(cfg.Cluster().APIServer().Image())
		if controlPlane != "" && controlPlane != k.apiVersion {
			o, ok := k.Upgrades[controlPlane]
			if !ok {
				t.Errorf("the config of %s runs the API server %s, which the test has no kube-apiserver for", node, controlPlane)
				return
			}
			t.Logf("e2etest: the config of %s moves the API server from %s to %s: restarting it", node, k.apiVersion, controlPlane)
			k.api.Restart(ctx, o)
			k.apiVersion = controlPlane
		}
	}
	k.sim.SetVersions(k.Nodes[i].Name, kubelet, controlPlane)
}

// imageTag is an image reference's tag ("v1.32.13"), "" without one.
func imageTag(image string) string {
	ref, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[i+1:]
	}
	return ""
}

// Started returns the API server and kubesim; nil before Start.
func (k *Kube) Started() (*realapiserver.Server, *kubesim.Sim) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.api, k.sim
}

// CollectGarbage plays the garbage collector's part in a foreground
// deletion (kube-controller-manager's, which the e2e tests do not run)
// until ctx ends: pulumi-kubernetes deletes with propagationPolicy
// Foreground, for which the API server holds the object, Terminating,
// under the foregroundDeletion finalizer until the collector has deleted
// its dependents and removes it. The objects of the collections given
// (list paths, e.g. /api/v1/namespaces/argocd/secrets) have none, so the
// finalizer is removed from each one being deleted, as the collector then
// does at once.
func (k *Kube) CollectGarbage(ctx context.Context, t *testing.T, collections ...string) {
	api, _ := k.Started()
	if api == nil {
		t.Errorf("CollectGarbage: the API server has not started")
		return
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, c := range collections {
			collectForeground(ctx, t, api, c)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// collectForeground removes the foregroundDeletion finalizer from the
// objects of a collection that are being deleted.
func collectForeground(ctx context.Context, t *testing.T, api *realapiserver.Server, collection string) {
	code, body, err := api.Call(ctx, http.MethodGet, collection, "", nil)
	if err != nil || code != http.StatusOK {
		return // not there (yet, or any more): nothing to collect
	}
	var list struct {
		Items []struct {
			Metadata struct {
				Name              string   `json:"name"`
				DeletionTimestamp string   `json:"deletionTimestamp"`
				Finalizers        []string `json:"finalizers"`
				ResourceVersion   string   `json:"resourceVersion"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Errorf("CollectGarbage: %s: %v", collection, err)
		return
	}
	for _, it := range list.Items {
		m := it.Metadata
		if m.DeletionTimestamp == "" || !slices.Contains(m.Finalizers, metav1ForegroundFinalizer) {
			continue
		}
		rest := slices.DeleteFunc(slices.Clone(m.Finalizers), func(f string) bool { return f == metav1ForegroundFinalizer })
		patch := map[string]any{"metadata": map[string]any{"finalizers": rest, "resourceVersion": m.ResourceVersion}}
		// A conflict (the object changed) or its disappearance is fine:
		// the next pass sees it again.
		_, _, _ = api.Call(ctx, http.MethodPatch, strings.TrimRight(collection, "/")+"/"+m.Name, "application/merge-patch+json", patch)
	}
}

// metav1ForegroundFinalizer is metav1.FinalizerDeleteDependents.
const metav1ForegroundFinalizer = "foregroundDeletion"
