package stacks

import (
	"strings"

	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/components/vps"
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
	DefaultVPSPrefix     = vps.DefaultPrefixLength
	// A week of daily backups, a month of weekly ones.
	DefaultBackupKeepLast   = 7
	DefaultBackupKeepDaily  = 7
	DefaultBackupKeepWeekly = 4
)

// DefaultProxmoxExtensions are the system extensions of the Proxmox image:
// the ProxmoxCluster's default.
func DefaultProxmoxExtensions() []string { return proxmox.DefaultExtensions() }

// DefaultVPSNameservers are public resolvers; a VPS has no local DNS server.
func DefaultVPSNameservers() []string { return talos.PublicNameservers() }

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

// proxmoxDefaults are the Proxmox sections' defaults of the file's own.
func proxmoxDefaults(cfg *Config) {
	for _, s := range cfg.ProxmoxSections() {
		sectionDefaults(s.ProxmoxConfig)
	}
	for _, n := range cfg.Nodes.All() {
		if cfg.OnServers(n.Host) {
			// The front-end's own, as on platform vps (known_hosts).
			setInt(&n.Rescue.Port, vps.DefaultRescuePort)
		}
	}
}

// sectionDefaults are one Proxmox section's defaults of the file's own.
func sectionDefaults(p *ProxmoxConfig) {
	setString(&p.Node, DefaultProxmoxNode)
	setString(&p.Addressing, AddressingDHCPReservation)
	setString(&p.Access, AccessDirect)
	if p.DNSMasq.Enabled == nil {
		on := p.Addressing == AddressingDHCPReservation
		p.DNSMasq.Enabled = &on
	}
	setInt(&p.SSH.Port, DefaultSSHPort)
	setString(&p.SSH.User, DefaultSSHUser)
}

// vpsDefaults are a VPS stack's defaults of the file's own.
func vpsDefaults(cfg *Config) {
	if cfg.Cluster.Schematic.Extensions == nil {
		cfg.Cluster.Schematic.Extensions = []string{}
	}
	// The rescue port is the front-end's too: it looks the host key
	// up in known_hosts there. The VPS settings and the rescue user
	// are the VpsCluster's defaults.
	for _, n := range cfg.Nodes.All() {
		setInt(&n.Rescue.Port, vps.DefaultRescuePort)
	}
}

// resolve fills defaults that copy another, already validated key, and
// normalises spellings the rest of the program should not care about.
func resolve(cfg *Config) {
	// Talos's generator takes the Kubernetes version without the v.
	cfg.Cluster.KubernetesVersion = strings.TrimPrefix(cfg.Cluster.KubernetesVersion, "v")
	rulesOf(cfg.Platform).resolve(cfg)
}

// proxmoxResolve fills the Proxmox keys that copy others.
func proxmoxResolve(cfg *Config) {
	for _, s := range cfg.ProxmoxSections() {
		setString(&s.SSH.Host, s.EndpointHost())
	}
	normalizeMACs(cfg)
	for _, n := range cfg.Nodes.All() {
		if cfg.OnServers(n.Host) {
			// A rented server: its own defaults, as on platform vps.
			setString(&n.InstallDisk, cfg.Cluster.InstallDisk)
			setString(&n.Rescue.Host, n.IP)
			continue
		}
		setString(&n.ProxmoxNode, cfg.SectionOf(n.Host).Node)
	}
}

// vpsResolve fills the VPS keys that copy others.
func vpsResolve(cfg *Config) {
	for _, n := range cfg.Nodes.All() {
		setString(&n.InstallDisk, cfg.Cluster.InstallDisk)
		setString(&n.Rescue.Host, n.IP)
	}
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
