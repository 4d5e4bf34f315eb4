package stacks

import (
	"fmt"
	"net/netip"
)

// MaxPoolCount bounds a pool's count: a typo (1000 for 10) is refused
// rather than creating machines by the hundred.
const MaxPoolCount = 100

// PoolNodeName is the name of a pool's node n (0-based): stable, so that a
// node keeps its name, machine and address while the count changes.
func PoolNodeName(pool string, n int) string { return fmt.Sprintf("%s-%d", pool, n) }

// expandPools makes the nodes of each pool: the pool's keys with the
// node's name (PoolNodeName), its address (the pool's ip plus n) and, when the pool
// gives one, its VM id (the pool's vmId plus n). An address past
// 255.255.255.255 is left empty, which validatePools reports.
func expandPools(nodes *NodesConfig) {
	nodes.pooled = make([][]NodeConfig, len(nodes.Pools))
	for i, pool := range nodes.Pools {
		count := 0
		if pool.Count != nil && *pool.Count >= 0 && *pool.Count <= MaxPoolCount {
			count = *pool.Count // else none: validatePools refuses it
		}
		first, firstOK := parseIPv4(pool.IP)
		for n := range count {
			node := pool
			node.Count, node.MAC = nil, "" // validatePools refuses a pool's MAC
			node.Name = PoolNodeName(pool.Name, n)
			node.IP = pool.IP
			if firstOK {
				node.IP = ""
				if addr, ok := addIPv4(first, n); ok {
					node.IP = addr.String()
				}
			}
			if pool.VMID != 0 {
				node.VMID = pool.VMID + n
			}
			nodes.pooled[i] = append(nodes.pooled[i], node)
		}
	}
}

// addIPv4 is a plus n, false past the last IPv4 address.
func addIPv4(a netip.Addr, n int) (netip.Addr, bool) {
	b := a.As4()
	v := uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])
	v += uint64(n)
	if v > 0xffffffff {
		return netip.Addr{}, false
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// validatePools checks what is a pool's own: its count, that its nodes'
// addresses exist, and the keys a pool cannot give (each of its nodes
// needs its own: a MAC, a rented server's rescue access). The nodes'
// other keys are checked on each node, at the pool's keys.
func validatePools(d *Diagnostics, cfg *Config) {
	for i, pool := range cfg.Nodes.Pools {
		at := fmt.Sprintf("nodes.pools[%d]", i)
		switch {
		case pool.Count == nil:
			d.errorf(at+".count", "is required: how many nodes the pool has (0 to %d)", MaxPoolCount)
		case *pool.Count < 0 || *pool.Count > MaxPoolCount:
			d.errorf(at+".count", "%d is not a pool size: 0 to %d", *pool.Count, MaxPoolCount)
		}
		if first, ok := parseIPv4(pool.IP); ok && pool.Count != nil && *pool.Count > 0 {
			if _, ok := addIPv4(first, *pool.Count-1); !ok {
				d.errorf(at+".ip", "%s plus %d nodes runs past 255.255.255.255", pool.IP, *pool.Count)
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
