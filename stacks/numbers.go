package stacks

import (
	"strconv"
	"strings"

	"github.com/fluodata/talos-pulumi/components/proxmox"
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

// noteObject records, while decoding, that the stack gives the object at
// path (an empty one too).
func (d *Diagnostics) noteObject(path string) {
	if d.objects == nil {
		d.objects = map[string]bool{}
	}
	d.objects[path] = true
}

// givenObject reports whether the stack gives the object at path.
func (d *Diagnostics) givenObject(path string) bool { return d.objects[path] }

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
	rejectExplicitZero(d, "backup.keep.last", "1 or more", itoa(DefaultBackupKeepLast))
	rulesOf(cfg.Platform).explicitZeros(d, cfg)
}

// validateVMSize refuses an explicit 0 for a Proxmox node's cores, memory
// or disk, where leaving the key out gives a default, and warns of a
// control plane with less memory than Talos recommends. Their bounds are
// the ProxmoxCluster's rules: program.Validate names its problems by these
// keys (issue 25).
func validateVMSize(d *Diagnostics, ref NodeRef) {
	p := ref.Path
	defCores, defMemory := proxmox.DefaultControlPlaneCores, proxmox.DefaultControlPlaneMemory
	if ref.Role == RoleWorker {
		defCores, defMemory = proxmox.DefaultWorkerCores, proxmox.DefaultWorkerMemory
	}
	rejectExplicitZero(d, p+".cores", rangeText(1, proxmox.MaxCores), itoa(defCores))
	rejectExplicitZero(d, p+".diskSize", rangeText(proxmox.MinDiskGiB, proxmox.MaxDiskGiB)+" GiB", itoa(proxmox.DefaultDiskSize)+" GiB")
	if !rejectExplicitZero(d, p+".memory", rangeText(proxmox.MinMemoryMiB, proxmox.MaxMemoryMiB)+" MiB", itoa(defMemory)+" MiB") &&
		ref.Role == RoleControlPlane && ref.Memory >= proxmox.MinMemoryMiB && ref.Memory < proxmox.MinControlPlaneMemoryMiB {
		d.warnf(p+".memory", "%d MiB is below the %d MiB Talos recommends for a control plane", ref.Memory, proxmox.MinControlPlaneMemoryMiB)
	}
}

func rangeText(lo, hi int) string { return itoa(lo) + "-" + itoa(hi) }

func itoa(n int) string { return strconv.Itoa(n) }
