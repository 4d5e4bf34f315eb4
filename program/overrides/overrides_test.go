package overrides_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/program/overrides"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// finding is an expected problem: its exact key path and a part of its
// message.
type finding struct{ path, says string }

// overrideCase edits an example stack file's cluster and nodes blocks, as a
// user would, and lists every error and warning CheckOverrides must give.
type overrideCase struct {
	name    string
	file    string // default: the Proxmox example (1 control plane, 2 workers)
	cluster func(c map[string]any)
	nodes   func(n map[string]any)
	errs    []finding
	warns   []finding
}

// set puts v at a dotted path of nested objects, creating them.
func set(m map[string]any, path string, v any) {
	keys := strings.Split(path, ".")
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[keys[len(keys)-1]] = v
}

func patches(scope string, ps ...any) func(map[string]any) {
	return func(c map[string]any) { set(c, "patches."+scope, ps) }
}

func ciliumValues(kv ...any) func(map[string]any) {
	return func(c map[string]any) {
		for i := 0; i < len(kv); i += 2 {
			set(c, "cilium.values."+kv[i].(string), kv[i+1])
		}
	}
}

func approverValues(kv ...any) func(map[string]any) {
	return func(c map[string]any) {
		for i := 0; i < len(kv); i += 2 {
			set(c, "certApprover.values."+kv[i].(string), kv[i+1])
		}
	}
}

func both(fs ...func(map[string]any)) func(map[string]any) {
	return func(c map[string]any) {
		for _, f := range fs {
			f(c)
		}
	}
}

// nodePatches gives one node (e.g. "workers", 1) its patches.
func nodePatches(list string, i int, ps ...any) func(map[string]any) {
	return func(n map[string]any) {
		n[list].([]any)[i].(map[string]any)["patches"] = ps
	}
}

const (
	workerType     = "machine:\n  type: worker\n"
	flannel        = "cluster:\n  network:\n    cni:\n      name: flannel\n"
	kubeProxyOn    = "cluster:\n  proxy:\n    disabled: false\n"
	kubePrismOff   = "machine:\n  features:\n    kubePrism:\n      enabled: false\n"
	kubePrism7446  = "machine:\n  features:\n    kubePrism:\n      enabled: true\n      port: 7446\n"
	timeServers    = "machine:\n  time:\n    servers: [pool.ntp.org]\n"
	noServingCerts = "machine:\n  kubelet:\n    extraArgs:\n      rotate-server-certificates: \"false\"\n"
)

