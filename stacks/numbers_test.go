package stacks_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
)

func boundsInvalidCases() []invalidCase {
	worker := func(key string, v any) func() stacks.Source {
		return proxmoxWith(func(k keys) { at(k, "nodes", "workers", 0)[key] = v })
	}
	cp := func(key string, v any) func() stacks.Source {
		return proxmoxWith(func(k keys) { at(k, "nodes", "controlPlanes", 0)[key] = v })
	}
	vpsNode := func(key string, v any) func() stacks.Source {
		return vpsWith(func(k keys) { at(k, "nodes", "controlPlanes", 0)[key] = v })
	}
	return []invalidCase{
		// An explicit 0 is an error, not the default.
		{"explicit 0 cores on a worker", worker("cores", 0), "nodes.workers[0].cores", "0 is out of range 1-256; leave the key out for the default (4)"},
		{"explicit 0 cores on a control plane", cp("cores", 0), "nodes.controlPlanes[0].cores", "leave the key out for the default (2)"},
		{"explicit 0 cores as a string", worker("cores", "0"), "nodes.workers[0].cores", "0 is out of range 1-256"},
		{"explicit 0 memory", worker("memory", 0), "nodes.workers[0].memory", "0 is out of range 1024-4194304 MiB; leave the key out for the default (8192 MiB)"},
		{"explicit 0 disk size", cp("diskSize", 0), "nodes.controlPlanes[0].diskSize", "0 is out of range 10-131072 GiB; leave the key out for the default (20 GiB)"},
		{"explicit 0 VM id", cp("vmId", 0), "nodes.controlPlanes[0].vmId", "0 is out of range 100-999999999"},
		{"explicit 0 prefix length (Proxmox)", proxmoxWith(func(k keys) { at(k, "cluster", "network")["prefixLength"] = 0 }),
			"cluster.network.prefixLength", "0 is out of range 8-30; leave the key out for the default (24)"},
		{"explicit 0 SSH port", proxmoxWith(func(k keys) { at(k, "proxmox", "ssh")["port"] = 0 }),
			"proxmox.ssh.port", "0 is out of range 1-65535; leave the key out for the default (22)"},
		{"explicit 0 prefix length (VPS)", vpsWith(func(k keys) { at(k, "cluster", "network")["prefixLength"] = 0 }),
			"cluster.network.prefixLength", "0 is out of range 8-32; leave the key out for the default (32)"},
		{"explicit 0 node prefix length", vpsNode("prefixLength", 0), "nodes.controlPlanes[0].prefixLength", "0 is out of range 8-32"},
		{"explicit 0 rescue port", vpsWith(func(k keys) { at(k, "nodes", "controlPlanes", 0, "rescue")["port"] = 0 }),
			"nodes.controlPlanes[0].rescue.port", "0 is out of range 1-65535"},
		{"explicit 0 public port", vpsWith(func(k keys) { at(k, "vps")["publicTcpPorts"] = []any{443, 0} }),
			"vps.publicTcpPorts[1]", "0 is out of range 1-65535"},
		// An explicit 0 still counts as set for the other platform.
		{"explicit 0 cores on a VPS node", vpsNode("cores", 0), "nodes.controlPlanes[0].cores", "is only valid for platform proxmox"},
		{"explicit 0 data disk on a VPS node", vpsNode("dataDiskSize", 0), "nodes.controlPlanes[0].dataDiskSize", "is only valid for platform proxmox"},
		{"explicit 0 VM id on a VPS node", vpsNode("vmId", 0), "nodes.controlPlanes[0].vmId", "is only valid for platform proxmox"},
		{"proxmox section of zeros on a VPS stack", vpsWith(func(k keys) { k["proxmox"] = obj{"vlanId": 0} }),
			"proxmox", "is only valid for platform proxmox"},
		{"explicit 0 prefix length on a Proxmox node", worker("prefixLength", 0), "nodes.workers[0].prefixLength", "is only valid for platform vps"},
		{"rescue of zeros on a Proxmox node", worker("rescue", obj{"port": 0}), "nodes.workers[0].rescue", "is only valid for platform vps"},
		// Upper bounds: what Proxmox VE takes.
		{"too many cores", worker("cores", 257), "nodes.workers[0].cores", "257 cores is more than 256"},
		{"memory beyond 4 TiB", worker("memory", 4*1024*1024+1), "nodes.workers[0].memory", "4194305 MiB is more than 4194304 MiB (4 TiB)"},
		{"memory given in bytes", worker("memory", 8<<30), "nodes.workers[0].memory", "is more than 4194304 MiB"},
		{"disk beyond 128 TiB", worker("diskSize", 128*1024+1), "nodes.workers[0].diskSize", "131073 GiB is more than 131072 GiB (128 TiB)"},
		{"data disk beyond 128 TiB", worker("dataDiskSize", 200000), "nodes.workers[0].dataDiskSize", "200000 GiB is more than 131072 GiB"},
		{"negative cores", worker("cores", -2), "nodes.workers[0].cores", "-2: at least one core is required"},
		{"VM id beyond Proxmox's", cp("vmId", 1000000000), "nodes.controlPlanes[0].vmId", "1000000000 is out of range 100-999999999"},
		{"VLAN tag beyond 4094", proxmoxWith(func(k keys) { at(k, "proxmox")["vlanId"] = 4095 }), "proxmox.vlanId", "4095 is out of range 0-4094"},
		{"negative VLAN tag", proxmoxWith(func(k keys) { at(k, "proxmox")["vlanId"] = -1 }), "proxmox.vlanId", "-1 is out of range 0-4094"},
		{"SSH port beyond 65535", proxmoxWith(func(k keys) { at(k, "proxmox", "ssh")["port"] = 65536 }), "proxmox.ssh.port", "65536 is out of range 1-65535"},
		{"rescue port beyond 65535", vpsWith(func(k keys) { at(k, "nodes", "controlPlanes", 0, "rescue")["port"] = 70000 }),
			"nodes.controlPlanes[0].rescue.port", "70000 is out of range 1-65535"},
		{"node prefix length beyond 32", vpsNode("prefixLength", 33), "nodes.controlPlanes[0].prefixLength", "33 is out of range 8-32"},
		{"number too large for any field", worker("memory", "99999999999999999999"), "nodes.workers[0].memory", "must be a whole number"},
	}
}

