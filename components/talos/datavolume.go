package talos

import (
	"fmt"
	"strconv"

	"github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/internal/talosversion"
)

// A node's data disk (NodeSpec.DataDiskSize) is a Talos user volume
// (UserVolumeConfig, Talos 1.10+): a partition grown over the whole disk,
// XFS, mounted at /var/mnt/<name>. The disk is chosen by a CEL selector that
// can never match the install disk: it excludes the system disk (the one
// Talos is installed on), CD-ROMs and read-only disks, and asks for the data
// disk's size.
const (
	// DefaultDataVolumeName names the volume: Longhorn's.
	DefaultDataVolumeName = "longhorn"
	// DataVolumeMountRoot is where Talos mounts user volumes.
	DataVolumeMountRoot = "/var/mnt/"
	// LayoutLonghorn adds the kubelet mount Longhorn needs (rshared, so
	// that the volumes it mounts under the path reach the pods);
	// LayoutPlain is the volume alone.
	LayoutLonghorn = "longhorn"
	LayoutPlain    = "plain"
	// maxDataVolumeName is Talos's limit (a partition label of 36
	// characters, "u-" and the name).
	maxDataVolumeName = 34
	// dataVolumeSlack is what the partition leaves of the disk (its
	// partition table): it grows over the rest.
	dataVolumeSlackMiB = 64
)

// Keys of a node's entry in the nodes output.
const (
	DataVolumeOutput   = "dataVolume"
	DataDiskSizeOutput = "dataDiskSize"
)

// minUserVolumeMinor is the first Talos 1.x release with UserVolumeConfig.
const minUserVolumeMinor = 10

// DataVolumeSettings say what a node's data disk becomes.
type DataVolumeSettings struct {
	// Name of the volume, mounted at /var/mnt/<name> (default longhorn):
	// letters, digits and '-', at most 34 characters.
	Name string `pulumi:"name,optional"`
	// Layout is longhorn (the volume and the kubelet mount Longhorn needs;
	// the default) or plain (the volume alone).
	Layout string `pulumi:"layout,optional"`
}

// LonghornExtensions are the system extensions Longhorn needs on a node
// (its iSCSI initiator and the util-linux tools it calls).
var LonghornExtensions = []string{"siderolabs/iscsi-tools", "siderolabs/util-linux-tools"}

// LonghornNodes reports whether a node has a data volume of the Longhorn
// layout: then the image must carry LonghornExtensions.
func (a *ClusterArgs) LonghornNodes() bool {
	if a.Cluster.dataVolume().Layout != LayoutLonghorn {
		return false
	}
	for _, n := range a.Nodes {
		if n.DataDiskSize > 0 {
			return true
		}
	}
	return false
}

// dataVolume is the settings with their defaults.
func (c ClusterSettings) dataVolume() DataVolumeSettings {
	d := DataVolumeSettings{Name: DefaultDataVolumeName, Layout: LayoutLonghorn}
	if c.DataVolume != nil {
		if c.DataVolume.Name != "" {
			d.Name = c.DataVolume.Name
		}
		if c.DataVolume.Layout != "" {
			d.Layout = c.DataVolume.Layout
		}
	}
	return d
}

// DataMount is where a node's data volume is mounted ("" without one).
func (c ClusterSettings) DataMount(n NodeSpec) string {
	if n.DataDiskSize <= 0 {
		return ""
	}
	return DataVolumeMountRoot + c.dataVolume().Name
}

// check records the problems of the data volume settings under prefix
// (e.g. "cluster.dataVolume.").
func (v *DataVolumeSettings) check(p *inputs.Problems, prefix string) {
	if v.Name != "" && !isVolumeName(v.Name) {
		p.Add(prefix+"name", "%q is not a volume name: letters, digits and '-', at most %d characters", v.Name, maxDataVolumeName)
	}
	if v.Layout != "" && v.Layout != LayoutLonghorn && v.Layout != LayoutPlain {
		p.Add(prefix+"layout", "%q is not %s or %s", v.Layout, LayoutLonghorn, LayoutPlain)
	}
}

// checkDataDiskSizes records the problems of the nodes' data disks.
func (a *ClusterArgs) checkDataDiskSizes(p *inputs.Problems, prefix string) {
	minor, known := talosversion.Minor(a.Cluster.TalosVersion)
	for i, n := range a.Nodes {
		at := fmt.Sprintf("%snodes[%d].dataDiskSize", prefix, i)
		switch {
		case n.DataDiskSize < 0:
			p.Add(at, "%d must not be negative", n.DataDiskSize)
		case n.DataDiskSize > 0 && known && minor < minUserVolumeMinor:
			p.Add(at, "a data disk is a Talos user volume, which needs Talos v1.%d or newer (cluster.talosVersion is %s): upgrade first, then add the disk", minUserVolumeMinor, a.Cluster.TalosVersion)
		}
	}
}

