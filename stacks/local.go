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
	rejectHosts(d, cfg)
	if cfg.Storage.ProxmoxCSI.Enabled() {
		d.errorf("storage.proxmoxCsi", "is only valid for platform proxmox (this stack's platform is local): the plugin makes disks of Proxmox VMs")
	}
	if s := cfg.Cluster.Schematic; s.ID != "" || len(s.Extensions) > 0 || len(s.KernelArgs) > 0 {
		d.errorf("cluster.schematic", "is not valid for platform local: the containers run Talos's published image, and a container loads no system extension; leave it out")
	}
}

// containerCannot are the reasons a container has none of a machine's
// node keys: rejectOtherPlatforms names them.
var containerCannot = map[string]string{
	"vmId":         "a container is no VM",
	"mac":          "Docker gives the container's interface its MAC",
	"diskSize":     "a container's disks are Docker volumes",
	"dataDiskSize": "a container has no disk for a Talos user volume",
	"proxmoxNode":  "a container runs on this machine",
	"host":         "a container runs on this machine",
	"gateway":      "Docker routes the containers through the network's gateway, cluster.network.gateway",
	"prefixLength": "the containers share one network, cluster.network.prefixLength",
	"installDisk":  "a container does not install Talos",
	"rescue":       "a container has no rescue system",
}

// containerTakes are the machine keys of another platform a container
// takes too: its CPU and memory limits.
var containerTakes = []string{"cores", "memory"}

// validateLocalStackNode refuses a node's keys of a machine: a container
// has no VM, disk, NIC or rescue system of its own.
func validateLocalStackNode(d *Diagnostics, ref NodeRef, _ map[string]string) {
	rejectOtherPlatforms(d, ref, PlatformLocal, containerCannot, containerTakes...)
	if ref.Schematic != nil {
		d.errorf(ref.Path+".schematic", "is not valid for platform local: the containers run Talos's published image, and a container loads no system extension nor kernel argument; leave it out")
	}
}
