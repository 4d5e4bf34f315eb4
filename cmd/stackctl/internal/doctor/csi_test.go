package doctor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/doctor"
	"github.com/fluodata/talos-pulumi/internal/kubeapi"
	"github.com/fluodata/talos-pulumi/internal/pveapi"
	"github.com/fluodata/talos-pulumi/internal/pveapi/pveapitest"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// withCSI is the direct example with the Proxmox CSI plugin on local-zfs.
func withCSI(t *testing.T) stacks.Source {
	t.Helper()
	return stackstest.EditSection(t, direct(t), "storage", func(s map[string]any) {
		s["proxmoxCsi"] = map[string]any{"datastore": "local-zfs"}
	})
}

// With storage.proxmoxCsi, the doctor checks the datastore holds images on
// each Proxmox node, and lists the plugin's volumes that no VM of the
// cluster has attached (kept after their claim or the cluster went), with
// the command that removes one; it removes nothing itself.
func TestTheDoctorListsTheCSIPluginsVolumes(t *testing.T) {
	t.Parallel()
	api := healthyAPI()
	api.storages = append(api.storages, pveapi.Storage{Storage: "local-zfs", Content: "images,rootdir"})
	api.volumes = []pveapi.Volume{
		{VolID: "local-zfs:vm-9999-pvc-aaa", Size: 8 << 30},
		{VolID: "local-zfs:vm-9999-pvc-bbb", Size: 1 << 30},
		{VolID: "local-zfs:vm-120-disk-1", Size: 20 << 30},
	}
	api.configs = map[int]map[string]any{120: {"scsi0": "local-lvm:vm-120-disk-0,size=20G", "scsi2": "local-zfs:vm-9999-pvc-aaa,size=8G"}}
	rs := doctor.Run(context.Background(), env(api), withCSI(t), "proxmox-homelab")
	var csi []doctor.Result
	for _, r := range rs {
		if r.Check == "csi" {
			csi = append(csi, r)
		}
	}
	require.Len(t, csi, 1, "%v", rs)
	assert.Equal(t, doctor.Warn, csi[0].Level)
	assert.Contains(t, csi[0].Message, "1 volumes of the CSI plugin on local-zfs are attached to no VM on the stack's Proxmox nodes, but the cluster's PersistentVolumes could not be read")
	assert.Contains(t, csi[0].Message, "local-zfs:vm-9999-pvc-bbb on pve (1 GiB)")
	assert.NotContains(t, csi[0].Message, "pvc-aaa on", "attached to worker-0")
	assert.NotContains(t, csi[0].Message, "vm-120-disk-1", "a VM's own disk is not the plugin's")
	assert.NotContains(t, csi[0].Message, "make csi-volume-rm", "none is offered while the claims are unknown")

	for _, r := range rs {
		if r.Check == "csi-perms" {
			assert.Equal(t, doctor.OK, r.Level, r.Message)
		}
	}

	api.lacks = map[string][]string{"/access": {"Sys.Modify"}, "/vms/120": {"Permissions.Modify"}}
	rs = doctor.Run(context.Background(), env(api), withCSI(t), "proxmox-homelab")
	var perms []doctor.Result
	for _, r := range rs {
		if r.Check == "csi-perms" {
			perms = append(perms, r)
		}
	}
	require.Len(t, perms, 1)
	assert.Equal(t, doctor.Warn, perms[0].Level, "read from Proxmox VE's access API, not tested against one: a warning")
	assert.Contains(t, perms[0].Message, "Sys.Modify on /access (creates the CSI plugin's role)")
	assert.Contains(t, perms[0].Message, "Permissions.Modify on /vms/120 (grants the CSI plugin its role on nodes.workers[0]'s VM)")
	api.lacks = nil

	api.volumes = api.volumes[:1]
	rs = doctor.Run(context.Background(), env(api), withCSI(t), "proxmox-homelab")
	for _, r := range rs {
		if r.Check == "csi" {
			assert.Equal(t, doctor.OK, r.Level, r.Message)
			assert.Contains(t, r.Message, "local-zfs:vm-9999-pvc-aaa (attached to worker-0)")
		}
	}

	api.storages = api.storages[:2]
	rs = doctor.Run(context.Background(), env(api), withCSI(t), "proxmox-homelab")
	var failed bool
	for _, r := range rs {
		if r.Level == doctor.Fail && strings.Contains(r.Message, `storage.proxmoxCsi.datastore: datastore "local-zfs" does not exist on pve`) {
			failed = true
		}
	}
	assert.True(t, failed, "%v", rs)
}

