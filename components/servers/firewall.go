package servers

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	"go.yaml.in/yaml/v3"

	"github.com/fluodata/talos-pulumi/components/talos"
)

// DefaultPodCIDR is Talos's default pod network; pods reach the kubelet and
// the API server on node addresses from it. A user patch that changes
// cluster.network.podSubnets must add its own rules.
const DefaultPodCIDR = "10.244.0.0/16"

// anywhere is the source of rules open to the internet.
const anywhere = "0.0.0.0/0"

// hubblePeerPort is where Cilium's Hubble server serves each node's network
// flows, to Hubble Relay on the other nodes: the firewall opens it to the
// nodes only, and publicTcpPorts may not open it to the internet.
const hubblePeerPort = 4244

// Firewall is the input of a node's ingress firewall.
type Firewall struct {
	// OperatorCIDRs may reach the Talos API and the Kubernetes API; empty
	// opens both to the internet (the config validation warns).
	OperatorCIDRs []string
	// PublicTCPPorts are open to the internet (e.g. an ingress controller).
	PublicTCPPorts []int
	// NodeIPs are every node's address; ControlPlaneIPs the control planes'.
	NodeIPs, ControlPlaneIPs []string
	// PodCIDR is the cluster's pod network.
	PodCIDR string
	// KubeSpan opens KubeSpan's WireGuard port to the nodes.
	KubeSpan bool
	// KubeSpanSources are the prefixes KubeSpan's port is open to instead
	// of the nodes': the nodes' and their NATs' public addresses, or
	// 0.0.0.0/0 when peers reach it from addresses the stack does not know
	// (nodes behind a NAT, whose public address is their router's).
	// WireGuard answers no packet it cannot authenticate.
	KubeSpanSources []string
}

// Rule is one NetworkRuleConfig document: a port set and the sources
// allowed to reach it.
type Rule struct {
	Name     string
	Protocol string
	Ports    []string
	Sources  []string
}

// Rules lists the node's allowed ingress: everything else is blocked by the
// default action. Loopback and replies to the node's own connections are
// always allowed by Talos itself.
func (f Firewall) Rules(role talos.Role) []Rule {
	nodes := hostPrefixes(f.NodeIPs)
	operators := f.OperatorCIDRs
	if len(operators) == 0 {
		operators = []string{anywhere}
	}
	pods := []string{f.PodCIDR}
	// apid: operators (talosctl) and other nodes (apid proxies requests to
	// the node named with --nodes through the endpoint).
	rules := []Rule{{Name: "apid", Protocol: "tcp", Ports: []string{strconv.Itoa(constants.ApidPort)}, Sources: union(operators, nodes)}}
	if role == talos.RoleControlPlane {
		rules = append(rules,
			// trustd signs the certificates of joining nodes.
			Rule{Name: "trustd", Protocol: "tcp", Ports: []string{strconv.Itoa(constants.TrustdPort)}, Sources: nodes},
			// The API server: operators, kubelets, and pods that reach the
			// "kubernetes" service (Cilium translates it to this address).
			Rule{Name: "kubernetes-api", Protocol: "tcp", Ports: []string{strconv.Itoa(constants.DefaultControlPlanePort)}, Sources: union(operators, nodes, pods)},
			Rule{Name: "etcd", Protocol: "tcp", Ports: []string{fmt.Sprintf("%d-%d", constants.EtcdClientPort, constants.EtcdPeerPort)}, Sources: hostPrefixes(f.ControlPlaneIPs)},
		)
	}
	rules = append(rules,
		// Logs, exec and metrics go from the API server and pods to kubelets.
		Rule{Name: "kubelet", Protocol: "tcp", Ports: []string{strconv.Itoa(constants.KubeletPort)}, Sources: union(nodes, pods)},
		// Cilium: VXLAN between nodes, health checks, Hubble peers.
		Rule{Name: "cilium-vxlan", Protocol: "udp", Ports: []string{"8472"}, Sources: nodes},
		Rule{Name: "cilium-health", Protocol: "tcp", Ports: []string{"4240"}, Sources: union(nodes, pods)},
		Rule{Name: "hubble-peer", Protocol: "tcp", Ports: []string{fmt.Sprint(hubblePeerPort)}, Sources: nodes},
	)
	if f.KubeSpan {
		// WireGuard between the nodes; the peers' keys authenticate, the
		// rule keeps the port closed to everyone else.
		sources := nodes
		if len(f.KubeSpanSources) > 0 {
			sources = f.KubeSpanSources
		}
		rules = append(rules, Rule{Name: "kubespan", Protocol: "udp", Ports: []string{fmt.Sprint(talos.KubeSpanPort)}, Sources: sources})
	}
	if len(f.PublicTCPPorts) > 0 {
		ports := make([]string, 0, len(f.PublicTCPPorts))
		for _, p := range f.PublicTCPPorts {
			ports = append(ports, fmt.Sprint(p))
		}
		rules = append(rules, Rule{Name: "public-tcp", Protocol: "tcp", Ports: ports, Sources: []string{anywhere}})
	}
	return rules
}

