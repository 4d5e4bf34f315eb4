package talos

// The overrides guard: the settings the cluster relies on, against the
// user's Talos patches and Helm values, which are merged after ours and
// could silently undo them. The patches are applied for real, with Talos's own
// configpatcher, to a config generated the way the provider generates it,
// and the result is read through Talos's config interfaces (which know the
// defaults, e.g. that a config without a CNI section gets flannel), so no
// spelling of a patch escapes the check. Every finding names the patch or
// value that caused it, by the component's input path. It is the
// component's own check, so that every language's programs get it.

import (
	"fmt"
	"net/netip"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"

	"github.com/fluodata/talos-pulumi/components/inputs"
)

// Input paths of the Helm values (the stack file's keys too).
const (
	ciliumValuesPath   = "cluster.cilium.values"
	approverValuesPath = "cluster.certApprover.values"
)

// Overrides are what the user's patches and Helm values do to the settings
// the cluster relies on: Errors for what breaks it, Warnings for what only
// weakens it. Each names the input (cluster.patches.all[0],
// nodes[2].patches[0], cluster.cilium.values.kubeProxyReplacement, ...).
type Overrides struct {
	Errors, Warnings []inputs.Problem
}

// CheckOverrides reports what the user's patches and Helm values do to the
// settings the cluster relies on: errors for what breaks it (another CNI,
// kube-proxy on, KubePrism moved, ...), warnings for what only weakens it.
// Platform patches apply first, as in the cluster; network (zero if unknown)
// judges the approver's prefixes. The cost grows with distinct patch sets.
func (a *ClusterArgs) CheckOverrides(network netip.Prefix) Overrides {
	args := a.WithDefaults()
	g := &guard{args: &args, nodes: args.Nodes, spec: args.PatchSpec(), network: network, index: map[string]*finding{}}
	prisms := g.patches()
	g.cilium(prisms)
	g.approver()
	return g.overrides()
}

// ValidatePlatform is a platform component's Validate: its own checks
// (check, on its inputs with their defaults), then, once they hold, the
// guard of the user's patches and Helm values (CheckOverrides) on the
// TalosCluster's arguments it hands on, whose paths are its own. One error
// names every problem; nil when there is none.
func ValidatePlatform(component, name string, check func(*inputs.Problems), talosArgs func() *ClusterArgs, network netip.Prefix) error {
	var p inputs.Problems
	check(&p)
	if err := p.Err(component, name); err != nil {
		return err
	}
	for _, e := range talosArgs().CheckOverrides(network).Errors {
		p.Add(e.Path, "%s", e.Message)
	}
	return p.Err(component, name)
}

type guard struct {
	args     *ClusterArgs
	nodes    []NodeSpec
	spec     PatchSpec
	network  netip.Prefix
	findings []*finding
	index    map[string]*finding
}

// A finding's message may hold scopeMark, replaced by where the patch took
// effect: a patch for all nodes that breaks both roles the same way is one
// finding "on all nodes", not one per role.
const scopeMark = "{scope}"

type finding struct {
	isErr  bool
	path   string
	msg    string
	scopes []string
}

func (g *guard) errorf(path, format string, args ...any) { g.add(true, path, "", format, args...) }
func (g *guard) warnf(path, format string, args ...any)  { g.add(false, path, "", format, args...) }

func (g *guard) add(isErr bool, path, scope, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	key := fmt.Sprint(isErr, "\x00", path, "\x00", msg)
	f, ok := g.index[key]
	if !ok {
		f = &finding{isErr: isErr, path: path, msg: msg}
		g.index[key] = f
		g.findings = append(g.findings, f)
	}
	if scope != "" && !slices.Contains(f.scopes, scope) {
		f.scopes = append(f.scopes, scope)
	}
}

func (g *guard) overrides() Overrides {
	var d Overrides
	for _, f := range g.findings {
		where := strings.Join(f.scopes, " and ")
		if len(f.scopes) == 2 && slices.Contains(f.scopes, scopeCPs) && slices.Contains(f.scopes, scopeWorkers) {
			where = "on all nodes"
		}
		p := inputs.Problem{Path: f.path, Message: strings.ReplaceAll(f.msg, scopeMark, where)}
		if f.isErr {
			d.Errors = append(d.Errors, p)
		} else {
			d.Warnings = append(d.Warnings, p)
		}
	}
	return d
}

