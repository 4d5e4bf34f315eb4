package talos_test

import (
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/talos"
)

// The changes a rollout cannot make safely are refused against the
// previous cluster before anything is registered, each naming its input.
func TestChangesARolloutCannotMakeAreRefused(t *testing.T) {
	t.Parallel()
	three := []string{"cp-0", "cp-1", "cp-2"}
	for name, tc := range map[string]struct {
		prev    talos.Previous
		kube    string
		nodes   []talos.NodeSpec
		inTurn  []string
		path    string
		message string
	}{
		"a skipped minor version": {
			prev: talos.Previous{KubernetesVersion: "v1.33.4"}, kube: "1.35.0", nodes: nodes(3, 2),
			path: "cluster.kubernetesVersion", message: "1.35.0 skips a minor version: the cluster runs v1.33.4; upgrade to 1.34 first",
		},
		"a downgrade": {
			prev: talos.Previous{KubernetesVersion: "1.34.1"}, kube: "1.33.9", nodes: nodes(3, 2),
			path: "cluster.kubernetesVersion", message: "1.33.9 is a downgrade from the running 1.34.1",
		},
		"a patch downgrade": {
			prev: talos.Previous{KubernetesVersion: "1.34.2"}, kube: "1.34.1", nodes: nodes(3, 2),
			path: "cluster.kubernetesVersion", message: "is a downgrade",
		},
		"a major version": {
			prev: talos.Previous{KubernetesVersion: "1.34.2"}, kube: "2.0.0", nodes: nodes(3, 2),
			path: "cluster.kubernetesVersion", message: "changes the major version",
		},
		"two control planes removed at once": {
			prev: talos.Previous{ControlPlanes: append(three, "cp-3", "cp-4")}, kube: "1.34.1", nodes: nodes(3, 2),
			path: "nodes", message: "removes 2 control planes in one `up` (cp-3, cp-4): remove one per `up`",
		},
		"every control plane replaced": {
			prev: talos.Previous{ControlPlanes: []string{"old-cp"}}, kube: "1.34.1", nodes: nodes(1, 0),
			path: "nodes", message: "removes every control plane the cluster has (old-cp): its etcd would be lost",
		},
		// Item 1 of issue 23: a lower Talos replaced the machine secrets
		// (the provider's plan); now it is refused, saying how to go back.
		"a Talos patch downgrade": {
			prev: talos.Previous{TalosVersion: "v1.12.1"}, kube: "1.34.1", nodes: nodes(3, 2),
			path: "cluster.talosVersion", message: "v1.12.0 is lower than v1.12.1, which the nodes run: the rollout never downgrades Talos. To go back after a bad upgrade, roll each upgraded node back",
		},
		"a renamed cluster": {
			prev: talos.Previous{ClusterName: "homelab"}, kube: "1.34.1", nodes: nodes(3, 2),
			path: "cluster.name", message: `"lab" renames the running cluster "homelab": every resource (the machine secrets and their CA included) is named after it`,
		},
		// Item 6 of issue 23: a node moved between the lists under the same
		// name deadlocked every gate; it is refused, saying how to do it.
		"a worker turned into a control plane": {
			prev: talos.Previous{ControlPlanes: []string{"cp-0"}, Roles: map[string]talos.Role{"cp-0": talos.RoleControlPlane, "cp-1": talos.RoleWorker}},
			kube: "1.34.1", nodes: nodes(2, 0),
			path: "nodes[1]", message: `node "cp-1" was a worker and is now a control plane: a node cannot change role in place (its etcd membership, its drain and its config are tied to its role); remove it in one ` + "`up`" + `, then add it back with its new role in the next`,
		},
		// Item 2 of issue 23: machines replaced (a new proxmoxNode, vmId,
		// ...) were all replaced at once, with no etcd gate.
		"two control planes' machines replaced": {
			prev: talos.Previous{ControlPlanes: []string{"cp-0", "cp-1", "cp-2"}, Machines: map[string]string{"cp-0": "vm 110", "cp-1": "vm 111", "cp-2": "vm 112"}},
			kube: "1.34.1", nodes: withMachines(nodes(3, 0), "vm 110", "vm 211", "vm 212"),
			path: "nodes", message: "replaces or removes 2 control planes in one `up` (cp-1 (vm 111 -> vm 211); cp-2 (vm 112 -> vm 212)): change one control plane's machine per `up`",
		},
		"a control plane's machine replaced and another removed": {
			prev: talos.Previous{ControlPlanes: []string{"cp-0", "cp-1", "cp-2", "cp-3"}, Machines: map[string]string{"cp-0": "vm 110", "cp-1": "vm 111", "cp-2": "vm 112"}},
			kube: "1.34.1", nodes: withMachines(nodes(3, 0), "vm 110", "vm 211", "vm 112"),
			path: "nodes", message: "replaces or removes 2 control planes in one `up` (cp-1 (vm 111 -> vm 211); cp-3)",
		},
		// Replaced in turn by the platform, but with a removal beside.
		"control planes' machines replaced in turn and another removed": {
			prev: talos.Previous{ControlPlanes: []string{"cp-0", "cp-1", "cp-2", "cp-3"}, Machines: map[string]string{"cp-0": "vm 110", "cp-1": "vm 111", "cp-2": "vm 112"}},
			kube: "1.34.1", nodes: withMachines(nodes(3, 0), "vm 210", "vm 211", "vm 112"), inTurn: []string{"cp-0", "cp-1"},
			path: "nodes", message: "replaces or removes 3 control planes in one `up` (cp-0 (vm 110 -> vm 210); cp-1 (vm 111 -> vm 211); cp-3)",
		},
		"the only control plane's machine replaced": {
			prev: talos.Previous{ControlPlanes: []string{"cp-0"}, Machines: map[string]string{"cp-0": "vm 110"}},
			kube: "1.34.1", nodes: withMachines(nodes(1, 0), "vm 210"),
			path: "nodes", message: "replaces the machine of the only control plane, cp-0 (vm 110 -> vm 210): its etcd, and with it the cluster's state, would be lost",
		},
		"a control plane turned into a worker, and another removed": {
			prev: talos.Previous{ControlPlanes: three}, kube: "1.34.1",
			nodes: append(nodes(1, 0), talos.NodeSpec{Name: "cp-1", IP: "10.0.0.11", Role: talos.RoleWorker, Network: talos.NodeNetwork{DHCP: true}}),
			path:  "nodes", message: "removes 2 control planes in one `up` (cp-1, cp-2)",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			args := clusterArgs("v1.12.0", tc.nodes)
			args.Cluster.KubernetesVersion = tc.kube
			args.Previous = &tc.prev
			args.ReplacedInTurn = tc.inTurn
			e := &componentstest.Engine{}
			err := pulumi.RunErr(func(ctx *pulumi.Context) error {
				_, err := talos.NewClusterWithDeps(ctx, "lab", &args, talos.Deps{Hooks: &componentstest.Hooks{}})
				return err
			}, pulumi.WithMocks("talos-cluster", "lab", e))
			var ie *inputs.Error
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, []string{tc.path}, ie.Paths())
			assert.ErrorContains(t, err, tc.message)
			assert.ErrorContains(t, err, "(nothing was created)")
			assert.Empty(t, e.All(), "nothing is registered")
		})
	}
}

