package kubeapitest

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fluodata/talos-pulumi/internal/kubeapi"
)

// mastersGroup is the group an admin kubeconfig's certificate carries.
const mastersGroup = "system:masters"

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /version", s.getVersion)
	mux.HandleFunc("GET /readyz", s.getReadyz)
	mux.HandleFunc("GET /api/v1/nodes", s.admin(access{"list", "nodes", "", ""}, s.listNodes))
	mux.HandleFunc("GET /api/v1/nodes/{name}", s.admin(access{"get", "nodes", "", ""}, s.getNode))
	mux.HandleFunc("PATCH /api/v1/nodes/{name}", s.admin(access{"patch", "nodes", "", ""}, s.patchNode))
	mux.HandleFunc("DELETE /api/v1/nodes/{name}", s.admin(access{"delete", "nodes", "", ""}, s.deleteNode))
	mux.HandleFunc("GET /api/v1/pods", s.admin(access{"list", "pods", "", ""}, s.listPods))
	mux.HandleFunc("GET /api/v1/persistentvolumes", s.admin(access{"list", "persistentvolumes", "", ""}, s.listPersistentVolumes))
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/pods/{name}", s.admin(access{"get", "pods", "", ""}, s.getPod))
	mux.HandleFunc("POST /api/v1/namespaces/{ns}/pods/{name}/eviction", s.admin(access{"create", "pods", "eviction", ""}, s.evict))
	mux.HandleFunc("GET /apis/apps/v1/namespaces/{ns}/daemonsets/{name}", s.admin(access{"get", "daemonsets", "", "apps"}, s.getDaemonSet))
	mux.HandleFunc("GET /apis/{group}/{version}/{resource}", s.admin(access{"list", "", "", ""}, s.listObjects))
	s.manifestRoutes(mux) // applied.go
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, http.StatusNotFound, "NotFound", fmt.Sprintf("the server could not find the requested resource (%s %s)", r.Method, r.URL.Path), nil)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		latency := s.latency
		s.mu.Unlock()
		if latency > 0 {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(latency):
			}
		}
		// Authentication comes before everything, whatever the path, as
		// the API server's filter chain has it.
		if !s.authenticated(r) {
			writeStatus(w, http.StatusUnauthorized, "Unauthorized", "Unauthorized", nil)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// authenticated says whether the request carries a client certificate of
// the CA for client authentication, as k8s.io/apiserver's x509
// authenticator checks it. The API server of a Talos cluster takes no
// anonymous request (--anonymous-auth=false): without one, it answers 401.
func (s *Server) authenticated(r *http.Request) bool {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return false
	}
	intermediates := x509.NewCertPool()
	for _, c := range r.TLS.PeerCertificates[1:] {
		intermediates.AddCert(c)
	}
	_, err := r.TLS.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots: s.clientCAs, Intermediates: intermediates, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return err == nil
}

// access is what RBAC is asked about a request (k8s.io/apiserver's
// authorizer.Attributes), besides the namespace and name of the path.
type access struct {
	verb, resource, subresource, group string
}

// admin lets only a client certificate of group system:masters through,
// answering others as RBAC does.
func (s *Server) admin(a access, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		subject := r.TLS.PeerCertificates[0].Subject // authenticated by routes
		if !slices.Contains(subject.Organization, mastersGroup) {
			forbidden(w, subject.CommonName, a, r.PathValue("ns"), r.PathValue("name"))
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.settle(time.Now())
		h(w, r)
	}
}

