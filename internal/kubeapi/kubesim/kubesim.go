// Package kubesim plays, against a real kube-apiserver, the parts of a
// cluster that are not the API server: the kubelets (Nodes that register
// and report Ready, a control plane's mirror pods) and the controllers whose results Helm's --wait and the
// program's waits read (a Deployment's ReplicaSet and both their statuses,
// a DaemonSet's status, a deleted namespace finalized). No Pod ever runs: the statuses say what the
// controllers would say once the Pods were ready.
//
// What it writes is what Helm v3.20's ReadyChecker (pkg/kube/ready.go,
// inside pulumi-kubernetes v4.32) reads: for a Deployment, the new
// ReplicaSet found by deploymentutil.GetNewReplicaSet (owned by the
// Deployment, matched by its selector, its template equal but for the
// pod-template-hash label) with readyReplicas, and the Deployment's
// observedGeneration; for a DaemonSet, observedGeneration and the
// scheduled, updated and ready counts.
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
)

// Node is a kubelet the simulator plays.
type Node struct {
	Name, IP       string
	ControlPlane   bool
	KubeletVersion string // e.g. v1.34.1
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

	mu    sync.Mutex
	nodes map[string]Node
	errs  []error
}

// New returns a simulator for the API server at base, reached with hc (an
// admin client: system:masters).
func New(base string, hc *http.Client) *Sim {
	return &Sim{base: strings.TrimRight(base, "/"), hc: hc, nodes: map[string]Node{}}
}

// Join registers a kubelet: its Node appears at the next reconcile.
func (s *Sim) Join(n Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[n.Name] = n
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

// Reconcile makes one pass: Nodes, then DaemonSets, then Deployments.
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
	errs = append(errs, s.daemonSets(ctx, len(nodes)), s.deployments(ctx), s.namespaces(ctx))
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
		err := s.call(ctx, http.MethodPost, "/api/v1/namespaces/kube-system/pods", "application/json", map[string]any{
			"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": name, "namespace": "kube-system",
				"annotations": map[string]any{"kubernetes.io/config.mirror": name, "kubernetes.io/config.source": "file"},
				"labels":      map[string]any{"k8s-app": component, "tier": "control-plane"}},
			"spec": map[string]any{"nodeName": n.Name, "containers": []any{map[string]any{
				"name": component, "image": "registry.k8s.io/" + component + ":" + n.KubeletVersion}}},
		}, nil)
		if err != nil && !errors.Is(err, errConflict) {
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
	var errs []error
	for _, d := range list.Items {
		errs = append(errs, s.deployment(ctx, d))
	}
	return errors.Join(errs...)
}

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
	if num(d.Status["observedGeneration"]) == d.Metadata.Generation && num(d.Status["readyReplicas"]) == replicas {
		return nil
	}
	return s.call(ctx, http.MethodPatch, d.path("apps/v1", "deployments")+"/status", "application/merge-patch+json", map[string]any{"status": map[string]any{
		"observedGeneration": d.Metadata.Generation, "replicas": replicas, "updatedReplicas": replicas,
		"readyReplicas": replicas, "availableReplicas": replicas,
		"conditions": []any{map[string]any{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}},
	}}, nil)
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
