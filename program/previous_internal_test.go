package program

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/talos"
)

func TestPreviousFromTheStackOutputs(t *testing.T) {
	t.Parallel()
	assert.Nil(t, talos.PreviousFromOutputs(nil), "a first up")
	assert.Nil(t, talos.PreviousFromOutputs(map[string]any{"kubernetesVersion": "1.34.1", "nodeIps": map[string]any{"cp-0": "10.0.0.10"}}),
		"a stack from before the nodes output: the roles are unknown")

	prev := talos.PreviousFromOutputs(map[string]any{
		"kubernetesVersion": "1.34.1",
		"clusterName":       "homelab",
		"nodes": map[string]any{
			"cp-0":     map[string]any{"role": "controlplane", "ip": "10.0.0.10", "machine": "proxmox node pve, vmId 110"},
			"worker-0": map[string]any{"role": "worker", "ip": "10.0.0.20", "talosVersion": "v1.13.9", "kubeletVersion": talos.Unknown},
		},
	})
	assert.Equal(t, &talos.Previous{
		KubernetesVersion: "1.34.1", ControlPlanes: []string{"cp-0"}, ControlPlaneIPs: []string{"10.0.0.10"}, ClusterName: "homelab",
		Roles:    map[string]talos.Role{"cp-0": talos.RoleControlPlane, "worker-0": talos.RoleWorker},
		Machines: map[string]string{"cp-0": "proxmox node pve, vmId 110"},
		Reported: map[string]map[string]string{"worker-0": {"talosVersion": "v1.13.9"}}, // an unknown version is no version
	}, prev)

	prev = talos.PreviousFromOutputs(map[string]any{"kubernetesVersion": talos.Unknown, "nodes": map[string]any{}})
	assert.Equal(t, &talos.Previous{ControlPlanes: []string{}, Roles: map[string]talos.Role{}}, prev, "an unknown version is no version")
}

// TestAddonsFromTheLastState: the pools and Argo CD's release the last run
// made are read from its state by their types and outputs (the names the
// cluster gave them, not their resource names), and nothing else counts.
func TestAddonsFromTheLastState(t *testing.T) {
	t.Parallel()
	resources := map[string]any{
		"urn:pulumi:s::p::t$kubernetes:cilium.io/v2:CiliumLoadBalancerIPPool::lab-lb-pool-web": map[string]any{
			"type": talos.LBPoolType, "outputs": map[string]any{"metadata": map[string]any{"name": "web"}},
		},
		"urn:pulumi:s::p::t$kubernetes:cilium.io/v2:CiliumLoadBalancerIPPool::lab-lb-pool-home": map[string]any{
			"type": talos.LBPoolType, "outputs": map[string]any{"metadata": map[string]any{"name": "home"}},
		},
		"urn:pulumi:s::p::t$kubernetes:helm.sh/v3:Release::lab-cilium": map[string]any{
			"type": talos.HelmReleaseType, "outputs": map[string]any{"name": "cilium", "namespace": "kube-system"},
		},
	}
	prev := &talos.Previous{}
	prev.AddAddons(resources)
	assert.Equal(t, []string{"home", "web"}, prev.LoadBalancerPools)
	assert.False(t, prev.GitOps, "Cilium's release is no hand-off")
	resources["urn:pulumi:s::p::t$kubernetes:helm.sh/v3:Release::lab-argocd"] = map[string]any{
		"type": talos.HelmReleaseType, "outputs": map[string]any{"name": "argocd", "namespace": "argocd"},
	}
	prev = &talos.Previous{}
	prev.AddAddons(resources)
	assert.True(t, prev.GitOps)
}

// TestCSIRegionsFromTheLastState: the Proxmox CSI plugin's regions by API
// URL, from its release's values in the last state (issue 48, item 16).
func TestCSIRegionsFromTheLastState(t *testing.T) {
	t.Parallel()
	assert.Nil(t, proxmox.PreviousCSIRegionsFrom(map[string]any{}), "no plugin")
	resources := map[string]any{
		"urn:pulumi:s::p::t$kubernetes:helm.sh/v3:Release::lab-csi": map[string]any{
			"type": talos.HelmReleaseType, "outputs": map[string]any{"name": "proxmox-csi-plugin", "namespace": proxmox.CSINamespace,
				"values": map[string]any{"config": map[string]any{"clusters": []any{
					map[string]any{"url": "https://192.168.1.70:8006/api2/json", "region": "home", "token_secret": "s"},
					map[string]any{"url": "https://203.0.113.20:8006/api2/json", "region": "office"},
				}}}},
		},
		"urn:pulumi:s::p::t$kubernetes:helm.sh/v3:Release::lab-cilium": map[string]any{
			"type": talos.HelmReleaseType, "outputs": map[string]any{"name": "cilium", "namespace": "kube-system"},
		},
	}
	assert.Equal(t, map[string]string{
		"https://192.168.1.70:8006/api2/json": "home", "https://203.0.113.20:8006/api2/json": "office",
	}, proxmox.PreviousCSIRegionsFrom(resources))
}
