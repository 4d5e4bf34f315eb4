package talos

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/go-multierror"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/siderolabs/talos/pkg/machinery/labels"
	"go.yaml.in/yaml/v3"

	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/internal/kubeapi"
)

// TaintsPatch sets a node's Kubernetes taints, in Talos's form (key to
// "value:Effect" or "Effect"). A control plane's are machine.nodeTaints:
// Talos sets them with admin credentials and removes those that leave the
// config. A worker's kubelet may not change its Node's taints (the API
// server's NodeRestriction refuses it, so Talos's own apply of
// machine.nodeTaints fails there): the kubelet registers the Node with
// them (registerWithTaints: no pod lands before them), and the settle hook
// changes them later as the cluster's admin (workerTaints).
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

// workerTaints is the taints a worker's apply registers its Node with
// (machine.kubelet.extraConfig.registerWithTaints of its merged config,
// see TaintsPatch); false when the config does not load.
func workerTaints(inputs resource.PropertyMap) ([]kubeapi.Taint, bool) {
	config, err := MergedConfig(inputs)
	if err != nil {
		return nil, false
	}
	dec := yaml.NewDecoder(strings.NewReader(string(config)))
	for {
		var doc struct {
			Version string `yaml:"version"`
			Machine struct {
				Kubelet struct {
					ExtraConfig struct {
						RegisterWithTaints []kubeapi.Taint `yaml:"registerWithTaints"`
					} `yaml:"extraConfig"`
				} `yaml:"kubelet"`
			} `yaml:"machine"`
		}
		if dec.Decode(&doc) != nil {
			return nil, false
		}
		if doc.Version == "v1alpha1" {
			return doc.Machine.Kubelet.ExtraConfig.RegisterWithTaints, true
		}
	}
}

// taintChange is what a worker's Node needs when its apply goes from old
// to new inputs: the taints it must carry and the keys it must lose;
// changed is false when its config's taints stay as they were, or when
// either config does not load (nothing is removed on a guess).
func taintChange(oldInputs, newInputs resource.PropertyMap) (want []kubeapi.Taint, drop []string, changed bool) {
	before, okBefore := workerTaints(oldInputs)
	after, okAfter := workerTaints(newInputs)
	if !okBefore || !okAfter || slices.Equal(before, after) {
		return nil, nil, false
	}
	for _, t := range before {
		if !slices.ContainsFunc(after, func(a kubeapi.Taint) bool { return a.Key == t.Key }) {
			drop = append(drop, t.Key)
		}
	}
	return after, drop, true
}
