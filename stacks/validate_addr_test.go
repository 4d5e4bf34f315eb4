package stacks_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
)

// addressAndPathInvalidCases: every address field refuses loopback,
// unspecified, multicast and link-local addresses; host names that are
// dotted numbers and URL ports out of range are refused; every path field
// refuses '..' and '.' segments, control characters, quotes and the root.
func addressAndPathInvalidCases() []invalidCase {
	return slices.Concat(specialAddressInvalidCases(), hostAndPortInvalidCases(), pathInvalidCases())
}

// setProxmox and setVPS build a case from an edit of the base configs.
func setProxmox(edit func(k keys)) func() stacks.Source {
	return func() stacks.Source {
		k := proxmoxKeys()
		edit(k)
		return proxmoxSource(k)
	}
}

func setVPS(edit func(k keys)) func() stacks.Source {
	return func() stacks.Source {
		k := vpsKeys()
		edit(k)
		return vpsSource(k)
	}
}

const (
	loopbackMsg    = "is a loopback address"
	unspecifiedMsg = "is an unspecified address"
	multicastMsg   = "is a multicast address"
	linkLocalMsg   = "is a link-local address"
)

func specialAddressInvalidCases() []invalidCase {
	return []invalidCase{
		// The node network.
		{"loopback gateway", setProxmox(func(k keys) { at(k, "cluster", "network")["gateway"] = "127.0.0.1" }),
			"cluster.network.gateway", "127.0.0.1 " + loopbackMsg},
		{"link-local gateway", setProxmox(func(k keys) { at(k, "cluster", "network")["gateway"] = "169.254.0.1" }),
			"cluster.network.gateway", "169.254.0.1 " + linkLocalMsg},
		{"loopback IPv6 nameserver", setProxmox(func(k keys) { at(k, "cluster", "network")["nameservers"] = []any{"1.1.1.1", "::1"} }),
			"cluster.network.nameservers[1]", "::1 " + loopbackMsg},
		{"unspecified nameserver", setProxmox(func(k keys) { at(k, "cluster", "network")["nameservers"] = []any{"0.0.0.0"} }),
			"cluster.network.nameservers[0]", "0.0.0.0 " + unspecifiedMsg},
		{"multicast nameserver", setVPS(func(k keys) { at(k, "cluster", "network")["nameservers"] = []any{"224.0.0.251"} }),
			"cluster.network.nameservers[0]", "224.0.0.251 " + multicastMsg},
		{"link-local nameserver", setVPS(func(k keys) { at(k, "cluster", "network")["nameservers"] = []any{"169.254.169.254"} }),
			"cluster.network.nameservers[0]", linkLocalMsg},
		{"IPv4-mapped loopback nameserver", setVPS(func(k keys) { at(k, "cluster", "network")["nameservers"] = []any{"::ffff:127.0.0.53"} }),
			"cluster.network.nameservers[0]", loopbackMsg},
		{"unspecified VIP", setProxmox(func(k keys) { at(k, "cluster")["vip"] = "0.0.0.0" }),
			"cluster.vip", "0.0.0.0 " + unspecifiedMsg},
		{"multicast VIP", setProxmox(func(k keys) { at(k, "cluster")["vip"] = "239.10.0.5" }),
			"cluster.vip", multicastMsg},
		{"loopback Kubernetes endpoint", setProxmox(func(k keys) { at(k, "cluster")["endpoint"] = "127.0.0.1" }),
			"cluster.endpoint", loopbackMsg},
		{"localhost as the Kubernetes endpoint", setVPS(func(k keys) { at(k, "cluster")["endpoint"] = "localhost" }),
			"cluster.endpoint", "localhost is a loopback name"},
		{"a .localhost name as the Kubernetes endpoint", setVPS(func(k keys) { at(k, "cluster")["endpoint"] = "k8s.Localhost" }),
			"cluster.endpoint", "loopback name"},
		{"broadcast Kubernetes endpoint", setVPS(func(k keys) { at(k, "cluster")["endpoint"] = "255.255.255.255" }),
			"cluster.endpoint", "is the broadcast address"},

		// Node IPs and gateways, on both platforms and on the VPS /32 path.
		{"loopback Proxmox node IP", setProxmox(func(k keys) { at(k, "nodes", "workers", 0)["ip"] = "127.0.0.1" }),
			"nodes.workers[0].ip", "127.0.0.1 " + loopbackMsg},
		{"loopback VPS node IP with /32", setVPS(func(k keys) { at(k, "nodes", "controlPlanes", 0)["ip"] = "127.0.0.1" }),
			"nodes.controlPlanes[0].ip", "127.0.0.1 " + loopbackMsg},
		{"unspecified VPS node IP", setVPS(func(k keys) { at(k, "nodes", "controlPlanes", 0)["ip"] = "0.0.0.0" }),
			"nodes.controlPlanes[0].ip", unspecifiedMsg},
		{"VPS node IP in 0.0.0.0/8", setVPS(func(k keys) { at(k, "nodes", "controlPlanes", 0)["ip"] = "0.1.2.3" }),
			"nodes.controlPlanes[0].ip", unspecifiedMsg},
		{"link-local VPS node IP", setVPS(func(k keys) { at(k, "nodes", "controlPlanes", 0)["ip"] = "169.254.10.10" }),
			"nodes.controlPlanes[0].ip", linkLocalMsg},
		{"multicast VPS node IP on a /24", setVPS(func(k keys) {
			at(k, "nodes", "controlPlanes", 0)["ip"] = "224.0.1.10"
			at(k, "nodes", "controlPlanes", 0)["prefixLength"] = 24
		}), "nodes.controlPlanes[0].ip", multicastMsg},
		{"loopback VPS gateway with /32", setVPS(func(k keys) { at(k, "cluster", "network")["gateway"] = "127.0.0.1" }),
			"cluster.network.gateway", loopbackMsg},
		{"unspecified VPS node gateway", setVPS(func(k keys) { at(k, "nodes", "controlPlanes", 0)["gateway"] = "0.0.0.0" }),
			"nodes.controlPlanes[0].gateway", unspecifiedMsg},
		{"link-local VPS node gateway", setVPS(func(k keys) { at(k, "nodes", "controlPlanes", 0)["gateway"] = "169.254.0.1" }),
			"nodes.controlPlanes[0].gateway", linkLocalMsg},

		// The hosts this machine or the nodes connect to.
		{"loopback rescue host", setVPS(func(k keys) { at(k, "nodes", "controlPlanes", 0, "rescue")["host"] = "127.0.0.2" }),
			"nodes.controlPlanes[0].rescue.host", "127.0.0.2 " + loopbackMsg},
		{"localhost as the rescue host", setVPS(func(k keys) { at(k, "nodes", "controlPlanes", 0, "rescue")["host"] = "localhost" }),
			"nodes.controlPlanes[0].rescue.host", "loopback name"},
		{"unspecified rescue host", setVPS(func(k keys) { at(k, "nodes", "controlPlanes", 0, "rescue")["host"] = "0.0.0.0" }),
			"nodes.controlPlanes[0].rescue.host", unspecifiedMsg},
		{"loopback Proxmox API", setProxmox(func(k keys) { at(k, "proxmox")["endpoint"] = "https://127.0.0.1:8006/" }),
			"proxmox.endpoint", "127.0.0.1 " + loopbackMsg + ": it reaches the machine that uses it, not another one; if it is the local end of an SSH port forward (ssh -L) to the Proxmox host, set proxmox.localForward: true"},
		{"localhost as the Proxmox API", setProxmox(func(k keys) { at(k, "proxmox")["endpoint"] = "https://localhost:8006/" }),
			"proxmox.endpoint", "loopback name"},
		{"link-local Proxmox API", setProxmox(func(k keys) { at(k, "proxmox")["endpoint"] = "https://169.254.1.1:8006/" }),
			"proxmox.endpoint", linkLocalMsg},
		{"loopback Proxmox SSH host", setProxmox(func(k keys) { at(k, "proxmox", "ssh")["host"] = "127.0.0.1" }),
			"proxmox.ssh.host", loopbackMsg},
		{"multicast Proxmox SSH host, even with localForward", setProxmox(func(k keys) {
			at(k, "proxmox")["localForward"] = true
			at(k, "proxmox", "ssh")["host"] = "224.0.0.1"
		}), "proxmox.ssh.host", multicastMsg},
		{"loopback image URL host", setVPS(func(k keys) { at(k, "vps")["imageUrl"] = "http://127.0.0.1:8080/metal-amd64.raw.zst" }),
			"vps.imageUrl", "127.0.0.1 " + loopbackMsg},
		{"IPv6 loopback image URL host", setVPS(func(k keys) { at(k, "vps")["imageUrl"] = "http://[::1]/metal-amd64.raw.zst" }),
			"vps.imageUrl", "host ::1 " + loopbackMsg},
	}
}