var overrideCases = []overrideCase{
	// Patches that break the cluster.
	{
		name:    "control planes made workers",
		cluster: patches("controlPlane", workerType),
		errs:    []finding{{"cluster.patches.controlPlane[0]", "sets machine.type: worker on control planes; a node's type is its role: make it a worker (in a stack file: move the node to nodes.workers)"}},
	},
	{
		name:    "every node made a worker, as an object patch",
		cluster: patches("all", map[string]any{"machine": map[string]any{"type": "worker"}}),
		errs:    []finding{{"cluster.patches.all[0]", "sets machine.type: worker on control planes"}},
	},
	{
		name:    "every node made a control plane: only the workers break",
		cluster: patches("all", "machine:\n  type: controlplane\n"),
		errs:    []finding{{"cluster.patches.all[0]", "sets machine.type: controlplane on workers; a node's type is its role: make it a control plane (in a stack file: move the node to nodes.controlPlanes)"}},
	},
	{
		name:  "a worker made a control plane by its own patch",
		nodes: nodePatches("workers", 1, timeServers, "machine:\n  type: controlplane\n"),
		errs:  []finding{{"nodes.workers[1].patches[1]", "sets machine.type: controlplane on this worker; a node's type is its role: make it a control plane (in a stack file: move the node to nodes.controlPlanes)"}},
	},
	{
		name:    "init type on control planes",
		cluster: patches("controlPlane", "machine:\n  type: init\n"),
		errs:    []finding{{"cluster.patches.controlPlane[0]", "sets machine.type: init on control planes; a node's type is its role and must stay controlplane"}},
	},
	{
		name:    "another CNI",
		cluster: patches("all", flannel),
		errs:    []finding{{"cluster.patches.all[0]", `makes Talos deploy the "flannel" CNI on all nodes (cluster.network.cni.name must stay none)`}},
	},
	{
		name:    "a custom CNI in a multi-document patch",
		cluster: patches("worker", "cluster:\n  network:\n    cni:\n      name: custom\n      urls: [https://example.com/cni.yaml]\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n"),
		errs:    []finding{{"cluster.patches.worker[0]", `makes Talos deploy the "custom" CNI on workers (cluster.network.cni.name must stay none)`}},
	},
	{
		name:    "the CNI section deleted: Talos's default is flannel",
		cluster: patches("controlPlane", "cluster:\n  network:\n    cni:\n      $patch: delete\n"),
		errs:    []finding{{"cluster.patches.controlPlane[0]", `makes Talos deploy the "flannel" CNI on control planes`}},
	},
	{
		name:    "the last patch to set the CNI is named",
		cluster: patches("all", flannel, "cluster:\n  network:\n    cni:\n      name: calico\n"),
		errs:    []finding{{"cluster.patches.all[1]", `"calico" CNI on all nodes`}},
	},
	{
		name: "another CNI undone on control planes only: the workers keep it",
		cluster: both(patches("all", flannel),
			patches("controlPlane", "cluster:\n  network:\n    cni:\n      name: none\n")),
		errs: []finding{{"cluster.patches.all[0]", `"flannel" CNI on workers`}},
	},
	{
		name:    "kube-proxy enabled",
		cluster: patches("worker", kubeProxyOn),
		errs:    []finding{{"cluster.patches.worker[0]", "enables kube-proxy on workers (cluster.proxy.disabled must stay true)"}},
	},
	{
		name:  "KubePrism disabled on one node",
		nodes: nodePatches("controlPlanes", 0, kubePrismOff),
		errs:  []finding{{"nodes.controlPlanes[0].patches[0]", "disables KubePrism on this control plane (machine.features.kubePrism.enabled must stay true)"}},
	},
	{
		name:    "KubePrism moved away from Cilium's port",
		cluster: patches("all", kubePrism7446),
		errs:    []finding{{"cluster.patches.all[0]", "sets KubePrism's port to 7446 on all nodes, but Cilium reaches the API at localhost:7445 (cluster.cilium.values.k8sServicePort): both must be the same port"}},
	},
	{
		name:    "Cilium's API port changed away from KubePrism",
		cluster: ciliumValues("k8sServicePort", 6443),
		errs:    []finding{{"cluster.cilium.values.k8sServicePort", "6443 is not KubePrism's port (7445)"}},
	},
	{
		name:    "Cilium's API port not a port",
		cluster: ciliumValues("k8sServicePort", "https"),
		errs:    []finding{{"cluster.cilium.values.k8sServicePort", `"https" is not a port`}},
	},
	{
		name:    "Cilium's API host changed to the VIP",
		cluster: ciliumValues("k8sServiceHost", "10.10.0.5"),
		errs:    []finding{{"cluster.cilium.values.k8sServiceHost", `"10.10.0.5" is not KubePrism`}},
	},
	{
		name:    "kube-proxy replacement off",
		cluster: ciliumValues("kubeProxyReplacement", false),
		errs:    []finding{{"cluster.cilium.values.kubeProxyReplacement", "false turns Cilium's kube-proxy replacement off"}},
	},
	{
		name:    "kube-proxy replacement off, as a string",
		cluster: ciliumValues("kubeProxyReplacement", "false"),
		errs:    []finding{{"cluster.cilium.values.kubeProxyReplacement", `"false" turns Cilium's kube-proxy replacement off`}},
	},
	{
		name:    "no Cilium operator",
		cluster: ciliumValues("operator.replicas", 0),
		errs:    []finding{{"cluster.cilium.values.operator.replicas", "0 leaves Cilium without its operator"}},
	},
	{
		name:    "SYS_MODULE given back to the agent",
		cluster: ciliumValues("securityContext.capabilities.ciliumAgent", []any{"NET_ADMIN", "SYS_MODULE"}),
		errs:    []finding{{"cluster.cilium.values.securityContext.capabilities.ciliumAgent", "includes SYS_MODULE"}},
	},
	{
		name:    "Cilium mounting cgroup2 itself",
		cluster: ciliumValues("cgroup.autoMount.enabled", true),
		errs:    []finding{{"cluster.cilium.values.cgroup.autoMount.enabled", "true makes Cilium mount cgroup2 itself, which Talos has already mounted"}},
	},
	{
		name:    "Cilium mounting cgroup2 itself, as a string",
		cluster: ciliumValues("cgroup.autoMount.enabled", "true"),
		errs:    []finding{{"cluster.cilium.values.cgroup.autoMount.enabled", `"true" makes Cilium mount cgroup2 itself`}},
	},
	{
		name:    "Cilium looking for cgroup2 where Talos does not mount it",
		cluster: ciliumValues("cgroup.hostRoot", "/run/cilium/cgroupv2"),
		errs:    []finding{{"cluster.cilium.values.cgroup.hostRoot", `"/run/cilium/cgroupv2" is not where Talos mounts cgroup2 (/sys/fs/cgroup)`}},
	},
	{
		name:    "approver pattern that does not compile",
		cluster: approverValues("providerRegex", "^(cp-0"),
		errs:    []finding{{"cluster.certApprover.values.providerRegex", `"^(cp-0" is not a valid regular expression`}},
	},
	{
		name:    "approver prefix that does not parse",
		cluster: approverValues("providerIpPrefixes", []any{"10.10.0.10/32", "10.10.0.20"}),
		errs:    []finding{{"cluster.certApprover.values.providerIpPrefixes[1]", `"10.10.0.20" is not an IP prefix`}},
	},

	// What only weakens the cluster.
	{
		name:    "approver pattern open to any name",
		cluster: approverValues("providerRegex", ".*"),
		warns:   []finding{{"cluster.certApprover.values.providerRegex", `".*" also matches "x", which is not a node of this cluster`}},
	},
	{
		name:    "approver pattern not anchored",
		cluster: approverValues("providerRegex", "cp-0|worker-0|worker-1"),
		warns:   []finding{{"cluster.certApprover.values.providerRegex", `also matches "evil-cp-0"`}},
	},
	{
		name:    "approver pattern empty: the approver's default takes any name",
		cluster: approverValues("providerRegex", ""),
		warns:   []finding{{"cluster.certApprover.values.providerRegex", `is empty, so the approver takes its default ".*"`}},
	},
	{
		name:    "approver pattern missing nodes",
		cluster: approverValues("providerRegex", "^cp-0$"),
		warns:   []finding{{"cluster.certApprover.values.providerRegex", `"^cp-0$" does not match node worker-0, worker-1`}},
	},
	{
		name:    "approver hostname check bypassed",
		cluster: approverValues("bypassHostnameCheck", true),
		warns:   []finding{{"cluster.certApprover.values.bypassHostnameCheck", "without checking that their name is the requesting node's"}},
	},
	{
		name:    "approver resolving node names in DNS",
		cluster: approverValues("bypassDnsResolution", false),
		warns:   []finding{{"cluster.certApprover.values.bypassDnsResolution", "false makes the approver resolve node names in DNS"}},
	},
	{
		name:    "approver open to every address",
		cluster: approverValues("providerIpPrefixes", []any{"0.0.0.0/0"}),
		warns: []finding{
			{"cluster.certApprover.values.providerIpPrefixes[0]", `"0.0.0.0/0" approves serving certificates for any address`},
		},
	},
	{
		name:    "approver open beyond the nodes' network",
		cluster: approverValues("providerIpPrefixes", []any{"10.0.0.0/8"}),
		warns:   []finding{{"cluster.certApprover.values.providerIpPrefixes[0]", `"10.0.0.0/8" approves serving certificates for addresses outside the nodes' network`}},
	},
	{
		name:    "approver prefixes emptied: the approver's default takes any address",
		cluster: approverValues("providerIpPrefixes", []any{}),
		warns:   []finding{{"cluster.certApprover.values.providerIpPrefixes", "is empty, so the approver takes its default 0.0.0.0/0,::/0"}},
	},
	{
		name:    "approver prefixes missing a node",
		cluster: approverValues("providerIpPrefixes", []any{"10.10.0.10/32", "10.10.0.20/32"}),
		warns:   []finding{{"cluster.certApprover.values.providerIpPrefixes", "covers no address of node worker-1 (10.10.0.21)"}},
	},
	{
		name:    "more operator replicas than nodes",
		cluster: ciliumValues("operator.replicas", 5),
		warns:   []finding{{"cluster.cilium.values.operator.replicas", "5 is more than the cluster's 3 nodes: the operator's replicas refuse to share a node, so 2 stay Pending"}},
	},
	{
		name:    "Hubble Relay on a NodePort",
		cluster: ciliumValues("hubble.relay.enabled", true, "hubble.relay.service.type", "NodePort"),
		warns:   []finding{{"cluster.cilium.values.hubble.relay.service.type", `"NodePort" publishes Hubble Relay`}},
	},
	{
		name:    "Hubble UI on a load balancer and an ingress",
		cluster: ciliumValues("hubble.ui.enabled", true, "hubble.ui.service.type", "LoadBalancer", "hubble.ui.ingress.enabled", true),
		warns: []finding{
			{"cluster.cilium.values.hubble.ui.service.type", `"LoadBalancer" publishes Hubble UI`},
			{"cluster.cilium.values.hubble.ui.ingress.enabled", "publishes Hubble UI through an ingress"},
		},
	},
	{
		name:    "Hubble on a host port",
		cluster: ciliumValues("hubble.relay.hostPort", 4245),
		warns:   []finding{{"cluster.cilium.values.hubble.relay.hostPort", "4245 publishes a Hubble port on the nodes' own addresses"}},
	},
	{
		name:    "Hubble without mutual TLS",
		cluster: ciliumValues("hubble.tls.enabled", false),
		warns:   []finding{{"cluster.cilium.values.hubble.tls.enabled", "false turns mutual TLS off on the Hubble API"}},
	},
	{
		name:    "kubelets without serving-certificate requests",
		cluster: patches("worker", noServingCerts),
		warns:   []finding{{"cluster.patches.worker[0]", "turns off the kubelet's serving-certificate requests on workers"}},
	},
	{
		name:    "no scheduling on a cluster without workers",
		file:    stackstest.VPSExample,
		cluster: patches("all", "cluster:\n  allowSchedulingOnControlPlanes: false\n"),
		warns:   []finding{{"cluster.patches.all[0]", "sets cluster.allowSchedulingOnControlPlanes: false on a cluster without workers"}},
	},
	{
		name:    "errors and warnings together",
		cluster: both(patches("controlPlane", kubeProxyOn), approverValues("bypassHostnameCheck", "true")),
		errs:    []finding{{"cluster.patches.controlPlane[0]", "enables kube-proxy on control planes"}},
		warns:   []finding{{"cluster.certApprover.values.bypassHostnameCheck", "without checking"}},
	},

	// What passes without a word.
	{name: "the example as it is"},
	{name: "the VPS example as it is", file: stackstest.VPSExample},
	{
		name: "patches that leave the program's settings alone",
		cluster: both(
			patches("all", timeServers, "machine:\n  sysctls:\n    vm.max_map_count: \"262144\"\n"),
			patches("controlPlane", "cluster:\n  network:\n    cni:\n      name: none\n  proxy:\n    disabled: true\n"),
			patches("worker", "machine:\n  type: worker\n  features:\n    kubePrism:\n      enabled: true\n      port: 7445\n  kubelet:\n    extraArgs:\n      rotate-server-certificates: \"true\"\n"),
		),
		nodes: nodePatches("workers", 0, "machine:\n  nodeLabels:\n    storage: longhorn\n"),
	},
	{
		name: "KubePrism and Cilium moved to another port together",
		cluster: both(patches("all", kubePrism7446),
			ciliumValues("k8sServicePort", 7446, "k8sServiceHost", "127.0.0.1")),
	},
	{
		name: "values that keep the program's settings",
		cluster: both(
			ciliumValues("kubeProxyReplacement", "true", "operator.replicas", 1, "hubble.relay.enabled", true,
				"hubble.ui.enabled", true, "hubble.ui.service.type", "ClusterIP", "hubble.tls.enabled", true,
				"cgroup.autoMount.enabled", false, "cgroup.hostRoot", "/sys/fs/cgroup/"),
			approverValues("providerRegex", "^(cp-0|worker-[0-9]+)$", "bypassDnsResolution", true,
				"providerIpPrefixes", []any{"10.10.0.0/24"}),
		),
	},
	{
		name:    "a firewall rule of the user's on the VPS",
		file:    stackstest.VPSExample,
		cluster: patches("all", "apiVersion: v1alpha1\nkind: NetworkRuleConfig\nname: ingress-https\nportSelector:\n  ports: [443]\n  protocol: tcp\ningress:\n  - subnet: 0.0.0.0/0\n"),
	},
}

