package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/fluodata/talos-pulumi/internal/kubeapi"
)

// What Talos and talosctl upgrade-k8s apply the bootstrap manifests with
// (talos pkg/machinery v1.13.9 constants/constants.go:1128-1135): the field
// manager of the applies, and the inventory ConfigMap that records what
// was applied, so that an object Talos no longer renders is pruned.
const (
	ManifestFieldManager = constants.KubernetesFieldManagerName
	InventoryNamespace   = constants.KubernetesInventoryNamespace
	InventoryName        = constants.KubernetesBootstrapManifestsInventoryName
	// inventoryAnnotation marks an object as the inventory's
	// (go-kubernetes v0.2.36 kubernetes/ssa/inventory.go:17).
	inventoryAnnotation = "config.k8s.io/owning-inventory"
)

// ErrInventory means an object belongs to another inventory: the sync
// neither changes nor prunes it.
var ErrInventory = errors.New("object of another inventory")

// SyncManifests brings the bootstrap manifests Talos renders (CoreDNS,
// kube-proxy where enabled, the RBAC of node bootstrap, ...) up to date
// after a Kubernetes upgrade, as the last step of talosctl upgrade-k8s
// (talos v1.13.9 pkg/cluster/kubernetes/talos_managed.go:163-165, after
// the static pods, kube-proxy and the kubelets; syncManifestsSSA,
// talos_managed.go:511-581): Talos applies them only at bootstrap. With
// upgrade-k8s's defaults: every object applied server-side with Talos's
// field manager, forced, in the inventory; an object of the inventory no
// longer rendered pruned; an object of another inventory refused
// (AdoptIfNoInventory); no immutable field recreated (--manifests-force
// off); then a wait until the changed workloads rolled out.
func (o Ops) SyncManifests(ctx context.Context) error {
	if o.Kube == nil {
		return errors.New("unable to sync the bootstrap manifests: no Kubernetes API")
	}
	t := o.Timing.WithDefaults()
	objects, from, err := o.readManifests(ctx)
	if err != nil {
		return err
	}
	kube, err := o.Kube(ctx, "")
	if err != nil {
		return fmt.Errorf("unable to open the Kubernetes API: %w", err)
	}
	inventory, err := kube.Inventory(ctx, InventoryNamespace, InventoryName)
	if err != nil {
		return err
	}
	o.logf("updating the bootstrap manifests of %s: %d objects", from, len(objects))
	// Cluster definitions first (CRDs, Namespaces, ClusterRoles), as
	// fluxcd ssa's ApplyAllStaged stages them (fluxcd/pkg/ssa v0.72.0
	// manager_apply.go:286-327, utils/is.go:28-39).
	slices.SortStableFunc(objects, func(a, b map[string]any) int { return rank(a) - rank(b) })
	applied, rollouts, applyErr := o.applyManifests(ctx, kube, objects)
	// The inventory is written with what was applied even when an apply
	// failed half-way, and nothing is pruned then (go-kubernetes v0.2.36
	// kubernetes/ssa/apply.go:312-340).
	keys := slices.Clone(inventory)
	for _, id := range applied {
		if !slices.Contains(keys, id.String()) {
			keys = append(keys, id.String())
		}
	}
	slices.Sort(keys)
	if err := kube.WriteInventory(ctx, InventoryNamespace, InventoryName, keys); err != nil || applyErr != nil {
		return errors.Join(applyErr, err)
	}
	rendered := map[string]bool{}
	for _, obj := range objects {
		rendered[kubeapi.IDOf(obj).String()] = true
	}
	kept, pruneErr := o.prune(ctx, kube, keys, rendered)
	if err := kube.WriteInventory(ctx, InventoryNamespace, InventoryName, kept); err != nil || pruneErr != nil {
		return errors.Join(pruneErr, err)
	}
	// Then wait until what changed is ready, as upgrade-k8s does unless
	// told not to (talos_managed.go:568-580: every 2 s, 5 min at most;
	// here Timing.Poll and Timing.Healthy).
	for _, r := range rollouts {
		id := kubeapi.IDOf(r)
		err := o.poll(ctx, t, fmt.Sprintf("%s %s/%s to roll out", id.Kind, id.Namespace, id.Name), func() error {
			cur, err := kube.GetObject(ctx, r["apiVersion"].(string), id.Kind, id.Namespace, id.Name)
			if err != nil {
				return err
			}
			if done, detail := kubeapi.Rollout(cur); !done {
				return errors.New(detail)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	o.logf("the bootstrap manifests are up to date")
	return nil
}

// readManifests reads the manifests a running control plane renders (the
// first of ControlPlanes that answers, the leaving ones skipped); every
// control plane renders the same from the same config. None read is an
// error: with none, the prune would delete every object of the inventory.
func (o Ops) readManifests(ctx context.Context) ([]map[string]any, string, error) {
	var errs []error
	for _, ip := range o.ControlPlanes {
		if slices.Contains(o.Leaving, ip) {
			continue
		}
		objects, err := o.API.Manifests(ctx, ip)
		switch {
		case err != nil:
			errs = append(errs, err)
		case len(objects) == 0:
			errs = append(errs, fmt.Errorf("control plane %s renders no bootstrap manifests", ip))
		default:
			return objects, "control plane " + ip, nil
		}
	}
	return nil, "", fmt.Errorf("unable to read the bootstrap manifests from a control plane: %w", errors.Join(errs...))
}

// applyManifests applies each object, marked as the inventory's: those
// applied, and the workloads whose apply changed them, to wait for.
func (o Ops) applyManifests(ctx context.Context, kube Kube, objects []map[string]any) ([]kubeapi.ObjectID, []map[string]any, error) {
	var applied []kubeapi.ObjectID
	var rollouts []map[string]any
	for _, obj := range objects {
		id := kubeapi.IDOf(obj)
		apiVersion, _ := obj["apiVersion"].(string)
		meta, _ := obj["metadata"].(map[string]any)
		if meta == nil {
			return applied, nil, fmt.Errorf("unable to apply %s: no metadata", id)
		}
		annotations, _ := meta["annotations"].(map[string]any)
		if owner, ok := annotations[inventoryAnnotation]; ok && owner != InventoryName {
			// go-kubernetes v0.2.36 kubernetes/ssa/apply.go:425-444,
			// prepareObjects.
			return applied, nil, fmt.Errorf("unable to apply %s: the manifest names inventory %v: %w", describe(id), owner, ErrInventory)
		}
		before := ""
		cur, err := kube.GetObject(ctx, apiVersion, id.Kind, id.Namespace, id.Name)
		switch {
		case err == nil:
			if owner := ownerOf(cur); owner != "" && owner != InventoryName {
				// AdoptIfNoInventory, upgrade-k8s's default policy
				// (go-kubernetes v0.2.36 kubernetes/ssa/inventory_policy.go:91-120).
				return applied, nil, fmt.Errorf("unable to apply %s: it belongs to inventory %s: %w", describe(id), owner, ErrInventory)
			}
			before = resourceVersionOf(cur)
		case !errors.Is(err, kubeapi.ErrNotFound):
			return applied, nil, fmt.Errorf("unable to apply %s: %w", describe(id), err)
		}
		obj = withAnnotation(obj, inventoryAnnotation, InventoryName)
		out, err := kube.ApplyObject(ctx, obj, kubeapi.ApplyOptions{FieldManager: ManifestFieldManager, Force: true})
		if err != nil {
			return applied, nil, err
		}
		applied = append(applied, id)
		action := "unchanged"
		switch {
		case before == "":
			action = "created"
		case resourceVersionOf(out) != before:
			action = "configured"
		}
		if done, _ := kubeapi.Rollout(out); action != "unchanged" && !done {
			rollouts = append(rollouts, out)
		}
		o.logf("  %s %s", describe(id), action)
	}
	return applied, rollouts, nil
}

// prune deletes the objects of the inventory no longer rendered (not
// after an apply failed), as upstream's Apply does unless --manifests-no-prune
// (go-kubernetes v0.2.36 kubernetes/ssa/apply.go:342-391): one already gone
// leaves the inventory, one of another inventory is refused. It returns
// the inventory's keys left.
func (o Ops) prune(ctx context.Context, kube Kube, keys []string, rendered map[string]bool) ([]string, error) {
	var kept []string
	var errs []error
	for i, key := range keys {
		if rendered[key] {
			kept = append(kept, key)
			continue
		}
		id, err := kubeapi.ParseObjectID(key)
		var version string
		if err == nil {
			version, err = kube.PreferredVersion(ctx, id.Group)
		}
		var cur map[string]any
		if err == nil {
			cur, err = kube.GetObject(ctx, version, id.Kind, id.Namespace, id.Name)
		}
		switch {
		case errors.Is(err, kubeapi.ErrNotFound):
			continue // gone: out of the inventory
		case err != nil:
			return append(kept, keys[i:]...), fmt.Errorf("unable to prune %s: %w", key, err)
		}
		if owner := ownerOf(cur); owner != "" && owner != InventoryName {
			return append(kept, keys[i:]...), fmt.Errorf("unable to prune %s: it belongs to inventory %s: %w", describe(id), owner, ErrInventory)
		}
		if err := kube.DeleteObject(ctx, version, id.Kind, id.Namespace, id.Name); err != nil {
			kept = append(kept, key)
			errs = append(errs, err)
			continue
		}
		o.logf("  %s deleted (no longer rendered)", describe(id))
	}
	return kept, errors.Join(errs...)
}

// rank orders the cluster definitions first.
func rank(obj map[string]any) int {
	id := kubeapi.IDOf(obj)
	switch {
	case id.Group == "apiextensions.k8s.io" && id.Kind == "CustomResourceDefinition",
		id.Group == "" && id.Kind == "Namespace",
		id.Group == "rbac.authorization.k8s.io" && id.Kind == "ClusterRole":
		return 0
	}
	return 1
}

func describe(id kubeapi.ObjectID) string {
	kind := id.Kind
	if id.Group != "" {
		kind += "." + id.Group
	}
	if id.Namespace == "" {
		return kind + " " + id.Name
	}
	return kind + " " + id.Namespace + "/" + id.Name
}

func ownerOf(obj map[string]any) string {
	meta, _ := obj["metadata"].(map[string]any)
	annotations, _ := meta["annotations"].(map[string]any)
	s, _ := annotations[inventoryAnnotation].(string)
	return s
}

func resourceVersionOf(obj map[string]any) string {
	meta, _ := obj["metadata"].(map[string]any)
	s, _ := meta["resourceVersion"].(string)
	return s
}

// withAnnotation is a copy of obj with the annotation set (the manifest
// read stays as it is).
func withAnnotation(obj map[string]any, key, value string) map[string]any {
	out := make(map[string]any, len(obj))
	for k, v := range obj {
		out[k] = v
	}
	meta := map[string]any{}
	if m, ok := obj["metadata"].(map[string]any); ok {
		for k, v := range m {
			meta[k] = v
		}
	}
	annotations := map[string]any{}
	if a, ok := meta["annotations"].(map[string]any); ok {
		for k, v := range a {
			annotations[k] = v
		}
	}
	annotations[key] = value
	meta["annotations"] = annotations
	out["metadata"] = meta
	return out
}
