package program_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// The example stacks' patches and values pass the override check without
// a word: Validate says what stacks.Load says.
func TestValidateExamples(t *testing.T) {
	t.Parallel()
	for _, file := range []string{stackstest.ProxmoxExample, stackstest.VPSExample} {
		src := stackstest.Example(t, file)
		_, loaded := stacks.Load(src)
		_, d := program.Validate(src)
		require.NoError(t, d.Err(), file)
		assert.Equal(t, loaded.Warnings, d.Warnings, file)
	}
}

// The overrides are checked after the config loads, and only then: a
// config with errors gets stacks.Load's errors alone.
func TestValidateOrder(t *testing.T) {
	t.Parallel()
	src := stackstest.EditSection(t, stackstest.Example(t, stackstest.ProxmoxExample), "cluster", func(c map[string]any) {
		c["patches"] = map[string]any{"worker": []any{"cluster:\n  proxy:\n    disabled: false\n"}}
	})
	_, d := program.Validate(src)
	require.Len(t, d.Errors, 1)
	assert.Equal(t, "cluster.patches.worker[0]", d.Errors[0].Path)
	assert.Contains(t, d.Errors[0].Message, "enables kube-proxy on workers")

	broken := stackstest.EditSection(t, src, "cluster", func(c map[string]any) { c["talosVersion"] = "1.12.4" })
	_, d = program.Validate(broken)
	require.Len(t, d.Errors, 1)
	assert.Equal(t, "cluster.talosVersion", d.Errors[0].Path)
}

// The front-end's checks and the component's: a key the component alone
// checks (a VM's size) is reported with the file's own errors, each once
// and by its stack key; a key both refuse (a Talos version given as a
// number: the file refuses its type, the component finds it empty) is
// reported once, by the file;
// and the component's problems elsewhere wait for a file without errors
// (its Args are then built from what the file has, checked).
func TestValidateNamesTheComponentsProblemsByStackKeyOnce(t *testing.T) {
	t.Parallel()
	src := stackstest.EditSection(t, stackstest.Example(t, stackstest.ProxmoxExample), "nodes", func(n map[string]any) {
		workers := n["workers"].([]any)
		workers[0].(map[string]any)["cores"] = 300
		workers[0].(map[string]any)["labels"] = map[string]any{"node-role.kubernetes.io/worker": "", "example.com/tier": "batch"}
		workers[0].(map[string]any)["taints"] = map[string]any{"example.com/gpu": "Never", "example.com/pool": "gpu:NoSchedule"}
		workers[1].(map[string]any)["memory"] = 0
		cps := n["controlPlanes"].([]any)
		cps[0].(map[string]any)["dataDiskSize"] = 20
	})
	src = stackstest.EditSection(t, src, "proxmox", func(px map[string]any) { px["bios"] = "uefi" })
	src = stackstest.EditSection(t, src, "cluster", func(c map[string]any) { c["talosVersion"] = 1.12 })
	_, d := program.Validate(src)
	got := map[string]string{}
	for _, p := range d.Errors {
		_, twice := got[p.Path]
		assert.False(t, twice, "%s reported twice", p.Path)
		got[p.Path] = p.Message
	}
	assert.Len(t, got, 7, "%v", d.Err())
	assert.Contains(t, got[`nodes.workers[0].taints["example.com/gpu"]`], `invalid taint effect: "Never"`)
	assert.Contains(t, got[`nodes.workers[0].labels["node-role.kubernetes.io/worker"]`], "NodeRestriction")
	assert.Contains(t, got["cluster.talosVersion"], "must be a string")
	assert.Contains(t, got["nodes.workers[0].cores"], "300 cores is more than 256")
	assert.Contains(t, got["nodes.workers[1].memory"], "leave the key out for the default")
	assert.Equal(t, "data disks are for workers only", got["nodes.controlPlanes[0].dataDiskSize"])
	assert.Contains(t, got["proxmox.bios"], `"uefi" is not seabios or ovmf`)
}

