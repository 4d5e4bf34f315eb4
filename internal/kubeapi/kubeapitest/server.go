// Package kubeapitest is a fake Kubernetes API server for tests: HTTPS on
// loopback that authenticates client certificates of its own CA (made at
// start, ECDSA P-256), authorizes only the group system:masters (as RBAC
// binds cluster-admin), and serves the calls of package kubeapi from an
// in-memory set of nodes, pods and persistent volumes:
//
//	GET    /version
//	GET    /readyz
//	GET    /api/v1/nodes
//	GET    /api/v1/nodes/{name}
//	PATCH  /api/v1/nodes/{name}              (merge patch of spec.unschedulable or spec.taints)
//	DELETE /api/v1/nodes/{name}
//	GET    /api/v1/pods?fieldSelector=spec.nodeName=...
//	GET    /api/v1/persistentvolumes
//	GET    /api/v1/namespaces/{ns}/pods/{name}
//	POST   /api/v1/namespaces/{ns}/pods/{name}/eviction
//	GET    /apis/apps/v1/namespaces/{ns}/daemonsets/{name}
//
// It is written from kube-apiserver v1.35's source, set up as Talos sets up
// a control plane's (--anonymous-auth=false, --authorization-mode=Node,RBAC):
// a request without a client certificate of the CA is answered 401
// (k8s.io/apiserver's x509 authenticator), one of a user outside
// system:masters 403 with RBAC's message (handlers/responsewriters's
// forbiddenMessage) but for /version and /readyz, which RBAC's
// system:public-info-viewer role lets every user read; lists are in the
// order of their etcd keys (by namespace and name); evictions follow
// pkg/registry/core/pod/storage/eviction.go. The agreement test
// (internal/kubeapi/agreement_e2e_test.go, `make e2e-kube`) holds it to the
// real kube-apiserver (kubeapitest/realapiserver) for every call of package
// kubeapi.
//
// Errors are Kubernetes Status objects. An eviction is refused with 429, as
// a PodDisruptionBudget refuses it, as often as the pod's spec says, but
// for a pod that is not Running (Pending, Succeeded, Failed) or already
// terminating, which the API evicts without asking its budget, and a pod
// that is not Ready, which its budget (1 healthy pod of 1 desired: met)
// lets go, as the API does by default (unhealthyPodEvictionPolicy
// IfHealthyBudget); a finished (Succeeded, Failed) or unscheduled pod is
// deleted at once, its grace period 0; another evicted pod lingers
// (terminating) for its
// TerminationDelay, measured on the clock when it is next looked at:
// nothing runs in the background. A pod on a NotReady node stays
// terminating for as long as its node is NotReady, as it does when the
// node's kubelet is gone: only the kubelet confirms that a pod's
// containers have stopped. Deleting a Node deletes the pods bound to it,
// as the pod garbage collector of kube-controller-manager does with the
// pods of a Node that is gone (the real API server alone keeps them).
//
// A merge patch that carries metadata.resourceVersion is refused with 409
// Conflict when the Node changed since (the API server's optimistic
// concurrency); every write of a Node raises it.
//
// A pod whose OwnerKind is DaemonSet comes with its DaemonSet (apps/v1,
// named OwnerName), which the fake serves, unless the pod is an orphan
// (OwnerGone).
//
// Cordons, taint changes, evictions and node deletions are recorded in an ordered event
// log (Events) that tests assert on.
package kubeapitest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/testkit/pkitest"

	"github.com/fluodata/talos-pulumi/internal/kubeapi"
)

// DefaultVersion is the API server's gitVersion unless SetVersion changes
// it, and a node's kubelet version unless its spec sets one.
const DefaultVersion = "v1.34.1"

// Forever is the PodSpec.PDBBlocks of a pod whose every eviction a
// PodDisruptionBudget refuses.
const Forever = -1

// NodeSpec describes a node.
type NodeSpec struct {
	// Name is the Node object's name.
	Name string
	// KubeletVersion defaults to DefaultVersion.
	KubeletVersion string
	// InternalIP is its InternalIP address; none when empty.
	InternalIP string
	// NotReady makes its Ready condition False: its kubelet is gone, and
	// the pods evicted from it stay terminating.
	NotReady bool
	// Unschedulable starts it cordoned.
	Unschedulable bool
	// Taints are its spec.taints.
	Taints []kubeapi.Taint
}