// The changes a rollout makes: one minor version up, a patch, one control
// plane removed, control planes added; and no previous cluster at all.
func TestChangesARolloutMakesPass(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		prev   *talos.Previous
		kube   string
		nodes  []talos.NodeSpec
		inTurn []string
		warn   string
	}{
		"one minor version up":        {prev: &talos.Previous{KubernetesVersion: "v1.33.4"}, kube: "1.34.1", nodes: nodes(3, 2)},
		"a patch":                     {prev: &talos.Previous{KubernetesVersion: "1.34.0"}, kube: "1.34.1", nodes: nodes(3, 2)},
		"the same version":            {prev: &talos.Previous{KubernetesVersion: "1.34.1"}, kube: "v1.34.1", nodes: nodes(3, 2)},
		"an unknown version":          {prev: &talos.Previous{KubernetesVersion: ""}, kube: "1.34.1", nodes: nodes(3, 2)},
		"one control plane less":      {prev: &talos.Previous{ControlPlanes: []string{"cp-0", "cp-1", "cp-2", "cp-3"}}, kube: "1.34.1", nodes: nodes(3, 0)},
		"three to two":                {prev: &talos.Previous{ControlPlanes: []string{"cp-0", "cp-1", "cp-2"}}, kube: "1.34.1", nodes: nodes(2, 1), warn: "nodes: the cluster goes from 3 to 2 control planes, an even number: etcd with 2 members survives no more failures than with 1; add or remove one more"},
		"one to three":                {prev: &talos.Previous{ControlPlanes: []string{"cp-0"}}, kube: "1.34.1", nodes: nodes(3, 0)},
		"a first up":                  {prev: nil, kube: "1.34.1", nodes: nodes(3, 2)},
		"a Talos upgrade":             {prev: &talos.Previous{TalosVersion: "v1.11.5", ClusterName: "lab"}, kube: "1.34.1", nodes: nodes(3, 2)},
		"the Talos the nodes run":     {prev: &talos.Previous{TalosVersion: "v1.12.0"}, kube: "1.34.1", nodes: nodes(3, 2)},
		"nodes that kept their roles": {prev: &talos.Previous{ControlPlanes: []string{"cp-0"}, Roles: map[string]talos.Role{"cp-0": talos.RoleControlPlane, "w-0": talos.RoleWorker}}, kube: "1.34.1", nodes: nodes(1, 1)},
		// Secure Boot turned on: every VM replaced, each in its turn.
		"every machine replaced in turn": {
			prev: &talos.Previous{ControlPlanes: []string{"cp-0", "cp-1", "cp-2"}, Machines: map[string]string{"cp-0": "vm 110", "cp-1": "vm 111", "cp-2": "vm 112", "w-0": "vm 120"}},
			kube: "1.34.1", nodes: withMachines(nodes(3, 1), "vm 110, secure boot", "vm 111, secure boot", "vm 112, secure boot", "vm 120, secure boot"),
			inTurn: []string{"cp-0", "cp-1", "cp-2", "w-0"},
			warn:   "nodes: this run replaces the machines of 4 node(s), one at a time, each once the one before rejoined: cp-0 (vm 110 -> vm 110, secure boot), cp-1 (vm 111 -> vm 111, secure boot), cp-2 (vm 112 -> vm 112, secure boot), w-0 (vm 120 -> vm 120, secure boot); each leaves the cluster, its machine and disks are deleted, and the new one installs Talos afresh and rejoins (what only its old disks held is gone)",
		},
		"one control plane's machine replaced": {
			prev: &talos.Previous{ControlPlanes: []string{"cp-0", "cp-1", "cp-2"}, Machines: map[string]string{"cp-0": "vm 110", "cp-1": "vm 111", "cp-2": "vm 112", "w-0": "vm 120"}},
			kube: "1.34.1", nodes: withMachines(nodes(3, 1), "vm 110", "vm 211", "vm 112", "vm 220"),
			warn: "nodes: this run replaces the machines of 2 node(s), at once: cp-1 (vm 111 -> vm 211), w-0 (vm 120 -> vm 220); each leaves the cluster, its machine and disks are deleted, and the new one installs Talos afresh and rejoins (what only its old disks held is gone)",
		},
		"roles unknown (old run)": {prev: &talos.Previous{KubernetesVersion: "1.34.1"}, kube: "1.34.1", nodes: nodes(1, 0)},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			args := clusterArgs("v1.12.0", tc.nodes)
			args.Cluster.KubernetesVersion = tc.kube
			args.Previous = tc.prev
			args.ReplacedInTurn = tc.inTurn
			require.NoError(t, args.Validate("lab"))
			if tc.warn != "" {
				assert.Equal(t, []string{tc.warn}, args.ChangeWarnings())
			} else {
				assert.Empty(t, args.ChangeWarnings())
			}
		})
	}
}

