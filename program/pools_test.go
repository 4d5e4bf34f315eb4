package program_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// withPool is the Proxmox example with pool (an entry of nodes.pools).
func withPool(t *testing.T, pools ...map[string]any) stacks.Source {
	t.Helper()
	return stackstest.EditSection(t, stackstest.Example(t, stackstest.ProxmoxExample), "nodes", func(n map[string]any) {
		list := make([]any, 0, len(pools))
		for _, p := range pools {
			list = append(list, p)
		}
		n["pools"] = list
	})
}

func gpuPool(count int) map[string]any {
	return map[string]any{
		"name": "gpu", "count": count, "ip": "10.10.0.40", "vmId": 140, "cores": 8, "memory": 16384,
		"labels": map[string]any{"example.com/pool": "gpu"}, "taints": map[string]any{"example.com/gpu": "true:NoSchedule"},
		"patches": []any{map[string]any{"machine": map[string]any{"sysctls": map[string]any{"vm.nr_hugepages": "64"}}}},
	}
}

// A pool's nodes are workers like the listed ones, named <pool>-<n>, at
// consecutive addresses and VM ids, with the pool's size, labels, taints
// and patches.
func TestAPoolsNodesAreWorkersWithThePoolsKeys(t *testing.T) {
	t.Parallel()
	cfg, d := program.Validate(withPool(t, gpuPool(3)))
	require.NoError(t, d.Err())
	var names []string
	for _, ref := range cfg.Nodes.Refs() {
		names = append(names, ref.Name)
		if ref.Path != "nodes.pools[0]" {
			continue
		}
		assert.Equal(t, stacks.RoleWorker, ref.Role)
		assert.Equal(t, 8, ref.Cores)
		assert.Equal(t, 16384, ref.Memory)
		assert.Nil(t, ref.Count)
	}
	assert.Equal(t, []string{"cp-0", "worker-0", "worker-1", "gpu-0", "gpu-1", "gpu-2"}, names)

	args := program.TalosArgs(cfg)
	byName := map[string]int{}
	for i, n := range args.Nodes {
		byName[n.Name] = i
	}
	for i, ip := range []string{"10.10.0.40", "10.10.0.41", "10.10.0.42"} {
		n := args.Nodes[byName["gpu-"+string(rune('0'+i))]]
		assert.Equal(t, ip, n.IP)
		assert.Equal(t, map[string]string{"example.com/pool": "gpu"}, n.Labels)
		assert.Equal(t, map[string]string{"example.com/gpu": "true:NoSchedule"}, n.Taints)
		assert.Len(t, n.UserPatches, 1)
	}
	proxmoxArgs := program.ProxmoxArgs(cfg)
	var vmids []int
	for _, n := range proxmoxArgs.Nodes {
		vmids = append(vmids, n.VMID)
	}
	assert.Equal(t, []int{110, 120, 121, 140, 141, 142}, vmids)
}

// Lowering a pool's count removes its highest-numbered nodes, and only
// them: the others keep their names, addresses and VM ids.
func TestALowerCountKeepsThePoolsFirstNodes(t *testing.T) {
	t.Parallel()
	names := func(count int) map[string]string {
		cfg, d := program.Validate(withPool(t, gpuPool(count)))
		require.NoError(t, d.Err())
		out := map[string]string{}
		for _, ref := range cfg.Nodes.Refs() {
			out[ref.Name] = ref.IP
		}
		return out
	}
	three, two, none := names(3), names(2), names(0)
	delete(three, "gpu-2")
	assert.Equal(t, three, two)
	delete(two, "gpu-1")
	delete(two, "gpu-0")
	assert.Equal(t, two, none, "a pool of 0 nodes is allowed: emptied, kept for later")
}

// What a pool cannot be or give is refused by the pool's keys, once
// however many nodes it has; a problem of its nodes is named by the
// pool's key, once.
func TestPoolsAreRefusedWhatTheirNodesCannotShare(t *testing.T) {
	t.Parallel()
	bad := gpuPool(3)
	bad["mac"] = "52:54:00:12:34:56"
	bad["cores"] = 300
	bad["rescue"] = map[string]any{"password": "Sup3r-s3cret-rescue"}
	noCount := gpuPool(1)
	delete(noCount, "count")
	noCount["name"] = "other"
	noCount["ip"] = "10.10.0.60"
	noCount["vmId"] = 160
	tooMany := gpuPool(101)
	tooMany["name"], tooMany["ip"], tooMany["vmId"] = "many", "10.10.0.70", 170
	clash := gpuPool(2)
	clash["name"], clash["ip"], clash["vmId"] = "clash", "10.10.0.21", 180 // worker-1's IP
	src := withPool(t, bad, noCount, tooMany, clash)
	src = stackstest.EditSection(t, src, "nodes", func(n map[string]any) {
		n["workers"].([]any)[0].(map[string]any)["count"] = 2
	})
	_, d := program.Validate(src)
	got := map[string]string{}
	for _, p := range d.Errors {
		_, twice := got[p.Path]
		assert.False(t, twice, "%s reported twice: %v", p.Path, d.Errors)
		got[p.Path] = p.Message
		assert.NotContains(t, p.Message, "Sup3r-s3cret-rescue")
	}
	assert.Contains(t, got["nodes.pools[0].mac"], "each of its VMs needs its own")
	assert.Contains(t, got["nodes.pools[0].cores"], "300 cores")
	assert.Contains(t, got["nodes.pools[0].rescue"], "only valid for platform vps")
	assert.Contains(t, got["nodes.pools[1].count"], "is required")
	assert.Contains(t, got["nodes.pools[2].count"], "101 is not a pool size")
	assert.Contains(t, got["nodes.pools[3].ip"], "10.10.0.21")
	assert.Contains(t, got["nodes.workers[0].count"], "only valid in nodes.pools")
}

// On platform local a pool is containers like the listed workers; rented
// servers cannot be one.
func TestPoolsOnTheOtherPlatforms(t *testing.T) {
	t.Parallel()
	local := stackstest.EditSection(t, stackstest.Example(t, stackstest.LocalExample), "nodes", func(n map[string]any) {
		n["pools"] = []any{map[string]any{"name": "batch", "count": 2, "ip": "10.5.0.10", "labels": map[string]any{"example.com/pool": "batch"}}}
	})
	cfg, d := program.Validate(local)
	require.NoError(t, d.Err())
	var nodes []string
	for _, n := range program.LocalArgs(cfg).Nodes {
		nodes = append(nodes, n.Name+"@"+n.IP)
	}
	assert.Equal(t, []string{"cp1@10.5.0.2", "w1@10.5.0.3", "batch-0@10.5.0.10", "batch-1@10.5.0.11"}, nodes)

	vps := stackstest.EditSection(t, stackstest.Example(t, stackstest.VPSExample), "nodes", func(n map[string]any) {
		n["pools"] = []any{map[string]any{"name": "batch", "count": 2, "ip": "203.0.113.40"}}
	})
	_, d = program.Validate(vps)
	require.Error(t, d.Err())
	assert.Contains(t, d.Err().Error(), "nodes.pools[0]: rented servers cannot be a pool")
}