// 0 where it means something (vlanId: untagged, dataDiskSize: none) is
// accepted as given; an explicit 0 elsewhere is reported once, at its key.
func TestExplicitZeros(t *testing.T) {
	t.Parallel()
	k := proxmoxKeys()
	at(k, "proxmox")["vlanId"] = 0
	at(k, "nodes", "workers", 0)["dataDiskSize"] = 0
	at(k, "nodes", "controlPlanes", 0)["dataDiskSize"] = 0
	cfg, d := stacks.Load(proxmoxSource(k))
	require.NoError(t, d.Err())
	assert.Empty(t, d.Warnings)
	assert.Equal(t, 0, cfg.Proxmox.VLANID)
	assert.Equal(t, 0, cfg.Nodes.Workers[0].DataDiskSize)

	k = proxmoxKeys()
	at(k, "nodes", "controlPlanes", 0)["vmId"] = 0
	at(k, "nodes", "workers", 0)["cores"] = 0
	at(k, "nodes", "workers", 0)["memory"] = 0
	at(k, "nodes", "workers", 1)["diskSize"] = 0
	at(k, "proxmox", "ssh")["port"] = 0
	_, d = program.Validate(proxmoxSource(k)) // the file's rules and the component's (a VM id's range)
	var paths []string
	for _, p := range d.Errors {
		paths = append(paths, p.Path)
	}
	assert.ElementsMatch(t, []string{
		"nodes.controlPlanes[0].vmId", "nodes.workers[0].cores", "nodes.workers[0].memory",
		"nodes.workers[1].diskSize", "proxmox.ssh.port",
	}, paths, "one error per key:\n%s", d.Err())

	// Absent keys still get their defaults: the file's, and the
	// ProxmoxCluster's for a VM's size.
	cfg, d = stacks.Load(proxmoxSource(proxmoxKeys()))
	require.NoError(t, d.Err())
	args := program.ProxmoxArgs(cfg).WithDefaults()
	w := args.Nodes[1]
	assert.Equal(t, []int{4, 8192, 20, 22, 24}, []int{w.Cores, w.Memory, w.DiskSize, cfg.Proxmox.SSH.Port, args.Proxmox.PrefixLength})
}

// The largest values Proxmox VE takes are accepted.
func TestUpperBoundsAreInclusive(t *testing.T) {
	t.Parallel()
	k := proxmoxKeys()
	w := at(k, "nodes", "workers", 0)
	w["cores"], w["memory"], w["diskSize"], w["dataDiskSize"] = 256, 4*1024*1024, 128*1024, 128*1024
	at(k, "nodes", "controlPlanes", 0)["vmId"] = 999999999
	at(k, "proxmox")["vlanId"] = 4094
	_, d := stacks.Load(proxmoxSource(k))
	require.NoError(t, d.Err())
}