// doctor.CSIVolumes with the real client against the Proxmox API fake: the
// plugin's volumes of the datastore (a ZFS pool's images, named
// vm-9999-pvc-*), which VM has each attached, and a VM that is gone.
func TestCSIVolumesThroughTheAPI(t *testing.T) {
	t.Parallel()
	vms := map[int]*pveapitest.VM{
		120: {Node: "pve", Name: "worker-0", Config: map[string]string{"scsi2": "local-zfs:vm-9999-pvc-aaa,size=8G"}},
		// Another cluster's worker on the same node and datastore (issue
		// 35, item C.10): its plugin's volume is not free.
		300: {Node: "pve", Name: "other-worker", Config: map[string]string{"scsi1": "local-zfs:vm-9999-pvc-ccc,size=2G"}},
	}
	s := pveapitest.New(t, vms)
	s.AddDatastore("local-zfs", pveapitest.Datastore{Content: []string{"images"}})
	s.PutFile("pve", "local-zfs:vm-9999-pvc-aaa", 8<<30)
	s.PutFile("pve", "local-zfs:vm-9999-pvc-bbb", 1<<30)
	s.PutFile("pve", "local-zfs:vm-9999-pvc-ccc", 2<<30)
	s.PutFile("pve", "local-zfs:vm-9999-pvc-ddd", 3<<30)
	s.PutFile("pve", "local-zfs:vm-120-disk-1", 20<<30)
	s.PutFile("pve", "local:iso/talos.iso", 1<<20)
	api, err := pveapi.New(s.URL, pveapitest.TokenID, pveapitest.TokenSecret, pveapi.Options{HTTPClient: s.Client()})
	require.NoError(t, err)
	cfg, d := stacks.Load(withCSI(t))
	require.NoError(t, d.Err())
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	// A bound claim whose pod is not running: its volume is attached to no
	// VM, and its PersistentVolume names it (the plugin's volume handle).
	claims := doctor.CSIClaims([]kubeapi.PersistentVolume{
		{Name: "pvc-ddd", Driver: doctor.CSIDriver, VolumeHandle: "proxmox/pve/local-zfs/vm-9999-pvc-ddd", Claim: "db/data-db-0"},
		{Name: "pvc-nfs", Driver: "nfs.csi.k8s.io", VolumeHandle: "proxmox/pve/local-zfs/vm-9999-pvc-bbb"},
	})
	vols, err := doctor.CSIVolumes(ctx, api, cfg, claims)
	require.NoError(t, err)
	assert.Equal(t, []doctor.CSIVolume{
		{VolID: "local-zfs:vm-9999-pvc-aaa", ProxmoxNode: "pve", AttachedTo: "worker-0", Size: 8 << 30},
		{VolID: "local-zfs:vm-9999-pvc-bbb", ProxmoxNode: "pve", Size: 1 << 30},
		{VolID: "local-zfs:vm-9999-pvc-ccc", ProxmoxNode: "pve", AttachedTo: "VM 300 (other-worker), not of this cluster", Size: 2 << 30},
		{VolID: "local-zfs:vm-9999-pvc-ddd", ProxmoxNode: "pve", ClaimedBy: "PersistentVolume pvc-ddd (claim db/data-db-0)", Size: 3 << 30},
	}, vols)
	free := 0
	for _, v := range vols {
		if v.Free() {
			free++
		}
	}
	assert.Equal(t, 1, free, "only bbb is offered")

	require.NoError(t, api.DeleteVolume(ctx, "pve", "local-zfs:vm-9999-pvc-bbb", 10*time.Millisecond))
	assert.NotContains(t, s.Volumes("pve"), "local-zfs:vm-9999-pvc-bbb")
}
