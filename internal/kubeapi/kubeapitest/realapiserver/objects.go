package realapiserver

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/fluodata/talos-pulumi/internal/kubeapi"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest"
)

// The objects of a test, described as kubeapitest describes them to its
// fake (NodeSpec, PodSpec, PersistentVolume), made in the real API server
// through its REST API as an admin: the same scene in both, so that a test
// can hold the fake's answers to the real one's. What only a controller or
// a kubelet would do (set a pod's phase, a budget's status, a volume's
// phase) is written to the objects' status subresources, as they would.

// AddNode creates the Node as the fake shows it: its Ready and
// MemoryPressure conditions, its InternalIP (first) and Hostname addresses,
// its kubelet version (kubeapitest.DefaultVersion unless set), cordoned
// when Unschedulable.
func (s *Server) AddNode(spec kubeapitest.NodeSpec) {
	s.t.Helper()
	if spec.KubeletVersion == "" {
		spec.KubeletVersion = kubeapitest.DefaultVersion
	}
	addresses := []map[string]string{{"type": "Hostname", "address": spec.Name}}
	if spec.InternalIP != "" {
		addresses = append([]map[string]string{{"type": "InternalIP", "address": spec.InternalIP}}, addresses...)
	}
	nodeSpec := map[string]any{"unschedulable": spec.Unschedulable}
	if len(spec.Taints) > 0 {
		nodeSpec["taints"] = spec.Taints
	}
	// A Node keeps the status it is created with (the node strategy clears
	// nothing), as the kubelet registers it.
	s.mustCall(http.MethodPost, "/api/v1/nodes", "", map[string]any{
		"apiVersion": "v1", "kind": "Node",
		"metadata": map[string]any{"name": spec.Name, "labels": map[string]string{"kubernetes.io/hostname": spec.Name}},
		"spec":     nodeSpec,
		"status": map[string]any{
			"conditions": nodeConditions(!spec.NotReady),
			"addresses":  addresses,
			"nodeInfo":   map[string]string{"kubeletVersion": spec.KubeletVersion, "osImage": "Talos (v1.12.0)"},
		},
	}, http.StatusCreated)
}

// SetNodeReady sets the node's Ready condition, as its kubelet (true) or
// the node lifecycle controller (false) would.
func (s *Server) SetNodeReady(name string, ready bool) {
	s.t.Helper()
	s.mustCall(http.MethodPatch, "/api/v1/nodes/"+url.PathEscape(name)+"/status", "application/merge-patch+json",
		map[string]any{"status": map[string]any{"conditions": nodeConditions(ready)}}, http.StatusOK)
}

func nodeConditions(ready bool) []map[string]string {
	return []map[string]string{
		{"type": "MemoryPressure", "status": "False"},
		{"type": "Ready", "status": condition(ready)},
	}
}