// PodSpec describes a pod.
type PodSpec struct {
	// Namespace defaults to "default".
	Namespace string
	// Name is the pod's name.
	Name string
	// Node is the node it runs on (spec.nodeName).
	Node string
	// OwnerKind is the kind of its controller ("ReplicaSet", "DaemonSet",
	// "StatefulSet"); none when empty. Its owner reference (apps/v1) names
	// OwnerName(spec); a DaemonSet of that name is made with the pod.
	OwnerKind string
	// OwnerNotController makes the owner reference one that is not the
	// pod's controller (controller: false).
	OwnerNotController bool
	// OwnerGone leaves out the DaemonSet of a DaemonSet's pod: the pod is
	// an orphan, its DaemonSet deleted without it.
	OwnerGone bool
	// EmptyDir gives it an emptyDir volume (local data a drain deletes).
	EmptyDir bool
	// Mirror makes it the mirror pod of a static pod (annotation
	// kubernetes.io/config.mirror).
	Mirror bool
	// Phase defaults to "Running".
	Phase string
	// PDBBlocks is how many evictions of it a PodDisruptionBudget refuses
	// (429) before one is allowed; Forever refuses them all.
	PDBBlocks int
	// TerminationDelay is how long it stays, terminating, once evicted.
	TerminationDelay time.Duration
	// Recreate replaces it, once terminated, by a pod of the same name and
	// a new UID not yet scheduled anywhere, as a StatefulSet does.
	Recreate bool
	// Image is its container's image (default registry.k8s.io/pause:3.10).
	Image string
	// NotReady makes its Ready condition False.
	NotReady bool
}

// Event is one entry of the log.
type Event struct {
	// Seq numbers the events from 1.
	Seq int
	// Action is "cordon", "uncordon", "evict" or "delete-node".
	Action string
	// Object is the node's name, or the pod's namespace/name.
	Object string
	// Code is the HTTP status of the answer: 201 for an eviction done,
	// 429 for one refused, 404 for a missing object.
	Code int
}

func (e Event) String() string {
	return fmt.Sprintf("%s %s %d", e.Action, e.Object, e.Code)
}

type node struct {
	spec NodeSpec
	uid  string
	// version is its metadata.resourceVersion, raised by every write.
	version int
	// racedReads is how many more reads another writer follows (see
	// RaceNodeWrites).
	racedReads int
}

type pod struct {
	spec        PodSpec
	uid         string
	ownerUID    string
	blocks      int
	deletedAt   time.Time // zero until evicted
	terminateAt time.Time
}

// Server is a fake API server; it stops at the end of the test.
type Server struct {
	t     testing.TB
	srv   *httptest.Server
	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
	caPEM []byte
	// clientCAs verifies the client certificates (authenticate).
	clientCAs *x509.CertPool

	adminCert, adminKey []byte

	mu      sync.Mutex
	version string
	nodes   map[string]*node
	pods    map[string]*pod // by namespace/name
	// daemonSets are the UIDs of the DaemonSets, by namespace/name.
	daemonSets map[string]string
	pvs        []PersistentVolume
	// objects are the objects of other resources (AddObject), by the
	// resource's list path.
	objects map[string][]kubeapi.ObjectRef
	events  []Event
	uids    int
	latency time.Duration

	// busy holds the connections with a request not yet answered (or not
	// yet read): see Settle.
	connMu sync.Mutex
	busy   map[net.Conn]bool
}