// The settings read from a node's final config, each as a string so that
// the last patch to change it is found the same way for all of them.
type setting int

const (
	sDoc       setting = iota // "yes" while a v1alpha1 document is there
	sType                     // machine.type
	sCNI                      // cluster.network.cni.name (Talos's default when unset)
	sProxy                    // kube-proxy "on"/"off"
	sPrism                    // KubePrism "on"/"off"
	sPrismPort                // KubePrism's port
	sRotate                   // kubelet extraArgs rotate-server-certificates
	sSchedCP                  // cluster.allowSchedulingOnControlPlanes "on"/"off"
	sVolumes                  // the user volumes' names, "\n"-joined
	sMounts                   // the kubelet's rshared extra mounts' destinations, "\n"-joined
	sHostDNS                  // the host DNS with kube-dns forwarded to it "on"/"off"
	sEncrypted                // the STATE or EPHEMERAL volume encrypted "yes"/""
	sKubeSpan                 // KubeSpan and the cluster discovery it needs "on"/"off"
	nSettings
)

type snapshot [nSettings]string

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func read(c config.Provider) snapshot {
	var s snapshot
	m, cl := c.Machine(), c.Cluster()
	if m == nil || cl == nil {
		return s
	}
	s[sDoc] = "yes"
	s[sType] = m.Type().String()
	s[sCNI] = cl.Network().CNI().Name()
	s[sProxy] = onOff(cl.Proxy().Enabled())
	kp := m.Features().KubePrism()
	s[sPrism] = onOff(kp.Enabled())
	s[sPrismPort] = strconv.Itoa(kp.Port())
	// Talos 1.13 lets an argument repeat; the kubelet takes the last.
	if v := m.Kubelet().ExtraArgs()["rotate-server-certificates"]; len(v) > 0 {
		s[sRotate] = v[len(v)-1]
	}
	s[sSchedCP] = onOff(cl.ScheduleOnControlPlanes())
	var volumes, mounts []string
	for _, v := range c.UserVolumeConfigs() {
		volumes = append(volumes, v.Name())
	}
	for _, mt := range m.Kubelet().ExtraMounts() {
		if slices.Contains(mt.Options, "rshared") {
			mounts = append(mounts, mt.Destination)
		}
	}
	s[sVolumes], s[sMounts] = strings.Join(volumes, "\n"), strings.Join(mounts, "\n")
	dns := m.Features().HostDNS()
	s[sHostDNS] = onOff(dns.Enabled() && dns.ForwardKubeDNSToHost())
	ks := c.NetworkKubeSpanConfig()
	s[sKubeSpan] = onOff(ks != nil && ks.Enabled() && cl.Discovery().Enabled())
	for _, name := range []string{constants.StatePartitionLabel, constants.EphemeralPartitionLabel} {
		if v, ok := c.Volumes().ByName(name); ok && v.Encryption() != nil && v.Encryption().Provider() != block.EncryptionProviderNone {
			s[sEncrypted] = "yes"
		}
	}
	return s
}

// patchStep is one patch of a node's chain: ours (path "") or the user's.
type patchStep struct {
	path  string
	patch configpatcher.Patch
}

// chainState is a config part-way through a node's patches, with, for each
// setting, the user patch that last changed it ("" while it is ours).
type chainState struct {
	cfg config.Provider
	got snapshot
	by  [nSettings]string
}

// advance applies steps in order. It returns nil, with an error recorded,
// when a patch cannot be applied (the provider would fail the same way).
func (g *guard) advance(st *chainState, steps []patchStep) *chainState {
	for _, s := range steps {
		out, err := configpatcher.Apply(configpatcher.WithConfig(st.cfg), []configpatcher.Patch{s.patch})
		var next config.Provider
		if err == nil {
			next, err = out.Config()
		}
		if err != nil {
			if s.path == "" {
				g.errorf("cluster.patches", "the generated patches cannot be applied after the user patches before them: %v", err)
			} else {
				g.errorf(s.path, "cannot be applied to the generated machine config: %v", err)
			}
			return nil
		}
		ns := &chainState{cfg: next, got: read(next), by: st.by}
		for i := range ns.got {
			if ns.got[i] != st.got[i] {
				ns.by[i] = s.path
			}
		}
		st = ns
	}
	return st
}

