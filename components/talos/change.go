package talos

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/fluodata/talos-pulumi/components/inputs"
)

// Previous is the cluster as the last `up` left it, read from the stack's
// outputs by the program (Go only). The changes a rollout cannot make
// safely are refused against it before anything is registered: a
// Kubernetes downgrade or minor-version skip, more than one control plane
// removed at once, every control plane replaced.
type Previous struct {
	// KubernetesVersion is what the API servers ran ("1.34.1" or
	// "v1.34.1"); empty when unknown.
	KubernetesVersion string
	// ControlPlanes are the names of the control planes; nil when
	// unknown.
	ControlPlanes []string
	// ControlPlaneIPs are their IPs: a control plane removed in this run
	// keeps its etcd member until its removal at the end of the run, and
	// the gates before it must count it.
	ControlPlaneIPs []string
	// TalosVersion is the oldest Talos version the nodes ran ("v1.12.4");
	// empty when unknown.
	TalosVersion string
	// ClusterName is the cluster's name; empty when unknown (a stack from
	// before the clusterName output).
	ClusterName string
	// Roles are every node's role by node name; nil when unknown.
	Roles map[string]Role
	// Machines are the nodes' NodeSpec.Machine by node name (those that
	// had one).
	Machines map[string]string
	// DataDisks are the nodes' data disk sizes in GiB by node name (those
	// that had one).
	DataDisks map[string]int
	// LoadBalancerPools are the names of the pools the last run made (the
	// CiliumLoadBalancerIPPools in its state): their removal is guarded
	// like their shrinking.
	LoadBalancerPools []string
	// GitOps says the last run made the GitOps hand-off (Argo CD's
	// release in its state): its removal is said in the preview.
	GitOps bool
	// Encryption is how each node's volumes were encrypted, by node name,
	// read from its membership; nil when unknown.
	Encryption map[string]Encryption
	// Reported are the versions each node reported in the last run
	// (talosVersion, kubeletVersion), by node name: a preview, which
	// reads no node, shows them again instead of "unknown".
	Reported map[string]map[string]string
}

// SkippedWithoutPrevious says what is not checked when the stack's last
// outputs cannot be read.
const SkippedWithoutPrevious = "the refusals that compare this run with the last one (a Kubernetes or Talos version change, removed control planes, a node's role change) are skipped"

// checkChange records the problems of the change from a.Previous.
func (a *ClusterArgs) checkChange(p *inputs.Problems, prefix string) {
	prev := a.Previous
	if prev == nil {
		return
	}
	a.checkIdentity(p, prefix)
	a.checkDataDisks(p, prefix)
	a.checkEncryptionChange(p, prefix)
	a.checkTalosUpgrade(p, prefix)
	next := a.Cluster.KubernetesVersion
	if next == "" {
		next = DefaultKubernetesVersion(a.Cluster.TalosVersion)
	}
	if msg := kubernetesChange(prev.KubernetesVersion, next); msg != "" {
		p.Add(prefix+"cluster.kubernetesVersion", "%s", msg)
	}
	if prev.ControlPlanes == nil {
		return
	}
	removed := a.removedControlPlanes()
	if replaced, inTurn := a.replacedControlPlanes(); len(replaced) > 0 {
		a.checkReplaced(p, prefix, removed, replaced, inTurn)
		return
	}
	switch {
	case len(removed) > 0 && len(removed) == len(prev.ControlPlanes):
		p.Add(prefix+"nodes", "removes every control plane the cluster has (%s): its etcd would be lost; add the new control planes in one `up` and remove the old ones, one per `up`, afterwards", strings.Join(removed, ", "))
	case len(removed) > 1:
		p.Add(prefix+"nodes", "removes %d control planes in one `up` (%s): remove one per `up`, so that etcd keeps its quorum while each member leaves", len(removed), strings.Join(removed, ", "))
	}
}

