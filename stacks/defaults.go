package stacks

import (
	"strings"

	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/servers"
	"github.com/fluodata/talos-pulumi/components/talos"
)

// Defaults that are plain literals. Defaults that refer to another key (a
// node's Proxmox host, a VPS node's rescue host) are filled by resolve, after
// validation, so that a bad source value is reported once, at its own key.
const (
	DefaultInstallDisk   = talos.DefaultInstallDisk
	DefaultProxmoxNode   = "pve"
	DefaultSSHPort       = proxmox.DefaultSSHPort
	DefaultSSHUser       = proxmox.DefaultSSHUser
	DefaultProxmoxPrefix = proxmox.DefaultPrefixLength
	DefaultVPSPrefix     = servers.DefaultPrefixLength
	// A week of daily backups, a month of weekly ones.
	DefaultBackupKeepLast   = 7
	DefaultBackupKeepDaily  = 7
	DefaultBackupKeepWeekly = 4
)

// applyDefaults fills what the front-end itself reads: the addressing and
// what follows from it, the access, the Proxmox host of the nodes, the SSH
// destination, a Proxmox stack's nameserver and schematic, and the rescue
// port. The components' own inputs (the bridge, datastores, CPU type, BIOS,
// dnsmasq paths and command, the network's prefix length, the VMs' sizes,
// the install disk, the chart versions, the worker parallelism, the VPS
// settings and nameservers, and the rescue user)
// are left empty for the components' defaults, which the Default*
// constants above name (issue 25).
func applyDefaults(cfg *Config) {
	keep := &cfg.Backup.Keep
	setInt(&keep.Last, DefaultBackupKeepLast)
	if keep.Daily == nil {
		keep.Daily = ptr(DefaultBackupKeepDaily)
	}
	if keep.Weekly == nil {
		keep.Weekly = ptr(DefaultBackupKeepWeekly)
	}

	rulesOf(cfg.Platform).defaults(cfg)
}

// resolve fills defaults that copy another, already validated key, and
// normalises spellings the rest of the program should not care about.
func resolve(cfg *Config) {
	// Talos's generator takes the Kubernetes version without the v.
	cfg.Cluster.KubernetesVersion = strings.TrimPrefix(cfg.Cluster.KubernetesVersion, "v")
	rulesOf(cfg.Platform).resolve(cfg)
}

func setString(dst *string, v string) {
	if *dst == "" {
		*dst = v
	}
}

func setInt(dst *int, v int) {
	if *dst == 0 {
		*dst = v
	}
}

func ptr[T any](v T) *T { return &v }