// forbidden answers as the API server refuses a request its authorizers do
// not allow: the message of handlers/responsewriters's forbiddenMessage
// inside apierrors.NewForbidden's, e.g. `nodes "worker-1" is forbidden:
// User "viewer" cannot patch resource "nodes" in API group "" at the
// cluster scope`.
func forbidden(w http.ResponseWriter, user string, a access, namespace, name string) {
	resource := a.resource
	if a.subresource != "" {
		resource += "/" + a.subresource
	}
	why := fmt.Sprintf("User %q cannot %s resource %q in API group %q at the cluster scope", user, a.verb, resource, a.group)
	if namespace != "" {
		why = fmt.Sprintf("User %q cannot %s resource %q in API group %q in the namespace %q", user, a.verb, resource, a.group, namespace)
	}
	// The group-qualified resource, as schema.GroupResource prints it.
	qualified := a.resource
	if a.group != "" {
		qualified += "." + a.group
	}
	msg := fmt.Sprintf("%s is forbidden: %s", qualified, why)
	if name != "" {
		msg = fmt.Sprintf("%s %q is forbidden: %s", qualified, name, why)
	}
	writeJSON(w, http.StatusForbidden, map[string]any{
		"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "message": msg, "reason": "Forbidden", "code": http.StatusForbidden,
		"details": map[string]any{"name": name, "kind": a.resource},
	})
}

// getReadyz answers as a ready API server: every check passes.
func (s *Server) getReadyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = io.WriteString(w, "ok") //nolint:errcheck // the client went away
}