func isVolumeName(s string) bool {
	if len(s) == 0 || len(s) > maxDataVolumeName {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-':
		default:
			return false
		}
	}
	return true
}

// CSIDiskWWIDPrefix starts the wwid Linux gives every disk the Proxmox CSI
// plugin attaches: the plugin sets each one's WWN to the hex of
// "PVC-ID<lun>" (proxmox-csi-plugin pkg/csi, wwn=0x5056432d4944..., since
// 2023, in every version the pinned chart can run), and its node side finds
// the device by that wwid ("naa." and the WWN). A serial would not do:
// Talos reads a disk's serial from /sys/block/<dev>/device/serial
// (go-blockdevice), which SCSI disks, Proxmox's default, do not have.
const CSIDiskWWIDPrefix = "naa.5056432d4944"

// DataDiskSelector is the CEL expression that picks a node's data disk of
// sizeGiB: never the system disk, a CD-ROM, a read-only disk or a volume
// of the Proxmox CSI plugin (an empty disk hot-plugged into a new worker
// before its user volume is provisioned would otherwise qualify), and at
// least the data disk's size. Changing it never moves a provisioned
// volume: Talos locates one by its partition label first and provisions
// (with the selector) only what it did not find.
func DataDiskSelector(sizeGiB int) string {
	return "!system_disk && !disk.cdrom && !disk.readonly && !disk.wwid.startsWith(\"" + CSIDiskWWIDPrefix + "\") && disk.size >= " +
		strconv.FormatInt(int64(sizeGiB)<<30, 10) + "u"
}

type (
	userVolumeDoc struct {
		APIVersion   string           `yaml:"apiVersion"`
		Kind         string           `yaml:"kind"`
		Name         string           `yaml:"name"`
		Provisioning provisioningSpec `yaml:"provisioning"`
		Filesystem   filesystemSpec   `yaml:"filesystem"`
		Encryption   *encryptionSpec  `yaml:"encryption,omitempty"`
	}
	provisioningSpec struct {
		DiskSelector diskSelector `yaml:"diskSelector"`
		MinSize      string       `yaml:"minSize"`
		Grow         bool         `yaml:"grow"`
	}
	diskSelector struct {
		Match string `yaml:"match"`
	}
	filesystemSpec struct {
		Type string `yaml:"type"`
	}
	extraMount struct {
		Destination string   `yaml:"destination"`
		Type        string   `yaml:"type"`
		Source      string   `yaml:"source"`
		Options     []string `yaml:"options"`
	}
)

// DataVolumePatches are a node's patches for its data disk: the user
// volume document and, in the Longhorn layout, the kubelet's rshared bind
// mount of it (Longhorn's documented Talos set-up). None without a disk.
// On a Secure Boot node the volume is encrypted as STATE is.
func DataVolumePatches(settings DataVolumeSettings, n NodeSpec, e Encryption) []string {
	if n.DataDiskSize <= 0 {
		return nil
	}
	mount := DataVolumeMountRoot + settings.Name
	out := []string{render(userVolumeDoc{
		APIVersion: "v1alpha1", Kind: "UserVolumeConfig", Name: settings.Name,
		Provisioning: provisioningSpec{
			DiskSelector: diskSelector{Match: DataDiskSelector(n.DataDiskSize)},
			MinSize:      strconv.Itoa(n.DataDiskSize<<10-dataVolumeSlackMiB) + "MiB",
			Grow:         true,
		},
		Filesystem: filesystemSpec{Type: "xfs"},
		Encryption: e.spec(constants.UserVolumePrefix + settings.Name),
	})}
	if settings.Layout == LayoutLonghorn {
		out = append(out, render(patchDoc{Machine: &machinePatch{Kubelet: &kubeletPatch{
			ExtraMounts: []extraMount{{Destination: mount, Type: "bind", Source: mount, Options: []string{"bind", "rshared", "rw"}}},
		}}}))
	}
	return out
}

// checkDataDisks refuses a data disk shrunk or removed from a node that
// had it: its data would be lost (the disk of a VM cannot shrink; a removed
// one takes its volume along). A node that goes from the stack takes its
// disk with it, as any removed node.
func (a *ClusterArgs) checkDataDisks(p *inputs.Problems, prefix string) {
	for i, n := range a.Nodes {
		had, ok := a.Previous.DataDisks[n.Name]
		if !ok || n.DataDiskSize >= had {
			continue
		}
		at := fmt.Sprintf("%snodes[%d].dataDiskSize", prefix, i)
		if n.DataDiskSize == 0 {
			p.Add(at, "removes the %d GiB data disk of %s, and the data on it: a data disk is never removed from a running node; remove the node instead (its workloads move first), or keep the disk", had, n.Name)
		} else {
			p.Add(at, "shrinks the data disk of %s from %d to %d GiB: a disk cannot shrink without losing its data; keep %d GiB or more", n.Name, had, n.DataDiskSize, had)
		}
	}
}
