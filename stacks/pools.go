package stacks

import (
	"fmt"

	"github.com/fluodata/talos-pulumi/components/inputs"
)

// expandPools makes the nodes of each pool: the pool's keys with the
// node's name (inputs.PoolNodeName), its address (inputs.PoolAddress: the
// pool's ip plus n) and, when the pool
// gives one, its VM id (the pool's vmId plus n). An address past
// 255.255.255.255 is left empty, which validatePools reports.
func expandPools(nodes *NodesConfig) {
	nodes.pooled = make([][]NodeConfig, len(nodes.Pools))
	for i, pool := range nodes.Pools {
		count := 0
		if pool.Count != nil && inputs.PoolCountProblem(*pool.Count) == "" {
			count = *pool.Count // else none: validatePools refuses it
		}
		_, firstOK := parseIPv4(pool.IP)
		for n := range count {
			node := pool
			node.Count, node.MAC = nil, "" // validatePools refuses a pool's MAC
			node.Name = inputs.PoolNodeName(pool.Name, n)
			if firstOK {
				node.IP, _ = inputs.PoolAddress(pool.IP, n)
			}
			if pool.VMID != 0 {
				node.VMID = pool.VMID + n
			}
			nodes.pooled[i] = append(nodes.pooled[i], node)
		}
	}
}

// validatePools checks what is a pool's own: its count, that its nodes'
// addresses exist, and the keys a pool cannot give (each of its nodes
// needs its own: a MAC, a rented server's rescue access). The nodes'
// other keys are checked on each node, at the pool's keys.
func validatePools(d *Diagnostics, cfg *Config) {
	for i, pool := range cfg.Nodes.Pools {
		at := fmt.Sprintf("nodes.pools[%d]", i)
		if pool.Count == nil {
			d.errorf(at+".count", "is required: how many nodes the pool has (0 to %d)", inputs.MaxPoolCount)
		} else {
			var p inputs.Problems
			p.CheckPool(at, pool.Name, *pool.Count, pool.IP)
			for _, pr := range p.List() {
				d.errorf(pr.Path, "%s", pr.Message)
			}
		}
		if pool.MAC != "" {
			d.errorf(at+".mac", "cannot be given to a pool: each of its VMs needs its own (leave it out: each gets one derived from its name)")
		}
		if cfg.Platform == PlatformVPS || cfg.OnServers(pool.Host) {
			d.errorf(at, "rented servers cannot be a pool: each has its own address and rescue access; list them under nodes.workers")
		}
	}
	for i, n := range cfg.Nodes.ControlPlanes {
		refuseCount(d, fmt.Sprintf("nodes.controlPlanes[%d]", i), n)
	}
	for i, n := range cfg.Nodes.Workers {
		refuseCount(d, fmt.Sprintf("nodes.workers[%d]", i), n)
	}
}

// refuseCount refuses count on a node that is not a pool.
func refuseCount(d *Diagnostics, at string, n NodeConfig) {
	if n.Count != nil {
		d.errorf(at+".count", "is only valid in nodes.pools: move the entry there to make it a pool of %d nodes", *n.Count)
	}
}