func hostAndPortInvalidCases() []invalidCase {
	return []invalidCase{
		{"endpoint with an IPv4 component over 255", setProxmox(func(k keys) { at(k, "cluster")["endpoint"] = "10.10.0.300" }),
			"cluster.endpoint", `"10.10.0.300" must be a host name or IPv4 address only`},
		{"rescue host with an IPv4 component over 255", setVPS(func(k keys) { at(k, "nodes", "controlPlanes", 0, "rescue")["host"] = "203.0.113.256" }),
			"nodes.controlPlanes[0].rescue.host", `"203.0.113.256" is not a host name or IPv4 address`},
		{"SSH host as three numbers", setProxmox(func(k keys) { at(k, "proxmox", "ssh")["host"] = "192.168.122" }),
			"proxmox.ssh.host", `"192.168.122" is not a host name or IPv4 address`},
		{"SSH host that inet_aton reads as 127.0.0.1", setProxmox(func(k keys) { at(k, "proxmox", "ssh")["host"] = "127.1" }),
			"proxmox.ssh.host", `"127.1" is not a host name or IPv4 address`},
		{"SSH host as a hex number", setProxmox(func(k keys) { at(k, "proxmox", "ssh")["host"] = "0x7f000001" }),
			"proxmox.ssh.host", `"0x7f000001" is not a host name or IPv4 address`},
		{"Proxmox API host with an IPv4 component over 255", setProxmox(func(k keys) { at(k, "proxmox")["endpoint"] = "https://192.168.122.700:8006/" }),
			"proxmox.endpoint", "has no valid host"},
		{"noProxy entry of dotted numbers", setProxmox(func(k keys) {
			at(k, "proxmox")["access"] = "ssh-proxy"
			at(k, "proxmox")["noProxy"] = []any{"192.168.1"}
		}), "proxmox.noProxy[0]", `"192.168.1" is not a host name`},
		{"image URL host with an IPv4 component over 255", setVPS(func(k keys) { at(k, "vps")["imageUrl"] = "https://198.51.100.999/metal-amd64.raw.zst?X-Sig=abc" }),
			"vps.imageUrl", `host "198.51.100.999" is neither a host name nor an IPv4 or [IPv6] address`},
		{"Proxmox API port out of range", setProxmox(func(k keys) { at(k, "proxmox")["endpoint"] = "https://pve.lan:80060/" }),
			"proxmox.endpoint", "port 80060 is out of range 1-65535"},
		{"Proxmox API port 0", setProxmox(func(k keys) { at(k, "proxmox")["endpoint"] = "https://pve.lan:0/" }),
			"proxmox.endpoint", "port 0 is out of range 1-65535"},
		{"image URL port out of range", setVPS(func(k keys) { at(k, "vps")["imageUrl"] = "https://mirror.example.com:65536/metal-amd64.raw.zst" }),
			"vps.imageUrl", "port 65536 is out of range 1-65535"},
	}
}

