package tests

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/program/programtest"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// withSecureBoot is the stack with cluster.secureBoot on.
func withSecureBoot(t *testing.T, src stacks.Source) stacks.Source {
	t.Helper()
	return edit(t, src, "cluster", func(m map[string]any) { m["secureBoot"] = true })
}

// With cluster.secureBoot each VM boots OVMF from an EFI disk without
// pre-enrolled keys (the firmware in setup mode, so the ISO enrolls
// Talos's own), has a TPM 2.0, boots the factory's Secure Boot ISO and
// installs and upgrades with its Secure Boot installer; every node's
// config encrypts STATE and EPHEMERAL with a TPM-sealed key. A replaced
// TPM replaces the VM, and the machine each node runs on says Secure Boot.
func TestProxmoxSecureBootVMs(t *testing.T) {
	t.Parallel()
	src := edit(t, withSecureBoot(t, stackstest.Example(t, stackstest.ProxmoxExample)), "proxmox", func(m map[string]any) {
		delete(m, "bios") // the example's seabios: ovmf is the default with Secure Boot
	})
	e, _ := deploy(t, src)
	isos := e.ByType(componentstest.Download)
	require.NotEmpty(t, isos)
	for _, iso := range isos {
		assert.Equal(t, "https://factory.talos.dev/image/"+componentstest.SchematicID+"/v1.13.9/metal-amd64-secureboot.iso", iso.Inputs["url"].StringValue())
		assert.Contains(t, iso.Inputs["fileName"].StringValue(), "metal-secureboot", "another file than the plain ISO")
	}
	vms := e.ByType(componentstest.VM)
	require.NotEmpty(t, vms)
	for _, v := range vms {
		assert.Equal(t, "ovmf", v.Inputs["bios"].StringValue(), v.Name)
		assert.Equal(t, "q35", v.Inputs["machine"].StringValue(), v.Name)
		efi := v.Inputs["efiDisk"]
		require.True(t, efi.IsObject(), v.Name)
		assert.False(t, obj(efi, "preEnrolledKeys").BoolValue(), "%s: setup mode", v.Name)
		assert.Equal(t, "4m", obj(efi, "type").StringValue(), v.Name)
		tpm := v.Inputs["tpmState"]
		require.True(t, tpm.IsObject(), "%s has a TPM", v.Name)
		assert.Equal(t, "v2.0", obj(tpm, "version").StringValue(), v.Name)
		assert.Equal(t, "local-lvm", obj(tpm, "datastoreId").StringValue(), v.Name)
		assert.Contains(t, v.ReplaceOnChanges, "tpmState", v.Name)
		assert.Contains(t, v.ReplaceOnChanges, "bios", v.Name)
	}
	for _, a := range e.ByType(componentstest.Apply) {
		patches := fmt.Sprint(a.Inputs["configPatches"])
		assert.Contains(t, patches, "factory.talos.dev/metal-installer-secureboot/"+componentstest.SchematicID+":v1.13.9", a.Name)
		assert.Contains(t, patches, "kind: VolumeConfig", a.Name)
		assert.Contains(t, patches, "checkSecurebootStatusOnEnroll: true", a.Name)
	}

	// Off (the example as it is): no TPM, the plain ISO and installer.
	plain, _ := deploy(t, stackstest.Example(t, stackstest.ProxmoxExample))
	for _, v := range plain.ByType(componentstest.VM) {
		assert.True(t, v.Inputs["tpmState"].IsNull(), v.Name)
		assert.Equal(t, "seabios", v.Inputs["bios"].StringValue(), v.Name)
	}
	for _, a := range plain.ByType(componentstest.Apply) {
		assert.NotContains(t, fmt.Sprint(a.Inputs["configPatches"]), "kind: VolumeConfig", a.Name)
	}
}

// Secure Boot is refused by key where it cannot be had: a Proxmox host
// whose VMs boot SeaBIOS, rented servers (platform vps, or a hosts entry of
// them), containers (platform local), and a Talos release whose volume
// config cannot encrypt STATE. Nothing is registered.
func TestSecureBootIsRefusedWhereItCannotBeHad(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		src   stacks.Source
		stack string
		want  string
	}{
		"seabios": {edit(t, withSecureBoot(t, stackstest.Example(t, stackstest.ProxmoxExample)), "proxmox", func(m map[string]any) { m["bios"] = "seabios" }),
			"proxmox-homelab", `proxmox.bios: "seabios" cannot boot with cluster.secureBoot, which needs UEFI firmware`},
		"vps":   {withSecureBoot(t, stackstest.Example(t, stackstest.VPSExample)), "vps", "cluster.secureBoot: a rented server is installed from its rescue system"},
		"local": {withSecureBoot(t, stackstest.Example(t, stackstest.LocalExample)), "local", "cluster.secureBoot: a DockerCluster's nodes are containers"},
		"talos 1.10": {edit(t, withSecureBoot(t, stackstest.Example(t, stackstest.ProxmoxExample)), "cluster", func(m map[string]any) { m["talosVersion"] = "v1.10.7" }),
			"proxmox-homelab", "cluster.secureBoot: needs Talos v1.11 or newer"},
	} {
		e, _, _, err := programtest.Run(t, c.src, c.stack, program.Options{})
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), c.want, name)
		for _, r := range e.Created() {
			assert.NotEqual(t, componentstest.VM, r.Type, "%s: nothing is made", name)
		}
	}
}
