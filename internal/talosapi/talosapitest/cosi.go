package talosapitest

import (
	"context"
	"fmt"

	cosiv1alpha1 "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	cosiserver "github.com/cosi-project/runtime/pkg/state/protobuf/server"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"google.golang.org/grpc"
)

// Manifest is one of the bootstrap manifests a control plane renders
// (a k8s.Manifest resource): its ID ("11-core-dns") and its objects.
type Manifest struct {
	ID      string
	Objects []map[string]any
}

// DefaultManifests are what a control plane renders until a test sets
// others (SetManifests): a real one always renders some. Here the node
// bootstrap's ClusterRoleBinding, as Talos renders it (talos v1.13.9
// internal/app/machined/pkg/controllers/k8s/internal/k8stemplates/csr.go,
// CSRNodeBootstrapTemplate).
var DefaultManifests = []Manifest{{ID: "01-csr-node-bootstrap", Objects: []map[string]any{{
	"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
	"metadata": map[string]any{"name": "system-bootstrap-node-bootstrapper"},
	"subjects": []any{
		map[string]any{"kind": "Group", "name": "system:bootstrappers:nodes", "apiGroup": "rbac.authorization.k8s.io"},
		map[string]any{"kind": "Group", "name": "system:nodes", "apiGroup": "rbac.authorization.k8s.io"},
	},
	"roleRef": map[string]any{"kind": "ClusterRole", "name": "system:node-bootstrapper", "apiGroup": "rbac.authorization.k8s.io"},
}}}}

// registerCOSI serves the node's resources through the COSI State service
// of upstream's own server (cosi-project/runtime pkg/state/protobuf/server,
// as machined serves it), so that the client's reads are the machinery
// client's against upstream's server. Only what the fake holds is there:
// the bootstrap manifests of a control plane; a worker has none, as in
// Talos (the manifest controllers run on control planes only).
func (n *Node) registerCOSI(srv *grpc.Server) {
	cosiv1alpha1.RegisterStateServer(srv, cosiserver.NewState(n.cosiState()))
}

// cosiState is the node's resource state, made at its first listen and
// kept across reboots (c.mu held).
func (n *Node) cosiState() state.State {
	if n.cosi == nil {
		n.cosi = state.WrapCore(namespaced.NewState(inmem.Build))
		n.putSecurityState()
		n.putVolumes()
		if n.spec.Role == ControlPlane {
			manifests := n.c.manifests
			if manifests == nil {
				manifests = DefaultManifests
			}
			n.putManifests(manifests)
		}
	}
	return n.cosi
}

// SetManifests makes every control plane render these bootstrap manifests
// (replacing the ones it had), as Talos renders them from its config: a
// test sets the new ones when a config moves the Kubernetes version (see
// OnApply); none: they render none. Workers render none.
func (c *Cluster) SetManifests(manifests ...Manifest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.manifests = append([]Manifest{}, manifests...)
	for _, n := range c.nodes {
		if n.spec.Role == ControlPlane && n.cosi != nil {
			n.putManifests(manifests)
		}
	}
}

// SetManifestsOf makes one control plane render these manifests: the one
// whose config was applied.
func (c *Cluster) SetManifestsOf(ip string, manifests ...Manifest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.spec.IP == ip {
			n.cosiState()
			n.putManifests(manifests)
		}
	}
}

// putManifests replaces the node's Manifest resources (c.mu held).
func (n *Node) putManifests(manifests []Manifest) {
	ctx := context.Background()
	old, err := n.cosi.List(ctx, k8s.NewManifest(k8s.ControlPlaneNamespaceName, "").Metadata())
	mustCOSI(err)
	for _, r := range old.Items {
		mustCOSI(n.cosi.Destroy(ctx, r.Metadata()))
	}
	for _, m := range manifests {
		r := k8s.NewManifest(k8s.ControlPlaneNamespaceName, m.ID)
		for _, o := range m.Objects {
			r.TypedSpec().Items = append(r.TypedSpec().Items, k8s.SingleManifest{Object: o})
		}
		mustCOSI(n.cosi.Create(ctx, r))
	}
}

// mustCOSI panics on an error of the in-memory state: a bug of the fake.
func mustCOSI(err error) {
	if err != nil {
		panic(fmt.Sprintf("talosapitest: COSI state: %v", err))
	}
}
