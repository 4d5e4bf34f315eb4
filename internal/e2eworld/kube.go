package e2eworld

import (
	"context"
	"sync"
	"testing"

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

	mu  sync.Mutex
	api *realapiserver.Server
	sim *kubesim.Sim
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
	k.api = realapiserver.StartAt(ctx, t, ca, k.Addr, k.More...)
	k.sim = kubesim.New(k.api.URL(), SimClient(t, k.api, ca))
	k.sim.CNI = k.CNI
	k.sim.OperatorCRDs = k.OperatorCRDs
	for _, n := range k.Nodes {
		k.sim.Join(n)
	}
	go k.sim.Run(ctx)
}

// Started returns the API server and kubesim; nil before Start.
func (k *Kube) Started() (*realapiserver.Server, *kubesim.Sim) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.api, k.sim
}