func loadEdited(t *testing.T, c overrideCase) (*stacks.Config, *talos.ClusterArgs) {
	t.Helper()
	file := c.file
	if file == "" {
		file = stackstest.ProxmoxExample
	}
	src := stackstest.Example(t, file)
	if c.cluster != nil {
		src = stackstest.EditSection(t, src, "cluster", c.cluster)
	}
	if c.nodes != nil {
		src = stackstest.EditSection(t, src, "nodes", c.nodes)
	}
	cfg, d := stacks.Load(src)
	require.NoError(t, d.Err(), "the edited stack must load: only CheckOverrides judges it")
	return cfg, program.TalosArgs(cfg)
}

func TestCheckOverrides(t *testing.T) {
	t.Parallel()
	for _, c := range overrideCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg, args := loadEdited(t, c)
			d := overrides.CheckOverrides(cfg, args)
			assertFindings(t, "error", c.errs, d.Errors)
			assertFindings(t, "warning", c.warns, d.Warnings)
		})
	}
}

// assertFindings wants exactly the expected problems, in any order.
func assertFindings(t *testing.T, kind string, want []finding, got []stacks.Problem) {
	t.Helper()
	var lines []string
	for _, p := range got {
		lines = append(lines, p.String())
	}
	all := strings.Join(lines, "\n")
	assert.Len(t, got, len(want), "%ss:\n%s", kind, all)
	for _, w := range want {
		found := false
		for _, p := range got {
			if p.Path == w.path && strings.Contains(p.Message, w.says) {
				found = true
			}
		}
		assert.True(t, found, "no %s %s: ...%s...; got:\n%s", kind, w.path, w.says, all)
	}
}

