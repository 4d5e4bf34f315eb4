package stacks

import (
	"reflect"

	"github.com/fluodata/talos-pulumi/components/servers"
	"github.com/fluodata/talos-pulumi/components/talos"
)

// DefaultVPSNameservers are public resolvers; a VPS has no local DNS server.
func DefaultVPSNameservers() []string { return talos.PublicNameservers() }

// vpsDefaults are a VPS stack's defaults of the file's own.
func vpsDefaults(cfg *Config) {
	if cfg.Cluster.Schematic.Extensions == nil {
		cfg.Cluster.Schematic.Extensions = []string{}
	}
	// The rescue port is the front-end's too: it looks the host key
	// up in known_hosts there. The VPS settings and the rescue user
	// are the VpsCluster's defaults.
	for _, n := range cfg.Nodes.All() {
		setInt(&n.Rescue.Port, servers.DefaultRescuePort)
	}
}

// vpsResolve fills the VPS keys that copy others.
func vpsResolve(cfg *Config) {
	for _, n := range cfg.Nodes.All() {
		setString(&n.InstallDisk, cfg.Cluster.InstallDisk)
		setString(&n.Rescue.Host, n.IP)
	}
}

// vpsExplicitZeros are validateExplicitZeros's VPS keys.
func vpsExplicitZeros(d *Diagnostics, cfg *Config) {
	rejectExplicitZero(d, "cluster.network.prefixLength", rangeText(minNodePrefix, 32), itoa(DefaultVPSPrefix))
	for _, ref := range cfg.Nodes.Refs() {
		rejectExplicitZero(d, ref.Path+".prefixLength", rangeText(minNodePrefix, 32), "cluster.network.prefixLength")
		rejectExplicitZero(d, ref.Path+".rescue.port", rangeText(1, maxPort), itoa(DefaultSSHPort))
	}
}

// validateVPSStack checks the VPS section and refuses the Proxmox ones.
func validateVPSStack(d *Diagnostics, cfg *Config) {
	validateVPS(d, cfg)
	rejectHosts(d, cfg)
	if !reflect.ValueOf(cfg.Proxmox).IsZero() || d.zeroUnder("proxmox") {
		d.errorf("proxmox", "is only valid for platform proxmox (this stack's platform is vps)")
	}
	if cfg.Storage.ProxmoxCSI.Enabled() {
		d.errorf("storage.proxmoxCsi", "is only valid for platform proxmox (this stack's platform is vps): the plugin makes disks of Proxmox VMs")
	}
}

// validateVPSStackNode checks a VPS node and refuses a Proxmox node's keys.
func validateVPSStackNode(d *Diagnostics, ref NodeRef, _ map[string]string) {
	validateVPSNode(d, ref)
	rejectOtherPlatforms(d, ref, PlatformVPS, nil)
}

func validateVPSNode(d *Diagnostics, ref NodeRef) {
	p := ref.Path
	// The gateway and prefix length are the VpsCluster's rules.
	if ref.InstallDisk != "" {
		validateDevicePath(d, p+".installDisk", ref.InstallDisk)
	}
	// The rescue system's host, port and user are the VpsCluster's rules
	// (program.Validate); a special address is validateAddresses'.
	r := ref.Rescue
	if !r.Password.IsSet() {
		d.errorf(p+".rescue.password", "is required: `pulumi config set --secret --path '%s.rescue.password' <password>`", p)
	}
	validateRescueHostKey(d, ref)
}

func validateVPS(d *Diagnostics, cfg *Config) {
	// The allowed CIDRs, public ports, image URL, wait, destroy and reboot
	// settings are the VpsCluster's own rules: program.Validate names its
	// problems by these keys (issue 25). What only weakens the cluster is
	// the front-end's warning.
	if len(cfg.VPS.AllowedCIDRs) == 0 {
		d.warnf("vps.allowedCidrs", "empty: the Talos API (50000) and Kubernetes API (6443) accept connections from the whole internet (they still require mTLS)")
	}
	warnOpenCIDRs(d, cfg.VPS.AllowedCIDRs)
}

// vpsAddresses checks the rescue hosts and the image URL's host.
func vpsAddresses(d *Diagnostics, cfg *Config) {
	for _, ref := range cfg.Nodes.Refs() {
		checkHost(d, ref.Path+".rescue.host", ref.Rescue.Host, false)
	}
	checkImageURLHost(d, cfg.VPS.ImageURL)
}