// Start starts an empty server on 127.0.0.1.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, version: DefaultVersion, nodes: map[string]*node{}, pods: map[string]*pod{}, daemonSets: map[string]string{}, busy: map[net.Conn]bool{}}
	s.makeCA()
	serverCert, serverKey := s.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	s.adminCert, s.adminKey = s.IssueClientCert("admin", "system:masters")
	cert, err := tls.X509KeyPair(serverCert, serverKey)
	s.must(err)
	s.clientCAs = x509.NewCertPool()
	s.clientCAs.AddCert(s.ca)

	s.srv = httptest.NewUnstartedServer(s.routes())
	// As kube-apiserver (k8s.io/apiserver's secure serving): the handshake
	// asks for a client certificate and takes any; the request is refused
	// (401) when it has none the CA signed.
	s.srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequestClientCert,
		MinVersion:   tls.VersionTLS12,
	}
	// Handshakes refused on purpose are not worth a line on stderr.
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.srv.Config.ConnState = func(c net.Conn, state http.ConnState) {
		s.connMu.Lock()
		defer s.connMu.Unlock()
		if state == http.StateNew || state == http.StateActive {
			s.busy[c] = true
		} else {
			delete(s.busy, c)
		}
	}
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	return s
}

// URL is the server's address ("https://127.0.0.1:PORT").
func (s *Server) URL() string { return s.srv.URL }

// CA returns the PEM certificate of the server's CA.
func (s *Server) CA() []byte { return s.caPEM }

// AdminCert returns the PEM certificate and key of the admin client
// (user admin, group system:masters).
func (s *Server) AdminCert() (cert, key []byte) { return s.adminCert, s.adminKey }

// Kubeconfig returns an admin kubeconfig for the server, laid out as Talos
// writes it.
func (s *Server) Kubeconfig() []byte {
	return Kubeconfig(s.URL(), s.caPEM, s.adminCert, s.adminKey)
}

// KubeconfigFor returns a kubeconfig with a new client certificate of the
// CA for user in groups. Only system:masters may do anything but read
// /version and /readyz.
func (s *Server) KubeconfigFor(user string, groups ...string) []byte {
	cert, key := s.IssueClientCert(user, groups...)
	return Kubeconfig(s.URL(), s.caPEM, cert, key)
}

