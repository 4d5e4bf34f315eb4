package pveapitest

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A VM is created as qemu-server's create_vm makes it: new volumes
// numbered in drive order, drives printed as print_drive prints them (the
// format dropped, the size formatted, the options sorted), the NIC as
// "<model>=<mac>", tags sorted; numbers as numbers in the config's JSON.
func TestCreateVMAllocatesAndPrintsAsProxmox(t *testing.T) {
	t.Parallel()
	s := New(t, map[int]*VM{})
	s.AddDatastore("local-lvm", Datastore{Content: []string{"images"}})
	form := url.Values{
		"vmid": {"120"}, "name": {"w"}, "cores": {"4"}, "tags": {"talos;cluster-a"},
		"scsi0":    {"file=local-lvm:20,format=raw,size=21474836480,iothread=1,discard=on"},
		"efidisk0": {"file=local-lvm:1,format=raw,efitype=4m,pre-enrolled-keys=0"},
		"ide0":     {"file=local-lvm:cloudinit,"},
		"ide2":     {"file=local:iso/talos.iso,media=cdrom,"},
		"net0":     {"model=virtio,bridge=vmbr1,firewall=0,macaddr=bc:24:11:00:00:20"},
	}
	a := call(t, s, http.MethodPost, "/nodes/pve/qemu", form)
	require.Equal(t, http.StatusOK, a.Status, a.Message)
	assert.Equal(t, "OK", exitStatus(t, s, a.Data))
	vm := s.VM(120)
	require.NotNil(t, vm)
	assert.Equal(t, "local-lvm:vm-120-disk-0,discard=on,iothread=1,size=20G", vm.Config["scsi0"])
	assert.Equal(t, "local-lvm:vm-120-disk-1,efitype=4m,pre-enrolled-keys=0,size=4M", vm.Config["efidisk0"])
	assert.Equal(t, "local-lvm:vm-120-cloudinit,media=cdrom", vm.Config["ide0"])
	assert.Equal(t, "local:iso/talos.iso,media=cdrom", vm.Config["ide2"])
	assert.Equal(t, "virtio=bc:24:11:00:00:20,bridge=vmbr1,firewall=0", vm.Config["net0"])
	assert.Equal(t, "cluster-a;talos", vm.Config["tags"])
	assert.False(t, vm.Running, "created stopped")

	a = call(t, s, http.MethodGet, "/nodes/pve/qemu/120/config", nil)
	var cfg map[string]any
	require.NoError(t, json.Unmarshal(a.Data, &cfg))
	assert.InDelta(t, 4, cfg["cores"], 0, "an integer key is a JSON number")
	assert.NotEmpty(t, cfg["digest"])

	a = call(t, s, http.MethodPost, "/nodes/pve/qemu", form)
	assert.Equal(t, http.StatusInternalServerError, a.Status)
	assert.Equal(t, "VM 120 already exists\n", a.Message)
}