// backup.schedule's cron syntax is the TalosCluster's rule (every language
// of the package gets it); the stack file's check names it by its stack
// key, with the rules the file keeps of the rest of the section.
func TestValidateNamesTheScheduleByItsStackKey(t *testing.T) {
	t.Parallel()
	src := stackstest.EditSection(t, stackstest.Example(t, stackstest.ProxmoxExample), "backup", func(b map[string]any) {
		b["target"] = "s3://backups/lab?endpoint=https://minio.lan:9000"
		b["recipients"] = []any{"age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"}
		b["schedule"] = "every six hours"
		b["s3"] = map[string]any{"accessKeyId": "AKIAEXAMPLE", "secretAccessKey": "s3-key"}
	})
	// backup holds a secret: the engine marks the whole top-level key.
	src.SecretKeys = append(src.SecretKeys, src.Project+":backup")
	_, d := program.Validate(src)
	require.Len(t, d.Errors, 1, "%v", d.Err())
	assert.Equal(t, "backup.schedule", d.Errors[0].Path)
	assert.Contains(t, d.Errors[0].Message, "is not a cron schedule")

	src = stackstest.EditSection(t, src, "backup", func(b map[string]any) { b["schedule"] = "30 2 * * *" })
	cfg, d := program.Validate(src)
	require.NoError(t, d.Err())
	e := program.EtcdBackupSettings(cfg, "homelab-prod")
	require.NotNil(t, e)
	assert.Equal(t, "backups", e.Bucket)
	assert.Equal(t, "lab/homelab-prod/in-cluster", e.Prefix, "beside the stack's backups")
	assert.Equal(t, "https://minio.lan:9000", e.Endpoint)
	assert.Equal(t, "us-east-1", e.Region, "a store's region, as make backup signs for it")

	// The nodes have no instance role: the schedule needs the keys
	// (issue 35, item B.7), named by the stack key.
	src = stackstest.EditSection(t, src, "backup", func(b map[string]any) { delete(b, "s3") })
	_, d = program.Validate(src)
	require.Len(t, d.Errors, 1, "%v", d.Err())
	assert.Equal(t, "backup.s3", d.Errors[0].Path)
	assert.Contains(t, d.Errors[0].Message, "no cloud instance role")
}

// cluster.dataVolume's rules are the TalosCluster's, named by stack key.
func TestValidateNamesTheDataVolumeByItsStackKey(t *testing.T) {
	t.Parallel()
	src := stackstest.EditSection(t, stackstest.Example(t, stackstest.ProxmoxExample), "cluster", func(c map[string]any) {
		c["dataVolume"] = map[string]any{"name": "longhorn data", "layout": "ceph"}
	})
	_, d := program.Validate(src)
	got := map[string]string{}
	for _, p := range d.Errors {
		got[p.Path] = p.Message
	}
	assert.Contains(t, got["cluster.dataVolume.name"], `"longhorn data" is not a volume name`)
	assert.Contains(t, got["cluster.dataVolume.layout"], "ceph")
	assert.Len(t, got, 2, "%v", d.Err())
}

// A component's input path is named by the stack key it comes from: a
// node by its place in the stack file, and the inputs the program fills
// from keys of other names (every platform's and its own) by those keys; a
// path that only starts like a renamed one is left alone.
func TestStackKeyNamesTheStackKey(t *testing.T) {
	t.Parallel()
	load := func(file string) *stacks.Config {
		cfg, d := stacks.Load(stackstest.Example(t, file))
		require.NoError(t, d.Err())
		return cfg
	}
	px, vp, local := load(stackstest.ProxmoxExample), load(stackstest.VPSExample), load(stackstest.LocalExample)
	for _, tc := range []struct {
		cfg      *stacks.Config
		in, want string
	}{
		{px, "nodes[0].ip", "nodes.controlPlanes[0].ip"},
		{px, "nodes[2].patches[1]", "nodes.workers[1].patches[1]"},
		{px, "nodes[9].ip", "nodes[9].ip"},
		{px, "proxmox.dnsmasq.ssh.port", "proxmox.ssh.port"},
		{px, "proxmox.dnsmasq.ssh", "proxmox.ssh"},
		{px, "proxmox.dnsmasq.configDir", "proxmox.dnsmasq.configDir"},
		{px, "proxmox.gateway", "cluster.network.gateway"},
		{px, "proxmox.prefixLength", "cluster.network.prefixLength"},
		{px, "cluster.nameservers[1]", "cluster.network.nameservers[1]"},
		{px, "schematic.extensions[2]", "cluster.schematic.extensions[2]"},
		{px, "schematic", "cluster.schematic"},
		{px, "schematicId", "schematicId"},
		{px, "proxmox.gatewayAddress", "proxmox.gatewayAddress"},
		{px, "cluster.cilium.version", "cluster.cilium.version"},
		{px, "docker.subnet", "docker.subnet"},
		{vp, "vps.gateway", "cluster.network.gateway"},
		{vp, "proxmox.gateway", "proxmox.gateway"},
		{local, "docker.subnet", "cluster.network"},
		{local, "docker.gateway", "cluster.network.gateway"},
		{local, "docker.talosPort", "local.talosPort"},
		{local, "dockerPorts", "dockerPorts"},
		{local, "nodes[1].ip", "nodes.workers[0].ip"},
		{local, "cluster.etcdBackup.bucket", "backup.target"},
	} {
		assert.Equal(t, tc.want, program.StackKey(tc.cfg, tc.in), "%s: %s", tc.cfg.Platform, tc.in)
	}
}