// withMachines sets the nodes' Machine, in order.
func withMachines(ns []talos.NodeSpec, machines ...string) []talos.NodeSpec {
	for i := range ns {
		ns[i].Machine = machines[i]
	}
	return ns
}

// TestPlacementWarnings: a host whose loss takes etcd's quorum is named, in
// a cluster on more than one host; one host, or hosts not known, say
// nothing.
func TestPlacementWarnings(t *testing.T) {
	t.Parallel()
	on := func(hosts ...string) *talos.ClusterArgs {
		ns := nodes(len(hosts), 1)
		for i, h := range hosts {
			ns[i].Host = h
		}
		ns[len(hosts)].Host = "pve3"
		return &talos.ClusterArgs{Nodes: ns}
	}
	w := on("pve1", "pve1", "pve2").PlacementWarnings()
	require.Len(t, w, 1)
	assert.Equal(t, "nodes: 2 of the 3 control planes run on host pve1: if it fails, etcd loses its quorum (2 of 3 members needed) and the cluster stops; spread the control planes so that no host has more than 1", w[0])
	assert.Empty(t, on("pve1", "pve2", "pve3").PlacementWarnings(), "one per host")
	assert.Empty(t, on("pve1", "pve1", "pve2", "pve2", "pve3").PlacementWarnings(), "5 control planes, 2 on a host: its loss leaves 3 of 5, the quorum")
	assert.Len(t, on("pve1", "pve1", "pve1", "pve2", "pve2").PlacementWarnings(), 1, "only pve1 (3 of 5) is named")
	single := on("pve1", "pve1", "pve1")
	single.Nodes[3].Host = "pve1"
	assert.Empty(t, single.PlacementWarnings(), "a single host: every node shares its fate anyway")
	unknown := on("pve1", "pve1", "pve2")
	unknown.Nodes[0].Host = ""
	assert.Empty(t, unknown.PlacementWarnings(), "hosts not known")
	assert.Len(t, on("pve1", "pve2").PlacementWarnings(), 2, "2 control planes: either host's loss takes the quorum")
}

// The quorum warning counts sites as well as hosts (issue 48, item 12):
// three control planes on three hosts, two of them at one site, are warned
// at that site; one per site is not; a site whose control planes share one
// host is named once, as that host.
func TestPlacementWarningsCountSites(t *testing.T) {
	t.Parallel()
	node := func(name, host, site string) talos.NodeSpec {
		return talos.NodeSpec{Name: name, Role: talos.RoleControlPlane, Host: host, Site: site}
	}
	a := &talos.ClusterArgs{Nodes: []talos.NodeSpec{node("cp-0", "pve", "home"), node("cp-1", "office/a", "office"), node("cp-2", "office/b", "office")}}
	w := a.PlacementWarnings()
	require.Len(t, w, 1, "%q", w)
	assert.Contains(t, w[0], "nodes: 2 of the 3 control planes run at site office (on office/a, office/b)")
	a.Nodes[2].Site = "edge"
	assert.Empty(t, a.PlacementWarnings(), "one per site")
	a.Nodes[2].Host, a.Nodes[2].Site = "office/a", "office"
	w = a.PlacementWarnings()
	require.Len(t, w, 1, "%q", w)
	assert.Contains(t, w[0], "run on host office/a")
}
