package tests

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/internals"
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

// threeControlPlanes is the Proxmox example with cp-1 and cp-2 beside
// cp-0.
func threeControlPlanes(t *testing.T) stacks.Source {
	t.Helper()
	return edit(t, stackstest.Example(t, stackstest.ProxmoxExample), "nodes", func(m map[string]any) {
		cps := m["controlPlanes"].([]any)
		for i := 1; i <= 2; i++ {
			cp := maps.Clone(cps[0].(map[string]any))
			cp["name"], cp["ip"], cp["vmId"] = fmt.Sprintf("cp-%d", i), fmt.Sprintf("10.10.0.1%d", i), 110+i
			cps = append(cps, cp)
		}
		m["controlPlanes"] = cps
	})
}

// Secure Boot turned on for a running cluster replaces every VM (new
// firmware, a TPM, new disks), one at a time: each VM waits for the
// config apply of the node replaced before it, which the engine creates
// once that node rejoined, the control planes first; the first waits for
// none. So three control planes may change in one `up`. With one control
// plane, the run is refused, naming the backup-and-restore path.
func TestSecureBootTurnedOnReplacesEachVMInTurn(t *testing.T) {
	t.Parallel()
	src := threeControlPlanes(t)
	_, outs, _, err := programtest.Run(t, src, "proxmox-homelab", program.Options{})
	require.NoError(t, err)
	on := edit(t, withSecureBoot(t, src), "proxmox", func(m map[string]any) { delete(m, "bios") })
	e, _, _, err := programtest.RunOn(t, &componentstest.Engine{StackOutputs: lastOutputs(outs)}, on, "proxmox-homelab", program.Options{})
	require.NoError(t, err, "three control planes replaced in turn")

	order := []string{"cp-0", "cp-1", "cp-2", "worker-0", "worker-1"}
	applyOf := func(node string) string { return e.Named(t, componentstest.Apply, "homelab-apply-"+node).URN }
	for i, node := range order {
		vm := e.Named(t, componentstest.VM, "homelab-vm-"+node)
		for j, other := range order {
			if j == i-1 {
				assert.Contains(t, vm.Dependencies, applyOf(other), "%s's VM waits for %s's apply", node, other)
			} else {
				assert.NotContains(t, vm.Dependencies, applyOf(other), "%s's VM does not wait for %s's apply", node, other)
			}
		}
	}

	// A second run with Secure Boot on: nothing is replaced, nothing waits.
	_, again, _, err := programtest.RunOn(t, &componentstest.Engine{StackOutputs: lastOutputs(outs)}, on, "proxmox-homelab", program.Options{})
	require.NoError(t, err)
	e2, _, _, err := programtest.RunOn(t, &componentstest.Engine{StackOutputs: lastOutputs(again)}, on, "proxmox-homelab", program.Options{})
	require.NoError(t, err)
	for _, node := range order {
		for _, dep := range e2.Named(t, componentstest.VM, "homelab-vm-"+node).Dependencies {
			assert.NotContains(t, dep, "ConfigurationApply", "%s's VM waits for no apply", node)
		}
	}

	// One control plane: refused, the way out named.
	one := stackstest.Example(t, stackstest.ProxmoxExample)
	_, outs, _, err = programtest.Run(t, one, "proxmox-homelab", program.Options{})
	require.NoError(t, err)
	oneOn := edit(t, withSecureBoot(t, one), "proxmox", func(m map[string]any) { delete(m, "bios") })
	_, _, _, err = programtest.RunOn(t, &componentstest.Engine{StackOutputs: lastOutputs(outs)}, oneOn, "proxmox-homelab", program.Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "replaces the machine of the only control plane, cp-0")
	assert.Contains(t, err.Error(), "make backup, then make restore")
}

// withDiskEncryption is the stack with cluster.diskEncryption nodeID.
func withDiskEncryption(t *testing.T, src stacks.Source) stacks.Source {
	t.Helper()
	return edit(t, src, "cluster", func(m map[string]any) { m["diskEncryption"] = "nodeID" })
}

// membershipsOf are the memberships a run registered, as the next run
// reads them from the stack's state (type, outputs).
func membershipsOf(e *componentstest.Engine) resource.PropertyMap {
	out := resource.PropertyMap{}
	for _, r := range e.ByType(componentstest.LocalCommand) {
		if strings.Contains(r.Name, "-member-") {
			out[resource.PropertyKey(r.URN)] = resource.NewObjectProperty(resource.PropertyMap{
				"type": resource.NewStringProperty(r.Type), "outputs": resource.NewObjectProperty(r.Inputs),
			})
		}
	}
	return out
}

// On rented servers, where no TPM is, cluster.diskEncryption nodeID
// encrypts STATE and EPHEMERAL with node-ID keys, and each membership
// records it. The next run refuses to change it on the running nodes
// (Talos never re-encrypts; STATE would not mount), by the key, and
// accepts it unchanged. A running cluster cannot turn it on either. Where
// it makes no sense it is refused by its key: containers, and Proxmox VMs
// (which take secureBoot).
func TestDiskEncryptionOnRentedServers(t *testing.T) {
	t.Parallel()
	vps := stackstest.Example(t, stackstest.VPSExample)
	on := withDiskEncryption(t, vps)
	e, outs, _, err := programtest.Run(t, on, "vps-prod", program.Options{})
	require.NoError(t, err)
	applies := e.ByType(componentstest.Apply)
	require.NotEmpty(t, applies)
	for _, a := range applies {
		patches := fmt.Sprint(a.Inputs["configPatches"])
		assert.Contains(t, patches, "kind: VolumeConfig", a.Name)
		assert.Contains(t, patches, "nodeID: {}", a.Name)
		assert.NotContains(t, patches, "tpm:", a.Name)
	}
	members := membershipsOf(e)
	require.NotEmpty(t, members)
	for _, m := range members {
		env := m.ObjectValue()["outputs"].ObjectValue()["environment"].ObjectValue()
		assert.Equal(t, "nodeID", env["NODE_ENCRYPTION"].StringValue())
	}

	last := func(outs map[string]internals.UnsafeAwaitOutputResult, members resource.PropertyMap) *componentstest.Engine {
		return &componentstest.Engine{StackOutputs: lastOutputs(outs), StackResources: members}
	}
	_, _, _, err = programtest.RunOn(t, last(outs, members), on, "vps-prod", program.Options{})
	require.NoError(t, err, "unchanged")
	off := last(outs, members)
	_, _, _, err = programtest.RunOn(t, off, vps, "vps-prod", program.Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cluster.diskEncryption: changes how the volumes of node-0")
	assert.Contains(t, err.Error(), "(node-ID keys -> none)")
	assert.Empty(t, off.Created(), "nothing is registered")

	plain, outs, _, err := programtest.Run(t, vps, "vps-prod", program.Options{})
	require.NoError(t, err)
	_, _, _, err = programtest.RunOn(t, last(outs, membershipsOf(plain)), on, "vps-prod", program.Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "(none -> node-ID keys)")

	for name, c := range map[string]struct {
		src   stacks.Source
		stack string
		want  string
	}{
		"local":   {withDiskEncryption(t, stackstest.Example(t, stackstest.LocalExample)), "local", "cluster.diskEncryption: a DockerCluster's nodes are containers"},
		"proxmox": {withDiskEncryption(t, stackstest.Example(t, stackstest.ProxmoxExample)), "proxmox-homelab", "cluster.diskEncryption: is for rented servers (platform vps)"},
	} {
		_, _, _, err := programtest.Run(t, c.src, c.stack, program.Options{})
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), c.want, name)
	}
}