func pathInvalidCases() []invalidCase {
	return []invalidCase{
		{"install disk with '..'", setProxmox(func(k keys) { at(k, "cluster")["installDisk"] = "/dev/sda/../../etc/shadow" }),
			"cluster.installDisk", `"/dev/sda/../../etc/shadow" has a '..' segment`},
		{"install disk with '.'", setProxmox(func(k keys) { at(k, "cluster")["installDisk"] = "/dev/disk/./sda" }),
			"cluster.installDisk", "has a '.' segment"},
		{"VPS node install disk with '..'", setVPS(func(k keys) { at(k, "nodes", "controlPlanes", 0)["installDisk"] = "/dev/disk/by-id/../../sda" }),
			"nodes.controlPlanes[0].installDisk", "has a '..' segment"},
		{"VPS node install disk with a quote", setVPS(func(k keys) { at(k, "nodes", "controlPlanes", 0)["installDisk"] = "/dev/sda'; reboot; '" }),
			"nodes.controlPlanes[0].installDisk", "is not a device path"},
		{"dnsmasq directory with '..'", setProxmox(func(k keys) { at(k, "proxmox")["dnsmasq"] = obj{"configDir": "/etc/dnsmasq.d/../../tmp"} }),
			"proxmox.dnsmasq.configDir", `"/etc/dnsmasq.d/../../tmp" has a '..' segment`},
		{"dnsmasq directory /", setProxmox(func(k keys) { at(k, "proxmox")["dnsmasq"] = obj{"configDir": "/"} }),
			"proxmox.dnsmasq.configDir", `"/" is the root directory`},
		{"dnsmasq directory with a single quote", setProxmox(func(k keys) {
			at(k, "proxmox")["dnsmasq"] = obj{"configDir": "/etc/dnsmasq.d'; touch /tmp/pwned; '"}
		}), "proxmox.dnsmasq.configDir", "contains a quote or backslash (')"},
		{"dnsmasq directory with a double quote", setProxmox(func(k keys) { at(k, "proxmox")["dnsmasq"] = obj{"configDir": `/etc/dnsmasq.d"`} }),
			"proxmox.dnsmasq.configDir", `contains a quote or backslash (")`},
		{"dnsmasq directory with a backtick", setProxmox(func(k keys) { at(k, "proxmox")["dnsmasq"] = obj{"configDir": "/etc/`reboot`"} }),
			"proxmox.dnsmasq.configDir", "contains a quote or backslash (`)"},
		{"dnsmasq directory with a backslash", setProxmox(func(k keys) { at(k, "proxmox")["dnsmasq"] = obj{"configDir": `/etc/dnsmasq\.d`} }),
			"proxmox.dnsmasq.configDir", `contains a quote or backslash (\)`},
		{"dnsmasq directory with a newline", setProxmox(func(k keys) { at(k, "proxmox")["dnsmasq"] = obj{"configDir": "/etc/dnsmasq.d\nreboot"} }),
			"proxmox.dnsmasq.configDir", `"/etc/dnsmasq.d\nreboot" contains a control character`},
		{"dnsmasq directory with a comma", setProxmox(func(k keys) { at(k, "proxmox")["dnsmasq"] = obj{"configDir": "/etc/dnsmasq.d,conf"} }),
			"proxmox.dnsmasq.configDir", "contains ','"},
		{"relative dnsmasq directory", setProxmox(func(k keys) { at(k, "proxmox")["dnsmasq"] = obj{"configDir": "dnsmasq.d"} }),
			"proxmox.dnsmasq.configDir", `"dnsmasq.d" must be an absolute path`},
		{"dnsmasq lease file with '..'", setProxmox(func(k keys) { at(k, "proxmox")["dnsmasq"] = obj{"leaseFile": "/var/lib/misc/../../etc/passwd"} }),
			"proxmox.dnsmasq.leaseFile", "has a '..' segment"},
		{"dnsmasq lease file /", setProxmox(func(k keys) { at(k, "proxmox")["dnsmasq"] = obj{"leaseFile": "/"} }),
			"proxmox.dnsmasq.leaseFile", "is the root directory"},
		{"dnsmasq lease file naming a directory", setProxmox(func(k keys) { at(k, "proxmox")["dnsmasq"] = obj{"leaseFile": "/var/lib/misc/"} }),
			"proxmox.dnsmasq.leaseFile", "ends in '/'"},
		{"dnsmasq lease file with a tab", setProxmox(func(k keys) { at(k, "proxmox")["dnsmasq"] = obj{"leaseFile": "/var/lib/misc/dnsmasq.leases\t"} }),
			"proxmox.dnsmasq.leaseFile", "contains a control character"},
		{"dnsmasq lease file with $(...) and a quote", setProxmox(func(k keys) { at(k, "proxmox")["dnsmasq"] = obj{"leaseFile": "/tmp/$(reboot)'"} }),
			"proxmox.dnsmasq.leaseFile", "contains a quote or backslash (')"},
		{"SSH key file with '..'", setProxmox(func(k keys) { at(k, "proxmox", "ssh")["privateKeyFile"] = "../keys/id_ed25519" }),
			"proxmox.ssh.privateKeyFile", "has a '..' segment"},
		{"SSH key file with a quote", setProxmox(func(k keys) { at(k, "proxmox", "ssh")["privateKeyFile"] = "~/.ssh/id'x" }),
			"proxmox.ssh.privateKeyFile", "contains a quote or backslash (')"},
		{"SSH key file /", setProxmox(func(k keys) { at(k, "proxmox", "ssh")["privateKeyFile"] = "/" }),
			"proxmox.ssh.privateKeyFile", "is the root directory"},
		{"SSH key file naming a directory", setProxmox(func(k keys) { at(k, "proxmox", "ssh")["privateKeyFile"] = "~/.ssh/" }),
			"proxmox.ssh.privateKeyFile", "names a directory"},
		{"restart command of two lines", setProxmox(func(k keys) {
			at(k, "proxmox")["dnsmasq"] = obj{"restartCommand": "systemctl restart dnsmasq\nreboot"}
		}), "proxmox.dnsmasq.restartCommand", "must be one line"},
		{"blank restart command", setProxmox(func(k keys) { at(k, "proxmox")["dnsmasq"] = obj{"restartCommand": "  "} }),
			"proxmox.dnsmasq.restartCommand", "must not be empty"},
	}
}

