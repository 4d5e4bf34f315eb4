// Package kubesim plays, against a real kube-apiserver, the parts of a
// cluster that are not the API server: the kubelets (Nodes that register
// and report Ready, a control plane's mirror pods), the controllers whose
// results Helm's --wait, Helm's hooks and the program's waits read (a
// Deployment's ReplicaSet and both their statuses, a DaemonSet's status, a
// StatefulSet's status, a Job completed, a deleted namespace finalized) and
// the operators that register CustomResourceDefinitions at start
// (Sim.OperatorCRDs). No Pod ever runs: the statuses say what the
// controllers would say once the Pods were ready, or had succeeded.
//
// What it writes is what Helm v3.20's ReadyChecker (pkg/kube/ready.go,
// inside pulumi-kubernetes v4.32) reads: for a Deployment, the new
// ReplicaSet found by deploymentutil.GetNewReplicaSet (owned by the
// Deployment, matched by its selector, its template equal but for the
// pod-template-hash label) with readyReplicas, and the Deployment's
// observedGeneration; for a DaemonSet, observedGeneration and the
// scheduled, updated and ready counts; for a StatefulSet (statefulSetReady),
// observedGeneration, updatedReplicas, readyReplicas and currentRevision
// equal to updateRevision; for a Job (jobReady, with --wait-for-jobs),
// succeeded reaching spec.completions. Helm's hooks (Client.watchUntilReady
// and waitForJob in pkg/kube/client.go) wait for a Job's Complete=True
// condition, which the sim sets as the job controller does.
//
// It speaks plain HTTPS and JSON, as internal/kubeapi does, so that tests
// need not bring client-go.
package kubesim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/yaml"
)

// Node is a kubelet the simulator plays.
type Node struct {
	Name, IP       string
	ControlPlane   bool
	KubeletVersion string // e.g. v1.34.1
	// ControlPlaneVersion is the version of a control plane's API
	// server, controller manager and scheduler pods (KubeletVersion when
	// empty): during a Kubernetes upgrade they move before the kubelet.
	ControlPlaneVersion string
}

// controlPlaneVersion is the version of the node's control-plane pods.
func (n Node) controlPlaneVersion() string {
	if n.ControlPlaneVersion != "" {
		return n.ControlPlaneVersion
	}
	return n.KubeletVersion
}

// Sim is the simulator. Run it with Run; register kubelets with Join.
type Sim struct {
	base string
	hc   *http.Client
	// CNI names a DaemonSet ("kube-system/cilium") without whose
	// readiness no Node reports Ready, as a kubelet without a network
	// plugin reports NotReady; empty: Nodes are Ready at once.
	CNI string
	// Interval is the reconcile period (default 200 ms).
	Interval time.Duration
	// OperatorCRDs are the CustomResourceDefinitions an operator
	// registers when it starts, keyed by its Deployment
	// ("kube-system/cilium-operator"): each value is a manifest, YAML or
	// JSON, of one or more CRDs (apiextensions.k8s.io/v1; YAML documents
	// separated by "---" lines). Once the Deployment exists with at least
	// one replica and the sim has reported it ready, the sim creates them
	// (one already there is left as it is), as cilium-operator v1.18 does
	// once elected leader (operator/cmd/root.go: apis.RegisterCRDsCell,
	// "the first operation to be invoked after the operator is elected
	// leader"; pkg/k8s/apis/cilium.io/client/register.go). They are
	// created again when the Deployment is replaced or its pod template
	// changes, as the restarted operator would. The API server makes them
	// Established by itself. Set it before Run.
	OperatorCRDs map[string][][]byte

	mu    sync.Mutex
	nodes map[string]Node
	errs  []error
	// registered is, by Deployment, the Deployment's UID and template hash
	// for which its OperatorCRDs were created.
	registered map[string]string
}

// New returns a simulator for the API server at base, reached with hc (an
// admin client: system:masters).
func New(base string, hc *http.Client) *Sim {
	return &Sim{base: strings.TrimRight(base, "/"), hc: hc, nodes: map[string]Node{}, registered: map[string]string{}}
}

