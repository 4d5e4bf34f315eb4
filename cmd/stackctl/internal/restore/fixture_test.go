package restore_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The stack, project and cluster the fixtures are of.
const (
	testStack   = "prod"
	testProject = "talos-cluster"
	testCluster = "homelab"
)

// Type tokens of the program's components (components/proxmox and
// components/talos ClusterType).
const (
	proxmoxClusterType = "talos-cluster:index:ProxmoxCluster"
	talosClusterType   = "talos-cluster:index:TalosCluster"
)

// encryptedSecret is a secret value as a passphrase secrets provider
// leaves it in an export: the seed must carry it as it is.
const encryptedSecret = `{"4dabf18193072939515e22adb298388d":"1b47061264138c4ac30d75fd1eb44270","ciphertext":"v1:abc"}`

// secretsProviders is the deployment's secrets provider, kept byte for
// byte by the seed.
const secretsProviders = `{"type":"passphrase","state":{"salt":"x"}}`

// fixture is a stack's state export as this project's program registers it
// for a Proxmox cluster of one control plane (cp-1): the URNs by role, and
// the resources in the order Pulumi writes them (dependencies first).
type fixture struct {
	Stack string

	Root, Platform, Cluster                                  string
	ProxmoxProvider, TalosProvider, CommandProvider          string
	VM, Secrets, Apply, Member                               string
	Bootstrap, Kubeconfig, APIReady, K8sProvider, Cilium     string
	NodesReady                                               string
	ProxmoxProviderRef, TalosProviderRef, CommandProviderRef string
	K8sProviderRef                                           string

	Resources []map[string]any
}

// urn is a resource's URN: urn:pulumi:<stack>::<project>::<parent type
// chain>$<type>::<name>.
func urn(stack, chain, typ, name string) string {
	qualified := typ
	if chain != "" {
		qualified = chain + "$" + typ
	}
	return "urn:pulumi:" + stack + "::" + testProject + "::" + qualified + "::" + name
}

