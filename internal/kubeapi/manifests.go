package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// ObjectID names an object as a server-side-apply inventory does: group,
// kind, namespace ("" when cluster-scoped) and name, without a version.
type ObjectID struct {
	Group, Kind, Namespace, Name string
}

// rbacKinds are the kinds whose names may hold colons, which an inventory
// key writes as "__" (fluxcd cli-utils v0.37.2-flux.1
// pkg/object/objmetadata.go:44-50, RBACGroupKind).
var rbacKinds = []string{"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}

// String is the inventory key of the object, as cli-utils writes it
// (objmetadata.go:122-132, ObjMetadata.String):
// <namespace>_<name>_<group>_<kind>.
func (o ObjectID) String() string {
	name := o.Name
	if o.Group == "rbac.authorization.k8s.io" && slices.Contains(rbacKinds, o.Kind) {
		name = strings.ReplaceAll(name, ":", "__")
	}
	return strings.Join([]string{o.Namespace, name, o.Group, o.Kind}, "_")
}

// ParseObjectID reads an inventory key (objmetadata.go:64-112,
// ParseObjMetadata): the first field is the namespace, the last two the
// group and the kind, the rest the name.
func ParseObjectID(s string) (ObjectID, error) {
	fields := strings.Split(s, "_")
	if len(fields) < 4 {
		return ObjectID{}, fmt.Errorf("unable to parse inventory key %q: not <namespace>_<name>_<group>_<kind>", s)
	}
	o := ObjectID{Namespace: fields[0], Group: fields[len(fields)-2], Kind: fields[len(fields)-1]}
	o.Name = strings.Join(fields[1:len(fields)-2], "_")
	o.Name = strings.ReplaceAll(o.Name, "__", ":")
	if o.Name == "" || o.Kind == "" || strings.Contains(o.Name, "_") {
		return ObjectID{}, fmt.Errorf("unable to parse inventory key %q: not <namespace>_<name>_<group>_<kind>", s)
	}
	return o, nil
}

// IDOf is the ID of an object (its apiVersion, kind and metadata).
func IDOf(obj map[string]any) ObjectID {
	group, _, grouped := strings.Cut(str(obj["apiVersion"]), "/")
	if !grouped {
		group = "" // "v1": the core group
	}
	meta, _ := obj["metadata"].(map[string]any)
	return ObjectID{Group: group, Kind: str(obj["kind"]), Namespace: str(meta["namespace"]), Name: str(meta["name"])}
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// mapping is where the API serves a kind: its resource and scope.
type mapping struct {
	resource   string
	namespaced bool
}

// mapKind finds the resource of a kind in the discovery document of its
// group version (/api/v1, /apis/<group>/<version>), as client-go's REST
// mapper does; cached per client. A kind the server does not serve gives an
// error wrapping ErrNotFound.
func (c *Client) mapKind(ctx context.Context, apiVersion, kind string) (mapping, error) {
	key := apiVersion + "/" + kind
	if m, ok := c.kinds.Load(key); ok {
		return m.(mapping), nil
	}
	path := "/apis/" + apiVersion
	if !strings.Contains(apiVersion, "/") {
		path = "/api/" + apiVersion
	}
	var list struct {
		Resources []struct {
			Name       string `json:"name"`
			Kind       string `json:"kind"`
			Namespaced bool   `json:"namespaced"`
		} `json:"resources"`
	}
	if err := c.do(ctx, http.MethodGet, path, nil, "", nil, &list); err != nil {
		return mapping{}, fmt.Errorf("unable to find the resource of %s %s: %w", apiVersion, kind, err)
	}
	for _, r := range list.Resources {
		if r.Kind == kind && !strings.Contains(r.Name, "/") {
			m := mapping{resource: r.Name, namespaced: r.Namespaced}
			c.kinds.Store(key, m)
			return m, nil
		}
	}
	return mapping{}, fmt.Errorf("unable to find the resource of %s %s: %w", apiVersion, kind, &APIError{Method: http.MethodGet, Path: path, Code: http.StatusNotFound, Message: "the server serves no kind " + kind})
}

// PreferredVersion is the version the API server prefers for a group ("v1"
// for the core group): an inventory key has none.
func (c *Client) PreferredVersion(ctx context.Context, group string) (string, error) {
	if group == "" {
		return "v1", nil
	}
	var g struct {
		PreferredVersion struct {
			GroupVersion string `json:"groupVersion"`
		} `json:"preferredVersion"`
	}
	if err := c.do(ctx, http.MethodGet, "/apis/"+url.PathEscape(group), nil, "", nil, &g); err != nil {
		return "", fmt.Errorf("unable to read the versions of API group %s: %w", group, err)
	}
	return g.PreferredVersion.GroupVersion, nil
}

// objectPath is the path of an object of apiVersion and kind; a namespaced
// one without a namespace is in "default", as Talos applies it (talos
// v1.13.9 internal/app/machined/pkg/controllers/k8s/manifest_apply.go:307-310),
// a cluster-scoped one loses the namespace it may have.
func (c *Client) objectPath(ctx context.Context, apiVersion, kind, namespace, name string) (string, error) {
	m, err := c.mapKind(ctx, apiVersion, kind)
	if err != nil {
		return "", err
	}
	prefix := "/apis/" + apiVersion
	if !strings.Contains(apiVersion, "/") {
		prefix = "/api/" + apiVersion
	}
	if m.namespaced {
		if namespace == "" {
			namespace = "default"
		}
		prefix += "/namespaces/" + url.PathEscape(namespace)
	}
	return prefix + "/" + m.resource + "/" + url.PathEscape(name), nil
}

// ApplyOptions are the parameters of a server-side apply.
type ApplyOptions struct {
	// FieldManager owns the applied fields.
	FieldManager string
	// Force takes over the fields another manager owns (a conflict is
	// an error otherwise).
	Force bool
	// DryRun asks what the apply would give, changing nothing.
	DryRun bool
}

// ApplyObject server-side applies obj (a PATCH of type
// application/apply-patch+yaml, whose JSON body is YAML too) and returns
// the object as the API server has it after the apply: what client-go's
// Patch(types.ApplyPatchType) with fieldManager and force sends, as
// fluxcd ssa's apply does for upstream's manifest sync (fluxcd/pkg/ssa
// v0.72.0 manager_apply.go:361-376, dryRunApply and apply).
func (c *Client) ApplyObject(ctx context.Context, obj map[string]any, opts ApplyOptions) (map[string]any, error) {
	id := IDOf(obj)
	path, err := c.objectPath(ctx, str(obj["apiVersion"]), id.Kind, id.Namespace, id.Name)
	if err != nil {
		return nil, fmt.Errorf("unable to apply %s: %w", id, err)
	}
	q := url.Values{"fieldManager": {opts.FieldManager}}
	if opts.Force {
		q.Set("force", "true")
	}
	if opts.DryRun {
		q.Set("dryRun", "All")
	}
	var out map[string]any
	if err := c.do(ctx, http.MethodPatch, path, q, "application/apply-patch+yaml", obj, &out); err != nil {
		return nil, fmt.Errorf("unable to apply %s: %w", id, err)
	}
	return out, nil
}

// GetObject reads an object; one that does not exist gives an error
// wrapping ErrNotFound.
func (c *Client) GetObject(ctx context.Context, apiVersion, kind, namespace, name string) (map[string]any, error) {
	path, err := c.objectPath(ctx, apiVersion, kind, namespace, name)
	var out map[string]any
	if err == nil {
		err = c.do(ctx, http.MethodGet, path, nil, "", nil, &out)
	}
	if err != nil {
		return nil, fmt.Errorf("unable to read %s %s/%s: %w", kind, namespace, name, err)
	}
	return out, nil
}

// DeleteObject deletes an object, its dependents in the background (the
// propagation upstream's prune asks: go-kubernetes v0.2.36
// kubernetes/ssa/apply.go:368-370). One already gone is no error.
func (c *Client) DeleteObject(ctx context.Context, apiVersion, kind, namespace, name string) error {
	path, err := c.objectPath(ctx, apiVersion, kind, namespace, name)
	if err == nil {
		err = c.do(ctx, http.MethodDelete, path, url.Values{"propagationPolicy": {"Background"}}, "", nil, nil)
	}
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("unable to delete %s %s/%s: %w", kind, namespace, name, err)
	}
	return nil
}

// Inventory reads the keys of an inventory ConfigMap, creating it empty
// when it does not exist, as upstream's inventory does (go-kubernetes
// v0.2.36 kubernetes/ssa/internal/inventory/configmap/inventory.go:35-72,
// NewInventory): the keys are the data's keys.
func (c *Client) Inventory(ctx context.Context, namespace, name string) ([]string, error) {
	path := "/api/v1/namespaces/" + url.PathEscape(namespace) + "/configmaps/" + url.PathEscape(name)
	var cm struct {
		Data map[string]string `json:"data"`
	}
	err := c.do(ctx, http.MethodGet, path, nil, "", nil, &cm)
	if errors.Is(err, ErrNotFound) {
		err = c.do(ctx, http.MethodPost, "/api/v1/namespaces/"+url.PathEscape(namespace)+"/configmaps", nil, "application/json",
			configMap(namespace, name, nil), nil)
	}
	if err != nil {
		return nil, fmt.Errorf("unable to read the inventory %s/%s: %w", namespace, name, err)
	}
	return slices.Sorted(maps.Keys(cm.Data)), nil
}

// WriteInventory replaces the keys of an inventory ConfigMap, with an
// update that names no resourceVersion, as upstream's Write does
// (inventory.go:89-108).
func (c *Client) WriteInventory(ctx context.Context, namespace, name string, keys []string) error {
	path := "/api/v1/namespaces/" + url.PathEscape(namespace) + "/configmaps/" + url.PathEscape(name)
	if err := c.do(ctx, http.MethodPut, path, nil, "application/json", configMap(namespace, name, keys), nil); err != nil {
		return fmt.Errorf("unable to write the inventory %s/%s: %w", namespace, name, err)
	}
	return nil
}

func configMap(namespace, name string, keys []string) map[string]any {
	data := map[string]any{}
	for _, k := range keys {
		data[k] = ""
	}
	return map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"data":     data,
	}
}