// userSteps loads the patches of one input; one that does not load is an
// error of its own (the apply would fail the same way).
func (g *guard) userSteps(path string, ps []string) []patchStep {
	out := make([]patchStep, 0, len(ps))
	for i, p := range ps {
		loaded, err := configpatcher.LoadPatch([]byte(p))
		if err != nil {
			g.errorf(fmt.Sprintf("%s[%d]", path, i), "is not a machine-config patch Talos can load: %v", err)
			continue
		}
		out = append(out, patchStep{path: fmt.Sprintf("%s[%d]", path, i), patch: loaded})
	}
	return out
}

func ourSteps(texts ...string) ([]patchStep, error) {
	out := make([]patchStep, 0, len(texts))
	for _, t := range texts {
		loaded, err := configpatcher.LoadPatch([]byte(t))
		if err != nil {
			return nil, err
		}
		out = append(out, patchStep{patch: loaded})
	}
	return out, nil
}

// prismUse is KubePrism as one group of nodes ends up with it, for the
// comparison with Cilium's API port.
type prismUse struct {
	port int
	by   string // the user patch that set the port, "" for ours
	role Role
}

// patches checks every node's final config, one chain per role and
// platform patch set, branching per node only for nodes with patches.
func (g *guard) patches() []prismUse {
	spec := g.spec
	c := g.args.Cluster
	all := g.userSteps("cluster.patches.all", c.Patches.All)
	byRole := map[Role][]patchStep{
		RoleControlPlane: g.userSteps("cluster.patches.controlPlane", c.Patches.ControlPlane),
		RoleWorker:       g.userSteps("cluster.patches.worker", c.Patches.Worker),
	}

	bases := map[Role]*chainState{}
	roleStates := map[string]*chainState{}
	judged := map[string]bool{}
	var prisms []prismUse
	for i, n := range g.nodes {
		key := string(n.Role) + "\x00" + strings.Join(n.PlatformPatches, "\x00") + "\x00" + strings.Join(DataVolumePatches(spec.DataVolume, n, spec.Encryption), "\x00")
		st, done := roleStates[key]
		if !done {
			st = g.roleState(bases, n, spec, all, byRole[n.Role])
			roleStates[key] = st
		}
		if st == nil {
			continue
		}
		if len(n.UserPatches) > 0 {
			// The node's own patches: one more step, from the shared chain.
			if st = g.advance(st, g.userSteps(fmt.Sprintf("nodes[%d].patches", i), n.UserPatches)); st == nil {
				continue
			}
		} else if judged[key] {
			continue // the same config as a node judged already
		} else {
			judged[key] = true
		}
		g.judgeDataVolume(st, n)
		if p, ok := g.judge(st, n.Role); ok {
			prisms = append(prisms, p)
		}
	}
	return prisms
}

// roleState is the config of a role after the generated cluster patch, the
// platform's patches, and the user's patches for all nodes and the role.
func (g *guard) roleState(bases map[Role]*chainState, n NodeSpec, spec PatchSpec, all, role []patchStep) *chainState {
	base, ok := bases[n.Role]
	if !ok {
		cfg, err := g.baseConfig(n.Role)
		if err != nil {
			g.errorf("cluster", "cannot generate a %s machine config to check the patches against: %v", n.Role, err)
			bases[n.Role] = nil
			return nil
		}
		base = &chainState{cfg: cfg, got: read(cfg)}
		bases[n.Role] = base
	}
	if base == nil {
		return nil
	}
	ours, err := ourSteps(slices.Concat(clusterPatches(spec), DataVolumePatches(spec.DataVolume, n, spec.Encryption), n.PlatformPatches)...)
	if err != nil {
		g.errorf("cluster", "a generated patch does not load: %v", err)
		return nil
	}
	steps := slices.Concat(ours, all, role)
	return g.advance(base, steps)
}

// baseConfig generates the role's config as the provider does, with empty
// key material: nothing here depends on keys, and real ones take seconds.
func (g *guard) baseConfig(role Role) (config.Provider, error) {
	c := g.args.Cluster
	vc, err := config.ParseContractFromVersion(c.TalosVersion)
	if err != nil {
		return nil, err
	}
	in, err := generate.NewInput(c.Name, c.Endpoint, strings.TrimPrefix(c.KubernetesVersion, "v"),
		generate.WithVersionContract(vc),
		generate.WithSecretsBundle(emptySecrets()),
	)
	if err != nil {
		return nil, err
	}
	mt := machine.TypeWorker
	if role == RoleControlPlane {
		mt = machine.TypeControlPlane
	}
	return in.Config(mt)
}