func condition(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// AddPod creates the pod as the fake shows it, with the status its kubelet
// would write. A DaemonSet's pod comes with its DaemonSet (made once per
// name, as the fake does) unless OwnerGone. PDBBlocks Forever adds a
// budget <name>-pdb allowing no disruption. Refusal counts, Recreate and
// TerminationDelay are not supported: a real budget refuses all or none,
// and no StatefulSet controller or kubelet runs.
func (s *Server) AddPod(spec kubeapitest.PodSpec) {
	s.t.Helper()
	if spec.Namespace == "" {
		spec.Namespace = "default"
	}
	if spec.Phase == "" {
		spec.Phase = "Running"
	}
	if spec.Image == "" {
		spec.Image = "registry.k8s.io/pause:3.10"
	}
	if spec.PDBBlocks > 0 || spec.Recreate {
		s.t.Fatalf("realapiserver: pod %s/%s: PDBBlocks %d and Recreate are the fake's alone: a real budget refuses all evictions or none, and no StatefulSet controller runs",
			spec.Namespace, spec.Name, spec.PDBBlocks)
	}
	s.ensureNamespace(spec.Namespace)
	ns := "/api/v1/namespaces/" + url.PathEscape(spec.Namespace)
	meta := map[string]any{"name": spec.Name, "namespace": spec.Namespace, "labels": map[string]string{"app": spec.Name}}
	if spec.OwnerKind != "" {
		uid := newUID()
		if spec.OwnerKind == "DaemonSet" && !spec.OwnerGone {
			uid = s.ensureDaemonSet(spec.Namespace, kubeapitest.OwnerName(spec))
		}
		meta["ownerReferences"] = []map[string]any{{
			"apiVersion": "apps/v1", "kind": spec.OwnerKind, "name": kubeapitest.OwnerName(spec), "uid": uid, "controller": !spec.OwnerNotController,
		}}
	}
	if spec.Mirror {
		meta["annotations"] = map[string]string{"kubernetes.io/config.mirror": "0123456789abcdef"}
	}
	podSpec := map[string]any{"containers": []map[string]string{{"name": "main", "image": spec.Image}}}
	if spec.EmptyDir {
		podSpec["volumes"] = []map[string]any{{"name": "scratch", "emptyDir": map[string]any{}}}
	}
	if spec.Node != "" {
		podSpec["nodeName"] = spec.Node
	}
	s.mustCall(http.MethodPost, ns+"/pods", "", map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": podSpec}, http.StatusCreated)
	s.mustCall(http.MethodPatch, ns+"/pods/"+url.PathEscape(spec.Name)+"/status", "application/merge-patch+json", map[string]any{
		"status": map[string]any{"phase": spec.Phase, "conditions": []map[string]string{{"type": "Ready", "status": condition(!spec.NotReady)}}},
	}, http.StatusOK)
	if spec.PDBBlocks == kubeapitest.Forever {
		s.addBudget(spec.Namespace, spec.Name)
	}
}

// ensureDaemonSet makes the DaemonSet (apps/v1) unless it exists, and
// returns its UID. No controller runs: it makes no pods of its own.
func (s *Server) ensureDaemonSet(namespace, name string) string {
	s.t.Helper()
	path := "/apis/apps/v1/namespaces/" + url.PathEscape(namespace) + "/daemonsets"
	labels := map[string]string{"daemonset": name}
	body := s.mustCall(http.MethodPost, path, "", map[string]any{
		"apiVersion": "apps/v1", "kind": "DaemonSet",
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": labels},
			"template": map[string]any{
				"metadata": map[string]any{"labels": labels},
				"spec":     map[string]any{"containers": []map[string]string{{"name": "main", "image": "registry.k8s.io/pause:3.10"}}},
			},
		},
	}, http.StatusCreated, http.StatusConflict)
	var ds struct {
		Kind     string `json:"kind"`
		Metadata struct {
			UID string `json:"uid"`
		} `json:"metadata"`
	}
	// 409: made already, by an earlier pod of the DaemonSet.
	if err := json.Unmarshal(body, &ds); err == nil && ds.Kind != "DaemonSet" {
		body = s.mustCall(http.MethodGet, path+"/"+url.PathEscape(name), "", nil, http.StatusOK)
		_ = json.Unmarshal(body, &ds) // no UID is the failure below
	}
	if ds.Metadata.UID == "" {
		s.t.Fatalf("realapiserver: DaemonSet %s/%s has no UID: %s", namespace, name, body)
	}
	return ds.Metadata.UID
}

// addBudget makes the PodDisruptionBudget <pod>-pdb (minAvailable 1) of
// the pod, with the status the disruption controller would write for one
// healthy pod of one desired: no disruption allowed.
func (s *Server) addBudget(namespace, pod string) {
	s.t.Helper()
	path := "/apis/policy/v1/namespaces/" + url.PathEscape(namespace) + "/poddisruptionbudgets"
	name := pod + "-pdb"
	var created struct {
		Metadata struct {
			Generation int64 `json:"generation"`
		} `json:"metadata"`
	}
	body := s.mustCall(http.MethodPost, path, "", map[string]any{
		"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec":     map[string]any{"minAvailable": 1, "selector": map[string]any{"matchLabels": map[string]string{"app": pod}}},
	}, http.StatusCreated)
	if err := json.Unmarshal(body, &created); err != nil {
		s.t.Fatalf("realapiserver: unable to decode PodDisruptionBudget %s/%s: %v", namespace, name, err)
	}
	// The eviction API answers "still being processed" (429 too, another
	// message) while observedGeneration is behind the budget's generation.
	s.mustCall(http.MethodPatch, path+"/"+url.PathEscape(name)+"/status", "application/merge-patch+json", map[string]any{
		"status": map[string]any{
			"observedGeneration": created.Metadata.Generation, "disruptionsAllowed": 0,
			"currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1,
		},
	}, http.StatusOK)
}

// SetPersistentVolumes creates the PersistentVolumes (once per server: a
// real one is not deleted while the pv-protection finalizer holds it, and
// no controller removes that): a CSI volume of Driver and VolumeHandle
// (a hostPath one when Driver is empty: CSI needs a driver), bound to Claim
// when set, its status phase written as the volume controller would (left
// at Pending, as created, when Phase is empty).
func (s *Server) SetPersistentVolumes(pvs ...kubeapitest.PersistentVolume) {
	s.t.Helper()
	if s.pvsSet {
		s.t.Fatal("realapiserver: SetPersistentVolumes is called once per server")
	}
	s.pvsSet = true
	for _, pv := range pvs {
		spec := map[string]any{
			"capacity": map[string]string{"storage": "1Gi"}, "accessModes": []string{"ReadWriteOnce"},
			"persistentVolumeReclaimPolicy": "Retain",
		}
		if pv.Driver != "" {
			spec["csi"] = map[string]string{"driver": pv.Driver, "volumeHandle": pv.VolumeHandle}
		} else {
			spec["hostPath"] = map[string]string{"path": "/var/mnt/" + pv.Name}
		}
		if namespace, name, ok := strings.Cut(pv.Claim, "/"); ok {
			spec["claimRef"] = map[string]string{"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": namespace, "name": name}
		}
		s.mustCall(http.MethodPost, "/api/v1/persistentvolumes", "", map[string]any{
			"apiVersion": "v1", "kind": "PersistentVolume", "metadata": map[string]any{"name": pv.Name}, "spec": spec,
		}, http.StatusCreated)
		if pv.Phase != "" {
			s.mustCall(http.MethodPatch, "/api/v1/persistentvolumes/"+url.PathEscape(pv.Name)+"/status", "application/merge-patch+json",
				map[string]any{"status": map[string]any{"phase": pv.Phase}}, http.StatusOK)
		}
	}
}

// ensureNamespace makes the namespace and its default ServiceAccount, which
// the ServiceAccount admission plugin wants for every pod and which only
// kube-controller-manager would make.
func (s *Server) ensureNamespace(namespace string) {
	s.t.Helper()
	if s.namespaces[namespace] {
		return
	}
	s.mustCall(http.MethodPost, "/api/v1/namespaces", "", map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]string{"name": namespace},
	}, http.StatusCreated, http.StatusConflict)
	s.mustCall(http.MethodPost, "/api/v1/namespaces/"+url.PathEscape(namespace)+"/serviceaccounts", "", map[string]any{
		"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]string{"name": "default"},
	}, http.StatusCreated, http.StatusConflict)
	s.namespaces[namespace] = true
}