// Destroy is refused while the VM runs; once stopped, it frees the VM's
// volumes. A disk grows by an absolute or relative size, never shrinks.
func TestResizeAndDestroyAsProxmox(t *testing.T) {
	t.Parallel()
	s := New(t, map[int]*VM{})
	var destroyed []int
	s.OnDestroy = func(vmid int) {
		_ = s.VMIDs() // called without the fake's lock
		destroyed = append(destroyed, vmid)
	}
	s.AddDatastore("local-lvm", Datastore{Content: []string{"images"}})
	a := call(t, s, http.MethodPost, "/nodes/pve/qemu", url.Values{"vmid": {"110"}, "scsi0": {"local-lvm:20,ssd=1"}, "start": {"1"}})
	assert.Equal(t, "OK", exitStatus(t, s, a.Data))
	require.True(t, s.Running(110))

	a = call(t, s, http.MethodPut, "/nodes/pve/qemu/110/resize", url.Values{"disk": {"scsi0"}, "size": {"10G"}})
	assert.Equal(t, "shrinking disks is not supported\n", a.Message)
	a = call(t, s, http.MethodPut, "/nodes/pve/qemu/110/resize", url.Values{"disk": {"scsi0"}, "size": {"+10G"}})
	assert.Equal(t, "OK", exitStatus(t, s, a.Data))
	assert.Equal(t, "local-lvm:vm-110-disk-0,size=30G,ssd=1", s.VM(110).Config["scsi0"])

	for _, c := range []struct {
		method, path string
		form         url.Values
	}{
		{http.MethodPost, "/access/roles", url.Values{"roleid": {"csi"}, "privs": {"VM.Audit"}}},
		{http.MethodPost, "/access/users", url.Values{"userid": {"csi@pve"}}},
		{http.MethodPut, "/access/acl", url.Values{"path": {"/vms/110"}, "roles": {"csi"}, "users": {"csi@pve"}}},
		{http.MethodPut, "/access/acl", url.Values{"path": {"/vms/111"}, "roles": {"csi"}, "users": {"csi@pve"}}},
	} {
		require.Equal(t, http.StatusOK, call(t, s, c.method, c.path, c.form).Status, c.path)
	}
	a = call(t, s, http.MethodDelete, "/nodes/pve/qemu/110", nil)
	assert.Equal(t, "VM 110 is running - destroy failed\n", a.Message)
	assert.Empty(t, destroyed)
	a = call(t, s, http.MethodPost, "/nodes/pve/qemu/110/status/stop", url.Values{})
	assert.Equal(t, "OK", exitStatus(t, s, a.Data))
	a = call(t, s, http.MethodDelete, "/nodes/pve/qemu/110/?destroy-unreferenced-disks=1&purge=1", nil)
	assert.Equal(t, "OK", exitStatus(t, s, a.Data))
	assert.Nil(t, s.VM(110))
	assert.Empty(t, s.Volumes("pve"))
	assert.Equal(t, []int{110}, destroyed, "its machine goes with it")
	_, _, _, acls := s.Access()
	assert.Equal(t, []ACL{{Path: "/vms/111", Role: "csi", User: "csi@pve", Propagate: true}}, acls, "the ACL entries on its path go with it (remove_vm_access)")
}

// A VM that starts (created with start, or started) boots with its
// configuration: OnBoot sees it, without the fake's lock.
func TestAVMBootsWithItsConfiguration(t *testing.T) {
	t.Parallel()
	s := New(t, map[int]*VM{})
	var boots []map[string]string
	s.OnBoot = func(vmid int, config map[string]string) {
		_ = s.VMIDs() // called without the fake's lock
		boots = append(boots, config)
	}
	s.AddDatastore("local-lvm", Datastore{Content: []string{"images"}})
	a := call(t, s, http.MethodPost, "/nodes/pve/qemu", url.Values{"vmid": {"110"}, "bios": {"ovmf"},
		"efidisk0": {"local-lvm:1,efitype=4m,pre-enrolled-keys=0"}, "tpmstate0": {"local-lvm:1,version=v2.0"}, "start": {"1"}})
	require.Equal(t, "OK", exitStatus(t, s, a.Data))
	_ = s.VMIDs() // settles the task
	require.Len(t, boots, 1)
	assert.Equal(t, "ovmf", boots[0]["bios"])
	assert.Contains(t, boots[0]["tpmstate0"], "version=v2.0")

	a = call(t, s, http.MethodPost, "/nodes/pve/qemu/110/status/stop", url.Values{})
	require.Equal(t, "OK", exitStatus(t, s, a.Data))
	a = call(t, s, http.MethodPost, "/nodes/pve/qemu/110/status/start", url.Values{})
	require.Equal(t, "OK", exitStatus(t, s, a.Data))
	_ = s.VMIDs()
	assert.Len(t, boots, 2, "a start boots it again")
}
