package kubeapitest

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// The objects of the server-side applies, the inventory ConfigMaps and
// what discovery says of their kinds: what the bootstrap-manifest sync of
// a Kubernetes upgrade reads and writes. They live beside the Server (by
// its pointer) rather than in it, so that this part of the fake stays in
// a file of its own.

// kind is a kind the fake serves: its group version, resource and scope.
type kind struct {
	groupVersion, kind, resource string
	namespaced                   bool
}

// kinds are the kinds Talos's bootstrap manifests use, and the
// inventory's ConfigMap.
var kinds = []kind{
	{"v1", "Namespace", "namespaces", false},
	{"v1", "ConfigMap", "configmaps", true},
	{"v1", "Secret", "secrets", true},
	{"v1", "ServiceAccount", "serviceaccounts", true},
	{"v1", "Service", "services", true},
	{"apps/v1", "Deployment", "deployments", true},
	{"apps/v1", "DaemonSet", "daemonsets", true},
	{"rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", false},
	{"rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "clusterrolebindings", false},
	{"rbac.authorization.k8s.io/v1", "Role", "roles", true},
	{"rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings", true},
}

// applied is the store of one Server (guarded by its mu).
type applied struct {
	objects map[string]map[string]any // by group version/resource/namespace/name
	version int
	hold    bool
}

var stores sync.Map // *Server: *applied

func (s *Server) applied() *applied {
	a, loaded := stores.LoadOrStore(s, &applied{objects: map[string]map[string]any{
		// The namespaces a cluster starts with.
		"v1/namespaces//kube-system": namespace("kube-system"),
		"v1/namespaces//default":     namespace("default"),
	}, version: 100})
	if !loaded {
		s.t.Cleanup(func() { stores.Delete(s) })
	}
	return a.(*applied)
}

func namespace(name string) map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name, "resourceVersion": "1"}}
}

// HoldRollouts keeps the Deployments and DaemonSets applied from now on
// from rolling out (hold), as when their pods do not start; the fake
// otherwise plays their controllers at once: the new generation is
// observed and every replica updated and available.
func (s *Server) HoldRollouts(hold bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.applied()
	a.hold = hold
	if !hold {
		for _, obj := range a.objects {
			rollOut(obj)
		}
	}
}

// Object returns an object the applies made ("apps/v1", "Deployment",
// "kube-system", "coredns"), nil when there is none.
func (s *Server) Object(groupVersion, kindName, namespace, name string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range kinds {
		if k.groupVersion == groupVersion && k.kind == kindName {
			if !k.namespaced {
				namespace = ""
			}
			return clone(s.applied().objects[groupVersion+"/"+k.resource+"/"+namespace+"/"+name])
		}
	}
	return nil
}

// manifestRoutes serves discovery, server-side apply, get and delete of
// the kinds above, and the create and update of ConfigMaps.
func (s *Server) manifestRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/{version}", s.admin(access{verb: "get"}, s.discover))
	mux.HandleFunc("GET /apis/{group}/{version}", s.admin(access{verb: "get"}, s.discover))
	mux.HandleFunc("GET /apis/{group}", s.admin(access{verb: "get"}, s.discoverGroup))
	for _, prefix := range []string{"/api/{version}", "/apis/{group}/{version}"} {
		for _, scope := range []string{"", "/namespaces/{ns}"} {
			path := prefix + scope + "/{resource}/{name}"
			mux.HandleFunc("GET "+path, s.admin(access{verb: "get"}, s.getApplied))
			mux.HandleFunc("PATCH "+path, s.admin(access{verb: "patch"}, s.apply))
			mux.HandleFunc("DELETE "+path, s.admin(access{verb: "delete"}, s.deleteApplied))
		}
	}
	mux.HandleFunc("POST /api/v1/namespaces/{ns}/configmaps", s.admin(access{verb: "create", resource: "configmaps"}, s.putConfigMap))
	mux.HandleFunc("PUT /api/v1/namespaces/{ns}/configmaps/{name}", s.admin(access{verb: "update", resource: "configmaps"}, s.putConfigMap))
}

func groupVersion(r *http.Request) string {
	if g := r.PathValue("group"); g != "" {
		return g + "/" + r.PathValue("version")
	}
	return r.PathValue("version")
}