func emptySecrets() *secrets.Bundle {
	return &secrets.Bundle{
		Cluster:    &secrets.Cluster{},
		Secrets:    &secrets.Secrets{},
		TrustdInfo: &secrets.TrustdInfo{},
		Certs: &secrets.Certs{
			Etcd:              &x509.PEMEncodedCertificateAndKey{},
			K8s:               &x509.PEMEncodedCertificateAndKey{},
			K8sAggregator:     &x509.PEMEncodedCertificateAndKey{},
			K8sServiceAccount: &x509.PEMEncodedKey{},
			OS:                &x509.PEMEncodedCertificateAndKey{},
		},
	}
}

// Where a patch took effect: all control planes or workers of the stack,
// or the one node whose patch it is.
const (
	scopeCPs     = "on control planes"
	scopeWorkers = "on workers"
)

func scope(path string, role Role) string {
	node := strings.HasPrefix(path, "nodes")
	switch {
	case role == RoleControlPlane && node:
		return "on this control plane"
	case role == RoleControlPlane:
		return scopeCPs
	case node:
		return "on this worker"
	default:
		return scopeWorkers
	}
}

// patchError and patchWarning record a finding about a user patch; the
// message says where it took effect through scopeMark.
func (g *guard) patchError(path string, role Role, format string, args ...any) {
	g.add(true, path, scope(path, role), format, args...)
}

func (g *guard) patchWarning(path string, role Role, format string, args ...any) {
	g.add(false, path, scope(path, role), format, args...)
}

// judge reports what the user's patches changed in one final config. Only
// settings a user patch changed are judged: the generated ones are tested.
// It returns KubePrism's use when KubePrism is on.
func (g *guard) judge(st *chainState, role Role) (prismUse, bool) {
	s, by := st.got, st.by
	if s[sDoc] == "" {
		if by[sDoc] != "" {
			g.patchError(by[sDoc], role, "removes the v1alpha1 machine config document "+scopeMark+", which holds everything the node runs")
		}
		return prismUse{}, false
	}
	if s[sType] != string(role) && by[sType] != "" {
		raw := st.cfg.RawV1Alpha1().MachineConfig.MachineType
		switch s[sType] {
		case string(RoleWorker):
			g.patchError(by[sType], role, "sets machine.type: %s "+scopeMark+"; a node's type is its role: make it a worker (in a stack file: move the node to nodes.workers) instead of patching its type", raw)
		case string(RoleControlPlane):
			g.patchError(by[sType], role, "sets machine.type: %s "+scopeMark+"; a node's type is its role: make it a control plane (in a stack file: move the node to nodes.controlPlanes) instead of patching its type", raw)
		default:
			g.patchError(by[sType], role, "sets machine.type: %s "+scopeMark+"; a node's type is its role and must stay %s (the program bootstraps the first control plane itself)", raw, role)
		}
	}
	if s[sCNI] != "none" && by[sCNI] != "" {
		g.patchError(by[sCNI], role, "makes Talos deploy the %q CNI "+scopeMark+" (cluster.network.cni.name must stay none): Cilium is this cluster's CNI, installed by the program, and two CNIs fight over the pod network; set Cilium options in %s instead",
			s[sCNI], ciliumValuesPath)
	}
	if s[sProxy] == "on" && by[sProxy] != "" {
		g.patchError(by[sProxy], role, "enables kube-proxy "+scopeMark+" (cluster.proxy.disabled must stay true): Cilium replaces kube-proxy here, and both would program the same Services")
	}
	if s[sPrism] == "off" && by[sPrism] != "" {
		g.patchError(by[sPrism], role, "disables KubePrism "+scopeMark+" (machine.features.kubePrism.enabled must stay true): Cilium reaches the Kubernetes API through it on localhost, as there is no kube-proxy and the VIP or endpoint needs a running Cilium")
	}
	if s[sRotate] != "true" && by[sRotate] != "" {
		g.patchWarning(by[sRotate], role, "turns off the kubelet's serving-certificate requests "+scopeMark+" (machine.kubelet.extraArgs.rotate-server-certificates must stay \"true\"): kubelets then serve self-signed certificates that metrics-server and other API clients cannot verify")
	}
	if g.args.InContainer && s[sHostDNS] == "off" && by[sHostDNS] != "" {
		g.patchError(by[sHostDNS], role, "turns off the host DNS or its forwarding of kube-dns "+scopeMark+" (machine.features.hostDNS.enabled and forwardKubeDNSToHost must stay true): Talos refuses a config without them in a container, where they pass the container's DNS on to the pods")
	}
	if g.args.InContainer && s[sEncrypted] != "" && by[sEncrypted] != "" {
		g.patchError(by[sEncrypted], role, "encrypts the STATE or EPHEMERAL volume "+scopeMark+": in a container they are Docker volumes, which Talos does not encrypt (it skips the setting); encrypt the disk Docker keeps its volumes on instead")
	}
	if g.spec.KubeSpan && s[sKubeSpan] == "off" && by[sKubeSpan] != "" {
		g.patchError(by[sKubeSpan], role, "turns off KubeSpan or the cluster discovery it needs "+scopeMark+" while cluster.kubeSpan.enabled is on: the node would leave the WireGuard mesh the other nodes reach it through; turn cluster.kubeSpan.enabled off instead")
	}
	if g.spec.SchedulableControlPlanes && s[sSchedCP] == "off" && by[sSchedCP] != "" {
		g.warnf(by[sSchedCP], "sets cluster.allowSchedulingOnControlPlanes: false on a cluster without workers: no ordinary workload can run anywhere")
	}
	if s[sPrism] == "off" {
		return prismUse{}, false
	}
	port, _ := strconv.Atoi(s[sPrismPort])
	return prismUse{port: port, by: by[sPrismPort], role: role}, true
}

