//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// firmware plays each VM's OVMF as the Talos nodes boot on it: a VM with
// OVMF, an EFI disk without pre-enrolled keys (setup mode) and a TPM,
// booted once from the Secure Boot ISO, has Talos's keys enrolled (the
// ISO enrolls them in setup mode) and runs under Secure Boot from then on,
// until its EFI disk goes with the VM. Anything else runs without it.
type firmware struct {
	mu       sync.Mutex
	enrolled map[int]bool
}

func (f *firmware) boot(vmid int, config map[string]string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	setupMode := config["bios"] == "ovmf" && strings.Contains(config["efidisk0"], "pre-enrolled-keys=0") && config["tpmstate0"] != ""
	if !setupMode {
		delete(f.enrolled, vmid)
		return false
	}
	if strings.Contains(config["ide2"], "secureboot") {
		f.enrolled[vmid] = true
	}
	return f.enrolled[vmid]
}

func (f *firmware) destroyed(vmid int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.enrolled, vmid)
}

// The Proxmox example turns Secure Boot on and lives with it, through
// make, the real CLI and plugins, against the Proxmox and Talos fakes
// (whose nodes boot under Secure Boot only as the VM's firmware allows,
// and encrypt only what Talos would). It walks: a first up without it;
// cluster.secureBoot turned on in one up, which replaces every VM one at a
// time (control planes first; no other node away when a VM goes), each
// with OVMF in setup mode and a TPM, booting the Secure Boot ISO, its
// STATE and EPHEMERAL encrypted; a preview with no change; a Talos upgrade
// with the Secure Boot installer; a backup; everything destroyed and
// restored into new VMs with new TPMs; destroy.
func TestE2EProxmoxSecureBootLivesItsLife(t *testing.T) {
	w := newWorld(t)
	fw := &firmware{enrolled: map[int]bool{}}
	ipOf := map[int]string{}
	for _, m := range machines {
		ipOf[m.vmID] = m.ip
	}
	var mu sync.Mutex
	var destroyed []string // in order, with any other node away then
	newMachine := w.pve.OnDestroy
	w.pve.OnDestroy = func(vmid int) {
		away := []string{}
		for _, m := range machines {
			if n := w.nodes.Node(m.ip); m.vmID != vmid && w.pve.VM(m.vmID) != nil && (n.InMaintenance() || !n.Up()) {
				away = append(away, m.name)
			}
		}
		mu.Lock()
		destroyed = append(destroyed, fmt.Sprintf("%d away:%v", vmid, away))
		mu.Unlock()
		fw.destroyed(vmid)
		newMachine(vmid)
	}
	w.pve.OnBoot = func(vmid int, config map[string]string) {
		if ip, ok := ipOf[vmid]; ok {
			w.nodes.Node(ip).SetSecureBoot(fw.boot(vmid, config))
		}
	}

	w.make("up", "YES=1")
	for _, m := range machines {
		assert.Equal(t, map[string]string{"EPHEMERAL": "none", "STATE": "none"}, w.nodes.Node(m.ip).VolumeEncryption(), m.name)
	}

	// Secure Boot turned on: every VM replaced, one at a time.
	w.edit("    kubernetesVersion: 1.35.4\n", "    kubernetesVersion: 1.35.4\n    secureBoot: true\n")
	w.edit("    bios: seabios\n", "")
	out := w.make("preview")
	assert.Contains(t, out, "one at a time, each once the one before rejoined: cp-0 (", "the preview says what goes, and how")
	start := time.Now()
	w.make("up", "YES=1")
	t.Logf("Secure Boot turned on: %s", time.Since(start).Round(time.Second))
	mu.Lock()
	assert.Equal(t, []string{"110 away:[]", "111 away:[]", "112 away:[]", "120 away:[]", "121 away:[]", "122 away:[]"}, destroyed,
		"each VM replaced in turn, control planes first, with no other node away")
	destroyed = nil
	mu.Unlock()
	for _, m := range machines {
		vm := w.pve.VM(m.vmID)
		require.NotNil(t, vm, m.name)
		assert.Equal(t, "ovmf", vm.Config["bios"], m.name)
		assert.Contains(t, vm.Config["efidisk0"], "pre-enrolled-keys=0", "%s: setup mode, for Talos's keys", m.name)
		assert.Contains(t, vm.Config["tpmstate0"], "version=v2.0", m.name)
		assert.Equal(t, map[string]string{"EPHEMERAL": "luks2", "STATE": "luks2"}, w.nodes.Node(m.ip).VolumeEncryption(), m.name)
	}
	var isos []string
	for _, v := range w.pve.Volumes("pve") {
		if strings.HasSuffix(v, ".iso") {
			isos = append(isos, v)
		}
	}
	for _, iso := range isos {
		assert.Contains(t, iso, "secureboot", "only Secure Boot ISOs are left: %v", isos)
	}
	w.noChange("after Secure Boot was turned on")

	// A Talos upgrade keeps to the Secure Boot installer.
	w.edit("v1.13.9 # e2e: talosVersion", "v1.13.10 # e2e: talosVersion")
	w.make("up", "YES=1")
	ups := w.nodes.Events("Upgrade")
	require.Len(t, ups, len(machines), "one upgrade per node")
	for _, up := range ups {
		assert.Contains(t, up.Args, "/nocloud-installer-secureboot/", "%s upgrades with the Secure Boot installer of its platform (static addressing: nocloud)", up.Node)
		assert.Contains(t, up.Args, ":v1.13.10", up.Node)
	}
	for _, m := range machines {
		assert.Equal(t, "v1.13.10", w.nodes.Node(m.ip).Version(), m.name)
		assert.Equal(t, map[string]string{"EPHEMERAL": "luks2", "STATE": "luks2"}, w.nodes.Node(m.ip).VolumeEncryption(), m.name)
	}
	w.noChange("after the Secure Boot upgrade")

	// Everything lost, TPMs included: restored from a backup into new VMs
	// with new TPMs; nothing needs the old ones.
	w.nodes.SetEtcdKeys(map[string]string{"/registry/configmaps/default/e2e": "kept"})
	w.make("backup")
	w.make("destroy", "YES=1")
	assert.Empty(t, w.pve.VMIDs(), "every VM gone, its TPM with it")
	w.make("restore", "IDENTITY="+w.identityFile)
	assert.Equal(t, "kept", w.nodes.EtcdKeys()["/registry/configmaps/default/e2e"], "etcd as the backup had it")
	for _, m := range machines {
		assert.NotNil(t, w.pve.VM(m.vmID), "VM %d made again", m.vmID)
		assert.False(t, w.nodes.Node(m.ip).InMaintenance(), "%s installed", m.name)
		assert.Equal(t, map[string]string{"EPHEMERAL": "luks2", "STATE": "luks2"}, w.nodes.Node(m.ip).VolumeEncryption(), "%s encrypted under its new TPM", m.name)
	}
	w.noChange("after the restore into new VMs")
	w.make("destroy", "YES=1")
	assert.Empty(t, w.pve.VMIDs())
}
