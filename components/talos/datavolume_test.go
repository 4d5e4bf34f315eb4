package talos_test

import (
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/siderolabs/talos/pkg/machinery/api/resource/definitions/block"
	"github.com/siderolabs/talos/pkg/machinery/cel"
	"github.com/siderolabs/talos/pkg/machinery/cel/celenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/talos"
)

const gib = uint64(1) << 30

// The data disk's selector, evaluated by Talos's own CEL environment, picks
// the data disk and never the install disk, whatever their sizes (equal,
// either larger, the smallest and largest Proxmox allows), nor the Talos
// ISO's CD-ROM or a read-only disk.
func TestTheDataDiskSelectorNeverPicksTheInstallDisk(t *testing.T) {
	t.Parallel()
	eval := func(expr string, disk *block.DiskSpec, system bool) bool {
		t.Helper()
		e, err := cel.ParseBooleanExpression(expr, celenv.DiskLocator())
		require.NoError(t, err)
		ok, err := e.EvalBool(celenv.DiskLocator(), map[string]any{"disk": disk, "system_disk": system})
		require.NoError(t, err)
		return ok
	}
	for _, install := range []int{5, 10, 20, 64, 131072} {
		for _, data := range []int{1, 5, 10, 20, 100, 131072} {
			sel := talos.DataDiskSelector(data)
			installDisk := &block.DiskSpec{Size: uint64(install) * gib, Transport: "virtio", DevPath: "/dev/sda"}
			dataDisk := &block.DiskSpec{Size: uint64(data) * gib, Transport: "virtio", DevPath: "/dev/sdb"}
			assert.False(t, eval(sel, installDisk, true), "install %d GiB, data %d GiB: the install disk", install, data)
			assert.True(t, eval(sel, dataDisk, false), "install %d GiB, data %d GiB: the data disk", install, data)
			assert.False(t, eval(sel, &block.DiskSpec{Size: uint64(data) * gib, Cdrom: true, Readonly: true}, false), "a CD-ROM")
			assert.False(t, eval(sel, &block.DiskSpec{Size: uint64(data) * gib, Readonly: true}, false), "a read-only disk")
			if data > 1 {
				assert.False(t, eval(sel, &block.DiskSpec{Size: uint64(data-1) * gib}, false), "a smaller disk")
			}
			// A volume the Proxmox CSI plugin hot-plugged (issue 35, item
			// C.11), as large as any: its WWN is "PVC-ID<lun>" in hex.
			csi := &block.DiskSpec{Size: uint64(data+1000) * gib, Transport: "virtio", DevPath: "/dev/sdc", Wwid: "naa.5056432d49443031"}
			assert.False(t, eval(sel, csi, false), "install %d GiB, data %d GiB: a CSI volume", install, data)
			dataDisk.Wwid = "t10.QEMU    QEMU HARDDISK   drive-scsi1"
			assert.True(t, eval(sel, dataDisk, false), "the data disk with QEMU's own wwid")
		}
	}
}

// A data disk needs Talos 1.10 (user volumes); a negative size, a bad
// volume name or layout are refused by path.
func TestDataVolumeSettingsAreChecked(t *testing.T) {
	t.Parallel()
	check := func(version string, v *talos.DataVolumeSettings, size int) error {
		ns := nodes(1, 1)
		ns[1].DataDiskSize = size
		a := talos.ClusterArgs{
			Cluster:        talos.ClusterSettings{Name: "lab", TalosVersion: version, DataVolume: v},
			InstallerImage: pulumi.String("x"), Nodes: ns,
		}
		return a.Validate("lab")
	}
	require.NoError(t, check("v1.10.0", nil, 20))
	require.NoError(t, check("v1.9.5", nil, 0), "no disk, no user volume")
	err := check("v1.9.5", nil, 20)
	require.ErrorContains(t, err, "nodes[1].dataDiskSize: a data disk is a Talos user volume, which needs Talos v1.10 or newer")
	require.ErrorContains(t, check("v1.12.4", nil, -1), "nodes[1].dataDiskSize: -1 must not be negative")
	require.ErrorContains(t, check("v1.12.4", &talos.DataVolumeSettings{Name: "longhorn_data"}, 20), "cluster.dataVolume.name")
	require.ErrorContains(t, check("v1.12.4", &talos.DataVolumeSettings{Layout: "ceph"}, 20), `cluster.dataVolume.layout: "ceph" is not longhorn or plain`)
}

// A worker's data disk becomes the user volume, mounted where Longhorn
// expects it with the kubelet's rshared mount; the plain layout has the
// volume alone; the outputs say where each node's volume is.
func TestDataVolumePatches(t *testing.T) {
	t.Parallel()
	n := talos.NodeSpec{Name: "w-0", Role: talos.RoleWorker, DataDiskSize: 20}
	longhorn := talos.DataVolumePatches(talos.DataVolumeSettings{Name: "longhorn", Layout: talos.LayoutLonghorn}, n, talos.EncryptionNone)
	require.Len(t, longhorn, 2)
	assert.Contains(t, longhorn[0], "kind: UserVolumeConfig")
	assert.Contains(t, longhorn[0], "name: longhorn")
	assert.Contains(t, longhorn[1], "destination: /var/mnt/longhorn")
	assert.Contains(t, longhorn[1], "- rshared")
	plain := talos.DataVolumePatches(talos.DataVolumeSettings{Name: "data", Layout: talos.LayoutPlain}, n, talos.EncryptionNone)
	require.Len(t, plain, 1)
	assert.Contains(t, plain[0], "name: data")
	assert.Empty(t, talos.DataVolumePatches(talos.DataVolumeSettings{Name: "longhorn"}, talos.NodeSpec{Name: "w-1"}, talos.EncryptionNone))
	c := talos.ClusterSettings{DataVolume: &talos.DataVolumeSettings{Name: "data"}}
	assert.Equal(t, "/var/mnt/data", c.DataMount(n))
	assert.Empty(t, c.DataMount(talos.NodeSpec{Name: "w-1"}))
}

// A data disk of a node the last run had may grow, never shrink or go: its
// data would be lost. A new node may have any.
func TestADataDiskIsNeverShrunkOrRemoved(t *testing.T) {
	t.Parallel()
	check := func(sizes map[string]int) error {
		ns := nodes(1, 2)
		for i := range ns {
			ns[i].DataDiskSize = sizes[ns[i].Name]
		}
		a := talos.ClusterArgs{
			Cluster:        talos.ClusterSettings{Name: "lab", TalosVersion: "v1.12.4"},
			InstallerImage: pulumi.String("x"), Nodes: ns,
			Previous: &talos.Previous{
				ControlPlanes: []string{"cp-0"}, Roles: map[string]talos.Role{"cp-0": talos.RoleControlPlane, "w-0": talos.RoleWorker},
				DataDisks: map[string]int{"w-0": 20},
			},
		}
		return a.Validate("lab")
	}
	require.NoError(t, check(map[string]int{"w-0": 20}))
	require.NoError(t, check(map[string]int{"w-0": 40, "w-1": 10}), "grown, and a new node's")
	require.ErrorContains(t, check(map[string]int{"w-0": 10}), "nodes[1].dataDiskSize: shrinks the data disk of w-0 from 20 to 10 GiB")
	require.ErrorContains(t, check(map[string]int{}), "nodes[1].dataDiskSize: removes the 20 GiB data disk of w-0")
}
