package talos

import (
	"context"
	"strings"
	"sync"

	"github.com/fluodata/talos-pulumi/internal/rollout"
)

// Unknown is what the outputs say of a version no node reported.
const Unknown = "unknown"

// The keys of a node's versions in the nodes output.
const (
	TalosVersionOutput   = "talosVersion"
	KubeletVersionOutput = "kubeletVersion"
)

// observation is what the nodes run, read from them.
type observation struct {
	// talos is the oldest Talos version a node reported; kubernetes the
	// oldest Kubernetes version an API server reported.
	talos, kubernetes string
	// nodes: by node name, its ip, role, talosVersion and kubeletVersion.
	nodes map[string]map[string]string
}

// observe reads what every node runs: its Talos version through the Talos
// API, its kubelet's version and each control plane's API server version
// through Kubernetes. What does not answer is reported as Unknown, and a
// cluster-wide version no node reported falls back to the one asked for.
func (d *dayTwo) observe(kubeconfig string, nodes []NodeSpec) observation {
	ctx, cancel := context.WithTimeout(d.deps.Context, observeTimeout)
	defer cancel()
	obs := observation{talos: d.talos, kubernetes: d.kubernetes, nodes: map[string]map[string]string{}}
	for _, n := range nodes {
		obs.nodes[n.Name] = map[string]string{"ip": n.IP, "role": string(n.Role), TalosVersionOutput: Unknown, KubeletVersionOutput: Unknown}
		if n.Machine != "" {
			obs.nodes[n.Name]["machine"] = n.Machine
		}
	}
	// A preview changes nothing and a destroy leaves nothing to report:
	// neither waits for nodes that may not answer. A preview shows what
	// the nodes reported last, so that it shows no change of its own.
	if d.ctx.DryRun() || d.deps.Destroy {
		if d.ctx.DryRun() && d.previous != nil {
			for _, n := range nodes {
				for key, v := range d.previous.Reported[n.Name] {
					obs.nodes[n.Name][key] = v
				}
			}
		}
		return obs
	}
	var talosVersions, apiVersions []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	if ops, err := d.ops(ctx, ""); err == nil {
		for _, n := range nodes {
			wg.Go(func() {
				v, err := ops.API.Version(ctx, n.IP)
				if err != nil {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				obs.nodes[n.Name][TalosVersionOutput] = v
				talosVersions = append(talosVersions, v)
			})
		}
	}
	if kubeconfig != "" {
		for _, n := range nodes {
			if n.Role != RoleControlPlane {
				continue
			}
			wg.Go(func() {
				kube, err := d.openKube([]byte(kubeconfig), "https://"+n.IP+":6443")
				if err != nil {
					return
				}
				defer closeKube(kube)
				if v, err := kube.ServerVersion(ctx); err == nil {
					mu.Lock()
					apiVersions = append(apiVersions, v)
					mu.Unlock()
				}
			})
		}
		wg.Go(func() {
			kube, err := d.openKube([]byte(kubeconfig), "")
			if err != nil {
				return
			}
			defer closeKube(kube)
			knodes, err := kube.Nodes(ctx)
			if err != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, n := range nodes {
				for _, k := range knodes {
					if k.InternalIP == n.IP {
						obs.nodes[n.Name][KubeletVersionOutput] = k.KubeletVersion
					}
				}
			}
		})
	}
	wg.Wait()
	if v := oldest(talosVersions); v != "" {
		obs.talos = v
	}
	if v := oldest(apiVersions); v != "" {
		obs.kubernetes = strings.TrimPrefix(v, "v")
	}
	return obs
}

// closeKube closes a Kubernetes client made for one read: its idle
// connections would stay open for the rest of the run.
func closeKube(k rollout.Kube) {
	if c, ok := k.(interface{ Close() }); ok {
		c.Close()
	}
}

// oldest is the lowest of the versions ("" for none); versions it cannot
// read sort first.
func oldest(versions []string) string {
	out := ""
	for _, v := range versions {
		if out == "" || versionLess(v, out) {
			out = v
		}
	}
	return out
}

func versionLess(a, b string) bool {
	va, okA := parseVersion(a)
	vb, okB := parseVersion(b)
	if !okA || !okB {
		return !okA && okB
	}
	for i := range va {
		if va[i] != vb[i] {
			return va[i] < vb[i]
		}
	}
	return false
}
