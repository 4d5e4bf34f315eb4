package stacks_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// serversKeys are multiHostKeys with a second hosts entry, hetzner, of
// rented servers (its allowedCidrs, its /32 network behind the
// provider's on-link gateway) holding a third control plane, cp-2:
// nodes.controlPlanes[2], whose rescue password is its only credential.
func serversKeys() keys {
	k := multiHostKeys()
	k["hosts"] = append(k["hosts"].([]any), obj{
		"name":    "hetzner",
		"vps":     obj{"allowedCidrs": []any{"198.51.100.10/32"}},
		"network": obj{"gateway": "172.31.1.1", "prefixLength": 32},
	})
	at(k, "nodes")["controlPlanes"] = append(at(k, "nodes")["controlPlanes"].([]any), obj{
		"name": "cp-2", "ip": "192.0.2.30", "host": "hetzner",
		"rescue": obj{"password": rescuePW, "hostKey": rescueHostKey},
	})
	return k
}

// serversSource marks the credential keys of serversKeys secret.
func serversSource(k keys) stacks.Source { return k.source("proxmox", "hosts", "nodes") }

// server is the key of the node on the servers entry.
const server = "nodes.controlPlanes[2]"

func hostEntry(k keys, i int) obj { return k["hosts"].([]any)[i].(obj) }

// serverErrors are the problems by path.
func serverErrors(ps []stacks.Problem) map[string]string {
	out := map[string]string{}
	for _, p := range ps {
		out[p.Path] += p.Message + "\n"
	}
	return out
}

func TestServersEntryLoads(t *testing.T) {
	t.Parallel()
	cfg, d := program.Validate(serversSource(serversKeys()))
	require.NoError(t, d.Err())
	assert.Empty(t, d.Warnings)
	require.Len(t, cfg.Hosts, 2)
	assert.False(t, cfg.Hosts[0].Servers(), "office gives proxmox")
	assert.True(t, cfg.Hosts[1].Servers(), "hetzner gives vps")
	assert.True(t, cfg.OnServers("hetzner"))
	for _, host := range []string{"", "office", "lab"} {
		assert.False(t, cfg.OnServers(host), "%q", host)
	}
	assert.Equal(t, []string{"198.51.100.10/32"}, cfg.Hosts[1].VPS.AllowedCIDRs)

	// An empty vps section makes an entry of servers all the same.
	k := serversKeys()
	hostEntry(k, 1)["vps"] = obj{}
	cfg, d = program.Validate(serversSource(k))
	require.NoError(t, d.Err())
	assert.True(t, cfg.Hosts[1].Servers())
	require.Len(t, d.Warnings, 1)
	assert.Equal(t, "hosts[1].vps.allowedCidrs", d.Warnings[0].Path)
	assert.Contains(t, d.Warnings[0].Message, "accept connections from the whole internet")

	// The example: its third machine is a rented server.
	cfg, d = stacks.Load(stackstest.Example(t, stackstest.MultiHostExample))
	require.NoError(t, d.Err())
	assert.Equal(t, []bool{false, true}, []bool{cfg.Hosts[0].Servers(), cfg.Hosts[1].Servers()})
	assert.Equal(t, "hetzner", cfg.Nodes.ControlPlanes[2].Host)
	assert.True(t, cfg.OnServers(cfg.Nodes.ControlPlanes[2].Host))
}

// A node on servers takes a VPS node's keys, and a VM's are refused by
// key, a zero too; its host is its own key.
func TestServersNodeRefusesVMKeys(t *testing.T) {
	t.Parallel()
	vmKeys := obj{"vmId": 130, "mac": "52:54:00:12:34:56", "cores": 2, "memory": 4096, "diskSize": 20, "dataDiskSize": 0, "proxmoxNode": "pve"}
	k := serversKeys()
	for key, v := range vmKeys {
		at(k, "nodes", "controlPlanes", 2)[key] = v
	}
	_, d := program.Validate(serversSource(k))
	var paths []string
	for _, p := range d.Errors {
		paths = append(paths, p.Path)
		assert.Equal(t, "is only valid for platform proxmox", p.Message, p.Path)
	}
	var want []string
	for key := range vmKeys {
		want = append(want, server+"."+key)
	}
	assert.ElementsMatch(t, want, paths)

	// A VM's node refuses a server's keys.
	k = serversKeys()
	w := at(k, "nodes", "workers", 0)
	w["rescue"], w["gateway"], w["prefixLength"] = obj{"password": rescuePW}, "10.10.0.1", 24
	_, d = program.Validate(serversSource(k))
	paths = nil
	for _, p := range d.Errors {
		paths = append(paths, p.Path)
	}
	assert.ElementsMatch(t, []string{"nodes.workers[0].rescue", "nodes.workers[0].gateway", "nodes.workers[0].prefixLength"}, paths, "%v", d.Err())
}