// Kubeconfig is a kubeconfig with one context, laid out as Talos writes
// it, the PEM blocks base64-encoded inline.
func Kubeconfig(server string, ca, cert, key []byte) []byte {
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
    - name: lab
      cluster:
        server: %s
        certificate-authority-data: %s
users:
    - name: admin@lab
      user:
        client-certificate-data: %s
        client-key-data: %s
contexts:
    - context:
        cluster: lab
        namespace: default
        user: admin@lab
      name: admin@lab
current-context: admin@lab
`, server, b64(ca), b64(cert), b64(key))
}

// PersistentVolume is a PersistentVolume of the fake: a CSI volume and
// its claim ("<namespace>/<name>", "" for none). Phase defaults to
// Pending, what the API server writes on create (the persistentvolume
// strategy's PrepareForCreate) until the volume controller writes another.
type PersistentVolume struct {
	Name, Phase, Driver, VolumeHandle, Claim string
}

// AddObject adds an object of a resource of an API group the fake serves
// besides its own (as a CRD's), which GET of the resource's list path
// lists; a group the test added nothing to is not served (404).
func (s *Server) AddObject(r kubeapi.APIResource, namespace, name string) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	path, err := r.ListPath()
	if err != nil {
		s.t.Fatalf("kubeapitest: %v", err)
		return
	}
	if s.objects == nil {
		s.objects = map[string][]kubeapi.ObjectRef{}
	}
	s.objects[path] = append(s.objects[path], kubeapi.ObjectRef{Namespace: namespace, Name: name})
}

// SetPersistentVolumes sets the PersistentVolumes the server lists (by
// name, as the API server lists them whatever their order here).
func (s *Server) SetPersistentVolumes(pvs ...PersistentVolume) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pvs = slices.Clone(pvs)
	for i := range s.pvs {
		if s.pvs[i].Phase == "" {
			s.pvs[i].Phase = "Pending"
		}
	}
	slices.SortFunc(s.pvs, func(a, b PersistentVolume) int { return strings.Compare(a.Name, b.Name) })
}

// SetVersion sets the API server's gitVersion.
func (s *Server) SetVersion(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.version = v
}

// SetLatency delays every answer by d (a request given up earlier is not
// answered).
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = d
}

// AddNode adds a node.
func (s *Server) AddNode(spec NodeSpec) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if spec.Name == "" || s.nodes[spec.Name] != nil {
		s.t.Fatalf("kubeapitest: node without a name, or a second node %q", spec.Name)
	}
	if spec.KubeletVersion == "" {
		spec.KubeletVersion = DefaultVersion
	}
	spec.Taints = withNotReadyTaint(spec.Taints)
	s.nodes[spec.Name] = &node{spec: spec, uid: s.uid()}
}

// SetTaintsOf sets a node's taints, as another owner (the node
// controller, an operator) sets them.
func (s *Server) SetTaintsOf(name string, taints ...kubeapi.Taint) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[name]
	if n == nil {
		return fmt.Errorf("kubeapitest: no node %q", name)
	}
	n.spec.Taints = taints
	n.version++
	return nil
}

// RaceNodeWrites makes another writer (the kubelet's status, the node
// controller) change the node right after each of its next reads: a
// write that carries the resourceVersion read is then answered 409.
func (s *Server) RaceNodeWrites(name string, reads int) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[name]
	if n == nil {
		s.t.Fatalf("kubeapitest: no node %q", name)
		return
	}
	n.racedReads = reads
}

// SetNodeReady sets a node's Ready condition: false as when its kubelet
// stopped answering (the machine is off), which also keeps the pods
// evicted from it terminating.
func (s *Server) SetNodeReady(name string, ready bool) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[name]
	if n == nil {
		s.t.Fatalf("kubeapitest: no node %q", name)
		return
	}
	n.spec.NotReady = !ready
}

// SetKubeletVersion makes a node's kubelet report version (a kubelet
// upgraded by its machine config).
func (s *Server) SetKubeletVersion(name, version string) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[name]
	if n == nil {
		s.t.Fatalf("kubeapitest: no node %q", name)
		return
	}
	n.spec.KubeletVersion = version
}

// SetPodImage changes a pod's container image (a static pod the kubelet
// restarted from a new manifest).
func (s *Server) SetPodImage(namespace, name, image string) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pods[namespace+"/"+name]
	if p == nil {
		s.t.Fatalf("kubeapitest: no pod %s/%s", namespace, name)
		return
	}
	p.spec.Image = image
}

// AddPod adds a pod.
func (s *Server) AddPod(spec PodSpec) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if spec.Namespace == "" {
		spec.Namespace = "default"
	}
	if spec.Phase == "" {
		spec.Phase = "Running"
	}
	key := spec.Namespace + "/" + spec.Name
	if spec.Name == "" || s.pods[key] != nil {
		s.t.Fatalf("kubeapitest: pod without a name, or a second pod %q", key)
	}
	p := &pod{spec: spec, uid: s.uid(), blocks: spec.PDBBlocks}
	if spec.OwnerKind != "" {
		p.ownerUID = s.uid()
		if spec.OwnerKind == "DaemonSet" && !spec.OwnerGone {
			ds := spec.Namespace + "/" + OwnerName(spec)
			if uid, ok := s.daemonSets[ds]; ok {
				p.ownerUID = uid
			} else {
				s.daemonSets[ds] = p.ownerUID
			}
		}
	}
	s.pods[key] = p
}

// OwnerName is the name of the owner a pod's spec gives it (OwnerKind):
// "<pod>-owner".
func OwnerName(spec PodSpec) string { return spec.Name + "-owner" }

// DeletePod deletes a pod at once, as its owner would (a StatefulSet
// scaled down): nothing blocks a drain on it any more.
func (s *Server) DeletePod(namespace, name string) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pods[namespace+"/"+name] == nil {
		s.t.Fatalf("kubeapitest: no pod %s/%s", namespace, name)
		return
	}
	delete(s.pods, namespace+"/"+name)
}

// Node returns the node's spec as it is now (Unschedulable follows
// cordons), and whether it exists.
func (s *Server) Node(name string) (NodeSpec, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[name]
	if !ok {
		return NodeSpec{}, false
	}
	return n.spec, true
}

// Pods returns the namespace/name of every pod there is now, terminating
// ones included, sorted.
func (s *Server) Pods() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settle(time.Now())
	var out []string
	for k := range s.pods {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Settle waits, up to 5 s, until every request the server received has
// been answered. A client whose context ended gives up on its request, but
// the request may already be on the wire: the server still handles it, and
// logs it, after the client has returned.
func (s *Server) Settle() {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		s.connMu.Lock()
		n := len(s.busy)
		s.connMu.Unlock()
		if n == 0 {
			return
		}
	}
	s.t.Errorf("kubeapitest: requests still unanswered after 5 s")
}

// Events returns the log so far.
func (s *Server) Events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

// IssueClientCert returns a PEM client certificate and key of the
// server's CA for user in groups (the certificate's organizations).
func (s *Server) IssueClientCert(user string, groups ...string) (cert, key []byte) {
	return s.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

func (s *Server) makeCA() {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	s.must(err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	s.must(err)
	s.ca, err = x509.ParseCertificate(der)
	s.must(err)
	s.caKey = key
	s.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func (s *Server) issue(tmpl *x509.Certificate) (cert, key []byte) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	s.must(err)
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	s.must(err)
	tmpl.SerialNumber = serial
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.ca, &k.PublicKey, s.caKey)
	s.must(err)
	keyDER, err := x509.MarshalECPrivateKey(k)
	s.must(err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

func (s *Server) must(err error) {
	s.t.Helper()
	if err != nil {
		s.t.Fatalf("kubeapitest: %v", err)
	}
}

// uid returns a new UID; s.mu held.
func (s *Server) uid() string {
	s.uids++
	return fmt.Sprintf("00000000-0000-4000-8000-%012d", s.uids)
}

// record logs an event; s.mu held.
func (s *Server) record(action, object string, code int) {
	s.events = append(s.events, Event{Seq: len(s.events) + 1, Action: action, Object: object, Code: code})
}

// settle ends the terminations due by now, but on a NotReady node, whose
// kubelet does not confirm them; s.mu held.
func (s *Server) settle(now time.Time) {
	for k, p := range s.pods {
		if p.deletedAt.IsZero() || now.Before(p.terminateAt) {
			continue
		}
		if n := s.nodes[p.spec.Node]; n != nil && n.spec.NotReady {
			continue
		}
		s.gone(k, p)
	}
}

// collect deletes the pods bound to a node that is gone, as the pod
// garbage collector does (without its grace period); s.mu held.
func (s *Server) collect(node string) {
	for k, p := range s.pods {
		if p.spec.Node == node {
			s.gone(k, p)
		}
	}
}

// gone deletes a pod, and replaces a StatefulSet's by a new one not
// scheduled yet; s.mu held.
func (s *Server) gone(key string, p *pod) {
	delete(s.pods, key)
	if p.spec.Recreate {
		spec := p.spec
		spec.Node = ""
		spec.Phase = "Pending"
		s.pods[key] = &pod{spec: spec, uid: s.uid(), blocks: spec.PDBBlocks}
	}
}

// Serve serves h over TLS on 127.0.0.1 to client certificates of its own
// CA only, and returns a kubeconfig for it: for the calls Server does not
// play (other API groups' objects), answered as the test needs.
func Serve(t testing.TB, h http.Handler) []byte {
	t.Helper()
	p := pkitest.New(t, "127.0.0.1")
	srv := httptest.NewUnstartedServer(h)
	cert, err := tls.X509KeyPair(p.ServerCert, p.ServerKey)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(p.CA))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return Kubeconfig(srv.URL, p.CA, p.ClientCert, p.ClientKey)
}

// NotReadyTaint is the taint the API server's TaintNodesByCondition
// admission gives every Node it creates (the node lifecycle controller,
// which the fake does not play, removes it once the node is Ready).
var NotReadyTaint = kubeapi.Taint{Key: "node.kubernetes.io/not-ready", Effect: "NoSchedule"}

// withNotReadyTaint is taints with NotReadyTaint after them unless one of
// them has its key and effect, as kubernetes v1.35.4
// plugin/pkg/admission/nodetaint/admission.go (addNotReadyTaint) does on
// create.
func withNotReadyTaint(taints []kubeapi.Taint) []kubeapi.Taint {
	for _, t := range taints {
		if t.Key == NotReadyTaint.Key && t.Effect == NotReadyTaint.Effect {
			return taints
		}
	}
	return append(slices.Clone(taints), NotReadyTaint)
}
