package proxmox

import (
	"slices"

	"github.com/fluodata/talos-pulumi/components/talos"
)

// Defaults of the optional inputs of a ProxmoxCluster: a usual single
// Proxmox VE host (the stack file's defaults are these).
const (
	DefaultBridge        = "vmbr0"
	DefaultDiskDatastore = "local-lvm"
	DefaultISODatastore  = "local"
	DefaultCPUType       = "host"
	DefaultBIOS          = "seabios"
	// SecureBootBIOS is the firmware of a cluster with Secure Boot: UEFI.
	SecureBootBIOS          = "ovmf"
	DefaultAddressing       = AddressingDHCPReservation
	DefaultDNSMasqDir       = "/etc/dnsmasq.d"
	DefaultDNSMasqLeaseFile = "/var/lib/misc/dnsmasq.leases"
	DefaultSSHPort          = 22
	DefaultSSHUser          = "root"
	// DefaultPrefixLength is a home or office network's /24.
	DefaultPrefixLength = 24
	// DefaultDiskSize is a node's system disk in GiB.
	DefaultDiskSize = 20
	// A node's size by role: a control plane runs etcd and the API server,
	// a worker the workloads.
	DefaultControlPlaneCores  = 2
	DefaultWorkerCores        = 4
	DefaultControlPlaneMemory = 4096
	DefaultWorkerMemory       = 8192
)

// DefaultExtensions are the system extensions of the image when the
// schematic gives neither an id nor extensions: the guest agent (clean VM
// status and shutdown), and the tools Longhorn needs.
func DefaultExtensions() []string {
	return []string{"siderolabs/qemu-guest-agent", "siderolabs/iscsi-tools", "siderolabs/util-linux-tools"}
}

// WithDefaults returns the arguments with every optional input that is
// empty set to its default. The nodes and settings are copied; nothing in a
// is changed.
func (a ClusterArgs) WithDefaults() ClusterArgs {
	bios := DefaultBIOS
	if a.Cluster.SecureBoot {
		bios = SecureBootBIOS
	}
	px := &a.Proxmox
	px.setDefaults(bios)
	hosts := make([]Host, len(a.Hosts))
	for i, h := range a.Hosts {
		if h.VPS != nil {
			// The servers' defaults of their settings.
			s := h.VPS.WithDefaults()
			h.VPS = &s
		} else if h.Proxmox != nil {
			px := *h.Proxmox
			px.setDefaults(bios)
			h.Proxmox = &px
		}
		hosts[i] = h
	}
	if a.Hosts != nil {
		a.Hosts = hosts
	}
	if a.Schematic.ID == "" && a.Schematic.Extensions == nil {
		a.Schematic.Extensions = DefaultExtensions()
	}
	if a.Cluster.Nameservers == nil && px.Gateway != "" && !slices.ContainsFunc(a.Hosts, func(h Host) bool { return h.settings().Gateway != px.Gateway }) {
		// A home or office network's router is its DNS server too; not
		// for hosts behind other routers, which could not reach it
		// (Talos's own defaults then, or DHCP's).
		a.Cluster.Nameservers = []string{px.Gateway}
	}
	if a.poolCounts == nil {
		// The pools' nodes after the listed ones, once.
		a.listed, a.poolCounts = len(a.Nodes), make([]int, len(a.Pools))
		listed := a.Nodes
		a.Nodes = slices.Clone(listed)
		for i, pl := range a.Pools {
			pooled := pl.nodes()
			a.poolCounts[i] = len(pooled)
			a.Nodes = append(a.Nodes, pooled...)
		}
	}
	nodes := make([]Node, len(a.Nodes))
	for i, n := range a.Nodes {
		if n.InstallDisk == "" {
			n.InstallDisk = talos.DefaultInstallDisk
		}
		if a.onServer(n) {
			// A rented server: no VM to size (its rescue defaults are
			// the VpsCluster's, applied where it is installed).
			nodes[i] = n
			continue
		}
		cores, memory := DefaultWorkerCores, DefaultWorkerMemory
		if n.Role == talos.RoleControlPlane {
			cores, memory = DefaultControlPlaneCores, DefaultControlPlaneMemory
		}
		if n.Cores == 0 {
			n.Cores = cores
		}
		if n.Memory == 0 {
			n.Memory = memory
		}
		if n.DiskSize == 0 {
			n.DiskSize = DefaultDiskSize
		}
		nodes[i] = n
	}
	a.Nodes = nodes
	if a.CSI != nil {
		csi := a.CSI.withDefaults()
		a.CSI = &csi
	}
	return a
}

// setDefaults sets every optional setting of the host left empty to its
// default, bios the firmware's; the reservations are copied.
func (px *HostSettings) setDefaults(bios string) {
	setString(&px.Bridge, DefaultBridge)
	setString(&px.DiskDatastore, DefaultDiskDatastore)
	setString(&px.ISODatastore, DefaultISODatastore)
	setString(&px.CPUType, DefaultCPUType)
	setString(&px.BIOS, bios)
	setString(&px.Addressing, DefaultAddressing)
	if px.PrefixLength == 0 {
		px.PrefixLength = DefaultPrefixLength
	}
	if px.DNSMasq != nil {
		dm := *px.DNSMasq
		setString(&dm.ConfigDir, DefaultDNSMasqDir)
		setString(&dm.LeaseFile, DefaultDNSMasqLeaseFile)
		setString(&dm.RestartCommand, DefaultDNSMasqRestart)
		if dm.SSH.Port == 0 {
			dm.SSH.Port = DefaultSSHPort
		}
		setString(&dm.SSH.User, DefaultSSHUser)
		px.DNSMasq = &dm
	}
}

func setString(s *string, def string) {
	if *s == "" {
		*s = def
	}
}