// Join registers a kubelet: its Node appears at the next reconcile.
func (s *Sim) Join(n Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[n.Name] = n
}

// SetVersions moves a kubelet, and a control plane's pods, to other
// versions (an empty one is left as it is), as a new machine config
// restarts them; false when the sim does not play the node.
func (s *Sim) SetVersions(name, kubelet, controlPlane string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[name]
	if !ok {
		return false
	}
	if kubelet != "" {
		n.KubeletVersion = kubelet
	}
	if controlPlane != "" {
		n.ControlPlaneVersion = controlPlane
	}
	s.nodes[name] = n
	return true
}

// Leave stops playing a kubelet (its Node object stays, NotReady, as a
// powered-off node's does).
func (s *Sim) Leave(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.nodes, name)
}

// Errors returns the errors of the reconciles so far (the last 20).
func (s *Sim) Errors() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.errs)
}

// Run reconciles until ctx ends.
func (s *Sim) Run(ctx context.Context) {
	every := s.Interval
	if every == 0 {
		every = 200 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := s.Reconcile(ctx); err != nil && ctx.Err() == nil {
			s.mu.Lock()
			s.errs = append(s.errs, err)
			if len(s.errs) > 20 {
				s.errs = s.errs[len(s.errs)-20:]
			}
			s.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Reconcile makes one pass: Nodes, DaemonSets, Deployments (and the CRDs of
// their operators), StatefulSets, Jobs, then the namespaces being deleted.
func (s *Sim) Reconcile(ctx context.Context) error {
	s.mu.Lock()
	nodes := slices.Collect(maps.Values(s.nodes))
	s.mu.Unlock()
	slices.SortFunc(nodes, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
	cniReady := s.CNI == ""
	if !cniReady {
		ns, name, _ := strings.Cut(s.CNI, "/")
		var ds object
		err := s.call(ctx, http.MethodGet, fmt.Sprintf("/apis/apps/v1/namespaces/%s/daemonsets/%s", ns, name), "", nil, &ds)
		switch {
		case err == nil:
			cniReady = ds.Status["numberReady"] != nil && num(ds.Status["numberReady"]) >= len(nodes) && len(nodes) > 0
		case !errors.Is(err, errNotFound):
			return err
		}
	}
	var errs []error
	for _, n := range nodes {
		errs = append(errs, s.node(ctx, n, cniReady))
	}
	errs = append(errs, s.daemonSets(ctx, len(nodes)), s.deployments(ctx), s.statefulSets(ctx), s.jobs(ctx), s.namespaces(ctx))
	return errors.Join(errs...)
}

// namespaces finalizes the namespaces being deleted, as the namespace
// controller does once it has deleted their contents: without it, a
// deleted namespace stays Terminating for ever (the Cilium chart's
// cilium-secrets, for one, and Helm's uninstall waits for it). What they
// still hold is left in etcd, unreachable: no test reads it.
func (s *Sim) namespaces(ctx context.Context) error {
	var list struct {
		Items []map[string]any `json:"items"`
	}
	if err := s.call(ctx, http.MethodGet, "/api/v1/namespaces", "", nil, &list); err != nil {
		return err
	}
	var errs []error
	for _, ns := range list.Items {
		status, _ := ns["status"].(map[string]any)
		if status["phase"] != "Terminating" {
			continue
		}
		meta, _ := ns["metadata"].(map[string]any)
		name, _ := meta["name"].(string)
		if spec, ok := ns["spec"].(map[string]any); ok {
			spec["finalizers"] = []any{}
		}
		errs = append(errs, s.call(ctx, http.MethodPut, "/api/v1/namespaces/"+name+"/finalize", "application/json", ns, nil))
	}
	return errors.Join(errs...)
}

// node creates the kubelet's Node and sets its status.
func (s *Sim) node(ctx context.Context, n Node, ready bool) error {
	labels := map[string]any{"kubernetes.io/hostname": n.Name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
	if n.ControlPlane {
		labels["node-role.kubernetes.io/control-plane"] = ""
	}
	err := s.call(ctx, http.MethodPost, "/api/v1/nodes", "application/json", map[string]any{
		"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": n.Name, "labels": labels},
	}, nil)
	if err != nil && !errors.Is(err, errConflict) {
		return err
	}
	status, reason := "False", "KubeletNotReady"
	if ready {
		status, reason = "True", "KubeletReady"
	}
	now := time.Now().UTC().Format(time.RFC3339)
	if n.ControlPlane {
		if err := s.staticPods(ctx, n); err != nil {
			return err
		}
	}
	return s.call(ctx, http.MethodPatch, "/api/v1/nodes/"+n.Name+"/status", "application/merge-patch+json", map[string]any{"status": map[string]any{
		"conditions": []any{map[string]any{"type": "Ready", "status": status, "reason": reason, "lastHeartbeatTime": now, "lastTransitionTime": now}},
		"addresses":  []any{map[string]any{"type": "InternalIP", "address": n.IP}, map[string]any{"type": "Hostname", "address": n.Name}},
		"nodeInfo": map[string]any{"kubeletVersion": n.KubeletVersion, "kubeProxyVersion": n.KubeletVersion, "operatingSystem": "linux", "architecture": "amd64",
			"osImage": "Talos", "containerRuntimeVersion": "containerd://2.1.0", "kernelVersion": "6.12.0-talos",
			"machineID": "", "systemUUID": "", "bootID": ""},
	}}, nil)
}

// staticPods are a control plane's mirror pods, as its kubelet posts them
// for the static pods Talos writes: the API server, controller manager and
// scheduler of the node's Kubernetes version, Ready.
func (s *Sim) staticPods(ctx context.Context, n Node) error {
	for _, component := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		name := component + "-" + n.Name
		image := "registry.k8s.io/" + component + ":" + n.controlPlaneVersion()
		err := s.call(ctx, http.MethodPost, "/api/v1/namespaces/kube-system/pods", "application/json", map[string]any{
			"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": name, "namespace": "kube-system",
				"annotations": map[string]any{"kubernetes.io/config.mirror": name, "kubernetes.io/config.source": "file"},
				"labels":      map[string]any{"k8s-app": component, "tier": "control-plane"}},
			"spec": map[string]any{"nodeName": n.Name, "containers": []any{map[string]any{
				"name": component, "image": image}}},
		}, nil)
		if errors.Is(err, errConflict) {
			err = s.mirrorImage(ctx, name, component, image)
		}
		if err != nil {
			return err
		}
		if err := s.call(ctx, http.MethodPatch, "/api/v1/namespaces/kube-system/pods/"+name+"/status", "application/merge-patch+json", map[string]any{"status": map[string]any{
			"phase": "Running", "conditions": []any{map[string]any{"type": "Ready", "status": "True"}},
		}}, nil); err != nil {
			return err
		}
	}
	return nil
}

// mirrorImage moves a mirror pod's container to image, as the kubelet
// posts the mirror pod of a static pod Talos rewrote (a strategic merge
// patch: the container is merged by name, its defaulted fields kept).
func (s *Sim) mirrorImage(ctx context.Context, name, container, image string) error {
	var pod struct {
		Spec struct {
			Containers []struct {
				Name  string `json:"name"`
				Image string `json:"image"`
			} `json:"containers"`
		} `json:"spec"`
	}
	path := "/api/v1/namespaces/kube-system/pods/" + name
	if err := s.call(ctx, http.MethodGet, path, "", nil, &pod); err != nil {
		return err
	}
	if len(pod.Spec.Containers) == 1 && pod.Spec.Containers[0].Image == image {
		return nil
	}
	return s.call(ctx, http.MethodPatch, path, "application/strategic-merge-patch+json", map[string]any{"spec": map[string]any{
		"containers": []any{map[string]any{"name": container, "image": image}},
	}}, nil)
}

// daemonSets reports every DaemonSet scheduled, updated and ready on every
// node (tolerations and node selectors are not modelled).
func (s *Sim) daemonSets(ctx context.Context, nodes int) error {
	var list objectList
	if err := s.call(ctx, http.MethodGet, "/apis/apps/v1/daemonsets", "", nil, &list); err != nil {
		return err
	}
	var errs []error
	for _, ds := range list.Items {
		if num(ds.Status["observedGeneration"]) == ds.Metadata.Generation && num(ds.Status["numberReady"]) == nodes {
			continue
		}
		errs = append(errs, s.call(ctx, http.MethodPatch, ds.path("apps/v1", "daemonsets")+"/status", "application/merge-patch+json", map[string]any{"status": map[string]any{
			"observedGeneration": ds.Metadata.Generation, "desiredNumberScheduled": nodes, "currentNumberScheduled": nodes,
			"updatedNumberScheduled": nodes, "numberReady": nodes, "numberAvailable": nodes, "numberMisscheduled": 0,
		}}, nil))
	}
	return errors.Join(errs...)
}

// deployments gives every Deployment a ReplicaSet of its current template,
// ready, and reports the Deployment rolled out.
func (s *Sim) deployments(ctx context.Context) error {
	var list objectList
	if err := s.call(ctx, http.MethodGet, "/apis/apps/v1/deployments", "", nil, &list); err != nil {
		return err
	}
	errs := []error{s.orphanedReplicaSets(ctx, list.Items)}
	for _, d := range list.Items {
		errs = append(errs, s.deployment(ctx, d))
	}
	return errors.Join(errs...)
}

// orphanedReplicaSets deletes the ReplicaSets whose Deployment is gone, as
// kube-controller-manager's garbage collector does for dependents whose
// owner no longer exists: else a Deployment made again under its old name
// (a release uninstalled and installed again) would find the old one's
// ReplicaSet, owned by the old uid, in the name of its new one, and never
// be reported rolled out.
func (s *Sim) orphanedReplicaSets(ctx context.Context, deployments []object) error {
	uids := map[string]bool{}
	for _, d := range deployments {
		uids[d.Metadata.UID] = true
	}
	var list objectList
	if err := s.call(ctx, http.MethodGet, "/apis/apps/v1/replicasets", "", nil, &list); err != nil {
		return err
	}
	var errs []error
	for _, rs := range list.Items {
		for _, o := range rs.Metadata.OwnerReferences {
			if o.Controller && o.Kind == "Deployment" && !uids[o.UID] {
				err := s.call(ctx, http.MethodDelete, rs.path("apps/v1", "replicasets"), "", nil, nil)
				if err != nil && !errors.Is(err, errNotFound) {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// deployment rolls d out, then registers its operator's CRDs.
func (s *Sim) deployment(ctx context.Context, d object) error {
	replicas := 1
	if r, ok := d.Spec["replicas"]; ok {
		replicas = num(r)
	}
	template, _ := d.Spec["template"].(map[string]any)
	hash, err := templateHash(template)
	if err != nil {
		return err
	}
	rsTemplate := withHashLabel(template, hash)
	tmeta, _ := rsTemplate["metadata"].(map[string]any)
	rsName := d.Metadata.Name + "-" + hash
	selector, _ := d.Spec["selector"].(map[string]any)
	rsSelector := map[string]any{"matchLabels": map[string]any{"pod-template-hash": hash}}
	maps.Copy(rsSelector, selector)
	if ml, ok := selector["matchLabels"].(map[string]any); ok {
		merged := maps.Clone(ml)
		merged["pod-template-hash"] = hash
		rsSelector["matchLabels"] = merged
	}
	rsPath := fmt.Sprintf("/apis/apps/v1/namespaces/%s/replicasets", d.Metadata.Namespace)
	err = s.call(ctx, http.MethodPost, rsPath, "application/json", map[string]any{
		"apiVersion": "apps/v1", "kind": "ReplicaSet",
		"metadata": map[string]any{
			"name": rsName, "namespace": d.Metadata.Namespace, "labels": tmeta["labels"],
			"ownerReferences": []any{map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": d.Metadata.Name, "uid": d.Metadata.UID, "controller": true, "blockOwnerDeletion": true}},
		},
		"spec": map[string]any{"replicas": replicas, "selector": rsSelector, "template": rsTemplate},
	}, nil)
	if err != nil && !errors.Is(err, errConflict) {
		return err
	}
	status := map[string]any{"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas, "fullyLabeledReplicas": replicas, "observedGeneration": 1}
	if err := s.call(ctx, http.MethodPatch, rsPath+"/"+rsName+"/status", "application/merge-patch+json", map[string]any{"status": status}, nil); err != nil {
		return err
	}
	if num(d.Status["observedGeneration"]) != d.Metadata.Generation || num(d.Status["readyReplicas"]) != replicas {
		if err := s.call(ctx, http.MethodPatch, d.path("apps/v1", "deployments")+"/status", "application/merge-patch+json", map[string]any{"status": map[string]any{
			"observedGeneration": d.Metadata.Generation, "replicas": replicas, "updatedReplicas": replicas,
			"readyReplicas": replicas, "availableReplicas": replicas,
			"conditions": []any{map[string]any{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}},
		}}, nil); err != nil {
			return err
		}
	}
	if replicas == 0 {
		return nil // no operator runs
	}
	return s.registerCRDs(ctx, d, hash)
}

// registerCRDs creates the OperatorCRDs of the ready Deployment d, whose
// pod template hashes to hash, once for each Deployment object and
// template: a CRD already there (409) is left as it is.
func (s *Sim) registerCRDs(ctx context.Context, d object, hash string) error {
	key := d.Metadata.Namespace + "/" + d.Metadata.Name
	manifests, ok := s.OperatorCRDs[key]
	if !ok {
		return nil
	}
	run := d.Metadata.UID + "/" + hash
	s.mu.Lock()
	done := s.registered[key] == run
	s.mu.Unlock()
	if done {
		return nil
	}
	var errs []error
	for i, m := range manifests {
		crds, err := parseCRDs(m)
		if err != nil {
			errs = append(errs, fmt.Errorf("unable to read the CRD manifest %d of %s: %w", i, key, err))
			continue
		}
		for _, crd := range crds {
			err := s.call(ctx, http.MethodPost, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "application/json", crd, nil)
			if err != nil && !errors.Is(err, errConflict) {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...) // tried again at the next reconcile
	}
	s.mu.Lock()
	s.registered[key] = run
	s.mu.Unlock()
	return nil
}

// parseCRDs reads a manifest of CustomResourceDefinitions: JSON, or YAML
// documents separated by "---" lines (empty ones skipped). What the API
// server would refuse to take in a create (resourceVersion, uid,
// creationTimestamp, status) is dropped.
func parseCRDs(manifest []byte) ([]map[string]any, error) {
	var out []map[string]any
	for _, doc := range yamlDocuments(manifest) {
		data, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, err
		}
		var obj map[string]any
		if err := json.Unmarshal(data, &obj); err != nil {
			return nil, err
		}
		if obj == nil {
			continue // an empty document
		}
		if obj["apiVersion"] != "apiextensions.k8s.io/v1" || obj["kind"] != "CustomResourceDefinition" {
			return nil, fmt.Errorf("%v %v is no apiextensions.k8s.io/v1 CustomResourceDefinition", obj["apiVersion"], obj["kind"])
		}
		if meta, ok := obj["metadata"].(map[string]any); ok {
			delete(meta, "resourceVersion")
			delete(meta, "uid")
			delete(meta, "creationTimestamp")
			delete(meta, "generation")
			delete(meta, "managedFields")
		}
		delete(obj, "status")
		out = append(out, obj)
	}
	return out, nil
}

// yamlDocuments splits a YAML stream at its "---" lines.
func yamlDocuments(stream []byte) [][]byte {
	var docs [][]byte
	var cur []byte
	for line := range bytes.Lines(stream) {
		if t := bytes.TrimRight(line, " \t\r\n"); bytes.Equal(t, []byte("---")) || bytes.HasPrefix(t, []byte("--- ")) {
			docs = append(docs, cur)
			cur = nil
			continue
		}
		cur = append(cur, line...)
	}
	return append(docs, cur)
}

// statefulSets reports every StatefulSet rolled out, with the status the
// StatefulSet controller of Kubernetes v1.35 writes once every Pod is ready,
// which meets Helm's statefulSetReady whatever the strategy
// (docs/decisions/0004-upstream-behaviours.md#what-the-kubernetes-simulator-stands-in-for).
func (s *Sim) statefulSets(ctx context.Context) error {
	var list objectList
	if err := s.call(ctx, http.MethodGet, "/apis/apps/v1/statefulsets", "", nil, &list); err != nil {
		return err
	}
	var errs []error
	for _, sts := range list.Items {
		replicas := 1
		if r, ok := sts.Spec["replicas"]; ok {
			replicas = num(r)
		}
		template, _ := sts.Spec["template"].(map[string]any)
		hash, err := templateHash(template)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		revision := sts.Metadata.Name + "-" + hash
		if num(sts.Status["observedGeneration"]) == sts.Metadata.Generation && num(sts.Status["readyReplicas"]) == replicas &&
			num(sts.Status["replicas"]) == replicas && sts.Status["updateRevision"] == revision && sts.Status["currentRevision"] == revision {
			continue
		}
		status := map[string]any{
			"observedGeneration": sts.Metadata.Generation, "replicas": replicas, "readyReplicas": replicas,
			"currentReplicas": replicas, "updatedReplicas": replicas, "availableReplicas": replicas,
			"currentRevision": revision, "updateRevision": revision,
		}
		if _, ok := sts.Status["collisionCount"]; !ok {
			status["collisionCount"] = 0 // the API server refuses it decremented: set only when absent
		}
		errs = append(errs, s.call(ctx, http.MethodPatch, sts.path("apps/v1", "statefulsets")+"/status", "application/merge-patch+json", map[string]any{"status": status}, nil))
	}
	return errors.Join(errs...)
}

// jobControllerName is spec.managedBy of the Jobs the built-in job
// controller manages (empty: the same).
const jobControllerName = "kubernetes.io/job-controller"

// jobs completes every Job that is not finished, not suspended and left to the
// built-in controller, with the status the job controller of Kubernetes v1.35
// writes once its Pods succeed, which the API server accepts and Helm waits for
// (docs/decisions/0004-upstream-behaviours.md#what-the-kubernetes-simulator-stands-in-for).
func (s *Sim) jobs(ctx context.Context) error {
	var list objectList
	if err := s.call(ctx, http.MethodGet, "/apis/batch/v1/jobs", "", nil, &list); err != nil {
		return err
	}
	var errs []error
	for _, job := range list.Items {
		if suspended, _ := job.Spec["suspend"].(bool); suspended {
			continue
		}
		if by, _ := job.Spec["managedBy"].(string); by != "" && by != jobControllerName {
			continue
		}
		conditions, _ := job.Status["conditions"].([]any)
		if conditionTrue(conditions, "Complete") || conditionTrue(conditions, "Failed") {
			continue
		}
		succeeded := 1
		if c, ok := job.Spec["completions"]; ok && c != nil {
			succeeded = num(c)
		}
		now := time.Now().UTC().Format(time.RFC3339)
		status := map[string]any{
			"succeeded": succeeded, "active": 0, "ready": 0, "terminating": 0, "failed": num(job.Status["failed"]),
			"uncountedTerminatedPods": map[string]any{}, "completionTime": now,
		}
		if job.Status["startTime"] == nil {
			status["startTime"] = now
		}
		if job.Spec["completionMode"] == "Indexed" {
			status["completedIndexes"] = indexes(succeeded)
		}
		kept := slices.DeleteFunc(slices.Clone(conditions), func(c any) bool {
			m, _ := c.(map[string]any)
			return m["type"] == "SuccessCriteriaMet" || m["type"] == "Complete"
		})
		for _, t := range []string{"SuccessCriteriaMet", "Complete"} {
			kept = append(kept, map[string]any{"type": t, "status": "True", "reason": "CompletionsReached",
				"message": "Reached expected number of succeeded pods", "lastProbeTime": now, "lastTransitionTime": now})
		}
		status["conditions"] = kept
		errs = append(errs, s.call(ctx, http.MethodPatch, job.path("batch/v1", "jobs")+"/status", "application/merge-patch+json", map[string]any{"status": status}, nil))
	}
	return errors.Join(errs...)
}

// indexes is status.completedIndexes of an Indexed Job whose indexes 0 to
// n-1 all succeeded, written as the job controller writes it
// (orderedIntervals.String: "0", "0,1", "0-2").
func indexes(n int) string {
	switch n {
	case 0:
		return ""
	case 1:
		return "0"
	case 2:
		return "0,1"
	}
	return fmt.Sprintf("0-%d", n-1)
}

// conditionTrue says whether conditions hold one of type t, True.
func conditionTrue(conditions []any, t string) bool {
	for _, c := range conditions {
		if m, _ := c.(map[string]any); m["type"] == t && m["status"] == "True" {
			return true
		}
	}
	return false
}

// templateHash names a pod template, as the deployment controller's
// pod-template-hash does (its value differs; only its stability matters).
func templateHash(template map[string]any) (string, error) {
	data, err := json.Marshal(template) // map keys are sorted: stable
	if err != nil {
		return "", fmt.Errorf("unable to hash pod template: %w", err)
	}
	h := fnv.New32a()
	_, _ = h.Write(data)
	return fmt.Sprintf("%x", h.Sum32()), nil
}

// withHashLabel is the template with the pod-template-hash label added.
func withHashLabel(template map[string]any, hash string) map[string]any {
	data, _ := json.Marshal(template)
	var out map[string]any
	_ = json.Unmarshal(data, &out)
	meta, _ := out["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		out["metadata"] = meta
	}
	labels, _ := meta["labels"].(map[string]any)
	if labels == nil {
		labels = map[string]any{}
	}
	labels["pod-template-hash"] = hash
	meta["labels"] = labels
	return out
}

type object struct {
	Metadata struct {
		Name       string `json:"name"`
		Namespace  string `json:"namespace"`
		UID        string `json:"uid"`
		Generation int    `json:"generation"`
		// OwnerReferences name the object's owners (kind and uid).
		OwnerReferences []struct {
			Kind       string `json:"kind"`
			UID        string `json:"uid"`
			Controller bool   `json:"controller"`
		} `json:"ownerReferences"`
	} `json:"metadata"`
	Spec   map[string]any `json:"spec"`
	Status map[string]any `json:"status"`
}

func (o object) path(groupVersion, resource string) string {
	return fmt.Sprintf("/apis/%s/namespaces/%s/%s/%s", groupVersion, o.Metadata.Namespace, resource, o.Metadata.Name)
}

type objectList struct {
	Items []object `json:"items"`
}

// num is a JSON number as an int (0 when absent).
func num(v any) int {
	f, _ := v.(float64)
	return int(f)
}

var (
	errNotFound = errors.New("not found")
	errConflict = errors.New("already exists")
)

func (s *Sim) call(ctx context.Context, method, path, contentType string, body, out any) error {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("unable to encode %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(data)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, rd)
	if err != nil {
		return fmt.Errorf("unable to build %s %s: %w", method, path, err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.hc.Do(req)
	if err != nil {
		return fmt.Errorf("unable to call %s %s: %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%s %s: %w", method, path, errNotFound)
	case resp.StatusCode == http.StatusConflict:
		return fmt.Errorf("%s %s: %w", method, path, errConflict)
	case resp.StatusCode/100 != 2:
		return fmt.Errorf("unable to call %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(data)))
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("unable to decode %s %s: %w", method, path, err)
		}
	}
	return nil
}
