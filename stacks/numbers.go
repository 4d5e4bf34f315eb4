package stacks

import (
	"strconv"
	"strings"

	"github.com/fluodata/talos-pulumi/components/proxmox"
)

// The Proxmox limits are the component's (proxmox.MinVMID ... MaxDiskGiB,
// with where each comes from).
const (
	maxCores       = proxmox.MaxCores
	minMemoryMiB   = proxmox.MinMemoryMiB
	minCPMemoryMiB = proxmox.MinControlPlaneMemoryMiB
	maxMemoryMiB   = proxmox.MaxMemoryMiB
	minDiskGiB     = proxmox.MinDiskGiB
	maxDiskGiB     = proxmox.MaxDiskGiB
)

// noteExplicitZero records, while decoding, that the stack gives path the
// number 0. Defaults fill a 0 as if the key were absent, so without this an
// explicit `cores: 0` would silently become the default.
func (d *Diagnostics) noteExplicitZero(path string) {
	if d.explicitZeros == nil {
		d.explicitZeros = map[string]bool{}
	}
	d.explicitZeros[path] = true
}

// explicitZero reports whether the stack gives path the number 0.
func (d *Diagnostics) explicitZero(path string) bool { return d.explicitZeros[path] }

// given reports whether a number key is set: to anything but 0 (nonZero),
// or to 0 explicitly.
func (d *Diagnostics) given(path string, nonZero bool) bool {
	return nonZero || d.explicitZero(path)
}

// zeroUnder reports whether the stack gives 0 to a key at or under path.
func (d *Diagnostics) zeroUnder(path string) bool {
	for p := range d.explicitZeros {
		if p == path || strings.HasPrefix(p, path+".") || strings.HasPrefix(p, path+"[") {
			return true
		}
	}
	return false
}

// rejectExplicitZero reports path when the stack gives it 0 and 0 is no
// valid value there; want says what is (e.g. "1-65535"), def what leaving
// the key out gives.
func rejectExplicitZero(d *Diagnostics, path, want, def string) bool {
	if !d.explicitZero(path) {
		return false
	}
	d.errorf(path, "0 is out of range %s; leave the key out for the default (%s)", want, def)
	return true
}

// validateExplicitZeros refuses a 0 given for a number key whose default
// fills 0 (a port, a prefix length). Keys where 0 means something (vlanId:
// untagged, dataDiskSize: none) are not checked; a VM's size is checked with
// its bounds in validateVMSize, a VM id in validateProxmoxNode.
func validateExplicitZeros(d *Diagnostics, cfg *Config) {
	switch cfg.Platform {
	case PlatformProxmox:
		rejectExplicitZero(d, "cluster.network.prefixLength", rangeText(minNodePrefix, maxProxmoxPrefix), itoa(DefaultProxmoxPrefix))
		rejectExplicitZero(d, "proxmox.ssh.port", rangeText(1, maxPort), itoa(DefaultSSHPort))
	case PlatformVPS:
		rejectExplicitZero(d, "cluster.network.prefixLength", rangeText(minNodePrefix, 32), itoa(DefaultVPSPrefix))
		for _, ref := range cfg.Nodes.Refs() {
			rejectExplicitZero(d, ref.Path+".prefixLength", rangeText(minNodePrefix, 32), "cluster.network.prefixLength")
			rejectExplicitZero(d, ref.Path+".rescue.port", rangeText(1, maxPort), itoa(DefaultSSHPort))
		}
	}
}

// validateVMSize checks a Proxmox node's cores, memory and disks: what Talos
// needs at least, what Proxmox VE accepts at most, and no explicit 0 where
// leaving the key out gives a default.
func validateVMSize(d *Diagnostics, ref NodeRef) {
	p := ref.Path
	defCores, defMemory := defaultControlPlaneCores, defaultControlPlaneMemory
	if ref.Role == RoleWorker {
		defCores, defMemory = defaultWorkerCores, defaultWorkerMemory
	}

	if !rejectExplicitZero(d, p+".cores", rangeText(1, maxCores), itoa(defCores)) {
		switch {
		case ref.Cores < 1:
			d.errorf(p+".cores", "%d: at least one core is required", ref.Cores)
		case ref.Cores > maxCores:
			d.errorf(p+".cores", "%d cores is more than %d, the most Proxmox VE offers a VM (and a VM cannot start with more vCPUs than its host has)", ref.Cores, maxCores)
		}
	}

	if !rejectExplicitZero(d, p+".memory", rangeText(minMemoryMiB, maxMemoryMiB)+" MiB", itoa(defMemory)+" MiB") {
		switch {
		case ref.Memory < minMemoryMiB:
			d.errorf(p+".memory", "%d MiB is below the %d MiB Talos needs", ref.Memory, minMemoryMiB)
		case ref.Memory > maxMemoryMiB:
			d.errorf(p+".memory", "%d MiB is more than %d MiB (4 TiB), the most Proxmox VE gives a VM; memory is in MiB", ref.Memory, maxMemoryMiB)
		case ref.Role == RoleControlPlane && ref.Memory < minCPMemoryMiB:
			d.warnf(p+".memory", "%d MiB is below the %d MiB Talos recommends for a control plane", ref.Memory, minCPMemoryMiB)
		}
	}

	if !rejectExplicitZero(d, p+".diskSize", rangeText(minDiskGiB, maxDiskGiB)+" GiB", itoa(DefaultDiskSize)+" GiB") {
		switch {
		case ref.DiskSize < minDiskGiB:
			d.errorf(p+".diskSize", "%d GiB is below the %d GiB Talos needs", ref.DiskSize, minDiskGiB)
		case ref.DiskSize > maxDiskGiB:
			d.errorf(p+".diskSize", "%d GiB is more than %d GiB (128 TiB), the largest disk Proxmox VE offers; sizes are in GiB", ref.DiskSize, maxDiskGiB)
		}
	}

	// 0 is a valid data disk size: none.
	switch {
	case ref.DataDiskSize < 0:
		d.errorf(p+".dataDiskSize", "%d must not be negative", ref.DataDiskSize)
	case ref.DataDiskSize > 0 && ref.Role == RoleControlPlane:
		d.errorf(p+".dataDiskSize", "data disks are for workers only")
	case ref.DataDiskSize > maxDiskGiB:
		d.errorf(p+".dataDiskSize", "%d GiB is more than %d GiB (128 TiB), the largest disk Proxmox VE offers; sizes are in GiB", ref.DataDiskSize, maxDiskGiB)
	}
}

func rangeText(lo, hi int) string { return itoa(lo) + "-" + itoa(hi) }

func itoa(n int) string { return strconv.Itoa(n) }