// The keys whose rules are the components' are read from the stack
// file's tags: every one of the lists kept by hand before is among them.
func TestComponentKeysAreTheTaggedOnes(t *testing.T) {
	t.Parallel()
	keys := stacks.ComponentKeys()
	for _, want := range []string{
		"cluster.network", "cluster.name", "cluster.vip", "cluster.schematic", "cluster.rollout", "cluster.talosVersion",
		"cluster.kubernetesVersion", "cluster.cilium.version", "cluster.certApprover.version", "backup.schedule",
		"cluster.dataVolume.name", "cluster.dataVolume.layout", "nodes[].name", "nodes[].ip",
		"proxmox.bridge", "proxmox.dnsmasq.restartCommand", "storage.proxmoxCsi", "nodes[].vmId", "nodes[].dataDiskSize",
		"vps.allowedCidrs", "vps.rebootCommand", "nodes[].gateway", "nodes[].rescue.host", "nodes[].rescue.user",
		"local.network", "local.image", "local.kubernetesPort", "local.talosPort",
	} {
		assert.Contains(t, keys, want)
	}
	assert.NotContains(t, keys, "proxmox.endpoint", "checked by the file itself: its SSH host defaults to it")
}

// The pools' and the hand-off's problems are named by their stack keys
// (gitops is the component's cluster.gitops), the secrets' text is checked
// by the file, and a VPS refuses the pools with the reason.
func TestValidateNamesTheAddonsByTheirStackKeys(t *testing.T) {
	t.Parallel()
	example := stackstest.Example(t, stackstest.GitOpsExample)
	_, d := program.Validate(example)
	require.NoError(t, d.Err(), "the example holds")

	src := stackstest.EditSection(t, example, "cluster", func(c map[string]any) {
		pools := c["loadBalancer"].(map[string]any)["pools"].([]any)
		pools[0].(map[string]any)["blocks"] = []any{"10.10.0.16/28"} // holds worker-0 and worker-1
		pools[1].(map[string]any)["serviceSelector"] = map[string]any{"pool": 7}
	})
	src = stackstest.EditSection(t, src, "gitops", func(g map[string]any) {
		g["repository"].(map[string]any)["url"] = "https://me:tok@git.example.com/x.git"
	})
	_, d = program.Validate(src)
	paths := map[string]string{}
	for _, e := range d.Errors {
		paths[e.Path] += e.Message
	}
	assert.Contains(t, paths["cluster.loadBalancer.pools[1].serviceSelector.pool"], "must be a string", "the file's own check: %v", d.Errors)

	src = stackstest.EditSection(t, example, "cluster", func(c map[string]any) {
		c["loadBalancer"].(map[string]any)["pools"].([]any)[0].(map[string]any)["blocks"] = []any{"10.10.0.16/28"}
	})
	src = stackstest.EditSection(t, src, "gitops", func(g map[string]any) {
		g["repository"].(map[string]any)["url"] = "https://me:tok@git.example.com/x.git"
	})
	_, d = program.Validate(src)
	paths = map[string]string{}
	for _, e := range d.Errors {
		paths[e.Path] += e.Message
	}
	assert.Contains(t, paths["cluster.loadBalancer.pools[0].blocks[0]"], "holds 10.10.0.20, the IP of nodes.workers[0] (worker-0)", "%v", d.Errors)
	assert.Contains(t, paths["gitops.repository.url"], "holds a credential", "%v", d.Errors)
}

func TestValidateRefusesPoolsOnAVPS(t *testing.T) {
	t.Parallel()
	src := stackstest.EditSection(t, stackstest.Example(t, stackstest.VPSExample), "cluster", func(c map[string]any) {
		c["loadBalancer"] = map[string]any{"pools": []any{map[string]any{"name": "home", "blocks": []any{"203.0.113.240/29"}}}}
	})
	_, d := program.Validate(src)
	require.Error(t, d.Err())
	require.Len(t, d.Errors, 1, "%v", d.Errors)
	assert.Equal(t, "cluster.loadBalancer", d.Errors[0].Path)
	assert.Contains(t, d.Errors[0].Message, "not by ARP")
}