// checkEncryptionChange refuses a node's new encryption on its old
// machine: Talos never re-encrypts a volume, and a STATE formatted
// otherwise than its config asks does not mount, so the node would not
// come back from its next reboot. A new machine (new disks) takes it.
func (a *ClusterArgs) checkEncryptionChange(p *inputs.Problems, prefix string) {
	if a.Previous.Encryption == nil {
		return
	}
	want := a.Cluster.encryption()
	var kept []string
	var was Encryption
	for _, n := range a.Nodes {
		had, ok := a.Previous.Encryption[n.Name]
		if !ok || had == want || machineReplaced(a.Previous, n) {
			continue
		}
		kept, was = append(kept, n.Name), had
	}
	if len(kept) == 0 {
		return
	}
	key := "cluster.diskEncryption"
	if want == EncryptionTPM || was == EncryptionTPM {
		key = "cluster.secureBoot"
	}
	p.Add(prefix+key, "changes how the volumes of %s are encrypted (%s -> %s) on the machines they run on: Talos never re-encrypts a volume, and the node would not come back from its next reboot; keep it as it was, or take a backup and restore it into new machines (make backup, make destroy, then make restore: docs/backup.md)",
		strings.Join(kept, ", "), encryptionName(was), encryptionName(want))
}

// encryptionName is an encryption as a message says it.
func encryptionName(e Encryption) string {
	switch e {
	case EncryptionTPM:
		return "TPM-sealed keys"
	case EncryptionNodeID:
		return "node-ID keys"
	}
	return "none"
}

// ChangeWarnings are the warnings about the change from a.Previous: a
// control plane count that becomes even.
func (a *ClusterArgs) ChangeWarnings() []string {
	if a.Previous == nil {
		return nil
	}
	var out []string
	if a.Previous.GitOps && a.Cluster.GitOps == nil {
		out = append(out, a.inputName("cluster.gitops")+": the section was removed: this run deletes Argo CD's release (its workloads), the root Application "+
			"(it has no resources finalizer: what Argo CD deployed stays, no longer synced), and the repository and SOPS age key Secrets; it leaves the "+
			ArgoCDNamespace+" namespace with any other Application in it, Argo CD's CRDs (the chart keeps them), the privileged namespaces (only their labels go), "+
			"and Cilium's and the approver's releases, which the stack's values manage again from this run on")
	}
	out = append(out, a.replacementWarnings()...)
	if a.Previous.ControlPlanes == nil {
		return out
	}
	return append(out, a.controlPlaneCountWarnings()...)
}

// replacementWarnings say, before anything runs, which nodes get a new
// machine and how: each installs Talos on new disks and rejoins, so what
// only its old disks held is gone.
func (a *ClusterArgs) replacementWarnings() []string {
	order := a.ReplacementOrder()
	if len(order) == 0 {
		return nil
	}
	how := ""
	switch {
	case len(order) == 1:
	case !slices.ContainsFunc(order, func(n string) bool { return !slices.Contains(a.ReplacedInTurn, n) }):
		how = ", one at a time, each once the one before rejoined"
	default:
		how = ", at once"
	}
	var changes []string
	for _, name := range order {
		changes = append(changes, fmt.Sprintf("%s (%s -> %s)", name, a.Previous.Machines[name], a.machineOf(name)))
	}
	return []string{fmt.Sprintf("nodes: this run replaces the machines of %d node(s)%s: %s; each leaves the cluster, its machine and disks are deleted, and the new one installs Talos afresh and rejoins (what only its old disks held is gone)",
		len(order), how, strings.Join(changes, ", "))}
}

// machineOf is the machine the node named has in this run.
func (a *ClusterArgs) machineOf(name string) string {
	for _, n := range a.Nodes {
		if n.Name == name {
			return n.Machine
		}
	}
	return ""
}

// controlPlaneCountWarnings warn of an even number of control planes
// reached from another number.
func (a *ClusterArgs) controlPlaneCountWarnings() []string {
	now := 0
	for _, n := range a.Nodes {
		if n.Role == RoleControlPlane {
			now++
		}
	}
	if now == len(a.Previous.ControlPlanes) || now%2 != 0 {
		return nil
	}
	return []string{fmt.Sprintf("nodes: the cluster goes from %d to %d control planes, an even number: etcd with %d members survives no more failures than with %d; add or remove one more",
		len(a.Previous.ControlPlanes), now, now, now-1)}
}