// newFixture is the backup's state of stack.
func newFixture(stack string) *fixture {
	f := &fixture{Stack: stack}
	platformChain := proxmoxClusterType
	clusterChain := proxmoxClusterType + "$" + talosClusterType
	f.Root = urn(stack, "", "pulumi:pulumi:Stack", testProject+"-"+stack)
	f.Platform = urn(stack, "", proxmoxClusterType, testCluster)
	f.Cluster = urn(stack, platformChain, talosClusterType, testCluster)
	f.ProxmoxProvider = urn(stack, "", "pulumi:providers:proxmoxve", "default_7_5_0")
	f.TalosProvider = urn(stack, "", "pulumi:providers:talos", "default_0_7_1")
	f.CommandProvider = urn(stack, "", "pulumi:providers:command", "default_1_1_0")
	f.ProxmoxProviderRef = f.ProxmoxProvider + "::6a0d4a4e-6f0b-4e3c-9a53-2d6c3f1b2a01"
	f.TalosProviderRef = f.TalosProvider + "::0b8a5f39-1e62-4c52-8f0c-6f2a0e7d9c02"
	f.CommandProviderRef = f.CommandProvider + "::c4e1d2f3-7a8b-4c9d-8e0f-1a2b3c4d5e03"
	f.VM = urn(stack, platformChain, "proxmoxve:vm/virtualMachine:VirtualMachine", testCluster+"-cp-1")
	f.Secrets = urn(stack, clusterChain, "talos:machine/secrets:Secrets", testCluster+"-secrets")
	f.Apply = urn(stack, clusterChain, "talos:machine/configurationApply:ConfigurationApply", testCluster+"-apply-cp-1")
	f.Member = urn(stack, clusterChain, "command:local:Command", testCluster+"-member-cp-1")
	f.Bootstrap = urn(stack, clusterChain, "talos:machine/bootstrap:Bootstrap", testCluster+"-bootstrap")
	f.Kubeconfig = urn(stack, clusterChain, "talos:cluster/kubeconfig:Kubeconfig", testCluster+"-kubeconfig")
	f.APIReady = urn(stack, clusterChain, "command:local:Command", testCluster+"-api-ready")
	f.K8sProvider = urn(stack, clusterChain, "pulumi:providers:kubernetes", testCluster+"-k8s")
	f.K8sProviderRef = f.K8sProvider + "::5f7e3d1c-2b4a-4968-b7c5-d3e1f9a8b004"
	f.Cilium = urn(stack, clusterChain, "kubernetes:helm.sh/v3:Release", testCluster+"-cilium")
	f.NodesReady = urn(stack, clusterChain, "command:local:Command", testCluster+"-nodes-ready")

	secret := json.RawMessage(encryptedSecret)
	f.Resources = []map[string]any{
		{
			"urn": f.Root, "custom": false, "type": "pulumi:pulumi:Stack",
			"outputs": map[string]any{"talosconfig": secret, "kubeconfig": secret, "clusterName": testCluster},
		},
		{"urn": f.Platform, "custom": false, "type": proxmoxClusterType, "parent": f.Root},
		{"urn": f.Cluster, "custom": false, "type": talosClusterType, "parent": f.Platform},
		provider(f.ProxmoxProvider, f.ProxmoxProviderRef, "pulumi:providers:proxmoxve"),
		provider(f.TalosProvider, f.TalosProviderRef, "pulumi:providers:talos"),
		provider(f.CommandProvider, f.CommandProviderRef, "pulumi:providers:command"),
		{
			"urn": f.VM, "custom": true, "id": "101", "type": "proxmoxve:vm/virtualMachine:VirtualMachine",
			"parent": f.Platform, "provider": f.ProxmoxProviderRef,
			"inputs": map[string]any{"nodeName": "pve", "vmId": 101}, "outputs": map[string]any{"vmId": 101},
		},
		{
			"urn": f.Secrets, "custom": true, "id": "machine_secrets", "type": "talos:machine/secrets:Secrets",
			"parent": f.Cluster, "provider": f.TalosProviderRef,
			"inputs":  map[string]any{"talosVersion": "v1.12.4"},
			"outputs": map[string]any{"machineSecrets": secret, "clientConfiguration": map[string]any{"caCertificate": "Q0E=", "clientKey": secret}},
		},
		{
			"urn": f.Apply, "custom": true, "id": "machine_configuration_apply", "type": "talos:machine/configurationApply:ConfigurationApply",
			"parent": f.Cluster, "provider": f.TalosProviderRef, "dependencies": []string{f.VM, f.Secrets},
			"propertyDependencies": map[string][]string{"clientConfiguration": {f.Secrets}, "node": {}},
		},
		{
			"urn": f.Member, "custom": true, "id": "cp-1", "type": "command:local:Command",
			"parent": f.Cluster, "provider": f.CommandProviderRef, "dependencies": []string{f.Apply}, "deletedWith": f.Secrets,
		},
		{
			"urn": f.Bootstrap, "custom": true, "id": "machine_bootstrap", "type": "talos:machine/bootstrap:Bootstrap",
			"parent": f.Cluster, "provider": f.TalosProviderRef, "dependencies": []string{f.Apply, f.Secrets},
			"propertyDependencies": map[string][]string{"clientConfiguration": {f.Secrets}},
			"inputs":               map[string]any{"node": "10.5.0.11", "clientConfiguration": map[string]any{"clientKey": secret}},
		},
		{
			"urn": f.Kubeconfig, "custom": true, "id": "cluster_kubeconfig", "type": "talos:cluster/kubeconfig:Kubeconfig",
			"parent": f.Cluster, "provider": f.TalosProviderRef, "dependencies": []string{f.Bootstrap},
			"outputs": map[string]any{"kubeconfigRaw": secret},
		},
		{
			"urn": f.APIReady, "custom": true, "id": "api-ready", "type": "command:local:Command",
			"parent": f.Cluster, "provider": f.CommandProviderRef, "dependencies": []string{f.Bootstrap, f.Kubeconfig},
		},
		{
			"urn": f.K8sProvider, "custom": true, "id": "5f7e3d1c-2b4a-4968-b7c5-d3e1f9a8b004", "type": "pulumi:providers:kubernetes",
			"parent": f.Cluster, "dependencies": []string{f.Kubeconfig, f.APIReady},
			"propertyDependencies": map[string][]string{"kubeconfig": {f.Kubeconfig}, "waitFor": {f.APIReady}},
			"inputs":               map[string]any{"kubeconfig": secret},
		},
		{
			"urn": f.Cilium, "custom": true, "id": "kube-system/cilium", "type": "kubernetes:helm.sh/v3:Release",
			"parent": f.Cluster, "provider": f.K8sProviderRef, "dependencies": []string{f.Kubeconfig},
			"inputs": map[string]any{"chart": "cilium", "version": "1.18.4"},
		},
		{
			"urn": f.NodesReady, "custom": true, "id": "nodes-ready", "type": "command:local:Command",
			"parent": f.Cluster, "provider": f.CommandProviderRef, "dependencies": []string{f.Cilium},
		},
	}
	return f
}

