package proxmox

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"

	"github.com/fluodata/talos-pulumi/components/inputs"
)

// The names and limits of Proxmox VE inputs, defined once for ProxmoxCluster's
// Args and the stack file's keys. MinVMID-MaxVMID is 'pve-vmid' (pve-common,
// src/PVE/JSONSchema.pm) and MaxVLAN a NIC's 'tag' (qemu-server,
// src/PVE/QemuServer/Network.pm; vlanId 0 leaves the tag off).
const (
	MinVMID = 100
	MaxVMID = 999999999
	MaxVLAN = 4094
	// MaxCores: qemu-server's config schema gives `cores` a minimum of 1 and
	// no maximum (src/PVE/QemuServer.pm), the web UI's Cores field stops at
	// 256 (pve-manager, www/manager6/qemu/ProcessorEdit.js), and a VM with
	// more vCPUs than its host has CPUs does not start ("MAX n vcpus allowed
	// per VM on this node", QemuServer.pm). A VM here has one socket, so
	// cores is its vCPU count.
	MaxCores = 256
	// MinMemoryMiB is what Talos needs; MinControlPlaneMemoryMiB what it
	// recommends for a control plane.
	MinMemoryMiB             = 1024
	MinControlPlaneMemoryMiB = 2048
	// MaxMemoryMiB is 4 TiB: the schema's `memory` (its `current` part) has
	// a minimum of 16 MiB and no maximum (src/PVE/QemuServer/Memory.pm,
	// $memory_fmt), and where qemu-server computes a VM's memory limit it
	// never allows more than 4 TiB (get_max_mem in the same file).
	MaxMemoryMiB = 4 * 1024 * 1024
	// MinDiskGiB: Talos needs at least 10 GB for its partitions.
	MinDiskGiB = 10
	// MaxDiskGiB is 128 TiB, where the web UI's disk size field stops
	// (pve-manager, www/manager6/form/DiskStorageSelector.js); the API
	// allocates `<storage>:<GiB>` with no limit of its own, so beyond this a
	// number is a typo (MiB for GiB) rather than a disk.
	MaxDiskGiB = 128 * 1024
)

var (
	apiTokenIDRe = regexp.MustCompile(`^[^\s@!]+@[^\s@!]+![A-Za-z][A-Za-z0-9._-]*$`)
	nodeNameRe   = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$`)
	bridgeNameRe = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_.-]{0,14}$`)
	datastoreRe  = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_.-]*$`)
)

// NodeNameProblem says why s is no Proxmox VE node name, or "".
func NodeNameProblem(s string) string {
	if !IsNodeName(s) {
		return fmt.Sprintf("%q is not a Proxmox node name", s)
	}
	return ""
}

// IsAPITokenID reports whether s is an API token id, user@realm!tokenname.
func IsAPITokenID(s string) bool { return apiTokenIDRe.MatchString(s) }

// IsNodeName reports whether s can name a Proxmox VE node.
func IsNodeName(s string) bool { return nodeNameRe.MatchString(s) }

// IsBridgeName reports whether s can name a Linux bridge (an interface
// name: at most 15 characters).
func IsBridgeName(s string) bool { return bridgeNameRe.MatchString(s) }

// IsDatastoreName reports whether s can name a Proxmox VE storage.
func IsDatastoreName(s string) bool { return datastoreRe.MatchString(s) }

// CPUTypeProblem says why Talos cannot run on VMs of the CPU type, or "":
// Talos needs x86-64-v2, which QEMU's oldest models lack.
func CPUTypeProblem(cpuType string) string {
	switch cpuType {
	case "qemu64", "kvm64", "qemu32", "kvm32", "486", "pentium":
		return fmt.Sprintf("%q lacks x86-64-v2, which Talos needs; use host or x86-64-v2-AES", cpuType)
	case "":
		return "must not be empty"
	}
	return ""
}

// DefaultDNSMasqRestart is the usual command that makes dnsmasq read the
// reservations (the stack file's default).
const DefaultDNSMasqRestart = "systemctl restart dnsmasq"

// HostPathProblem says what is wrong with a path on the Proxmox host (the
// dnsmasq config directory, a file there), or "": absolute, no file path
// ending in '/', and no ',' in the directory, which the reservation scripts
// pass as --conf-dir=<dir>, where dnsmasq reads what follows a comma as
// file-name suffixes.
func HostPathProblem(p string, dir bool) string {
	switch why := inputs.PathProblem(p); {
	case why != "":
		return fmt.Sprintf("%q %s", p, why)
	case !strings.HasPrefix(p, "/"):
		return fmt.Sprintf("%q must be an absolute path", p)
	case !dir && strings.HasSuffix(p, "/"):
		return fmt.Sprintf("%q ends in '/'; give the path of the file", p)
	case dir && strings.Contains(p, ","):
		return fmt.Sprintf("%q contains ',', which dnsmasq's conf-dir option reads as the start of its file-name suffixes", p)
	}
	return ""
}

// RestartCommandProblem says what is wrong with dnsmasq's restart command,
// shell code the reservation scripts run on the Proxmox host through
// `sh -c` (so it cannot end or reshape the script around it), or "". Empty,
// dnsmasq would never read the reservations; on several lines or with
// other control characters it is a paste mistake.
func RestartCommandProblem(cmd string) string {
	switch {
	case strings.TrimSpace(cmd) == "":
		return fmt.Sprintf("must not be empty: dnsmasq reads the reservations only when restarted, e.g. %q", DefaultDNSMasqRestart)
	case strings.ContainsAny(cmd, "\n\r"):
		return "must be one line; put longer logic in a script on the host and call it"
	case strings.ContainsFunc(cmd, func(r rune) bool { return r != '\t' && unicode.IsControl(r) }):
		return fmt.Sprintf("%q contains a control character", cmd)
	}
	return ""
}