func (s *Server) getVersion(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	v := s.version
	s.mu.Unlock()
	major, minor, _ := strings.Cut(strings.TrimPrefix(v, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	writeJSON(w, http.StatusOK, map[string]string{
		"major": major, "minor": minor, "gitVersion": v,
		"goVersion": "go1.24.6", "compiler": "gc", "platform": "linux/amd64",
	})
}

func (s *Server) listNodes(w http.ResponseWriter, _ *http.Request) {
	names := make([]string, 0, len(s.nodes))
	for name := range s.nodes {
		names = append(names, name)
	}
	slices.Sort(names)
	items := make([]any, 0, len(names))
	for _, name := range names {
		items = append(items, s.nodes[name].object())
	}
	writeJSON(w, http.StatusOK, map[string]any{"apiVersion": "v1", "kind": "NodeList", "metadata": map[string]string{"resourceVersion": "1"}, "items": items})
}

func (s *Server) getNode(w http.ResponseWriter, r *http.Request) {
	n, ok := s.nodes[r.PathValue("name")]
	if !ok {
		notFound(w, "nodes", r.PathValue("name"))
		return
	}
	writeJSON(w, http.StatusOK, n.object())
	if n.racedReads > 0 {
		n.racedReads--
		n.version++
	}
}

func (s *Server) patchNode(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/merge-patch+json" {
		writeStatus(w, http.StatusUnsupportedMediaType, "UnsupportedMediaType",
			fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: application/merge-patch+json (got %q)", ct), nil)
		return
	}
	var patch struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Spec struct {
			Unschedulable *bool            `json:"unschedulable"`
			Taints        *[]kubeapi.Taint `json:"taints"`
		} `json:"spec"`
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil {
		err = json.Unmarshal(raw, &patch)
	}
	if err != nil {
		writeStatus(w, http.StatusBadRequest, "BadRequest", "error decoding patch: "+err.Error(), nil)
		return
	}
	// "taints": null removes them, as a merge patch's null does.
	removesTaints := strings.Contains(string(raw), `"taints":null`)
	n, ok := s.nodes[name]
	action := "cordon"
	switch {
	case patch.Spec.Taints != nil || removesTaints:
		action = "taint"
	case patch.Spec.Unschedulable != nil && !*patch.Spec.Unschedulable:
		action = "uncordon"
	}
	if !ok {
		s.record(action, name, http.StatusNotFound)
		notFound(w, "nodes", name)
		return
	}
	if rv := patch.Metadata.ResourceVersion; rv != "" && rv != strconv.Itoa(n.version) {
		s.record(action, name, http.StatusConflict)
		writeStatus(w, http.StatusConflict, "Conflict", fmt.Sprintf(`Operation cannot be fulfilled on nodes %q: the object has been modified; please apply your changes to the latest version and try again`, name), nil)
		return
	}
	if patch.Spec.Unschedulable != nil {
		n.spec.Unschedulable = *patch.Spec.Unschedulable
		n.version++
		s.record(action, name, http.StatusOK)
	}
	if patch.Spec.Taints != nil || removesTaints {
		n.spec.Taints = nil
		if patch.Spec.Taints != nil {
			n.spec.Taints = *patch.Spec.Taints
		}
		n.version++
		s.record(action, name, http.StatusOK)
	}
	writeJSON(w, http.StatusOK, n.object())
}

func (s *Server) deleteNode(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	n, ok := s.nodes[name]
	if !ok {
		s.record("delete-node", name, http.StatusNotFound)
		notFound(w, "nodes", name)
		return
	}
	delete(s.nodes, name)
	s.collect(name)
	s.record("delete-node", name, http.StatusOK)
	writeJSON(w, http.StatusOK, n.object())
}

func (s *Server) listPods(w http.ResponseWriter, r *http.Request) {
	onNode, filtered := "", false
	if sel := r.URL.Query().Get("fieldSelector"); sel != "" {
		v, ok := strings.CutPrefix(sel, "spec.nodeName=")
		if !ok || strings.ContainsAny(v, ",=!") {
			writeStatus(w, http.StatusBadRequest, "BadRequest", fmt.Sprintf("unable to parse requested field selector %q: the fake knows spec.nodeName=<name> only", sel), nil)
			return
		}
		onNode, filtered = v, true
	}
	keys := make([]string, 0, len(s.pods))
	for k, p := range s.pods {
		if !filtered || p.spec.Node == onNode {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	items := make([]any, 0, len(keys))
	for _, k := range keys {
		items = append(items, s.pods[k].object())
	}
	writeJSON(w, http.StatusOK, map[string]any{"apiVersion": "v1", "kind": "PodList", "metadata": map[string]string{"resourceVersion": "1"}, "items": items})
}

func (s *Server) getPod(w http.ResponseWriter, r *http.Request) {
	p, ok := s.pods[r.PathValue("ns")+"/"+r.PathValue("name")]
	if !ok {
		notFound(w, "pods", r.PathValue("name"))
		return
	}
	writeJSON(w, http.StatusOK, p.object())
}

func (s *Server) evict(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	key := ns + "/" + name
	var ev struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&ev); err != nil {
		writeStatus(w, http.StatusBadRequest, "BadRequest", "error decoding eviction: "+err.Error(), nil)
		return
	}
	if ev.APIVersion != "policy/v1" || ev.Kind != "Eviction" || ev.Metadata.Name != name || (ev.Metadata.Namespace != "" && ev.Metadata.Namespace != ns) {
		writeStatus(w, http.StatusBadRequest, "BadRequest",
			fmt.Sprintf("expected a policy/v1 Eviction of %s, got %s %s of %s/%s", key, ev.APIVersion, ev.Kind, ev.Metadata.Namespace, ev.Metadata.Name), nil)
		return
	}
	p, ok := s.pods[key]
	if !ok {
		s.record("evict", key, http.StatusNotFound)
		notFound(w, "pods", name)
		return
	}
	// The API evicts a pod that is terminating or not Running without
	// asking its budget (eviction.go's canIgnorePDB), and one that is not
	// Ready while the budget is met (its default
	// unhealthyPodEvictionPolicy, IfHealthyBudget): the fake's budget
	// always reports 1 healthy pod of 1 desired.
	if p.deletedAt.IsZero() {
		guarded := p.spec.Phase == "Running" && !p.spec.NotReady
		if guarded && (p.blocks == Forever || p.blocks > 0) {
			if p.blocks > 0 {
				p.blocks--
			}
			s.record("evict", key, http.StatusTooManyRequests)
			writeStatus(w, http.StatusTooManyRequests, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.",
				[]map[string]string{{"reason": "DisruptionBudget", "message": fmt.Sprintf("The disruption budget %s-pdb needs 1 healthy pods and has 1 currently", name)}})
			return
		}
		// A finished or unscheduled pod is deleted at once: the pod
		// strategy's CheckGracefulDelete gives it a grace period of 0
		// (kubernetes v1.35.4 pkg/registry/core/pod/strategy.go:179-186),
		// no kubelet confirms its end.
		if p.spec.Phase == "Succeeded" || p.spec.Phase == "Failed" || p.spec.Node == "" {
			s.gone(key, p)
			s.record("evict", key, http.StatusCreated)
			writeJSON(w, http.StatusCreated, map[string]any{"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{}, "status": "Success", "code": http.StatusCreated})
			return
		}
		now := time.Now()
		p.deletedAt, p.terminateAt = now, now.Add(p.spec.TerminationDelay)
		s.settle(now)
	}
	s.record("evict", key, http.StatusCreated)
	writeJSON(w, http.StatusCreated, map[string]any{"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{}, "status": "Success", "code": http.StatusCreated})
}

func (n *node) object() map[string]any {
	spec := map[string]any{"unschedulable": n.spec.Unschedulable}
	if len(n.spec.Taints) > 0 {
		spec["taints"] = n.spec.Taints
	}
	ready := "True"
	if n.spec.NotReady {
		ready = "False"
	}
	addresses := []map[string]string{{"type": "Hostname", "address": n.spec.Name}}
	if n.spec.InternalIP != "" {
		addresses = append([]map[string]string{{"type": "InternalIP", "address": n.spec.InternalIP}}, addresses...)
	}
	return map[string]any{
		"apiVersion": "v1", "kind": "Node",
		"metadata": map[string]any{"name": n.spec.Name, "uid": n.uid, "resourceVersion": strconv.Itoa(n.version), "labels": map[string]string{"kubernetes.io/hostname": n.spec.Name}},
		"spec":     spec,
		"status": map[string]any{
			"conditions": []map[string]string{
				{"type": "MemoryPressure", "status": "False"},
				{"type": "Ready", "status": ready},
			},
			"addresses": addresses,
			"nodeInfo":  map[string]string{"kubeletVersion": n.spec.KubeletVersion, "osImage": "Talos (v1.12.0)"},
		},
	}
}

func (p *pod) object() map[string]any {
	meta := map[string]any{"name": p.spec.Name, "namespace": p.spec.Namespace, "uid": p.uid}
	if p.spec.OwnerKind != "" {
		meta["ownerReferences"] = []map[string]any{{"apiVersion": "apps/v1", "kind": p.spec.OwnerKind, "name": OwnerName(p.spec), "uid": p.ownerUID, "controller": !p.spec.OwnerNotController}}
	}
	if p.spec.Mirror {
		meta["annotations"] = map[string]string{"kubernetes.io/config.mirror": "0123456789abcdef"}
	}
	if !p.deletedAt.IsZero() {
		meta["deletionTimestamp"] = p.deletedAt.UTC().Format(time.RFC3339)
	}
	image := p.spec.Image
	if image == "" {
		image = "registry.k8s.io/pause:3.10"
	}
	spec := map[string]any{"containers": []map[string]string{{"name": "main", "image": image}}}
	if p.spec.EmptyDir {
		spec["volumes"] = []map[string]any{{"name": "scratch", "emptyDir": map[string]any{}}}
	}
	if p.spec.Node != "" {
		spec["nodeName"] = p.spec.Node
	}
	ready := "True"
	if p.spec.NotReady {
		ready = "False"
	}
	status := map[string]any{"phase": p.spec.Phase, "conditions": []map[string]string{{"type": "Ready", "status": ready}}}
	return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}
}

func notFound(w http.ResponseWriter, kind, name string) {
	writeStatus(w, http.StatusNotFound, "NotFound", fmt.Sprintf("%s %q not found", kind, name), nil)
}

// writeStatus answers with a Kubernetes Status object.
func writeStatus(w http.ResponseWriter, code int, reason, message string, causes []map[string]string) {
	st := map[string]any{
		"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "message": message, "reason": reason, "code": code,
	}
	if causes != nil {
		st["details"] = map[string]any{"causes": causes}
	}
	writeJSON(w, code, st)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) //nolint:errcheck // the client went away
}

// listPersistentVolumes answers as the API server's PersistentVolumeList.
func (s *Server) listPersistentVolumes(w http.ResponseWriter, _ *http.Request) {
	items := make([]any, 0, len(s.pvs))
	for _, pv := range s.pvs {
		spec := map[string]any{"csi": map[string]any{"driver": pv.Driver, "volumeHandle": pv.VolumeHandle}}
		if ns, name, ok := strings.Cut(pv.Claim, "/"); ok {
			spec["claimRef"] = map[string]any{"kind": "PersistentVolumeClaim", "namespace": ns, "name": name}
		}
		items = append(items, map[string]any{
			"apiVersion": "v1", "kind": "PersistentVolume", "metadata": map[string]any{"name": pv.Name},
			"spec": spec, "status": map[string]any{"phase": pv.Phase},
		})
	}
	writeJSON(w, http.StatusOK, map[string]any{"apiVersion": "v1", "kind": "PersistentVolumeList", "metadata": map[string]string{"resourceVersion": "1"}, "items": items})
}

// listObjects lists the objects AddObject added to a resource, in the
// order of their etcd keys, at most limit; a resource without any is not
// served: 404 with the API server's message for a path it has no handler
// for.
func (s *Server) listObjects(w http.ResponseWriter, r *http.Request) {
	objects, ok := s.objects[r.URL.Path]
	if !ok {
		writeStatus(w, http.StatusNotFound, "NotFound", "the server could not find the requested resource", nil)
		return
	}
	objects = slices.Clone(objects)
	slices.SortFunc(objects, func(a, b kubeapi.ObjectRef) int { return strings.Compare(a.String(), b.String()) })
	if limit, err := strconv.Atoi(r.URL.Query().Get("limit")); err == nil && limit > 0 && limit < len(objects) {
		objects = objects[:limit]
	}
	items := make([]any, 0, len(objects))
	for _, o := range objects {
		meta := map[string]any{"name": o.Name}
		if o.Namespace != "" {
			meta["namespace"] = o.Namespace
		}
		items = append(items, map[string]any{"metadata": meta})
	}
	writeJSON(w, http.StatusOK, map[string]any{"kind": "List", "metadata": map[string]any{}, "items": items})
}

// getDaemonSet answers a DaemonSet (apps/v1) the pods of AddPod own, as the
// API server shows one its controller has not yet looked at, or 404 with
// the API server's message for a group's resource.
func (s *Server) getDaemonSet(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	uid, ok := s.daemonSets[ns+"/"+name]
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]any{
			"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
			"status": "Failure", "message": fmt.Sprintf("daemonsets.apps %q not found", name), "reason": "NotFound",
			"details": map[string]any{"name": name, "group": "apps", "kind": "daemonsets"}, "code": http.StatusNotFound,
		})
		return
	}
	labels := map[string]string{"app": name}
	writeJSON(w, http.StatusOK, map[string]any{
		"apiVersion": "apps/v1", "kind": "DaemonSet",
		"metadata": map[string]any{"name": name, "namespace": ns, "uid": uid, "generation": 1},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": labels},
			"template": map[string]any{
				"metadata": map[string]any{"labels": labels},
				"spec":     map[string]any{"containers": []map[string]string{{"name": "main", "image": "registry.k8s.io/pause:3.10"}}},
			},
		},
		"status": map[string]any{"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0, "numberReady": 0},
	})
}