func provider(u, ref, typ string) map[string]any {
	return map[string]any{
		"urn": u, "custom": true, "id": ref[strings.LastIndex(ref, "::")+2:], "type": typ,
		"inputs": map[string]any{"version": "1.0.0"}, "outputs": map[string]any{"version": "1.0.0"},
	}
}

// Export is the fixture as `pulumi stack export` prints it, with a
// secrets provider and an operation in flight.
func (f *fixture) Export(t testing.TB) []byte {
	t.Helper()
	return exportOf(t, f.Resources, map[string]any{
		"secrets_providers":  json.RawMessage(secretsProviders),
		"pending_operations": []any{map[string]any{"resource": map[string]any{"urn": f.Bootstrap, "type": "talos:machine/bootstrap:Bootstrap"}, "type": "creating"}},
	})
}

// Without is the fixture's export without the resources of urns.
func (f *fixture) Without(t testing.TB, urns ...string) []byte {
	t.Helper()
	var rs []map[string]any
	for _, r := range f.Resources {
		drop := false
		for _, u := range urns {
			drop = drop || r["urn"] == u
		}
		if !drop {
			rs = append(rs, r)
		}
	}
	return exportOf(t, rs, nil)
}

// exportOf is a version 3 export of resources (none: a new stack's), with
// extra deployment fields.
func exportOf(t testing.TB, resources []map[string]any, extra map[string]any) []byte {
	t.Helper()
	dep := map[string]any{"manifest": map[string]any{"time": "2026-11-01T03:00:00Z", "magic": "m", "version": "v3.219.0"}}
	if resources != nil {
		dep["resources"] = resources
	}
	for k, v := range extra {
		dep[k] = v
	}
	b, err := json.Marshal(map[string]any{"version": 3, "deployment": dep})
	require.NoError(t, err)
	return b
}

// emptyExport is a stack's state with no resources (new, or destroyed).
func emptyExport(t testing.TB) []byte {
	t.Helper()
	return exportOf(t, nil, nil)
}

// deployment is an export parsed into maps: its deployment's fields, and
// its resources by URN and in order.
type deployment struct {
	Fields    map[string]json.RawMessage
	Resources []map[string]any
	ByURN     map[string]map[string]any
	Raw       map[string]map[string]json.RawMessage
}

func parse(t testing.TB, export []byte) deployment {
	t.Helper()
	var top struct {
		Version    int                        `json:"version"`
		Deployment map[string]json.RawMessage `json:"deployment"`
	}
	require.NoError(t, json.Unmarshal(export, &top))
	require.Equal(t, 3, top.Version)
	d := deployment{Fields: top.Deployment, ByURN: map[string]map[string]any{}, Raw: map[string]map[string]json.RawMessage{}}
	if r, ok := top.Deployment["resources"]; ok {
		require.NoError(t, json.Unmarshal(r, &d.Resources))
		var raws []map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(r, &raws))
		for i, res := range d.Resources {
			u, _ := res["urn"].(string)
			d.ByURN[u] = res
			d.Raw[u] = raws[i]
		}
	}
	return d
}

// urns are the URNs of d's resources, in order.
func (d deployment) urns() []string {
	var out []string
	for _, r := range d.Resources {
		u, _ := r["urn"].(string)
		out = append(out, u)
	}
	return out
}
