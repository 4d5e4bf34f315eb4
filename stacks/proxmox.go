package stacks

import (
	"cmp"
	"fmt"
	"net/netip"
	"net/url"
	"reflect"
	"strings"

	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/servers"
)

// DefaultProxmoxExtensions are the system extensions of the Proxmox image:
// the ProxmoxCluster's default.
func DefaultProxmoxExtensions() []string { return proxmox.DefaultExtensions() }

// proxmoxDefaults are the Proxmox sections' defaults of the file's own.
func proxmoxDefaults(cfg *Config) {
	for _, s := range cfg.ProxmoxSections() {
		sectionDefaults(s.ProxmoxConfig)
	}
	for _, n := range cfg.Nodes.All() {
		if cfg.OnServers(n.Host) {
			// The front-end's own, as on platform vps (known_hosts).
			setInt(&n.Rescue.Port, servers.DefaultRescuePort)
		}
	}
}

// sectionDefaults are one Proxmox section's defaults of the file's own.
func sectionDefaults(p *ProxmoxConfig) {
	setString(&p.Node, DefaultProxmoxNode)
	setString(&p.Addressing, AddressingDHCPReservation)
	setString(&p.Access, AccessDirect)
	if p.DNSMasq.Enabled == nil {
		on := p.Addressing == AddressingDHCPReservation
		p.DNSMasq.Enabled = &on
	}
	setInt(&p.SSH.Port, DefaultSSHPort)
	setString(&p.SSH.User, DefaultSSHUser)
}

// proxmoxResolve fills the Proxmox keys that copy others.
func proxmoxResolve(cfg *Config) {
	for _, s := range cfg.ProxmoxSections() {
		setString(&s.SSH.Host, s.EndpointHost())
	}
	normalizeMACs(cfg)
	for _, n := range cfg.Nodes.All() {
		if cfg.OnServers(n.Host) {
			// A rented server: its own defaults, as on platform vps.
			setString(&n.InstallDisk, cfg.Cluster.InstallDisk)
			setString(&n.Rescue.Host, n.IP)
			continue
		}
		setString(&n.ProxmoxNode, cfg.SectionOf(n.Host).Node)
	}
}

// proxmoxExplicitZeros are validateExplicitZeros's Proxmox keys.
func proxmoxExplicitZeros(d *Diagnostics, cfg *Config) {
	rejectExplicitZero(d, "cluster.network.prefixLength", rangeText(minNodePrefix, maxProxmoxPrefix), itoa(DefaultProxmoxPrefix))
	for _, s := range cfg.ProxmoxSections() {
		rejectExplicitZero(d, s.Path+".ssh.port", rangeText(1, maxPort), itoa(DefaultSSHPort))
	}
	for i, h := range cfg.Hosts {
		most := maxProxmoxPrefix
		if h.servers {
			most = 32
		}
		rejectExplicitZero(d, fmt.Sprintf("hosts[%d].network.prefixLength", i), rangeText(minNodePrefix, most), "cluster.network.prefixLength")
	}
	for _, ref := range cfg.Nodes.Refs() {
		if cfg.OnServers(ref.Host) {
			rejectExplicitZero(d, ref.Path+".prefixLength", rangeText(minNodePrefix, 32), "its host's network.prefixLength")
			rejectExplicitZero(d, ref.Path+".rescue.port", rangeText(1, maxPort), itoa(DefaultSSHPort))
		}
	}
}

// validateProxmoxStack checks the Proxmox section and refuses the VPS one.
func validateProxmoxStack(d *Diagnostics, cfg *Config) {
	for _, section := range cfg.ProxmoxSections() {
		validateProxmox(d, cfg, section)
	}
	for i, h := range cfg.Hosts {
		if !h.servers {
			continue
		}
		if px := fmt.Sprintf("hosts[%d].proxmox", i); d.givenObject(px) || !reflect.ValueOf(h.Proxmox).IsZero() {
			d.errorf(px, "and vps exclude each other: an entry is a Proxmox VE host (proxmox) or rented servers (vps)")
		}
		at := fmt.Sprintf("hosts[%d].vps.allowedCidrs", i)
		if len(h.VPS.AllowedCIDRs) == 0 {
			d.warnf(at, "empty: the Talos API (50000) and Kubernetes API (6443) of these servers accept connections from the whole internet (they still require mTLS)")
		}
	}
	if !reflect.ValueOf(cfg.VPS).IsZero() {
		d.errorf("vps", "is only valid for platform vps (this stack's platform is proxmox)")
	}
}