// removedControlPlanes are the previous control planes the nodes no longer
// have as control planes.
func (a *ClusterArgs) removedControlPlanes() []string {
	var removed []string
	for _, name := range a.Previous.ControlPlanes {
		if !slices.ContainsFunc(a.Nodes, func(n NodeSpec) bool { return n.Name == name && n.Role == RoleControlPlane }) {
			removed = append(removed, name)
		}
	}
	return removed
}

// kubernetesChange says why going from version from to version to is not
// a Kubernetes upgrade the rollout can make ("" when it is): a downgrade,
// or a skip of a minor version. Versions it cannot read are left to the
// version checks.
func kubernetesChange(from, to string) string {
	f, okF := parseVersion(from)
	t, okT := parseVersion(to)
	if !okF || !okT {
		return ""
	}
	switch {
	case t[0] != f[0]:
		return fmt.Sprintf("%s changes the major version of the running %s: not an upgrade Kubernetes supports", to, from)
	case t[1] < f[1] || t[1] == f[1] && t[2] < f[2]:
		return fmt.Sprintf("%s is a downgrade from the running %s: Kubernetes does not support downgrades", to, from)
	case t[1] > f[1]+1:
		return fmt.Sprintf("%s skips a minor version: the cluster runs %s; upgrade to %d.%d first, one minor version per `up`", to, from, f[0], f[1]+1)
	}
	return ""
}

func parseVersion(v string) ([3]int, bool) {
	var out [3]int
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(parts) != 3 {
		return out, false
	}
	for i, s := range parts {
		n, err := strconv.Atoi(s)
		if err != nil {
			return out, false
		}
		out[i] = n
	}
	return out, true
}

// PlacementWarnings warn when the loss of one host, or of one site, would
// take etcd's quorum with it: more than (n-1)/2 of the n control planes on
// one host or at one site, in a cluster whose nodes run on more than one
// (on a single host, every node shares its fate anyway). A site whose
// control planes all run on one host is named once, as that host.
func (a *ClusterArgs) PlacementWarnings() []string {
	hostCPs := map[string]int{}        // every host, with its control planes
	siteHosts := map[string][]string{} // every site, with the hosts of its control planes
	cps := 0
	for _, n := range a.Nodes {
		if n.Host == "" {
			return nil
		}
		if _, ok := hostCPs[n.Host]; !ok {
			hostCPs[n.Host] = 0
		}
		if _, ok := siteHosts[n.Site]; !ok {
			siteHosts[n.Site] = nil
		}
		if n.Role == RoleControlPlane {
			hostCPs[n.Host]++
			siteHosts[n.Site] = append(siteHosts[n.Site], n.Host)
			cps++
		}
	}
	if len(hostCPs) < 2 || cps < 2 {
		return nil
	}
	most := (cps - 1) / 2
	var out []string
	warn := func(k int, what, kind string) {
		out = append(out, fmt.Sprintf("%s: %d of the %d control planes run %s: if it fails, etcd loses its quorum (%d of %d members needed) and the cluster stops; spread the control planes so that no %s has more than %d",
			a.inputName("nodes"), k, cps, what, cps/2+1, cps, kind, most))
	}
	for _, h := range slices.Sorted(maps.Keys(hostCPs)) {
		if k := hostCPs[h]; k > most {
			warn(k, "on host "+h, "host")
		}
	}
	if len(siteHosts) < 2 {
		return out
	}
	for _, s := range slices.Sorted(maps.Keys(siteHosts)) {
		hosts := slices.Compact(slices.Sorted(slices.Values(siteHosts[s])))
		if k := len(siteHosts[s]); k > most && len(hosts) > 1 {
			warn(k, fmt.Sprintf("at site %s (on %s)", s, strings.Join(hosts, ", ")), "site")
		}
	}
	return out
}
