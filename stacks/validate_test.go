package stacks_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
)

const (
	project     = "talos-cluster"
	tokenSecret = "6f1c2e0a-8b7d-4c3e-9f5a-1d2b3c4d5e6f"
	rescuePW    = "hunter2-rescue"
	// Pinned host keys, so that the base configs are free of warnings.
	pveHostKey    = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILLv5oo8Hld2lK72k/SU05828UX0FPhpCEGBq4aMEq1x root@pve"
	rescueHostKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJzbzgU1kskLi7H36Wq4kAjh/rmPo053Qwt7aZy3WMdA"
)

// keys is a stack config as top-level key -> value (strings stay raw, the rest
// becomes JSON), the form the engine hands to the program.
type keys map[string]any

func (k keys) source(secretKeys ...string) stacks.Source {
	src := stacks.Source{Project: project, Values: map[string]string{}}
	for key, v := range k {
		if s, ok := v.(string); ok {
			src.Values[project+":"+key] = s
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		src.Values[project+":"+key] = string(b)
	}
	for _, s := range secretKeys {
		src.SecretKeys = append(src.SecretKeys, project+":"+s)
	}
	return src
}

type obj = map[string]any

func proxmoxKeys() keys {
	return keys{
		"platform": "proxmox",
		"cluster": obj{
			"name": "lab", "talosVersion": "v1.12.4",
			"network": obj{"gateway": "10.10.0.1"},
			"vip":     "10.10.0.5",
		},
		"nodes": obj{
			"controlPlanes": []any{obj{"name": "cp-0", "ip": "10.10.0.10", "vmId": 110}},
			"workers": []any{
				obj{"name": "worker-0", "ip": "10.10.0.20", "vmId": 120},
				obj{"name": "worker-1", "ip": "10.10.0.21", "vmId": 121},
			},
		},
		"proxmox": obj{
			"endpoint": "https://192.168.122.70:8006/", "apiTokenId": "root@pam!pulumi",
			"apiTokenSecret": tokenSecret, "bridge": "vmbr1",
			"ssh": obj{"hostKey": pveHostKey},
		},
	}
}

// multiHostKeys are proxmoxKeys with a second Proxmox VE host on another
// network (office), holding a control plane and a worker, over KubeSpan and
// without a VIP.
func multiHostKeys() keys {
	k := proxmoxKeys()
	c := at(k, "cluster")
	delete(c, "vip")
	c["endpoint"] = "k8s.lab.example.com"
	c["kubeSpan"] = obj{"enabled": true}
	cps := at(k, "nodes")["controlPlanes"].([]any)
	at(k, "nodes")["controlPlanes"] = append(cps,
		obj{"name": "cp-1", "ip": "10.20.0.10", "vmId": 110, "host": "office"})
	at(k, "nodes")["workers"] = append(at(k, "nodes")["workers"].([]any),
		obj{"name": "worker-2", "ip": "10.20.0.20", "vmId": 120, "host": "office"})
	k["hosts"] = []any{obj{
		"name": "office",
		"proxmox": obj{
			"endpoint": "https://198.51.100.7:8006/", "apiTokenId": "root@pam!pulumi",
			"apiTokenSecret": "0e9d8c7b-6a5f-4e3d-2c1b-0a9f8e7d6c5b", "ssh": obj{"hostKey": pveHostKey},
		},
		"network": obj{"gateway": "10.20.0.1"},
	}}
	return k
}

// multiHostSource marks the credential keys of multiHostKeys secret.
func multiHostSource(k keys) stacks.Source { return k.source("proxmox", "hosts") }

func vpsKeys() keys {
	return keys{
		"platform": "vps",
		"cluster":  obj{"name": "prod", "talosVersion": "v1.12.4", "network": obj{"gateway": "203.0.113.254"}},
		"nodes": obj{"controlPlanes": []any{obj{
			"name": "node-0", "ip": "203.0.113.10", "rescue": obj{"password": rescuePW, "hostKey": rescueHostKey},
		}}},
		"vps": obj{"allowedCidrs": []any{"198.51.100.0/24"}},
	}
}

// localKeys are a local stack: every key of its own left to defaults.
func localKeys() keys {
	return keys{
		"platform": "local",
		"cluster":  obj{"name": "local", "talosVersion": "v1.13.9"},
		"nodes": obj{
			"controlPlanes": []any{obj{"name": "cp1", "ip": "10.5.0.2"}},
			"workers":       []any{obj{"name": "w1", "ip": "10.5.0.3"}},
		},
	}
}

func localSource(k keys) stacks.Source { return k.source("nodes") }

func proxmoxSource(k keys) stacks.Source { return k.source("proxmox") }
func vpsSource(k keys) stacks.Source     { return k.source("nodes") }

// at walks into nested test config: at(k, "nodes", "workers", 1) etc.
func at(v any, path ...any) obj {
	for _, p := range path {
		switch key := p.(type) {
		case string:
			switch m := v.(type) {
			case keys:
				v = m[key]
			case obj:
				v = m[key]
			}
		case int:
			v = v.([]any)[key]
		}
	}
	return v.(obj)
}

func TestBaseConfigsAreValid(t *testing.T) {
	t.Parallel()
	for name, src := range map[string]stacks.Source{
		"proxmox": proxmoxSource(proxmoxKeys()),
		"vps":     vpsSource(vpsKeys()),
	} {
		_, d := program.Validate(src)
		require.NoError(t, d.Err(), name)
		assert.Empty(t, d.Warnings, name)
	}
}

// invalidCase is one invalid stack config and the problem it must report.
type invalidCase struct {
	name     string
	src      func() stacks.Source
	wantPath string
	wantMsg  string
}

// invalidCases is the invalid-config table: the base cases below and one
// group per class of problem, each in a file of its own.
func invalidCases() []invalidCase {
	return slices.Concat(
		baseInvalidCases(),
		limitsInvalidCases(),
		addressAndPathInvalidCases(),
		secretAndSizeInvalidCases(),
		backupInvalidCases(),
	)
}

func baseInvalidCases() []invalidCase {
	return []invalidCase{
		{"missing platform", func() stacks.Source {
			k := proxmoxKeys()
			delete(k, "platform")
			return proxmoxSource(k)
		}, "platform", "is required"},
		{"unknown platform", func() stacks.Source {
			k := proxmoxKeys()
			k["platform"] = "ovh"
			return proxmoxSource(k)
		}, "platform", `"ovh" is not a platform`},
		{"unknown top-level key", func() stacks.Source {
			k := proxmoxKeys()
			k["clustr"] = obj{}
			return proxmoxSource(k)
		}, "clustr", `unknown key (did you mean "cluster"?)`},
		{"unknown nested key with wrong case", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "nodes", "workers", 0)["vmid"] = 122
			return proxmoxSource(k)
		}, "nodes.workers[0].vmid", `unknown key (did you mean "vmId"?)`},
		{"duplicate node name", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "nodes", "workers", 1)["name"] = "worker-0"
			return proxmoxSource(k)
		}, "nodes.workers[1].name", `"worker-0" is already the name of nodes.workers[0]`},
		{"duplicate IP", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "nodes", "workers", 1)["ip"] = "10.10.0.10"
			return proxmoxSource(k)
		}, "nodes.workers[1].ip", "10.10.0.10 is already the IP of nodes.controlPlanes[0]"},
		{"duplicate VM id", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "nodes", "workers", 1)["vmId"] = 120
			return proxmoxSource(k)
		}, "nodes.workers[1].vmId", "120 is already the VM id of nodes.workers[0]"},
		{"duplicate MAC in another spelling", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "nodes", "workers", 0)["mac"] = "52:54:00:aa:bb:01"
			at(k, "nodes", "workers", 1)["mac"] = "52-54-00-AA-BB-01"
			return proxmoxSource(k)
		}, "nodes.workers[1].mac", "52:54:00:aa:bb:01 is already the MAC of nodes.workers[0]"},
		{"multicast MAC", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "nodes", "workers", 0)["mac"] = "01:00:5e:00:00:01"
			return proxmoxSource(k)
		}, "nodes.workers[0].mac", "multicast"},
		{"malformed MAC", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "nodes", "workers", 0)["mac"] = "52:54:00:zz:00:01"
			return proxmoxSource(k)
		}, "nodes.workers[0].mac", "is not a MAC address"},
		{"bad IP", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "nodes", "workers", 1)["ip"] = "10.10.0.300"
			return proxmoxSource(k)
		}, "nodes.workers[1].ip", `"10.10.0.300" is not an IPv4 address`},
		{"IPv6 node IP", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "nodes", "workers", 1)["ip"] = "fd00::21"
			return proxmoxSource(k)
		}, "nodes.workers[1].ip", "is not an IPv4 address"},
		{"IP outside the gateway's subnet", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "nodes", "workers", 0)["ip"] = "10.20.0.20"
			return proxmoxSource(k)
		}, "nodes.workers[0].ip", "10.20.0.20 is outside the node network 10.10.0.0/24 of gateway 10.10.0.1"},
		{"node IP is the gateway", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "nodes", "workers", 0)["ip"] = "10.10.0.1"
			return proxmoxSource(k)
		}, "nodes.workers[0].ip", "is the gateway's address"},
		{"node IP is the broadcast address", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "nodes", "workers", 0)["ip"] = "10.10.0.255"
			return proxmoxSource(k)
		}, "nodes.workers[0].ip", "broadcast address of 10.10.0.0/24"},
		{"bad gateway", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "cluster", "network")["gateway"] = "10.10.0"
			return proxmoxSource(k)
		}, "cluster.network.gateway", `"10.10.0" is not an IPv4 address`},
		{"bad nameserver", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "cluster", "network")["nameservers"] = []any{"1.1.1.1", "dns.google"}
			return proxmoxSource(k)
		}, "cluster.network.nameservers[1]", "is not an IP address"},
		{"prefix too long for a VM network", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "cluster", "network")["prefixLength"] = 31
			return proxmoxSource(k)
		}, "cluster.network.prefixLength", "31 is out of range 8-30"},
		{"VIP equal to a node IP", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "cluster")["vip"] = "10.10.0.10"
			return proxmoxSource(k)
		}, "cluster.vip", "10.10.0.10 is also the IP of nodes.controlPlanes[0] (cp-0)"},
		{"VIP outside the subnet", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "cluster")["vip"] = "192.168.1.5"
			return proxmoxSource(k)
		}, "cluster.vip", "outside the node network"},
		{"endpoint given as URL", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "cluster")["endpoint"] = "https://k8s.lab:6443"
			return proxmoxSource(k)
		}, "cluster.endpoint", "must be a host name or IPv4 address only"},
		{"Talos version without v", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "cluster")["talosVersion"] = "1.12.4"
			return proxmoxSource(k)
		}, "cluster.talosVersion", `"1.12.4" needs the v prefix: v1.12.4`},
		{"Talos version too old", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "cluster")["talosVersion"] = "v1.5.0"
			return proxmoxSource(k)
		}, "cluster.talosVersion", "is not supported"},
		{"bad Kubernetes version", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "cluster")["kubernetesVersion"] = "latest"
			return proxmoxSource(k)
		}, "cluster.kubernetesVersion", `"latest" is not a Kubernetes version`},
		{"cluster name not a DNS label", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "cluster")["name"] = "Home_Lab"
			return proxmoxSource(k)
		}, "cluster.name", `"Home_Lab" must be lowercase letters`},
		{"schematic id and extensions together", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "cluster")["schematic"] = obj{"id": strings.Repeat("a", 64), "extensions": []any{"siderolabs/iscsi-tools"}}
			return proxmoxSource(k)
		}, "cluster.schematic", "set either id or extensions, not both"},
		{"bad schematic id", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "cluster")["schematic"] = obj{"id": "e187c9b"}
			return proxmoxSource(k)
		}, "cluster.schematic.id", "64 lowercase hex digits"},
		{"bad extension name", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "cluster")["schematic"] = obj{"extensions": []any{"qemu guest agent"}}
			return proxmoxSource(k)
		}, "cluster.schematic.extensions[0]", "is not an extension name"},
		{"duplicate extension", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "cluster")["schematic"] = obj{"extensions": []any{"siderolabs/iscsi-tools", "siderolabs/iscsi-tools"}}
			return proxmoxSource(k)
		}, "cluster.schematic.extensions[1]", "already listed at extensions[0]"},
		{"chart version with v", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "cluster")["cilium"] = obj{"version": "v1.18.4"}
			return proxmoxSource(k)
		}, "cluster.cilium.version", `chart versions have no v prefix; use "1.18.4"`},
		{"chart version as a YAML number", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "cluster")["certApprover"] = obj{"version": 1.2}
			return proxmoxSource(k)
		}, "cluster.certApprover.version", "must be a string, got the number 1.2 (quote it in YAML)"},
		{"install disk not a device", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "cluster")["installDisk"] = "sda"
			return proxmoxSource(k)
		}, "cluster.installDisk", `"sda" is not a device path`},
		{"patch with a misspelled Talos key", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "cluster")["patches"] = obj{"all": []any{obj{"machine": obj{"instal": obj{"disk": "/dev/vda"}}}}}
			return proxmoxSource(k)
		}, "cluster.patches.all[0]", "not a valid Talos config patch"},
		{"JSON6902 patch", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "nodes", "workers", 0)["patches"] = []any{"- op: add\n  path: /machine/sysctls\n  value: {}\n"}
			return proxmoxSource(k)
		}, "nodes.workers[0].patches[0]", "JSON6902 patches cannot be applied"},
		{"no control planes", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "nodes")["controlPlanes"] = []any{}
			return proxmoxSource(k)
		}, "nodes.controlPlanes", "at least one control plane is required"},
		{"nodes key absent", func() stacks.Source {
			k := proxmoxKeys()
			delete(k, "nodes")
			return proxmoxSource(k)
		}, "nodes.controlPlanes", "at least one control plane is required"},
		{"VM id out of range", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "nodes", "controlPlanes", 0)["vmId"] = 42
			return proxmoxSource(k)
		}, "nodes.controlPlanes[0].vmId", "42 is out of range 100-999999999"},
		{"VM id missing", func() stacks.Source {
			k := proxmoxKeys()
			delete(at(k, "nodes", "controlPlanes", 0), "vmId")
			return proxmoxSource(k)
		}, "nodes.controlPlanes[0].vmId", "is required"},
		{"memory not a number", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "nodes", "workers", 0)["memory"] = "lots"
			return proxmoxSource(k)
		}, "nodes.workers[0].memory", `must be a whole number, got the string "lots"`},
		{"boot disk too small", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "nodes", "workers", 0)["diskSize"] = 5
			return proxmoxSource(k)
		}, "nodes.workers[0].diskSize", "5 GiB is below the 10 GiB Talos needs"},
		{"data disk on a control plane", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "nodes", "controlPlanes", 0)["dataDiskSize"] = 20
			return proxmoxSource(k)
		}, "nodes.controlPlanes[0].dataDiskSize", "data disks are for workers only"},
		{"VPS field on a Proxmox node", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "nodes", "workers", 0)["rescue"] = obj{"user": "root"}
			return proxmoxSource(k)
		}, "nodes.workers[0].rescue", "is only valid for platform vps"},
		{"missing Proxmox token secret", func() stacks.Source {
			k := proxmoxKeys()
			delete(at(k, "proxmox"), "apiTokenSecret")
			return proxmoxSource(k)
		}, "proxmox.apiTokenSecret", "is required"},
		{"Proxmox token secret in plain text", func() stacks.Source {
			return proxmoxKeys().source() // the proxmox key is not marked secret
		}, "proxmox.apiTokenSecret", "is stored in plain text; set it with `pulumi config set --secret --path 'proxmox.apiTokenSecret' <value>`"},
		{"Proxmox token secret not a UUID", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "proxmox")["apiTokenSecret"] = "not-a-uuid"
			return proxmoxSource(k)
		}, "proxmox.apiTokenSecret", "is not a UUID"},
		{"bad token id", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "proxmox")["apiTokenId"] = "root@pam"
			return proxmoxSource(k)
		}, "proxmox.apiTokenId", `"root@pam" is not a token id like user@realm!tokenname`},
		{"Proxmox endpoint over http", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "proxmox")["endpoint"] = "http://192.168.122.70:8006/"
			return proxmoxSource(k)
		}, "proxmox.endpoint", "must use https"},
		{"Proxmox endpoint not a URL", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "proxmox")["endpoint"] = "192.168.122.70:8006"
			return proxmoxSource(k)
		}, "proxmox.endpoint", "is not a URL"},
		{"Proxmox endpoint with the API path", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "proxmox")["endpoint"] = "https://pve:8006/api2/json"
			return proxmoxSource(k)
		}, "proxmox.endpoint", "without /api2/json"},
		{"CPU type Talos cannot boot on", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "proxmox")["cpuType"] = "kvm64"
			return proxmoxSource(k)
		}, "proxmox.cpuType", "lacks x86-64-v2"},
		{"unknown addressing mode", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "proxmox")["addressing"] = "dhcp"
			return proxmoxSource(k)
		}, "proxmox.addressing", `"dhcp" is not dhcp-reservation or static`},
		{"dnsmasq with static addressing", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "proxmox")["addressing"] = "static"
			at(k, "proxmox")["dnsmasq"] = obj{"enabled": true}
			return proxmoxSource(k)
		}, "proxmox.dnsmasq.enabled", "only used with addressing dhcp-reservation"},
		{"relative dnsmasq lease file", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "proxmox")["dnsmasq"] = obj{"leaseFile": "dnsmasq.leases"}
			return proxmoxSource(k)
		}, "proxmox.dnsmasq.leaseFile", `"dnsmasq.leases" must be an absolute path`},
		{"dnsmasq reservations for VMs on two Proxmox nodes", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "nodes", "workers", 1)["proxmoxNode"] = "pve2"
			return proxmoxSource(k)
		}, "nodes.workers[1].proxmoxNode", `"pve2" is not proxmox.node ("pve"), and DHCP reservations are on: the dnsmasq holding them on the host reached over SSH serves only the bridge vmbr1 it sits on`},
		{"unknown VM network access", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "proxmox")["access"] = "ssh"
			return proxmoxSource(k)
		}, "proxmox.access", `"ssh" is not direct or ssh-proxy`},
		{"noProxy without the SSH proxy", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "proxmox")["noProxy"] = []any{"charts.lan"}
			return proxmoxSource(k)
		}, "proxmox.noProxy[0]", "is only used with access ssh-proxy"},
		{"noProxy entry that is no host", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "proxmox")["access"] = "ssh-proxy"
			at(k, "proxmox")["noProxy"] = []any{"charts.lan", ".corp.example", "192.168.1.0/24", "mirror.lan:8443", "a.lan,b.lan"}
			return proxmoxSource(k)
		}, "proxmox.noProxy[4]", `"a.lan,b.lan" is not a host name, .domain, IP or CIDR`},
		{"noProxy that covers the VM network", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "proxmox")["access"] = "ssh-proxy"
			at(k, "proxmox")["noProxy"] = []any{"10.0.0.0/8"}
			return proxmoxSource(k)
		}, "proxmox.noProxy[0]", "overlaps the VM network 10.10.0.0/24"},
		{"noProxy that bypasses everything", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "proxmox")["access"] = "ssh-proxy"
			at(k, "proxmox")["noProxy"] = []any{"*"}
			return proxmoxSource(k)
		}, "proxmox.noProxy[0]", "would send nothing through the proxy"},
		{"boolean given as a word", func() stacks.Source {
			k := proxmoxKeys()
			at(k, "proxmox")["insecure"] = "yes"
			return proxmoxSource(k)
		}, "proxmox.insecure", `must be true or false, got the string "yes"`},
		{"section given as a string", func() stacks.Source {
			k := proxmoxKeys()
			k["cluster"] = "lab"
			return proxmoxSource(k)
		}, "cluster", `must be an object, got the string "lab"`},
		{"vps section on a Proxmox stack", func() stacks.Source {
			k := proxmoxKeys()
			k["vps"] = obj{"allowedCidrs": []any{"198.51.100.0/24"}}
			return proxmoxSource(k)
		}, "vps", "is only valid for platform vps"},
		{"VPS without a rescue password", func() stacks.Source {
			k := vpsKeys()
			delete(at(k, "nodes", "controlPlanes", 0, "rescue"), "password")
			return vpsSource(k)
		}, "nodes.controlPlanes[0].rescue.password", "is required: `pulumi config set --secret --path 'nodes.controlPlanes[0].rescue.password' <password>`"},
		{"VPS rescue password in plain text", func() stacks.Source {
			return vpsKeys().source()
		}, "nodes.controlPlanes[0].rescue.password", "is stored in plain text"},
		{"VPS with a VIP", func() stacks.Source {
			k := vpsKeys()
			at(k, "cluster")["vip"] = "203.0.113.5"
			return vpsSource(k)
		}, "cluster.vip", "use cluster.endpoint"},
		{"VPS gateway outside a /24", func() stacks.Source {
			k := vpsKeys()
			at(k, "nodes", "controlPlanes", 0)["prefixLength"] = 24
			at(k, "nodes", "controlPlanes", 0)["gateway"] = "198.51.100.1"
			return vpsSource(k)
		}, "nodes.controlPlanes[0].gateway", "198.51.100.1 is outside 203.0.113.0/24, the network of nodes.controlPlanes[0] (203.0.113.10); for point-to-point addressing use prefixLength 32"},
		{"Proxmox field on a VPS node", func() stacks.Source {
			k := vpsKeys()
			at(k, "nodes", "controlPlanes", 0)["vmId"] = 100
			return vpsSource(k)
		}, "nodes.controlPlanes[0].vmId", "is only valid for platform proxmox"},
		{"proxmox section on a VPS stack", func() stacks.Source {
			k := vpsKeys()
			k["proxmox"] = obj{"node": "pve"}
			return vpsSource(k)
		}, "proxmox", "is only valid for platform proxmox"},
		{"bad operator CIDR", func() stacks.Source {
			k := vpsKeys()
			at(k, "vps")["allowedCidrs"] = []any{"198.51.100.0/33"}
			return vpsSource(k)
		}, "vps.allowedCidrs[0]", `"198.51.100.0/33" is not a CIDR`},
		{"operator CIDR with host bits", func() stacks.Source {
			k := vpsKeys()
			at(k, "vps")["allowedCidrs"] = []any{"198.51.100.7/24"}
			return vpsSource(k)
		}, "vps.allowedCidrs[0]", "did you mean 198.51.100.0/24?"},
		{"public port that the firewall manages", func() stacks.Source {
			k := vpsKeys()
			at(k, "vps")["publicTcpPorts"] = []any{443, 6443}
			return vpsSource(k)
		}, "vps.publicTcpPorts[1]", "6443 is the Kubernetes API"},
		{"public port of Hubble's peer service", func() stacks.Source {
			k := vpsKeys()
			at(k, "vps")["publicTcpPorts"] = []any{443, 4244}
			return vpsSource(k)
		}, "vps.publicTcpPorts[1]", "4244 is Hubble's peer service, which serves every node's network flows"},
		{"public port out of range", func() stacks.Source {
			k := vpsKeys()
			at(k, "vps")["publicTcpPorts"] = []any{70000}
			return vpsSource(k)
		}, "vps.publicTcpPorts[0]", "out of range"},
		{"public port twice", func() stacks.Source {
			k := vpsKeys()
			at(k, "vps")["publicTcpPorts"] = []any{443, 443}
			return vpsSource(k)
		}, "vps.publicTcpPorts[1]", "listed twice"},
		{"image URL that is not a raw image", func() stacks.Source {
			k := vpsKeys()
			at(k, "vps")["imageUrl"] = "https://factory.talos.dev/image/x/v1.12.4/metal-amd64.iso"
			return vpsSource(k)
		}, "vps.imageUrl", "ending in .raw"},
		{"image URL without scheme", func() stacks.Source {
			k := vpsKeys()
			at(k, "vps")["imageUrl"] = "factory.talos.dev/metal-amd64.raw.xz"
			return vpsSource(k)
		}, "vps.imageUrl", "not an http(s) URL"},
		{"wait timeout that is not a duration", func() stacks.Source {
			k := vpsKeys()
			at(k, "vps")["talosWaitTimeout"] = "30"
			return vpsSource(k)
		}, "vps.talosWaitTimeout", "between 1m and 24h"},
		{"unknown destroy mode", func() stacks.Source {
			k := vpsKeys()
			at(k, "vps")["onDestroy"] = "delete"
			return vpsSource(k)
		}, "vps.onDestroy", "'forget'"},
		{"multi-line reboot command", func() stacks.Source {
			k := vpsKeys()
			at(k, "vps")["rebootCommand"] = "ovh boot set disk\nreboot"
			return vpsSource(k)
		}, "vps.rebootCommand", "one line"},
	}
}