// validateProxmoxStackNode checks a Proxmox node and refuses a VPS node's keys.
func validateProxmoxStackNode(d *Diagnostics, ref NodeRef, macs map[string]string) {
	validateProxmoxNode(d, ref, macs)
	rejectOtherPlatforms(d, ref, PlatformProxmox, nil)
}

func validateProxmoxNode(d *Diagnostics, ref NodeRef, macs map[string]string) {
	p := ref.Path
	// A VM id's range and uniqueness are the ProxmoxCluster's rules
	// (program.Validate); a missing one is the file's.
	if ref.VMID == 0 && !d.explicitZero(p+".vmId") {
		d.errorf(p+".vmId", "is required")
	}
	validateMAC(d, p, ref.MAC, macs)
	validateVMSize(d, ref)
	// The ProxmoxCluster's rule, checked here at the key the file gives
	// (resolve copies proxmox.node into the nodes that give none).
	if ref.ProxmoxNode != "" && proxmox.NodeNameProblem(ref.ProxmoxNode) != "" {
		d.errorf(p+".proxmoxNode", "%s", proxmox.NodeNameProblem(ref.ProxmoxNode))
	}
}

// validateDNSMasqPlacement refuses reservations for VMs spread over several
// Proxmox nodes. The reservations live in the dnsmasq of the one host reached
// over SSH, and a DHCP server answers only on the layer-2 network it sits on:
// a VM on another node's bridge of the same name never reaches it, boots
// without its reserved address, and the node's config apply times out. Only
// the operator knows whether the bridge spans the nodes (an SDN VXLAN or VLAN
// zone does), hence proxmox.dnsmasq.bridgeSpansHosts. Runs before resolve: an
// empty proxmoxNode is proxmox.node.
func validateDNSMasqPlacement(d *Diagnostics, cfg *Config, section ProxmoxSection) {
	px := section.ProxmoxConfig
	if px.Addressing != AddressingDHCPReservation || !px.DNSMasqEnabled() || px.DNSMasq.BridgeSpansHosts {
		return
	}
	var refs []NodeRef
	hosts := map[string]bool{}
	for _, ref := range cfg.Nodes.Refs() {
		if ref.Host == section.Host {
			refs = append(refs, ref)
			hosts[nodeHost(px, ref)] = true
		}
	}
	if len(hosts) < 2 {
		return
	}
	// The bridge the VMs get: the file's, or the ProxmoxCluster's default.
	bridge := cmp.Or(px.Bridge, proxmox.DefaultBridge)
	at := section.Path
	for _, ref := range refs {
		if host := nodeHost(px, ref); host != px.Node {
			d.errorf(ref.Path+".proxmoxNode", "%q is not %s.node (%q), and DHCP reservations are on: the dnsmasq holding them on the host reached over SSH serves only the bridge %s it sits on, which does not reach VMs on other Proxmox nodes; set %s.dnsmasq.bridgeSpansHosts: true if %s spans the nodes (e.g. an SDN VXLAN zone), or use addressing %s",
				host, at, px.Node, bridge, at, bridge, AddressingStatic)
		}
	}
}

// nodeHost is the Proxmox node a VM runs on, before resolve fills it in.
func nodeHost(px *ProxmoxConfig, ref NodeRef) string {
	if ref.ProxmoxNode != "" {
		return ref.ProxmoxNode
	}
	return px.Node
}

