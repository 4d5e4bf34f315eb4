package proxmox

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/muhlba91/pulumi-proxmoxve/sdk/v7/go/proxmoxve/vm"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// Drive interfaces. q35 has only ide0 and ide2; the cloud-init drive's
// default (ide2) would take the CD-ROM's slot, so it goes to ide0.
const (
	bootDisk       = "scsi0"
	dataDisk       = "scsi1"
	cdromInterface = "ide2"
	cloudInitDrive = "ide0"
)

// VM timeouts in seconds. The provider's defaults are 1800 s for shutdown
// and reboot: a guest that ignores ACPI would hang `up` and `destroy` for
// half an hour. Destroy hard-stops (stopOnDestroy), and its deadline is the
// larger of the stop and shutdown timeouts.
const (
	timeoutStopSeconds     = 60
	timeoutShutdownSeconds = 60
	timeoutRebootSeconds   = 120
	timeoutStartSeconds    = 300
	timeoutCreateSeconds   = 600
	agentTimeout           = "2m"
)

// tpmVersion is the TPM a Secure Boot VM gets: Talos seals keys to TPM
// 2.0 only.
const tpmVersion = "v2.0"

// Tag values. Proxmox stores tags sorted and lowercase, so anything else
// shows a diff on every preview.
var tagCharRe = regexp.MustCompile(`[^a-z0-9_+.-]`)

// StackTag is the tag that marks a VM as this stack's; the fast-delete hook
// refuses to stop a VM without it.
func StackTag(stack string) string {
	return "stack-" + tagCharRe.ReplaceAllString(strings.ToLower(stack), "-")
}

// Tags are the sorted tags of every VM of the cluster.
func Tags(cluster, stack string) []string {
	tags := []string{"talos", "cluster-" + cluster, StackTag(stack)}
	slices.Sort(tags)
	return tags
}

// vmSpec is everything a VM needs beyond its node's config.
type vmSpec struct {
	Cluster, Stack string
	MAC            pulumi.StringInput
	ISO            pulumi.StringInput // file id <datastore>:iso/<file>
	Agent          bool
}