func TestInvalidConfigsNameTheKeyAndTheProblem(t *testing.T) {
	t.Parallel()
	cases := invalidCases()
	require.GreaterOrEqual(t, len(cases), 25)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The stack front-end: the file's own rules and the
			// component's, named by the stack's keys.
			_, d := program.Validate(tc.src())
			require.True(t, d.HasErrors(), "expected an error at %s", tc.wantPath)
			var found bool
			for _, p := range d.Errors {
				if p.Path == tc.wantPath && strings.Contains(p.Message, tc.wantMsg) {
					found = true
				}
			}
			assert.True(t, found, "want %s: ...%s...; got:\n%s", tc.wantPath, tc.wantMsg, d.Err())
			assert.Contains(t, d.Err().Error(), tc.wantPath+": ", "the printed message names the key")
		})
	}
}

// dnsmasq on the host reached over SSH serves VMs on other Proxmox nodes only
// when the bridge spans the nodes; every VM off proxmox.node is named.
func TestDNSMasqReservationsAndMultiHostPlacement(t *testing.T) {
	t.Parallel()
	multiHost := func() keys {
		k := proxmoxKeys()
		at(k, "nodes", "workers", 0)["proxmoxNode"] = "pve2"
		at(k, "nodes", "workers", 1)["proxmoxNode"] = "pve3"
		return k
	}
	_, d := stacks.Load(proxmoxSource(multiHost()))
	var paths []string
	for _, p := range d.Errors {
		paths = append(paths, p.Path)
		assert.Contains(t, p.Message, "proxmox.dnsmasq.bridgeSpansHosts: true", p.Path)
		assert.Contains(t, p.Message, "the bridge vmbr1 it sits on", p.Path)
	}
	assert.Equal(t, []string{"nodes.workers[0].proxmoxNode", "nodes.workers[1].proxmoxNode"}, paths)

	for name, edit := range map[string]func(keys){
		"the bridge spans the hosts": func(k keys) { at(k, "proxmox")["dnsmasq"] = obj{"bridgeSpansHosts": true} },
		"dnsmasq off":                func(k keys) { at(k, "proxmox")["dnsmasq"] = obj{"enabled": false} },
		"static addressing":          func(k keys) { at(k, "proxmox")["addressing"] = "static" },
		"every VM on one other node": func(k keys) {
			at(k, "nodes", "controlPlanes", 0)["proxmoxNode"] = "pve2"
			at(k, "nodes", "workers", 1)["proxmoxNode"] = "pve2"
			at(k, "nodes", "workers", 0)["proxmoxNode"] = "pve2"
		},
		"proxmoxNode spelling out proxmox.node": func(k keys) {
			at(k, "nodes", "workers", 0)["proxmoxNode"] = "pve"
			at(k, "nodes", "workers", 1)["proxmoxNode"] = "pve"
		},
	} {
		k := multiHost()
		edit(k)
		_, d := stacks.Load(proxmoxSource(k))
		assert.NoError(t, d.Err(), name)
	}
}

