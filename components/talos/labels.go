package talos

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/labels"

	"github.com/fluodata/talos-pulumi/components/inputs"
)

// LabelsPatch sets a node's Kubernetes labels through Talos
// (machine.nodeLabels): Talos applies them to its Node and removes those
// it set once they leave the config, without a reboot.
func LabelsPatch(nodeLabels map[string]string) string {
	return render(map[string]any{"machine": map[string]any{"nodeLabels": nodeLabels}})
}

// checkLabels records the problems of a node's labels at path: each key a
// qualified name and each value a label value, as Talos's machinery
// validates machine.nodeLabels (labels.Validate). A worker sets its labels
// with its kubelet's credentials, which the API server's NodeRestriction
// admission limits in the kubernetes.io and k8s.io namespaces to the
// kubelet's own labels (isKubeletLabel); a control plane sets them as
// admin.
func checkLabels(p *inputs.Problems, path string, role Role, nodeLabels map[string]string) {
	for _, key := range slices.Sorted(maps.Keys(nodeLabels)) {
		at := fmt.Sprintf("%s[%q]", path, key)
		if err := labels.ValidateQualifiedName(key); err != nil {
			p.Add(at, "is not a label key: %v", err)
			continue
		}
		if err := labels.ValidateLabelValue(nodeLabels[key]); err != nil {
			p.Add(at, "%q is not a label value: %v", nodeLabels[key], err)
		}
		if role == RoleWorker && kubernetesNamespace(key) && !isKubeletLabel(key) {
			p.Add(at, "a worker cannot set this label on itself: the API server's NodeRestriction admission refuses labels under kubernetes.io and k8s.io to a node's own credentials, except the kubelet's (node.kubernetes.io/..., kubelet.kubernetes.io/..., topology.kubernetes.io/zone and region); use a key of your own domain, e.g. example.com/%s", key[strings.LastIndex(key, "/")+1:])
		}
	}
}

// kubernetesNamespace says a label key is in the kubernetes.io or k8s.io
// namespace (or a subdomain of one), where NodeRestriction applies.
func kubernetesNamespace(key string) bool {
	ns, _, found := strings.Cut(key, "/")
	if !found {
		return false
	}
	for _, d := range []string{"kubernetes.io", "k8s.io"} {
		if ns == d || strings.HasSuffix(ns, "."+d) {
			return true
		}
	}
	return false
}

// kubeletLabels and kubeletLabelNamespaces are the labels a kubelet may
// set on its own Node, as k8s.io/kubelet v0.37.2 pkg/apis/well_known_labels.go
// lists them (kubeletLabels, kubeletLabelNamespaces; the values of
// k8s.io/api core/v1 well_known_labels.go). Not imported: k8s.io/api alone
// is 2 MB of source in every test binary here.
var (
	kubeletLabels = []string{
		"kubernetes.io/hostname", "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
		"failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
		"beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type",
		"kubernetes.io/os", "kubernetes.io/arch", "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
	}
	kubeletLabelNamespaces = []string{"kubelet.kubernetes.io", "node.kubernetes.io"}
)

// isKubeletLabel is k8s.io/kubelet's IsKubeletLabel: one of its labels, or
// a key in one of its namespaces or their subdomains.
func isKubeletLabel(key string) bool {
	if slices.Contains(kubeletLabels, key) {
		return true
	}
	ns, _, found := strings.Cut(key, "/")
	if !found {
		return false
	}
	for _, allowed := range kubeletLabelNamespaces {
		if ns == allowed || strings.HasSuffix(ns, "."+allowed) {
			return true
		}
	}
	return false
}