// cilium checks the merged Cilium values against what the cluster needs.
func (g *guard) cilium(prisms []prismUse) {
	v := CiliumValues(len(g.nodes), g.args.Cluster.Cilium.Values)
	p := func(keys ...string) string { return ciliumValuesPath + "." + strings.Join(keys, ".") }

	if kpr := v["kubeProxyReplacement"]; !truthy(kpr) {
		g.errorf(p("kubeProxyReplacement"), "%s turns Cilium's kube-proxy replacement off, but there is no kube-proxy (cluster.proxy.disabled): Services would not work; leave it true", show(kpr))
	}
	host, _ := v["k8sServiceHost"].(string)
	if host != "localhost" && host != "127.0.0.1" {
		g.errorf(p("k8sServiceHost"), "%s is not KubePrism: Cilium must reach the Kubernetes API at localhost, KubePrism on each node (port %d), as there is no kube-proxy and the VIP or endpoint needs a running Cilium; leave it out",
			show(v["k8sServiceHost"]), KubePrismPort)
	}
	port, ok := intOf(v["k8sServicePort"])
	if !ok || port < 1 || port > 65535 {
		g.errorf(p("k8sServicePort"), "%s is not a port; leave it out (KubePrism's port, %d)", show(v["k8sServicePort"]), KubePrismPort)
	} else {
		for _, u := range prisms {
			if int64(u.port) == port {
				continue
			}
			if u.by != "" {
				g.patchError(u.by, u.role, "sets KubePrism's port to %d "+scopeMark+", but Cilium reaches the API at localhost:%d (%s): both must be the same port",
					u.port, port, p("k8sServicePort"))
			} else {
				g.errorf(p("k8sServicePort"), "%d is not KubePrism's port (%d): Cilium reaches the API through KubePrism; leave it out", port, u.port)
			}
		}
	}

	if r, set := lookup(v, "operator", "replicas"); set {
		n, ok := intOf(r)
		switch {
		case !ok:
			g.errorf(p("operator", "replicas"), "%s is not a number of replicas", show(r))
		case n < 1:
			g.errorf(p("operator", "replicas"), "%d leaves Cilium without its operator, which the agents need (CRDs, IPAM); use 1 or more", n)
		case n > int64(len(g.nodes)):
			g.warnf(p("operator", "replicas"), "%d is more than the cluster's %d nodes: the operator's replicas refuse to share a node, so %d stay Pending and the release may never be ready",
				n, len(g.nodes), n-int64(len(g.nodes)))
		}
	}

	for _, c := range []string{"ciliumAgent", "cleanCiliumState"} {
		caps, _ := lookup(v, "securityContext", "capabilities", c)
		if list, ok := caps.([]any); ok && slices.ContainsFunc(list, func(x any) bool { s, _ := x.(string); return strings.EqualFold(s, "SYS_MODULE") }) {
			g.errorf(p("securityContext", "capabilities", c), "includes SYS_MODULE, which Talos grants no pod (workloads cannot load kernel modules): the container would not start; leave it out")
		}
	}

	g.cgroup(v)
	g.hubble(v)
	g.hostRouting(v)
}