// The rescue password is required, and kept as a credential: stored
// encrypted, never shown.
func TestServersRescuePassword(t *testing.T) {
	t.Parallel()
	k := serversKeys()
	delete(at(k, "nodes", "controlPlanes", 2, "rescue"), "password")
	_, d := program.Validate(serversSource(k))
	require.Len(t, d.Errors, 1, "%v", d.Err())
	assert.Equal(t, server+".rescue.password", d.Errors[0].Path)
	assert.Contains(t, d.Errors[0].Message, "is required: `pulumi config set --secret --path 'nodes.controlPlanes[2].rescue.password' <password>`")

	// The nodes key holds no secret: the password is plain text.
	_, d = program.Validate(serversKeys().source("proxmox", "hosts"))
	require.Len(t, d.Errors, 1, "%v", d.Err())
	assert.Equal(t, server+".rescue.password", d.Errors[0].Path)
	assert.Contains(t, d.Errors[0].Message, "is stored in plain text")
	assert.NotContains(t, d.Err().Error(), rescuePW)

	cfg, d := stacks.Load(serversSource(serversKeys()))
	require.NoError(t, d.Err())
	assert.Equal(t, rescuePW, cfg.Nodes.ControlPlanes[2].Rescue.Password.Reveal())
	for _, dump := range []string{fmt.Sprintf("%v", cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg), mustJSON(t, cfg)} {
		assert.NotContains(t, dump, rescuePW)
	}
	args := program.ProxmoxArgs(cfg)
	require.NotNil(t, args.Nodes[2].Server)
	assert.NotNil(t, args.Nodes[2].Server.Rescue.Password, "handed on to the component")
}

// A server's defaults are a VPS node's: the rescue system at its IP on
// port 22, the cluster's install disk; no Proxmox node.
func TestServersDefaults(t *testing.T) {
	t.Parallel()
	k := serversKeys()
	at(k, "cluster")["installDisk"] = "/dev/nvme0n1"
	cfg, d := stacks.Load(serversSource(k))
	require.NoError(t, d.Err())
	n := cfg.Nodes.ControlPlanes[2]
	assert.Equal(t, "192.0.2.30", n.Rescue.Host)
	assert.Equal(t, 22, n.Rescue.Port)
	assert.Empty(t, n.Rescue.User, "the VpsCluster's default")
	assert.Equal(t, "/dev/nvme0n1", n.InstallDisk)
	assert.Empty(t, n.ProxmoxNode)
	assert.Equal(t, stacks.DefaultProxmoxNode, cfg.Nodes.ControlPlanes[0].ProxmoxNode, "a VM's Proxmox node is its host's")
	assert.Empty(t, cfg.Nodes.ControlPlanes[0].Rescue.Host, "a VM has no rescue system")
	assert.Zero(t, cfg.Nodes.ControlPlanes[0].Rescue.Port)

	// What the node gives is kept.
	k = serversKeys()
	cp := at(k, "nodes", "controlPlanes", 2)
	cp["installDisk"] = "/dev/vda"
	at(k, "nodes", "controlPlanes", 2, "rescue")["host"] = "rescue.example.com"
	at(k, "nodes", "controlPlanes", 2, "rescue")["port"] = 2222
	cfg, d = stacks.Load(serversSource(k))
	require.NoError(t, d.Err())
	n = cfg.Nodes.ControlPlanes[2]
	assert.Equal(t, []any{"rescue.example.com", 2222, "/dev/vda"}, []any{n.Rescue.Host, n.Rescue.Port, n.InstallDisk})
}