func TestEveryProblemIsReportedAtOnce(t *testing.T) {
	t.Parallel()
	k := proxmoxKeys()
	at(k, "cluster")["talosVersion"] = "1.12.4"
	at(k, "nodes", "workers", 0)["ip"] = "10.10.0.300"
	at(k, "nodes", "workers", 1)["vmId"] = 110
	at(k, "proxmox")["endpoint"] = "ftp://pve"
	k["extra"] = "x"
	at(k, "proxmox")["bios"] = "uefi"
	_, d := program.Validate(proxmoxSource(k))
	var paths []string
	for _, p := range d.Errors {
		paths = append(paths, p.Path)
	}
	assert.ElementsMatch(t, []string{
		"extra", "cluster.talosVersion", "nodes.workers[0].ip", "nodes.workers[1].vmId", "proxmox.endpoint",
		"proxmox.bios", // the ProxmoxCluster's rule, among the file's errors
	}, paths)
	assert.Contains(t, d.Err().Error(), "invalid stack configuration (6 problems):")
}

func TestWarningsAreKeptApartFromErrors(t *testing.T) {
	t.Parallel()
	k := proxmoxKeys()
	at(k, "proxmox")["insecure"] = true
	nodes := at(k, "nodes")
	nodes["controlPlanes"] = []any{
		obj{"name": "cp-0", "ip": "10.10.0.10", "vmId": 110},
		obj{"name": "cp-1", "ip": "10.10.0.11", "vmId": 111, "memory": 1536},
	}
	_, d := stacks.Load(proxmoxSource(k))
	require.NoError(t, d.Err())
	var warned []string
	for _, w := range d.Warnings {
		warned = append(warned, w.Path)
	}
	assert.ElementsMatch(t, []string{"proxmox.insecure", "nodes.controlPlanes", "nodes.controlPlanes[1].memory"}, warned)

	v := vpsKeys()
	delete(v, "vps")
	_, d = stacks.Load(vpsSource(v))
	require.NoError(t, d.Err())
	require.Len(t, d.Warnings, 1)
	assert.Equal(t, "vps.allowedCidrs", d.Warnings[0].Path)
	assert.Contains(t, d.Warnings[0].Message, "whole internet")
}