// Rollout says whether a workload the apply changed has rolled out, as
// kstatus (which upstream's wait uses: go-kubernetes v0.2.36
// kubernetes/ssa/wait.go) reads a Deployment, DaemonSet or StatefulSet:
// the controller saw the last generation and every replica is updated and
// available; detail says what is missing. Other kinds are done once
// applied.
func Rollout(obj map[string]any) (done bool, detail string) {
	spec, _ := obj["spec"].(map[string]any)
	status, _ := obj["status"].(map[string]any)
	meta, _ := obj["metadata"].(map[string]any)
	num := func(m map[string]any, k string) int64 {
		f, _ := m[k].(float64)
		return int64(f)
	}
	if str(obj["apiVersion"]) != "apps/v1" {
		return true, ""
	}
	if num(status, "observedGeneration") < num(meta, "generation") {
		return false, "its controller has not seen the new spec yet"
	}
	switch str(obj["kind"]) {
	case "Deployment", "StatefulSet":
		want := int64(1)
		if _, ok := spec["replicas"]; ok {
			want = num(spec, "replicas")
		}
		updated, ready := num(status, "updatedReplicas"), num(status, "readyReplicas")
		if updated < want || ready < want || num(status, "replicas") > want {
			return false, fmt.Sprintf("%d of %d replicas updated, %d ready, %d in all", updated, want, ready, num(status, "replicas"))
		}
	case "DaemonSet":
		want := num(status, "desiredNumberScheduled")
		updated, available := num(status, "updatedNumberScheduled"), num(status, "numberAvailable")
		if updated < want || available < want {
			return false, fmt.Sprintf("%d of %d pods updated, %d available", updated, want, available)
		}
	}
	return true, ""
}