// hostRouting checks the Cilium settings known to break Talos's networking.
// eBPF masquerading with kube-proxy replacement turns on Cilium's eBPF host
// routing, which bypasses the host's stack: Talos's forwarding of kube-dns
// to the host's DNS (on by default since Talos 1.8) stops answering
// (Cilium's Talos install guide, cilium/cilium#36852), and over KubeSpan
// pod traffic never reaches its WireGuard interface (siderolabs/talos
// #11235, #11244); bpf.hostLegacyRouting: true keeps the host's routing.
// Native routing sends pod traffic unencapsulated, which KubeSpan does not
// carry (siderolabs/talos#9043, open).
func (g *guard) hostRouting(v map[string]any) {
	p := func(keys ...string) string { return ciliumValuesPath + "." + strings.Join(keys, ".") }
	kubeSpan := g.args.Cluster.KubeSpan != nil && g.args.Cluster.KubeSpan.Enabled
	masq, _ := lookup(v, "bpf", "masquerade")
	legacy, _ := lookup(v, "bpf", "hostLegacyRouting")
	if truthy(masq) && !truthy(legacy) {
		if kubeSpan {
			g.errorf(p("bpf", "masquerade"), "%s without bpf.hostLegacyRouting: true turns on Cilium's eBPF host routing, which bypasses the host's stack: "+
				"pod traffic between nodes never reaches KubeSpan's WireGuard interface, and Talos's kube-dns forwarding to the host's DNS stops answering; set bpf.hostLegacyRouting: true with it", show(masq))
		} else {
			g.warnf(p("bpf", "masquerade"), "%s without bpf.hostLegacyRouting: true turns on Cilium's eBPF host routing, which bypasses the host's stack: "+
				"Talos's kube-dns forwarding to the host's DNS (machine.features.hostDNS.forwardKubeDNSToHost, on by default) stops answering; set bpf.hostLegacyRouting: true with it", show(masq))
		}
	}
	if mode, _ := lookup(v, "routingMode"); kubeSpan && mode == "native" {
		g.errorf(p("routingMode"), "%s sends pod traffic between nodes unencapsulated, which KubeSpan does not carry (siderolabs/talos#9043): leave it out (tunnel routing)", show(mode))
	}
}

// cgroup checks that Cilium uses the cgroup2 Talos mounts, as Talos's
// Cilium guide has it (components/talos/values.go sets it so).
func (g *guard) cgroup(v map[string]any) {
	p := func(keys ...string) string { return ciliumValuesPath + ".cgroup." + strings.Join(keys, ".") }
	if e, _ := lookup(v, "cgroup", "autoMount", "enabled"); truthy(e) {
		g.errorf(p("autoMount", "enabled"), "%s makes Cilium mount cgroup2 itself, which Talos has already mounted: Cilium's mount-cgroup init container enters the host's namespaces to mount a second cgroup2 at /run/cilium/cgroupv2, which fails on Talos and keeps the agent from starting; leave it false", show(e))
	}
	ours, _ := lookup(CiliumValues(len(g.nodes), nil), "cgroup", "hostRoot")
	want, _ := ours.(string)
	r, _ := lookup(v, "cgroup", "hostRoot")
	if s, ok := r.(string); !ok || path.Clean(s) != want {
		g.errorf(p("hostRoot"), "%s is not where Talos mounts cgroup2 (%s): the Cilium agent finds no cgroup2 there and does not start; leave it out", show(r), want)
	}
}