// mustCall makes the call and fails the test unless it answers one of the
// codes; it returns the answer.
func (s *Server) mustCall(method, path, contentType string, body any, codes ...int) []byte {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.t.Context(), 30*time.Second)
	defer cancel()
	code, answer, err := s.call(ctx, method, path, contentType, body)
	if err != nil {
		s.t.Fatalf("realapiserver: %v", err)
	}
	if !slices.Contains(codes, code) {
		s.t.Fatalf("realapiserver: %s %s answered %d: %s", method, path, code, answer)
	}
	return answer
}

// newUID is a random UUID (version 4), as the API server makes them.
func newUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// AddObject creates an object of a resource as the fake serves it: a
// custom resource, whose CRD (that version alone, served and stored,
// namespaced when namespace is given) is made first and waited for until
// the API server serves its list.
func (s *Server) AddObject(r kubeapi.APIResource, namespace, name string) {
	s.t.Helper()
	list, err := r.ListPath()
	if err != nil {
		s.t.Fatalf("realapiserver: %v", err)
	}
	// /apis/<group>/<version>/<plural>
	parts := strings.Split(strings.TrimPrefix(list, "/apis/"), "/")
	if len(parts) != 3 {
		s.t.Fatalf("realapiserver: AddObject makes custom resources only, not %s", r)
	}
	group, version, plural := parts[0], parts[1], parts[2]
	kind := strings.ToUpper(plural[:1]) + strings.TrimSuffix(plural[1:], "s")
	scope := "Cluster"
	if namespace != "" {
		scope = "Namespaced"
	}
	ctx, cancel := context.WithTimeout(s.t.Context(), 30*time.Second)
	defer cancel()
	crd := plural + "." + group
	if code, _, err := s.call(ctx, http.MethodGet, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"+crd, "", nil); err != nil || code == http.StatusNotFound {
		s.mustCall(http.MethodPost, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "", map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
			"metadata": map[string]any{"name": crd},
			"spec": map[string]any{
				"group": group, "scope": scope,
				"names": map[string]any{"plural": plural, "singular": strings.ToLower(kind), "kind": kind, "listKind": kind + "List"},
				"versions": []any{map[string]any{"name": version, "served": true, "storage": true,
					"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
			},
		}, http.StatusCreated)
		for {
			if code, _, err := s.call(ctx, http.MethodGet, list, "", nil); err == nil && code == http.StatusOK {
				break
			}
			select {
			case <-ctx.Done():
				s.t.Fatalf("realapiserver: the CRD %s is not served after 30 s", crd)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	at := "/apis/" + group + "/" + version + "/" + plural
	meta := map[string]any{"name": name}
	if namespace != "" {
		at = "/apis/" + group + "/" + version + "/namespaces/" + url.PathEscape(namespace) + "/" + plural
		meta["namespace"] = namespace
		s.ensureNamespace(namespace)
	}
	s.mustCall(http.MethodPost, at, "", map[string]any{"apiVersion": group + "/" + version, "kind": kind, "metadata": meta}, http.StatusCreated)
}
