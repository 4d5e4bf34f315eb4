package stacks

import (
	"reflect"

	"github.com/fluodata/talos-pulumi/components/docker"
)

// The node network of a local stack when the file gives none: Talos's own
// Docker provisioner's (talosctl cluster create), so that the example
// needs no editing.
const (
	DefaultLocalGateway      = "10.5.0.1"
	DefaultLocalPrefixLength = 24
)

// localDefaults are a local stack's defaults of the file's own: the node
// network (the Docker network's subnet is read from it).
func localDefaults(cfg *Config) {
	n := &cfg.Cluster.Network
	if n.Gateway == "" && n.PrefixLength == 0 {
		n.Gateway, n.PrefixLength = DefaultLocalGateway, DefaultLocalPrefixLength
	}
	setInt(&n.PrefixLength, DefaultLocalPrefixLength)
}

// localExplicitZeros are validateExplicitZeros's local keys.
func localExplicitZeros(d *Diagnostics, _ *Config) {
	rejectExplicitZero(d, "cluster.network.prefixLength", rangeText(minNodePrefix, 29), itoa(DefaultLocalPrefixLength))
	rejectExplicitZero(d, "local.kubernetesPort", rangeText(1, maxPort), itoa(docker.DefaultKubernetesPort))
	rejectExplicitZero(d, "local.talosPort", rangeText(1, maxPort), itoa(docker.DefaultTalosPort))
}

// validateLocalStack refuses the other platforms' sections and what a
// container cannot do.
func validateLocalStack(d *Diagnostics, cfg *Config) {
	if !reflect.ValueOf(cfg.Proxmox).IsZero() || d.zeroUnder("proxmox") {
		d.errorf("proxmox", "is only valid for platform proxmox (this stack's platform is local)")
	}
	if !reflect.ValueOf(cfg.VPS).IsZero() || d.zeroUnder("vps") {
		d.errorf("vps", "is only valid for platform vps (this stack's platform is local)")
	}
	if cfg.Storage.ProxmoxCSI.Enabled() {
		d.errorf("storage.proxmoxCsi", "is only valid for platform proxmox (this stack's platform is local): the plugin makes disks of Proxmox VMs")
	}
	if s := cfg.Cluster.Schematic; s.ID != "" || len(s.Extensions) > 0 {
		d.errorf("cluster.schematic", "is not valid for platform local: the containers run Talos's published image, and a container loads no system extension; leave it out")
	}
}

// validateLocalStackNode refuses a node's keys of a machine: a container
// has no VM, disk, NIC or rescue system of its own.
func validateLocalStackNode(d *Diagnostics, ref NodeRef, _ map[string]string) {
	p := ref.Path
	for _, k := range []struct {
		key, why string
		set      bool
	}{
		{"vmId", "a container is no VM", d.given(p+".vmId", ref.VMID != 0)},
		{"mac", "Docker gives the container's interface its MAC", ref.MAC != ""},
		{"cores", "the containers share this machine's CPUs", d.given(p+".cores", ref.Cores != 0)},
		{"memory", "the containers share this machine's memory", d.given(p+".memory", ref.Memory != 0)},
		{"diskSize", "a container's disks are Docker volumes", d.given(p+".diskSize", ref.DiskSize != 0)},
		{"dataDiskSize", "a container has no disk for a Talos user volume", d.given(p+".dataDiskSize", ref.DataDiskSize != 0)},
		{"proxmoxNode", "a container runs on this machine", ref.ProxmoxNode != ""},
		{"gateway", "Docker routes the containers through the network's gateway, cluster.network.gateway", ref.Gateway != ""},
		{"prefixLength", "the containers share one network, cluster.network.prefixLength", d.given(p+".prefixLength", ref.PrefixLength != 0)},
		{"installDisk", "a container does not install Talos", ref.InstallDisk != ""},
		{"rescue", "a container has no rescue system", !reflect.ValueOf(ref.Rescue).IsZero() || d.zeroUnder(p+".rescue")},
	} {
		if k.set {
			d.errorf(p+"."+k.key, "is not valid for platform local: %s", k.why)
		}
	}
}