type (
	defaultActionDoc struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Ingress    string `yaml:"ingress"`
	}
	ruleDoc struct {
		APIVersion   string        `yaml:"apiVersion"`
		Kind         string        `yaml:"kind"`
		Name         string        `yaml:"name"`
		PortSelector portSelector  `yaml:"portSelector"`
		Ingress      []ingressRule `yaml:"ingress"`
	}
	portSelector struct {
		Ports    []yamlPort `yaml:"ports"`
		Protocol string     `yaml:"protocol"`
	}
	ingressRule struct {
		Subnet string `yaml:"subnet"`
	}
)

// yamlPort renders "8472" as a YAML integer and "2379-2380" as a string,
// as Talos writes them.
type yamlPort string

// MarshalYAML implements yaml.Marshaler.
func (p yamlPort) MarshalYAML() (any, error) {
	var n int
	if _, err := fmt.Sscanf(string(p), "%d", &n); err == nil && fmt.Sprint(n) == string(p) {
		return n, nil
	}
	return string(p), nil
}

// Patch renders the firewall as one multi-document Talos patch: the default
// ingress action block, then one NetworkRuleConfig per rule.
func (f Firewall) Patch(role talos.Role) string {
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(4)
	docs := []any{defaultActionDoc{APIVersion: "v1alpha1", Kind: "NetworkDefaultActionConfig", Ingress: "block"}}
	for _, r := range f.Rules(role) {
		d := ruleDoc{APIVersion: "v1alpha1", Kind: "NetworkRuleConfig", Name: r.Name,
			PortSelector: portSelector{Protocol: r.Protocol}}
		for _, p := range r.Ports {
			d.PortSelector.Ports = append(d.PortSelector.Ports, yamlPort(p))
		}
		for _, s := range r.Sources {
			d.Ingress = append(d.Ingress, ingressRule{Subnet: s})
		}
		docs = append(docs, d)
	}
	for _, d := range docs {
		if err := enc.Encode(d); err != nil {
			// Only the plain structs above are encoded; failure is a bug.
			panic(fmt.Sprintf("vps: render firewall: %v", err))
		}
	}
	return b.String()
}

// hostPrefixes turns addresses into prefixes of one address each: /32, or
// /128 for IPv6 (a KubeSpan endpoint may be one), never a whole network.
// What is no address is left out (validation refuses it).
func hostPrefixes(ips []string) []string {
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		if prefix, ok := talos.HostPrefix(ip); ok {
			out = append(out, prefix)
		}
	}
	return out
}

// union concatenates source lists, dropping repeats and keeping order; an
// "anywhere" source makes every other one redundant.
func union(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		for _, s := range l {
			if s == anywhere {
				return []string{anywhere}
			}
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}