// Zeros given where a default stands are refused; a servers entry's
// network may be a /32, a Proxmox VE host's may not.
func TestServersNumbers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(k keys)
		path string
		says string
	}{
		{"a server's prefixLength 0", func(k keys) { at(k, "nodes", "controlPlanes", 2)["prefixLength"] = 0 },
			server + ".prefixLength", "0 is out of range 8-32; leave the key out for the default (its host's network.prefixLength)"},
		{"a server's rescue.port 0", func(k keys) { at(k, "nodes", "controlPlanes", 2, "rescue")["port"] = 0 },
			server + ".rescue.port", "0 is out of range 1-65535; leave the key out for the default (22)"},
		{"the servers' network.prefixLength 0", func(k keys) { hostEntry(k, 1)["network"].(obj)["prefixLength"] = 0 },
			"hosts[1].network.prefixLength", "0 is out of range 8-32"},
		{"a Proxmox VE host's /32", func(k keys) { hostEntry(k, 0)["network"].(obj)["prefixLength"] = 32 },
			"hosts[0].network.prefixLength", "32 is out of range 8-30"},
		{"the servers' network.prefixLength 33", func(k keys) { hostEntry(k, 1)["network"].(obj)["prefixLength"] = 33 },
			"hosts[1].network.prefixLength", "33 is out of range 8-32"},
		{"a server's prefixLength 40", func(k keys) { at(k, "nodes", "controlPlanes", 2)["prefixLength"] = 40 },
			server + ".prefixLength", "40 is out of range 8-32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := serversKeys()
			tc.edit(k)
			_, d := program.Validate(serversSource(k))
			msgs := serverErrors(d.Errors)
			assert.Contains(t, msgs[tc.path], tc.says, "%v", d.Err())
		})
	}
	_, d := program.Validate(serversSource(serversKeys()))
	require.NoError(t, d.Err(), "a /32 for the servers")
}

// The components' rules of the servers entry and of its node reach the
// file through program.Validate, named by the stack's keys.
func TestServersComponentProblemsByStackKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		edit  func(k keys)
		paths []string
		says  string
	}{
		{"settings", func(k keys) {
			hostEntry(k, 1)["vps"] = obj{"allowedCidrs": []any{"198.51.100.10"}, "talosWaitTimeout": "5s", "onDestroy": "delete", "publicTcpPorts": []any{6443}}
		}, []string{"hosts[1].vps.allowedCidrs[0]", "hosts[1].vps.talosWaitTimeout", "hosts[1].vps.onDestroy", "hosts[1].vps.publicTcpPorts[0]"}, "is not a CIDR"},
		{"no gateway: the entry's network", func(k keys) { delete(hostEntry(k, 1), "network") },
			[]string{"hosts[1].network.gateway"}, "is required: a node gives no gateway of its own"},
		{"gone", func(k keys) { hostEntry(k, 1)["gone"] = true },
			[]string{"hosts[1].gone"}, "is for Proxmox VE hosts"},
		{"static addressing", func(k keys) {
			at(k, "proxmox")["addressing"] = "static"
			hostEntry(k, 0)["proxmox"].(obj)["addressing"] = "static"
		}, []string{"hosts[1].vps"}, "use addressing dhcp-reservation with rented servers"},
		{"a server's own keys", func(k keys) {
			cp := at(k, "nodes", "controlPlanes", 2)
			cp["installDisk"] = "sda"
			at(k, "nodes", "controlPlanes", 2, "rescue")["port"] = 70000
			at(k, "nodes", "controlPlanes", 2, "rescue")["user"] = ""
		}, []string{server + ".installDisk", server + ".rescue.port"}, "is not a device path"},
		{"a server's gateway", func(k keys) { at(k, "nodes", "controlPlanes", 2)["gateway"] = "127.0.0.1" },
			[]string{server + ".gateway"}, "loopback"},
		{"a server's rescue host", func(k keys) { at(k, "nodes", "controlPlanes", 2, "rescue")["host"] = "127.0.0.1" },
			[]string{server + ".rescue.host"}, "127.0.0.1 is a loopback address"},
		{"servers without KubeSpan", func(k keys) { delete(at(k, "cluster"), "kubeSpan") },
			[]string{"cluster.kubeSpan.enabled"}, "host hetzner (rented servers)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := serversKeys()
			tc.edit(k)
			_, d := program.Validate(serversSource(k))
			var paths []string
			for _, p := range d.Errors {
				// The TalosCluster's follow-ups at derived keys: a known
				// bug (see components/proxmox TestServersProblemsKnownBugs).
				if !strings.HasPrefix(p.Path, server+".network.") {
					paths = append(paths, p.Path)
				}
			}
			assert.ElementsMatch(t, tc.paths, paths, "%v", d.Err())
			assert.Contains(t, serverErrors(d.Errors)[tc.paths[0]], tc.says)
		})
	}
}

