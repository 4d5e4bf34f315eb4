package talos

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/go-multierror"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/siderolabs/talos/pkg/machinery/labels"

	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/internal/kubeapi"
)

// TaintsPatch sets a node's Kubernetes taints, in Talos's form (key to
// "value:Effect" or "Effect"). A control plane's are machine.nodeTaints:
// Talos sets them with admin credentials and removes those that leave the
// config. A worker's kubelet may not change its Node's taints (the API
// server's NodeRestriction refuses it, so Talos's own apply of
// machine.nodeTaints fails there): the kubelet registers the Node with
// them (registerWithTaints: no pod lands before them), and the worker's
// taints resource (TaintsSuffix) sets them later as the cluster's admin.
func TaintsPatch(role Role, taints map[string]string) string {
	if role == RoleControlPlane {
		return render(map[string]any{"machine": map[string]any{"nodeTaints": taints}})
	}
	list := make([]map[string]string, 0, len(taints))
	for _, t := range taintList(taints) {
		m := map[string]string{"key": t.Key, "effect": t.Effect}
		if t.Value != "" {
			m["value"] = t.Value
		}
		list = append(list, m)
	}
	return render(map[string]any{"machine": map[string]any{"kubelet": map[string]any{"extraConfig": map[string]any{"registerWithTaints": list}}}})
}

// taintList is taints in Talos's form as Kubernetes taints, by key.
func taintList(taints map[string]string) []kubeapi.Taint {
	out := make([]kubeapi.Taint, 0, len(taints))
	for _, key := range slices.Sorted(maps.Keys(taints)) {
		value, effect, found := strings.Cut(taints[key], ":")
		if !found {
			value, effect = "", value
		}
		out = append(out, kubeapi.Taint{Key: key, Value: value, Effect: effect})
	}
	return out
}

// checkTaints records the problems of a node's taints at path, as Talos's
// machinery validates machine.nodeTaints (labels.ValidateTaints): each
// key a qualified name, each value "Effect" or "value:Effect" with a
// label value and one of Kubernetes's effects.
func checkTaints(p *inputs.Problems, path string, taints map[string]string) {
	for _, key := range slices.Sorted(maps.Keys(taints)) {
		if err := labels.ValidateTaints(map[string]string{key: taints[key]}); err != nil {
			// One taint: its one error, without the multierror's frame.
			var multi *multierror.Error
			if errors.As(err, &multi) && len(multi.Errors) == 1 {
				err = multi.Errors[0]
			}
			p.Add(fmt.Sprintf("%s[%q]", path, key), "%q is not a taint: %v (write \"NoSchedule\", or \"value:NoSchedule\"; the effects are NoSchedule, PreferNoSchedule and NoExecute)", taints[key], err)
		}
	}
}

// TaintsSuffix names a worker's taints resource (after the cluster's
// name, before the node's).
const TaintsSuffix = "-taints-"

// taintsEnvKey holds a worker's taints, as JSON, in its taints resource's
// environment.
const taintsEnvKey = "NODE_TAINTS"

// taintsEnv is a worker's taints resource's environment: the node, and its
// taints as Kubernetes taints by key.
func taintsEnv(n NodeSpec) pulumi.StringMap {
	taints, _ := json.Marshal(taintList(n.Taints)) // strings only: never fails
	return pulumi.StringMap{
		"NODE_NAME":  pulumi.String(n.Name),
		"NODE_IP":    pulumi.String(n.IP),
		taintsEnvKey: pulumi.String(string(taints)),
	}
}

// taintsOf reads the taints a taints resource's inputs carry; false when
// there are no inputs (a create) or they do not read.
func taintsOf(inputs resource.PropertyMap) ([]kubeapi.Taint, bool) {
	env := PlainValue(inputs["environment"])
	if !env.IsObject() {
		return nil, false
	}
	v := PlainValue(env.ObjectValue()[taintsEnvKey])
	if !v.IsString() {
		return nil, false
	}
	var taints []kubeapi.Taint
	if err := json.Unmarshal([]byte(v.StringValue()), &taints); err != nil {
		return nil, false
	}
	return taints, true
}

// setTaints runs before a worker's taints resource is created or updated:
// its Node gets the new taints and loses the keys only the old ones had.
// A Node not registered yet is left to its kubelet, which registers it
// with them. Its error fails the step: the state keeps the old taints, and
// the next up tries again.
func (d *dayTwo) setTaints(args *pulumi.ResourceHookArgs) error {
	want, ok := taintsOf(args.NewInputs)
	if !ok {
		return fmt.Errorf("unable to read the taints of %s", args.Name)
	}
	old, _ := taintsOf(args.OldInputs)
	var drop []string
	for _, t := range old {
		if !slices.ContainsFunc(want, func(w kubeapi.Taint) bool { return w.Key == t.Key }) {
			drop = append(drop, t.Key)
		}
	}
	if len(want) == 0 && len(drop) == 0 {
		return nil // none to set, none to remove: nothing is asked
	}
	n, err := d.node(d.applyPrefix + PlainValue(PlainValue(args.NewInputs["environment"]).ObjectValue()["NODE_NAME"]).StringValue())
	if err != nil {
		return err
	}
	ctx, cancel := d.hookContext()
	defer cancel()
	ops, err := d.ops(ctx, args.URN)
	if err != nil {
		return err
	}
	return ops.SetTaints(ctx, n, want, drop)
}