// The check's work grows with the patch sets, not the nodes: a node without
// patches of its own costs no config work, and the result is the same for
// 3 nodes as for 300.
func TestCheckOverridesSharesWorkAcrossNodes(t *testing.T) { // not parallel: it counts allocations
	src := stackstest.EditSection(t, stackstest.Example(t, stackstest.ProxmoxExample), "cluster", func(c map[string]any) {
		set(c, "network.prefixLength", 16)
		set(c, "patches.worker", []any{kubeProxyOn})
	})
	src = stackstest.EditSection(t, src, "nodes", func(n map[string]any) {
		var ws []any
		for i := range 300 {
			w := map[string]any{"name": fmt.Sprintf("w-%d", i), "ip": fmt.Sprintf("10.10.%d.%d", 1+i/200, 10+i%200), "vmId": 2000 + i}
			if i == 7 {
				w["patches"] = []any{kubePrismOff}
			}
			ws = append(ws, w)
		}
		n["workers"] = ws
	})
	cfg, d := stacks.Load(src)
	require.NoError(t, d.Err())
	args := program.TalosArgs(cfg)
	nodes := args.Nodes
	// The same arguments with only the first n nodes.
	firstNodes := func(n int) *talos.ClusterArgs {
		a := *args
		a.Nodes = nodes[:n]
		return &a
	}

	o := overrides.CheckOverrides(cfg, args)
	assertFindings(t, "error", []finding{
		{"cluster.patches.worker[0]", "enables kube-proxy on workers"},
		{"nodes.workers[7].patches[0]", "disables KubePrism on this worker"},
	}, o.Errors)

	// Three config chains (control planes, workers, worker 7) whatever the
	// count: the nodes beyond the first nine add only a little each
	// (the approver's name pattern and prefixes), far less than one chain.
	all := testing.AllocsPerRun(3, func() { overrides.CheckOverrides(cfg, args) })
	nine := testing.AllocsPerRun(3, func() { overrides.CheckOverrides(cfg, firstNodes(9)) })
	two := testing.AllocsPerRun(3, func() { overrides.CheckOverrides(cfg, firstNodes(2)) })
	perNode := (all - nine) / float64(len(nodes)-9)
	perChain := nine - two // worker 7's own step and judgement
	t.Logf("allocations: %v for %d nodes, %v for 9, %v for 2: %.1f per node, %v for worker 7's chain", all, len(nodes), nine, two, perNode, perChain)
	assert.Less(t, perNode*10, perChain, "a node without patches costs far less than a config")
}