// hubble warns when Hubble is published outside the cluster: its flows
// show all the cluster's traffic, and Relay and the UI have no login.
func (g *guard) hubble(v map[string]any) {
	h, _ := v["hubble"].(map[string]any)
	if h == nil {
		return
	}
	p := func(keys ...string) string { return ciliumValuesPath + ".hubble." + strings.Join(keys, ".") }
	for _, part := range []struct{ key, name string }{{"relay", "Hubble Relay"}, {"ui", "Hubble UI"}} {
		t, _ := lookup(h, part.key, "service", "type")
		if s, _ := t.(string); strings.EqualFold(s, "NodePort") || strings.EqualFold(s, "LoadBalancer") {
			g.warnf(p(part.key, "service", "type"), "%s publishes %s on every node's address or a load balancer: whoever reaches it reads all the cluster's network flows, with no login; reach it with `cilium hubble port-forward` or `kubectl port-forward` instead",
				show(t), part.name)
		}
	}
	if e, _ := lookup(h, "ui", "ingress", "enabled"); truthy(e) {
		g.warnf(p("ui", "ingress", "enabled"), "publishes Hubble UI through an ingress: it has no login, so put authentication in front of it")
	}
	if e, set := lookup(h, "tls", "enabled"); set && !truthy(e) {
		g.warnf(p("tls", "enabled"), "%s turns mutual TLS off on the Hubble API, which listens on every node's own address (port 4244): whoever reaches a node reads its network flows", show(e))
	}
	walk(h, "", func(path string, key string, val any) {
		if key == "hostPort" && !zero(val) {
			g.warnf(p(path), "%s publishes a Hubble port on the nodes' own addresses: whoever reaches a node reaches it, with no login", show(val))
		}
	})
}

// Names a broadened approver pattern gives away: none is a node name, and
// an anchored list of node names matches none of them.
var strangerNames = []string{"x", "attacker", "evil.example.com"}

// approver checks the merged kubelet-csr-approver values: it approves a
// kubelet's serving certificate only for this cluster's node names and IPs.
func (g *guard) approver() {
	var extra []string
	if g.args.Cluster.VIP != "" {
		extra = append(extra, g.args.Cluster.VIP)
	}
	v := ApproverValues(g.nodes, extra, g.args.Cluster.CertApprover.Values)
	p := func(key string) string { return approverValuesPath + "." + key }

	switch re := v["providerRegex"].(type) {
	case string:
		g.approverRegex(p("providerRegex"), re)
	default:
		g.errorf(p("providerRegex"), "%s is not a regular expression: the approver would not start", show(re))
	}
	g.approverPrefixes(p("providerIpPrefixes"), v["providerIpPrefixes"])
	if b := v["bypassHostnameCheck"]; truthy(b) {
		g.warnf(p("bypassHostnameCheck"), "approves serving certificates without checking that their name is the requesting node's")
	}
	if b := v["bypassDnsResolution"]; !truthy(b) {
		g.warnf(p("bypassDnsResolution"), "%s makes the approver resolve node names in DNS and compare the addresses: the nodes' names are not in DNS here, so no serving certificate is approved unless you put them there", show(b))
	}
}

func (g *guard) approverRegex(path, s string) {
	if s == "" {
		// The chart then leaves the variable out and the approver's
		// default, ".*", approves any name.
		g.warnf(path, "is empty, so the approver takes its default \".*\" and approves serving certificates for any name")
		return
	}
	re, err := regexp.Compile(s)
	if err != nil {
		g.errorf(path, "%q is not a valid regular expression (%v): the approver would not start", s, err)
		return
	}
	probes := slices.Clone(strangerNames)
	if len(g.nodes) > 0 {
		n := g.nodes[0].Name
		probes = append(probes, "evil-"+n, n+"-evil", n+".evil.example.com")
	}
	for _, probe := range probes {
		if re.MatchString(probe) {
			g.warnf(path, "%q also matches %q, which is not a node of this cluster: serving certificates can be approved for names that are not this cluster's nodes; anchor it (^...$) and list the node names, or leave it out", s, probe)
			break
		}
	}
	var missed []string
	for _, n := range g.nodes {
		if !re.MatchString(n.Name) {
			missed = append(missed, n.Name)
		}
	}
	if len(missed) > 0 {
		g.warnf(path, "%q does not match node %s: their kubelets' serving certificates are never approved (kubectl logs and exec, metrics-server fail for them)", s, strings.Join(missed, ", "))
	}
}