// validateProxmox checks one Proxmox section (proxmox, or a hosts
// entry's) at its keys.
func validateProxmox(d *Diagnostics, cfg *Config, section ProxmoxSection) {
	px, at := section.ProxmoxConfig, section.Path
	validateProxmoxEndpoint(d, at, px.Endpoint)
	// The token id is the ProxmoxCluster's rule (program.Validate).
	switch {
	case !px.APITokenSecret.IsSet():
		d.errorf(at+".apiTokenSecret", "is required: `pulumi config set --secret --path %s.apiTokenSecret <uuid>`", at)
	case !uuidRe.MatchString(px.APITokenSecret.Reveal()):
		// The value is a credential: say what is wrong without echoing it.
		d.errorf(at+".apiTokenSecret", "is not a UUID, the form Proxmox issues token secrets in")
	}
	if px.Insecure {
		d.warnf(at+".insecure", "TLS verification of the Proxmox API is off; the API token can be intercepted")
	}
	if msg := proxmox.NodeNameProblem(px.Node); msg != "" {
		d.errorf(at+".node", "%s", msg)
	}
	// The bridge, VLAN, datastores, CPU type, BIOS, addressing and the
	// dnsmasq paths and command are the ProxmoxCluster's own rules:
	// program.Validate names its problems by these keys (issue 25).
	if px.Addressing == AddressingStatic && px.DNSMasqEnabled() {
		d.errorf(at+".dnsmasq.enabled", "DHCP reservations are only used with addressing %s", AddressingDHCPReservation)
	}
	validateDNSMasqPlacement(d, cfg, section)
	switch px.Access {
	case AccessDirect, AccessSSHProxy:
	default:
		d.errorf(at+".access", "%q is not %s or %s", px.Access, AccessDirect, AccessSSHProxy)
	}
	vmNet, hasVMNet := cfg.SectionNetwork(section)
	for i, h := range px.NoProxy {
		path := fmt.Sprintf("%s.noProxy[%d]", at, i)
		switch {
		case px.Access != AccessSSHProxy:
			d.errorf(path, "is only used with access %s", AccessSSHProxy)
		case h == "*":
			d.errorf(path, "\"*\" would send nothing through the proxy; use access %s instead", AccessDirect)
		case !isNoProxyEntry(h):
			d.errorf(path, "%q is not a host name, .domain, IP or CIDR (optionally with :port)", h)
		case hasVMNet:
			if p, err := netip.ParsePrefix(h); err == nil && p.Overlaps(vmNet) {
				d.errorf(path, "%s overlaps the VM network %s, which only the proxy reaches", h, vmNet)
			}
			if a, err := netip.ParseAddr(h); err == nil && vmNet.Contains(a) {
				d.errorf(path, "%s is in the VM network %s, which only the proxy reaches", h, vmNet)
			}
		}
	}
	// The SSH settings are the ProxmoxCluster's (proxmox.dnsmasq.ssh),
	// with its rules; the file checks them with those whether or not the
	// reservations use them, as the access proxy does too.
	ssh := px.SSH
	var sshProblems inputs.Problems
	proxmox.SSHSettings{Host: ssh.Host, Port: ssh.Port, User: ssh.User}.Check(&sshProblems, at+".ssh.")
	for _, p := range sshProblems.List() {
		d.errorf(p.Path, "%s", p.Message)
	}
	validateKeyFilePath(d, at+".ssh.privateKeyFile", ssh.PrivateKeyFile)
	if ssh.PrivateKey.IsSet() && ssh.PrivateKeyFile != "" {
		d.errorf(at+".ssh", "set either privateKey or privateKeyFile, not both")
	}
	if ssh.PrivateKey.IsSet() && !strings.Contains(ssh.PrivateKey.Reveal(), "PRIVATE KEY") {
		d.errorf(at+".ssh.privateKey", "is not a PEM/OpenSSH private key (no \"PRIVATE KEY\" header)")
	}
	validateProxmoxHostKey(d, section)
}

func validateProxmoxEndpoint(d *Diagnostics, section, endpoint string) {
	// The ProxmoxCluster's rule, checked here too: the file's defaults
	// (the SSH host) are taken from a valid endpoint.
	if msg := proxmox.EndpointProblem(endpoint); msg != "" {
		d.errorf(section+".endpoint", "%s", msg)
	}
}

// proxmoxAddresses checks the Proxmox API and SSH hosts.
func proxmoxAddresses(d *Diagnostics, cfg *Config) {
	for _, s := range cfg.ProxmoxSections() {
		if u, err := url.Parse(s.Endpoint); err == nil && u.Host != "" {
			checkHost(d, s.Path+".endpoint", u.Hostname(), s.LocalForward)
		}
		checkHost(d, s.Path+".ssh.host", s.SSH.Host, s.LocalForward)
	}
	for _, ref := range cfg.Nodes.Refs() {
		if cfg.OnServers(ref.Host) {
			checkHost(d, ref.Path+".rescue.host", ref.Rescue.Host, false)
		}
	}
}