// vmArgs builds a node's VM. The boot order puts the disk before the CD-ROM:
// an empty disk is not bootable, so the first boot falls through to the ISO;
// once Talos has installed itself, every boot takes the disk. The ISO is
// ejected after the install anyway (see ejectISO), because a VM whose ISO
// file is deleted (a later Talos version replaces it) would not start.
func vmArgs(in *ClusterArgs, ref Node, s vmSpec) *vm.VirtualMachineArgs {
	px := in.settingsOf(ref.Host)
	tags := Tags(s.Cluster, s.Stack)
	if ref.Host != "" {
		// The fast-stop hook finds the host's API by it.
		tags = append(tags, HostTag(ref.Host))
		slices.Sort(tags)
	}
	disks := vm.VirtualMachineDiskArray{diskArgs(bootDisk, px.DiskDatastore, ref.DiskSize)}
	if ref.DataDiskSize > 0 {
		disks = append(disks, diskArgs(dataDisk, px.DiskDatastore, ref.DataDiskSize))
	}
	nic := vm.VirtualMachineNetworkDeviceArgs{
		Bridge:     pulumi.String(px.Bridge),
		Model:      pulumi.String("virtio"),
		MacAddress: s.MAC,
		Firewall:   pulumi.Bool(false),
	}
	if px.VLANID > 0 {
		nic.VlanId = pulumi.Int(px.VLANID)
	}
	args := &vm.VirtualMachineArgs{
		NodeName:    pulumi.String(ref.ProxmoxNode),
		VmId:        pulumi.Int(ref.VMID),
		Name:        pulumi.String(ref.Name),
		Description: pulumi.String(fmt.Sprintf("Talos %s %s of cluster %s; managed by Pulumi stack %s.", ref.Role, ref.Name, s.Cluster, s.Stack)),
		Tags:        pulumi.ToStringArray(tags),
		Machine:     pulumi.String("q35"),
		Bios:        pulumi.String(px.BIOS),
		OperatingSystem: &vm.VirtualMachineOperatingSystemArgs{
			Type: pulumi.String("l26"),
		},
		Cpu: &vm.VirtualMachineCpuArgs{
			Type:    pulumi.String(px.CPUType),
			Cores:   pulumi.Int(ref.Cores),
			Sockets: pulumi.Int(1),
		},
		Memory:         &vm.VirtualMachineMemoryArgs{Dedicated: pulumi.Int(ref.Memory)},
		ScsiHardware:   pulumi.String("virtio-scsi-single"),
		Disks:          disks,
		NetworkDevices: vm.VirtualMachineNetworkDeviceArray{nic},
		Cdrom: &vm.VirtualMachineCdromArgs{
			FileId:    s.ISO,
			Interface: pulumi.String(cdromInterface),
		},
		BootOrders: pulumi.ToStringArray([]string{bootDisk, cdromInterface}),
		Agent: &vm.VirtualMachineAgentArgs{
			Enabled: pulumi.Bool(s.Agent),
			Trim:    pulumi.Bool(s.Agent),
			Timeout: pulumi.String(agentTimeout),
		},
		OnBoot:  pulumi.Bool(true),
		Started: pulumi.Bool(true),
		// Talos reboots itself when it must; a provider-driven reboot goes
		// through ACPI or the agent and can hang on a guest that ignores it.
		// CPU or memory changes take effect at the next reboot.
		RebootAfterUpdate: pulumi.Bool(false),
		StopOnDestroy:     pulumi.Bool(true),
		PurgeOnDestroy:    pulumi.Bool(true),
		TimeoutStopVm:     pulumi.Int(timeoutStopSeconds),
		TimeoutShutdownVm: pulumi.Int(timeoutShutdownSeconds),
		TimeoutReboot:     pulumi.Int(timeoutRebootSeconds),
		TimeoutStartVm:    pulumi.Int(timeoutStartSeconds),
		TimeoutCreate:     pulumi.Int(timeoutCreateSeconds),
	}
	if px.BIOS == "ovmf" {
		// OVMF keeps its variables on an EFI disk, without pre-enrolled
		// keys: the firmware starts in setup mode, so that the Secure Boot
		// ISO enrolls Talos's own keys on its first boot (Microsoft's,
		// which Proxmox would pre-enroll, would not verify Talos's image).
		args.EfiDisk = &vm.VirtualMachineEfiDiskArgs{
			DatastoreId:     pulumi.String(px.DiskDatastore),
			FileFormat:      pulumi.String("raw"),
			Type:            pulumi.String("4m"),
			PreEnrolledKeys: pulumi.Bool(false),
		}
	}
	if in.Cluster.SecureBoot {
		// The TPM 2.0 (swtpm) that seals the keys of the node's encrypted
		// volumes; its state lives on a disk of the VM.
		args.TpmState = &vm.VirtualMachineTpmStateArgs{
			DatastoreId: pulumi.String(px.DiskDatastore),
			Version:     pulumi.String(tpmVersion),
		}
	}
	if px.Addressing == AddressingStatic {
		// The nocloud image reads address, gateway and DNS from this drive
		// while in maintenance mode; the machine config repeats them.
		args.Initialization = &vm.VirtualMachineInitializationArgs{
			Type:        pulumi.String("nocloud"),
			Interface:   pulumi.String(cloudInitDrive),
			DatastoreId: pulumi.String(px.DiskDatastore),
			IpConfigs: vm.VirtualMachineInitializationIpConfigArray{vm.VirtualMachineInitializationIpConfigArgs{
				Ipv4: &vm.VirtualMachineInitializationIpConfigIpv4Args{
					Address: pulumi.String(fmt.Sprintf("%s/%d", ref.IP, px.PrefixLength)),
					Gateway: pulumi.String(px.Gateway),
				},
			}},
			Dns: &vm.VirtualMachineInitializationDnsArgs{Servers: pulumi.ToStringArray(in.Cluster.Nameservers)},
		}
	}
	return args
}

func diskArgs(iface, datastore string, sizeGiB int) vm.VirtualMachineDiskArgs {
	return vm.VirtualMachineDiskArgs{
		Interface:   pulumi.String(iface),
		DatastoreId: pulumi.String(datastore),
		Size:        pulumi.Int(sizeGiB),
		FileFormat:  pulumi.String("raw"),
		Iothread:    pulumi.Bool(true),
		Discard:     pulumi.String("on"),
		Ssd:         pulumi.Bool(true),
	}
}

// vmIgnoreChanges lists VM properties Pulumi must not try to converge:
//   - disks[N].speed: proxmoxve 7.13.0 reports an update there on every
//     preview for disks without speed limits (muhlba91/pulumi-proxmoxve#664),
//     and a second `up` must show no changes;
//   - cdrom: ejected after the install on purpose (see ejectISO); a new
//     Talos version must not re-insert the ISO into installed VMs.
func vmIgnoreChanges(disks int) []string {
	out := []string{"cdrom"}
	for i := range disks {
		out = append(out, fmt.Sprintf("disks[%d].speed", i))
	}
	return out
}
