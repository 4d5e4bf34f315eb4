package talos

import (
	"maps"
	"regexp"
	"strings"
)

// Chart repositories and names of the in-cluster releases. Release names are
// fixed so a rename never installs a second copy next to the first.
const (
	CiliumRepo           = "https://helm.cilium.io"
	CiliumChart          = "cilium"
	CiliumRelease        = "cilium"
	ApproverRepo         = "https://postfinance.github.io/kubelet-csr-approver"
	ApproverChart        = "kubelet-csr-approver"
	ApproverRelease      = "kubelet-csr-approver"
	SystemNamespace      = "kube-system"
	maxOperatorReplicas  = 2
	ciliumTimeoutSeconds = 600
	approverTimeoutSecs  = 300
)

// CiliumValues are the values Talos needs (see Talos's "Deploying Cilium
// CNI"): the API through KubePrism on localhost (there is no kube-proxy and
// the VIP needs a running cluster), kube-proxy replacement, Talos's
// pre-mounted cgroup v2, and the capabilities Talos allows (no SYS_MODULE).
// user is merged over them.
func CiliumValues(nodeCount int, user map[string]any) map[string]any {
	base := map[string]any{
		"ipam":                 map[string]any{"mode": "kubernetes"},
		"kubeProxyReplacement": true,
		"k8sServiceHost":       "localhost",
		"k8sServicePort":       KubePrismPort,
		"cgroup": map[string]any{
			"autoMount": map[string]any{"enabled": false},
			"hostRoot":  "/sys/fs/cgroup",
		},
		"securityContext": map[string]any{"capabilities": map[string]any{
			"ciliumAgent": []any{"CHOWN", "KILL", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "SYS_ADMIN",
				"SYS_RESOURCE", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID"},
			"cleanCiliumState": []any{"NET_ADMIN", "SYS_ADMIN", "SYS_RESOURCE"},
		}},
		// The operator's replicas refuse to share a node; more replicas than
		// nodes never become ready and the release would wait forever.
		"operator": map[string]any{"replicas": min(maxOperatorReplicas, max(nodeCount, 1))},
	}
	return MergeValues(base, user)
}

// ApproverValues restrict the approver to this cluster's nodes: a CSR is
// approved only for one of these host names and from one of these IPs.
// Node names are not in DNS, so the DNS check is bypassed.
func ApproverValues(nodes []NodeSpec, extraIPs []string, user map[string]any) map[string]any {
	names := make([]string, 0, len(nodes))
	prefixes := make([]any, 0, len(nodes)+len(extraIPs))
	for _, n := range nodes {
		names = append(names, regexp.QuoteMeta(n.Name))
		prefixes = append(prefixes, n.IP+"/32")
	}
	for _, ip := range extraIPs {
		prefixes = append(prefixes, ip+"/32")
	}
	base := map[string]any{
		"providerRegex":       "^(" + strings.Join(names, "|") + ")$",
		"providerIpPrefixes":  prefixes,
		"bypassDnsResolution": true,
	}
	return MergeValues(base, user)
}

// MergeValues deep-merges over into base (objects merge, everything else is
// replaced), the way Helm merges values files. Neither input is modified.
func MergeValues(base, over map[string]any) map[string]any {
	out := maps.Clone(base)
	if out == nil {
		out = map[string]any{}
	}
	for k, v := range over {
		if vm, ok := v.(map[string]any); ok {
			if bm, ok := out[k].(map[string]any); ok {
				out[k] = MergeValues(bm, vm)
				continue
			}
		}
		out[k] = v
	}
	return out
}