func (g *guard) approverPrefixes(path string, raw any) {
	var items []string
	switch x := raw.(type) {
	case nil:
	case string:
		// The chart joins a list with commas; a string is taken as it is.
		for _, s := range strings.Split(x, ",") {
			if s = strings.TrimSpace(s); s != "" {
				items = append(items, s)
			}
		}
	case []any:
		for i, item := range x {
			s, ok := item.(string)
			if !ok {
				g.errorf(fmt.Sprintf("%s[%d]", path, i), "%s is not an IP prefix: the approver would not start", show(item))
				return
			}
			items = append(items, s)
		}
	default:
		g.errorf(path, "%s is not a list of IP prefixes", show(raw))
		return
	}
	if len(items) == 0 {
		g.warnf(path, "is empty, so the approver takes its default 0.0.0.0/0,::/0 and approves serving certificates for any address")
		return
	}
	network, hasNetwork := g.network, g.network.IsValid()
	var prefixes []netip.Prefix
	for i, s := range items {
		ipath := path
		if _, isList := raw.([]any); isList {
			ipath = fmt.Sprintf("%s[%d]", path, i)
		}
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			g.errorf(ipath, "%q is not an IP prefix like 10.10.0.10/32: the approver would not start", s)
			continue
		}
		prefixes = append(prefixes, pfx)
		insideNodes := hasNetwork && network.Bits() <= pfx.Bits() && network.Contains(pfx.Addr())
		switch {
		case pfx.Bits() == 0:
			g.warnf(ipath, "%q approves serving certificates for any address", s)
		case pfx.Bits() < pfx.Addr().BitLen() && !insideNodes:
			g.warnf(ipath, "%q approves serving certificates for addresses outside the nodes' network: list the node addresses (/32) instead", s)
		}
	}
	var missed []string
	for _, n := range g.nodes {
		a, err := netip.ParseAddr(n.IP)
		if err == nil && !slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Contains(a) }) {
			missed = append(missed, fmt.Sprintf("%s (%s)", n.Name, n.IP))
		}
	}
	if len(missed) > 0 && len(prefixes) == len(items) {
		g.warnf(path, "covers no address of node %s: their kubelets' serving certificates are never approved", strings.Join(missed, ", "))
	}
}

// lookup returns the value at keys in nested values, and whether it is set.
func lookup(v map[string]any, keys ...string) (any, bool) {
	var cur any = v
	for _, k := range keys {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// walk calls fn for every key under v, with its dotted path.
func walk(v map[string]any, path string, fn func(path, key string, val any)) {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		kp := k
		if path != "" {
			kp = path + "." + k
		}
		fn(kp, k, v[k])
		switch x := v[k].(type) {
		case map[string]any:
			walk(x, kp, fn)
		case []any:
			for i, item := range x {
				if m, ok := item.(map[string]any); ok {
					walk(m, fmt.Sprintf("%s[%d]", kp, i), fn)
				}
			}
		}
	}
}

// truthy is how the values are read: a boolean, or a string Helm templates
// and the programs parse as one.
func truthy(v any) bool {
	switch x := v.(type) {
	case bool:
		return x
	case string:
		b, err := strconv.ParseBool(x)
		return err == nil && b
	default:
		return false
	}
}

func zero(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case bool:
		return !x
	case string:
		return x == "" || x == "0"
	default:
		n, ok := intOf(v)
		return ok && n == 0
	}
}

// intOf reads an integer value however it was decoded.
func intOf(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int64:
		return x, true
	case float64:
		if x == float64(int64(x)) {
			return int64(x), true
		}
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// show renders a value for messages: strings quoted, the rest as written.
func show(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return fmt.Sprintf("a list of %d items", len(x))
	default:
		return fmt.Sprint(x)
	}
}

// judgeDataVolume refuses user patches that take away a node's data volume
// or, in the Longhorn layout, the kubelet's rshared mount of it: Longhorn
// would then write to the system disk, or its volumes would not reach the
// pods.
func (g *guard) judgeDataVolume(st *chainState, n NodeSpec) {
	if n.DataDiskSize <= 0 {
		return
	}
	s, by := st.got, st.by
	v := g.spec.DataVolume
	if by[sVolumes] != "" && !slices.Contains(strings.Split(s[sVolumes], "\n"), v.Name) {
		g.patchError(by[sVolumes], n.Role, "removes the user volume %q of the data disk "+scopeMark+": the disk would stay unused and the workloads would write to the system disk; change cluster.dataVolume instead", v.Name)
	}
	mount := DataVolumeMountRoot + v.Name
	if v.Layout == LayoutLonghorn && by[sMounts] != "" && !slices.Contains(strings.Split(s[sMounts], "\n"), mount) {
		g.patchError(by[sMounts], n.Role, "removes the kubelet's rshared mount of %s "+scopeMark+", which Longhorn needs to reach its volumes; set cluster.dataVolume.layout to plain if this is not for Longhorn", mount)
	}
}