// discover answers as the API server's APIResourceList.
func (s *Server) discover(w http.ResponseWriter, r *http.Request) {
	gv := groupVersion(r)
	var resources []map[string]any
	for _, k := range kinds {
		if k.groupVersion == gv {
			resources = append(resources, map[string]any{"name": k.resource, "kind": k.kind, "namespaced": k.namespaced, "singularName": strings.ToLower(k.kind)})
		}
	}
	if resources == nil {
		// A group version nobody serves falls through the API server's
		// handlers to the mux's plain 404, no Status.
		http.NotFound(w, r)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
}

// discoverGroup answers as the API server's APIGroup.
func (s *Server) discoverGroup(w http.ResponseWriter, r *http.Request) {
	for _, k := range kinds {
		if g, v, ok := strings.Cut(k.groupVersion, "/"); ok && g == r.PathValue("group") {
			gv := map[string]any{"groupVersion": k.groupVersion, "version": v}
			writeJSON(w, http.StatusOK, map[string]any{"kind": "APIGroup", "apiVersion": "v1", "name": g, "versions": []any{gv}, "preferredVersion": gv})
			return
		}
	}
	http.NotFound(w, r)
}

// kindOf is the kind the request's path is about; false, with the answer
// written, when the fake does not serve it.
func (s *Server) kindOf(w http.ResponseWriter, r *http.Request) (kind, string, bool) {
	gv, res, ns := groupVersion(r), r.PathValue("resource"), r.PathValue("ns")
	for _, k := range kinds {
		if k.groupVersion == gv && k.resource == res && k.namespaced == (ns != "") {
			return k, gv + "/" + res + "/" + ns + "/" + r.PathValue("name"), true
		}
	}
	writeStatus(w, http.StatusNotFound, "NotFound", "the server could not find the requested resource", nil)
	return kind{}, "", false
}

func (s *Server) getApplied(w http.ResponseWriter, r *http.Request) {
	k, key, ok := s.kindOf(w, r)
	if !ok {
		return
	}
	obj, ok := s.applied().objects[key]
	if !ok {
		notFound(w, qualified(k), r.PathValue("name"))
		return
	}
	writeJSON(w, http.StatusOK, obj)
}

// qualified is the resource as the API server's NotFound names it
// ("deployments.apps", "configmaps").
func qualified(k kind) string {
	if g, _, ok := strings.Cut(k.groupVersion, "/"); ok {
		return k.resource + "." + g
	}
	return k.resource
}

// apply is a server-side apply (application/apply-patch+yaml, a JSON body
// here): the object becomes what the manager applies, the server's fields
// kept. Only one manager's fields are modelled: another's are replaced,
// as a forced apply replaces them, and a conflict is never raised.
// resourceVersion moves only when the object changes, as the API server
// writes no-op applies to nothing; generation moves with the spec.
func (s *Server) apply(w http.ResponseWriter, r *http.Request) {
	k, key, ok := s.kindOf(w, r)
	if !ok {
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/apply-patch+yaml" {
		writeStatus(w, http.StatusUnsupportedMediaType, "UnsupportedMediaType", fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got %s)", ct), nil)
		return
	}
	manager := r.URL.Query().Get("fieldManager")
	if manager == "" {
		writeStatus(w, http.StatusBadRequest, "BadRequest", "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch", nil)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var in map[string]any
	if err := json.Unmarshal(body, &in); err != nil {
		writeStatus(w, http.StatusBadRequest, "BadRequest", err.Error(), nil)
		return
	}
	meta, _ := in["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		in["metadata"] = meta
	}
	if k.namespaced {
		meta["namespace"] = r.PathValue("ns")
	}
	a := s.applied()
	old, exists := a.objects[key]
	obj := clone(in)
	m := obj["metadata"].(map[string]any)
	generation := 1.0
	if exists {
		om := old["metadata"].(map[string]any)
		for _, f := range []string{"uid", "creationTimestamp", "resourceVersion", "generation"} {
			if v, ok := om[f]; ok {
				m[f] = v
			}
		}
		if st, ok := old["status"]; ok {
			obj["status"] = st
		}
		generation, _ = om["generation"].(float64)
		if !reflect.DeepEqual(old["spec"], obj["spec"]) {
			generation++
		}
	} else {
		m["uid"] = s.uid()
		m["creationTimestamp"] = "2026-01-01T00:00:00Z"
	}
	if _, ok := obj["spec"]; ok {
		m["generation"] = generation
	}
	m["managedFields"] = []any{map[string]any{"manager": manager, "operation": "Apply", "apiVersion": k.groupVersion, "fieldsType": "FieldsV1"}}
	if !exists || !reflect.DeepEqual(withoutVersion(old), withoutVersion(obj)) {
		if !a.hold {
			rollOut(obj)
		}
		if r.URL.Query().Get("dryRun") == "" {
			a.version++
			m["resourceVersion"] = strconv.Itoa(a.version)
			a.objects[key] = obj
			s.record("apply", key, http.StatusOK)
		}
	}
	code := http.StatusOK
	if !exists {
		code = http.StatusCreated
	}
	writeJSON(w, code, obj)
}

func withoutVersion(obj map[string]any) map[string]any {
	c := clone(obj)
	delete(c["metadata"].(map[string]any), "resourceVersion")
	return c
}

// rollOut is the controller's work for a Deployment or DaemonSet: the
// generation observed, every replica updated and available.
func rollOut(obj map[string]any) {
	meta, _ := obj["metadata"].(map[string]any)
	switch obj["kind"] {
	case "Deployment":
		spec, _ := obj["spec"].(map[string]any)
		n, ok := spec["replicas"].(float64)
		if !ok {
			n = 1
		}
		obj["status"] = map[string]any{"observedGeneration": meta["generation"], "replicas": n, "updatedReplicas": n, "readyReplicas": n, "availableReplicas": n}
	case "DaemonSet":
		obj["status"] = map[string]any{"observedGeneration": meta["generation"], "desiredNumberScheduled": 1.0, "updatedNumberScheduled": 1.0, "numberAvailable": 1.0, "numberReady": 1.0}
	}
}

func (s *Server) deleteApplied(w http.ResponseWriter, r *http.Request) {
	k, key, ok := s.kindOf(w, r)
	if !ok {
		return
	}
	a := s.applied()
	obj, ok := a.objects[key]
	if !ok {
		s.record("delete", key, http.StatusNotFound)
		notFound(w, qualified(k), r.PathValue("name"))
		return
	}
	delete(a.objects, key)
	s.record("delete", key, http.StatusOK)
	writeJSON(w, http.StatusOK, obj)
}

// putConfigMap creates (POST) or replaces (PUT, no resourceVersion
// needed: a ConfigMap takes unconditional updates) a ConfigMap.
func (s *Server) putConfigMap(w http.ResponseWriter, r *http.Request) {
	var in map[string]any
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeStatus(w, http.StatusBadRequest, "BadRequest", err.Error(), nil)
		return
	}
	meta, _ := in["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	key := "v1/configmaps/" + r.PathValue("ns") + "/" + name
	a := s.applied()
	_, exists := a.objects[key]
	switch {
	case r.Method == http.MethodPost && exists:
		writeStatus(w, http.StatusConflict, "AlreadyExists", fmt.Sprintf("configmaps %q already exists", name), nil)
		return
	case r.Method == http.MethodPut && !exists:
		notFound(w, "configmaps", name)
		return
	}
	a.version++
	meta["resourceVersion"] = strconv.Itoa(a.version)
	a.objects[key] = in
	s.record(strings.ToLower(r.Method)+"-configmap", key, http.StatusOK)
	code := http.StatusOK
	if r.Method == http.MethodPost {
		code = http.StatusCreated
	}
	writeJSON(w, code, in)
}

// InventoryKeys are the keys of a ConfigMap's data, sorted.
func (s *Server) InventoryKeys(namespace, name string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, _ := s.applied().objects["v1/configmaps/"+namespace+"/"+name]["data"].(map[string]any)
	return slices.Sorted(maps.Keys(data))
}

func clone(obj map[string]any) map[string]any {
	if obj == nil {
		return nil
	}
	b, _ := json.Marshal(obj)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}