// One mistake, one message: what follows from a special address (node IPs
// outside a loopback gateway's network, a nameserver defaulted from it) is
// not reported again.
func TestSpecialAddressesAreReportedOnce(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		src  func() stacks.Source
		want []string
	}{
		"Proxmox gateway": {setProxmox(func(k keys) { at(k, "cluster", "network")["gateway"] = "127.0.0.1" }),
			[]string{"cluster.network.gateway"}},
		"Proxmox node IP": {setProxmox(func(k keys) { at(k, "nodes", "workers", 0)["ip"] = "169.254.0.20" }),
			[]string{"nodes.workers[0].ip"}},
		"VIP": {setProxmox(func(k keys) { at(k, "cluster")["vip"] = "127.0.0.5" }),
			[]string{"cluster.vip"}},
		"VPS gateway on a /24": {setVPS(func(k keys) {
			at(k, "cluster", "network")["gateway"] = "127.0.0.1"
			at(k, "nodes", "controlPlanes", 0)["prefixLength"] = 24
		}), []string{"cluster.network.gateway"}},
		"VPS node IP on a /24": {setVPS(func(k keys) {
			at(k, "nodes", "controlPlanes", 0)["ip"] = "127.0.0.10"
			at(k, "nodes", "controlPlanes", 0)["prefixLength"] = 24
		}), []string{"nodes.controlPlanes[0].ip"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, d := program.Validate(tc.src()) // the components' rules and the file's
			var got []string
			for _, p := range d.Errors {
				got = append(got, p.Path)
			}
			assert.Equal(t, tc.want, got, d.Err())
		})
	}
}