func TestSecretsNeverShowInMessagesOrDumps(t *testing.T) {
	t.Parallel()
	k := proxmoxKeys()
	at(k, "proxmox")["apiTokenSecret"] = "s3cr3t-not-a-uuid"
	cfg, d := stacks.Load(k.source())
	require.True(t, d.HasErrors())
	assert.NotContains(t, d.Err().Error(), "s3cr3t")

	for _, dump := range []string{fmt.Sprintf("%v", cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg), mustJSON(t, cfg)} {
		assert.NotContains(t, dump, "s3cr3t")
	}
	assert.Equal(t, "s3cr3t-not-a-uuid", cfg.Proxmox.APITokenSecret.Reveal())
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func TestDefaultsPerPlatform(t *testing.T) {
	t.Parallel()
	cfg, d := stacks.Load(proxmoxSource(proxmoxKeys()))
	require.NoError(t, d.Err())
	// The extensions, the nameserver (the gateway) and the /24 are the
	// ProxmoxCluster's defaults: the file leaves them out of the Args.
	assert.Nil(t, cfg.Cluster.Schematic.Extensions)
	assert.Nil(t, cfg.Cluster.Network.Nameservers)
	pxArgs := program.ProxmoxArgs(cfg).WithDefaults()
	assert.Equal(t, stacks.DefaultProxmoxExtensions(), pxArgs.Schematic.Extensions)
	assert.Equal(t, []string{"10.10.0.1"}, pxArgs.Cluster.Nameservers)
	assert.Equal(t, 24, pxArgs.Proxmox.PrefixLength)
	assert.Equal(t, "192.168.122.70", cfg.Proxmox.SSH.Host, "SSH host defaults to the API host")
	assert.Equal(t, stacks.AccessDirect, cfg.Proxmox.Access)
	// A VM's size is the ProxmoxCluster's default, by role: the file
	// leaves it out of the Args the program builds.
	assert.Zero(t, cfg.Nodes.ControlPlanes[0].Cores)
	assert.Equal(t, 2, pxArgs.Nodes[0].Cores)
	assert.Equal(t, 8192, pxArgs.Nodes[1].Memory)

	cfg, d = stacks.Load(vpsSource(vpsKeys()))
	require.NoError(t, d.Err())
	assert.Empty(t, cfg.Cluster.Schematic.Extensions)
	assert.NotNil(t, cfg.Cluster.Schematic.Extensions)
	// The network's defaults are the VpsCluster's: a /32, public
	// resolvers; the gateway is the nodes' default, not copied into them.
	vpsArgs := program.VPSArgs(cfg).WithDefaults()
	assert.Zero(t, cfg.Nodes.ControlPlanes[0].PrefixLength)
	assert.Equal(t, 32, vpsArgs.VPS.PrefixLength)
	assert.Equal(t, "root", vpsArgs.Nodes[0].Rescue.User, "the VpsCluster's default")
	assert.Equal(t, stacks.DefaultVPSNameservers(), vpsArgs.Cluster.Nameservers)

	// An explicit empty extension list means a vanilla image, not the default.
	k := proxmoxKeys()
	at(k, "cluster")["schematic"] = obj{"extensions": []any{}}
	cfg, d = stacks.Load(proxmoxSource(k))
	require.NoError(t, d.Err())
	assert.Empty(t, program.ProxmoxArgs(cfg).WithDefaults().Schematic.Extensions)
}

func TestPatchesArriveAsYAML(t *testing.T) {
	t.Parallel()
	k := proxmoxKeys()
	at(k, "cluster")["patches"] = obj{
		"all":    []any{obj{"machine": obj{"sysctls": obj{"vm.max_map_count": "262144"}}}},
		"worker": []any{"machine:\n  kubelet:\n    extraArgs:\n      max-pods: \"250\"\n"},
	}
	cfg, d := stacks.Load(proxmoxSource(k))
	require.NoError(t, d.Err())
	assert.Equal(t, "machine:\n    sysctls:\n        vm.max_map_count: \"262144\"\n", cfg.Cluster.Patches.All[0].YAML)
	assert.Contains(t, cfg.Cluster.Patches.Worker[0].YAML, "max-pods")
}

func TestKubernetesVersionLosesItsV(t *testing.T) {
	t.Parallel()
	k := proxmoxKeys()
	at(k, "cluster")["kubernetesVersion"] = "v1.35.0"
	cfg, d := stacks.Load(proxmoxSource(k))
	require.NoError(t, d.Err())
	assert.Equal(t, "1.35.0", cfg.Cluster.KubernetesVersion)
}

// The components' problems, named by stack keys, are scrubbed of the
// stack's secrets as the file's own are: a token secret pasted as the
// bridge is refused without being shown.
func TestComponentsProblemsShowNoSecret(t *testing.T) {
	t.Parallel()
	k := proxmoxKeys()
	at(k, "proxmox")["bridge"] = tokenSecret
	_, d := program.Validate(proxmoxSource(k))
	var bridge []string
	for _, p := range d.Errors {
		if p.Path == "proxmox.bridge" {
			bridge = append(bridge, p.Message)
		}
		assert.NotContains(t, p.Message, tokenSecret, p.Path)
	}
	require.Len(t, bridge, 1, "%v", d.Err())
	assert.Contains(t, bridge[0], "[secret]")
	assert.Contains(t, bridge[0], "is not a bridge name")
}
