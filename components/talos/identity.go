package talos

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fluodata/talos-pulumi/components/inputs"
)

// checkIdentity refuses the edits that give a running cluster or node another
// identity in the resource graph: a new cluster name (every resource's name
// starts with it, so the engine would replace the whole cluster), and a node
// that changes role under the same name (no removal runs for the old role).
func (a *ClusterArgs) checkIdentity(p *inputs.Problems, prefix string) {
	prev := a.Previous
	if prev.ClusterName != "" && a.Cluster.Name != prev.ClusterName {
		p.Add(prefix+"cluster.name", "%q renames the running cluster %q: every resource (the machine secrets and their CA included) is named after it and would be replaced, and the nodes' configs name it; keep %q (a new name is a new cluster: a new stack)",
			a.Cluster.Name, prev.ClusterName, prev.ClusterName)
	}
	if msg := talosDowngrade(prev.TalosVersion, a.Cluster.TalosVersion); msg != "" {
		p.Add(prefix+"cluster.talosVersion", "%s", msg)
	}
	if prev.Roles == nil {
		return
	}
	for i, n := range a.Nodes {
		was, ok := prev.Roles[n.Name]
		if !ok || was == n.Role {
			continue
		}
		p.Add(fmt.Sprintf("%snodes[%d]", prefix, i), "node %q was a %s and is now a %s: a node cannot change role in place (its etcd membership, its drain and its config are tied to its role); remove it in one `up`, then add it back with its new role in the next (or add it under a new name)",
			n.Name, roleName(was), roleName(n.Role))
	}
}

// roleName is a role as the stack file's node lists name it.
func roleName(r Role) string {
	if r == RoleControlPlane {
		return "control plane"
	}
	return "worker"
}

// talosDowngrade says why going from the Talos version the nodes run to
// another is refused ("" when it is not): a lower version. The rollout
// upgrades nodes through the Talos API; an older release may not read what
// a newer one wrote (etcd's data, the state partition), and Talos's own way
// back is a rollback to the previous boot entry, node by node, not an
// install of an older image.
func talosDowngrade(running, wanted string) string {
	_, okR := parseVersion(running)
	_, okW := parseVersion(wanted)
	if !okR || !okW || !versionLess(wanted, running) {
		return ""
	}
	return fmt.Sprintf("%s is lower than %s, which the nodes run: the rollout never downgrades Talos. To go back after a bad upgrade, roll each upgraded node back to the Talos it booted before (`talosctl rollback --nodes <ip>`, one control plane at a time, workers after), check it with `talosctl version`, then set cluster.talosVersion to the version they run and `up`",
		wanted, running)
}

// replacedControlPlanes are the control planes whose machine the run
// replaces (their Machine changed), each with what changes, and how many
// of them the platform replaces in turn.
func (a *ClusterArgs) replacedControlPlanes() (replaced []string, inTurn int) {
	for _, n := range a.Nodes {
		if n.Role == RoleControlPlane && machineReplaced(a.Previous, n) {
			replaced = append(replaced, fmt.Sprintf("%s (%s -> %s)", n.Name, a.Previous.Machines[n.Name], n.Machine))
			if slices.Contains(a.ReplacedInTurn, n.Name) {
				inTurn++
			}
		}
	}
	return replaced, inTurn
}

// ReplacementOrder are the nodes whose machine this run replaces, in the
// order a platform that replaces them in turn goes: the control planes,
// then the workers, each in the order of the nodes.
func (a *ClusterArgs) ReplacementOrder() []string {
	var cps, workers []string
	for _, n := range a.Nodes {
		if !machineReplaced(a.Previous, n) {
			continue
		}
		if n.Role == RoleControlPlane {
			cps = append(cps, n.Name)
		} else {
			workers = append(workers, n.Name)
		}
	}
	return append(cps, workers...)
}

// machineReplaced reports whether n's machine is another than the last
// run's: both known, and different.
func machineReplaced(prev *Previous, n NodeSpec) bool {
	if prev == nil {
		return false
	}
	was := prev.Machines[n.Name]
	return was != "" && n.Machine != "" && was != n.Machine
}

// checkReplaced refuses more than one control plane replaced or removed in
// one `up`, unless the platform replaces each in turn and none is removed,
// and the replacement of the only one: the new machine of a control plane
// joins etcd as a new member once the old one is gone, and etcd keeps its
// quorum only while one member at a time is away.
func (a *ClusterArgs) checkReplaced(p *inputs.Problems, prefix string, removed, replaced []string, inTurn int) {
	switch {
	case len(a.Previous.ControlPlanes) == 1:
		p.Add(prefix+"nodes", "replaces the machine of the only control plane, %s: its etcd, and with it the cluster's state, would be lost; add a control plane first (one `up`), then replace this one, or take a backup and restore it into new machines (make backup, then make restore: docs/backup.md)", replaced[0])
	case len(removed) == 0 && inTurn == len(replaced):
		// One at a time, each after the one before rejoined.
	case len(replaced)+len(removed) > 1:
		all := append(append([]string{}, replaced...), removed...)
		p.Add(prefix+"nodes", "replaces or removes %d control planes in one `up` (%s): change one control plane's machine per `up`, so that etcd keeps its quorum while each new machine joins",
			len(all), strings.Join(all, "; "))
	}
}