// Names with digits, documentation and private addresses, and loopback
// ends of SSH port forwards with proxmox.localForward all stay valid.
func TestOrdinaryAddressesAndPathsStayValid(t *testing.T) {
	t.Parallel()
	for name, src := range map[string]func() stacks.Source{
		"host names with digits": setProxmox(func(k keys) {
			at(k, "cluster")["endpoint"] = "k8s-1.lab2.example"
			at(k, "proxmox")["endpoint"] = "https://pve1.lan:8006/"
			at(k, "proxmox", "ssh")["host"] = "1pve.example.com"
		}),
		"an SSH port forward": setProxmox(func(k keys) {
			at(k, "proxmox")["localForward"] = true
			at(k, "proxmox")["endpoint"] = "https://localhost:18006/"
			at(k, "proxmox", "ssh")["host"] = "127.0.0.1"
			at(k, "proxmox", "ssh")["port"] = 2222
		}),
		"paths": setProxmox(func(k keys) {
			at(k, "cluster")["installDisk"] = "/dev/disk/by-id/nvme-Samsung_SSD_980_1TB_S64ANS0T1234.5"
			at(k, "proxmox")["dnsmasq"] = obj{"configDir": "/etc/dnsmasq.d/", "leaseFile": "/var/lib/misc/dnsmasq leases", "restartCommand": "systemctl restart dnsmasq && sleep 1"}
			at(k, "proxmox", "ssh")["privateKeyFile"] = "~/.ssh/id_ed25519.pve"
		}),
		"VPS with an IPv6 mirror and nameserver": setVPS(func(k keys) {
			at(k, "vps")["imageUrl"] = "https://[2001:db8::10]:8443/talos/metal-amd64.raw.zst"
			at(k, "cluster", "network")["nameservers"] = []any{"2606:4700:4700::1111", "9.9.9.9"}
			at(k, "nodes", "controlPlanes", 0, "rescue")["host"] = "rescue.example.net"
		}),
		"a VPS node with a gateway on its /24": setVPS(func(k keys) {
			at(k, "nodes", "controlPlanes", 0)["prefixLength"] = 24
			at(k, "nodes", "controlPlanes", 0)["gateway"] = "203.0.113.1"
		}),
	} {
		_, d := program.Validate(src())
		require.NoError(t, d.Err(), name)
		for _, w := range d.Warnings {
			assert.NotContains(t, w.Message, "address", name)
		}
	}
}

// The SSH host defaults to the API's host: a forwarded API's loopback host
// becomes the SSH host only with localForward, which the API needed too.
func TestLocalForwardCoversTheDefaultSSHHost(t *testing.T) {
	t.Parallel()
	cfg, d := stacks.Load(setProxmox(func(k keys) {
		at(k, "proxmox")["localForward"] = true
		at(k, "proxmox")["endpoint"] = "https://127.0.0.1:18006/"
		delete(at(k, "proxmox", "ssh"), "host")
	})())
	require.NoError(t, d.Err())
	assert.Equal(t, "127.0.0.1", cfg.Proxmox.SSH.Host)

	_, d = stacks.Load(setVPS(func(k keys) { k["proxmox"] = obj{"localForward": true} })())
	require.Error(t, d.Err())
	assert.True(t, strings.Contains(d.Err().Error(), "proxmox: is only valid for platform proxmox"), d.Err())
}