// An entry that gives proxmox and vps is refused, by the component's
// rule, through program.Validate.
func TestServersEntryOfBothKindsIsRefused(t *testing.T) {
	t.Parallel()
	k := serversKeys()
	hostEntry(k, 1)["proxmox"] = obj{
		"endpoint": "https://203.0.113.9:8006/", "apiTokenId": "root@pam!pulumi",
		"apiTokenSecret": "0e9d8c7b-6a5f-4e3d-2c1b-0a9f8e7d6c5b",
	}
	_, d := program.Validate(serversSource(k))
	assert.Contains(t, serverErrors(d.Errors)["hosts[1].proxmox"], "and vps exclude each other", "%v", d.Err())
	// An empty proxmox object is an entry's kind given too.
	hostEntry(k, 1)["proxmox"] = obj{}
	_, d = program.Validate(serversSource(k))
	assert.Contains(t, serverErrors(d.Errors)["hosts[1].proxmox"], "and vps exclude each other", "%v", d.Err())
}

// An entry that gives neither is a Proxmox VE host: its proxmox keys are
// required, and its node's rescue refused.
func TestServersEntryOfNeitherKindIsAProxmoxHost(t *testing.T) {
	t.Parallel()
	k := serversKeys()
	delete(hostEntry(k, 1), "vps")
	cfg, d := program.Validate(serversSource(k))
	assert.False(t, cfg.Hosts[1].Servers())
	msgs := serverErrors(d.Errors)
	for _, path := range []string{"hosts[1].proxmox.endpoint", "hosts[1].proxmox.apiTokenSecret", server + ".vmId", server + ".rescue"} {
		assert.Contains(t, msgs, path, "%v", d.Err())
	}
}

// The Proxmox sections (and their nodes) leave the servers out: no API,
// no SSH, no defaults of a Proxmox section for them.
func TestServersAreNoProxmoxSection(t *testing.T) {
	t.Parallel()
	cfg, d := stacks.Load(serversSource(serversKeys()))
	require.NoError(t, d.Err())
	sections := cfg.ProxmoxSections()
	var paths []string
	for _, s := range sections {
		paths = append(paths, s.Path)
		for _, ref := range cfg.SectionRefs(s) {
			assert.NotEqual(t, "cp-2", ref.Name, s.Path)
		}
	}
	assert.Equal(t, []string{"proxmox", "hosts[0].proxmox"}, paths)
	assert.Equal(t, "proxmox", cfg.SectionOf("").Path)
	assert.Equal(t, "hosts[0].proxmox", cfg.SectionOf("office").Path)
	assert.Empty(t, cfg.Hosts[1].Proxmox.Node, "no Proxmox defaults for servers")
	assert.Empty(t, cfg.Hosts[1].Proxmox.Access)
	var names []string
	for _, ref := range cfg.SectionRefs(sections[0]) {
		names = append(names, ref.Name)
	}
	assert.Equal(t, []string{"cp-0", "worker-0", "worker-1"}, names)
	assert.False(t, slices.ContainsFunc(cfg.SectionRefs(sections[1]), func(r stacks.NodeRef) bool { return r.Host != "office" }))
}
