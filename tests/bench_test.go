package tests

import (
	"fmt"
	"testing"

	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// sizedProxmox is the Proxmox example grown to n nodes (3 control planes
// when n allows, workers for the rest) on a /16.
func sizedProxmox(b *testing.B, n int) stacks.Source {
	b.Helper()
	src := stackstest.Example(b, stackstest.ProxmoxExample)
	src = edit(b, src, "cluster", func(m map[string]any) {
		m["network"].(map[string]any)["prefixLength"] = 16
	})
	return edit(b, src, "nodes", func(m map[string]any) {
		cps := min(3, n)
		var cp, ws []any
		for i := range n {
			node := map[string]any{
				"name": fmt.Sprintf("node-%d", i),
				"ip":   fmt.Sprintf("10.10.%d.%d", 1+i/200, 10+i%200),
				"vmId": 1000 + i,
			}
			if i < cps {
				cp = append(cp, node)
			} else {
				node["dataDiskSize"] = 20
				ws = append(ws, node)
			}
		}
		m["controlPlanes"], m["workers"] = cp, ws
	})
}

// BenchmarkProxmoxProgram evaluates the whole program under mocks: config
// load and validation, every resource registration and output. ns/node is
// the figure to watch: it should stay flat from 3 to 300 nodes.
func BenchmarkProxmoxProgram(b *testing.B) {
	for _, n := range []int{3, 30, 300} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			src := sizedProxmox(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				e, _ := deploy(b, src)
				if got := len(e.ByType("proxmoxve:VM/virtualMachine:VirtualMachine")); got != n {
					b.Fatalf("%d VMs, want %d", got, n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/node")
		})
	}
}
