package stacks

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	jsonpatch "github.com/evanphx/json-patch"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"

	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/internal/talosversion"
)

var (
	uuidRe = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
)

// Limits this project relies on.
const (
	maxProxmoxPrefix   = 30
	minNodePrefix      = inputs.MinNodePrefix
	maxPort            = inputs.MaxPort
	kubeAPIPort        = 6443
	ipv4BroadcastBytes = 4
)

func validate(d *Diagnostics, cfg *Config) {
	switch cfg.Platform {
	case PlatformProxmox, PlatformVPS:
	case "":
		d.errorf("platform", "is required: set `proxmox` or `vps`")
	default:
		d.errorf("platform", "%q is not a platform; use `proxmox` or `vps`", string(cfg.Platform))
	}
	validateCluster(d, cfg)
	validateNodes(d, cfg)
	validateAddresses(d, cfg)
	switch cfg.Platform {
	case PlatformProxmox:
		validateProxmox(d, cfg)
		if !reflect.ValueOf(cfg.VPS).IsZero() {
			d.errorf("vps", "is only valid for platform vps (this stack's platform is proxmox)")
		}
	case PlatformVPS:
		validateVPS(d, cfg)
		if !reflect.ValueOf(cfg.Proxmox).IsZero() || d.zeroUnder("proxmox") {
			d.errorf("proxmox", "is only valid for platform proxmox (this stack's platform is vps)")
		}
	}
	validateExplicitZeros(d, cfg)
}

func validateCluster(d *Diagnostics, cfg *Config) {
	c := &cfg.Cluster
	// The name, the versions and the schematic are the TalosCluster's and
	// platform components' own rules: program.Validate names their
	// problems by these keys (issue 25). A release newer than the
	// machinery's is the front-end's warning.
	warnNewerTalos(d, c.TalosVersion)
	validateDevicePath(d, "cluster.installDisk", c.InstallDisk)

	validateNetwork(d, cfg)
	validateEndpoint(d, cfg)
	validatePatches(d, "cluster.patches.all", c.Patches.All)
	validatePatches(d, "cluster.patches.controlPlane", c.Patches.ControlPlane)
	validatePatches(d, "cluster.patches.worker", c.Patches.Worker)
}

// warnNewerTalos warns of a Talos release newer than the one this
// project validates machine configs with.
func warnNewerTalos(d *Diagnostics, v string) {
	if !inputs.IsReleaseVersion(v) || talosversion.CheckSupported(v) != nil {
		return
	}
	minor, _ := talosversion.Minor(v)
	if _, pinnedMinor := talosversion.Pinned(); minor > pinnedMinor {
		d.warnf("cluster.talosVersion", "%q is newer than v1.%d, the newest release this project validates machine configs for", v, pinnedMinor)
	}
}

// validatePatches loads every patch with Talos's own patch loader, so a
// misspelled key fails here, before anything is created.
func validatePatches(d *Diagnostics, path string, patches []Patch) {
	for i, p := range patches {
		ppath := fmt.Sprintf("%s[%d]", path, i)
		loaded, err := configpatcher.LoadPatch([]byte(p.YAML))
		if err != nil {
			d.errorf(ppath, "not a valid Talos config patch: %v", err)
			continue
		}
		if _, isJSONPatch := loaded.(jsonpatch.Patch); isJSONPatch {
			d.errorf(ppath, "JSON6902 patches cannot be applied to multi-document Talos configs (v1.12+); write a strategic merge patch")
		}
	}
}

func validateNetwork(d *Diagnostics, cfg *Config) {
	n := cfg.Cluster.Network
	if n.Gateway == "" {
		d.errorf("cluster.network.gateway", "is required")
	} else if _, ok := parseIPv4(n.Gateway); !ok {
		d.errorf("cluster.network.gateway", "%q is not an IPv4 address", n.Gateway)
	}
	maxPrefix := 32
	if cfg.Platform == PlatformProxmox {
		maxPrefix = maxProxmoxPrefix
	}
	if n.PrefixLength < minNodePrefix || n.PrefixLength > maxPrefix {
		d.errorf("cluster.network.prefixLength", "%d is out of range %d-%d", n.PrefixLength, minNodePrefix, maxPrefix)
	}
	for i, ns := range n.Nameservers {
		if a, err := netip.ParseAddr(ns); err != nil || a.Zone() != "" {
			d.errorf(fmt.Sprintf("cluster.network.nameservers[%d]", i), "%q is not an IP address", ns)
		}
	}
}

func validateEndpoint(d *Diagnostics, cfg *Config) {
	c := cfg.Cluster
	if c.Endpoint != "" {
		if !inputs.IsHost(c.Endpoint) {
			d.errorf("cluster.endpoint", "%q must be a host name or IPv4 address only; the API URL is https://<endpoint>:%d", c.Endpoint, kubeAPIPort)
		}
	}
	if c.VIP == "" {
		if cfg.Platform == PlatformProxmox && len(cfg.Nodes.ControlPlanes) > 1 && c.Endpoint == "" {
			d.warnf("cluster.vip", "not set: the Kubernetes endpoint is the first control plane, so the API goes down with it")
		}
		return
	}
	if cfg.Platform == PlatformVPS {
		d.errorf("cluster.vip", "a layer-2 VIP needs a shared network segment, which VPS nodes do not have; use cluster.endpoint (e.g. a DNS name) instead")
		return
	}
	vip, ok := parseIPv4(c.VIP)
	if !ok {
		d.errorf("cluster.vip", "%q is not an IPv4 address", c.VIP)
		return
	}
	if inputs.SpecialAddress(vip) != "" {
		return // validateAddresses says why
	}
	if net, ok := nodeNetwork(cfg); ok && !net.Contains(vip) {
		d.errorf("cluster.vip", "%s is outside the node network %s of gateway %s", vip, net, cfg.Cluster.Network.Gateway)
	}
	if gw, ok := parseIPv4(c.Network.Gateway); ok && gw == vip {
		d.errorf("cluster.vip", "%s is the gateway's address", vip)
	}
	// A VIP that is a node's IP is the TalosCluster's rule.
}

// nodeNetwork is the shared node subnet (Proxmox), if the gateway is valid.
func nodeNetwork(cfg *Config) (netip.Prefix, bool) {
	gw, ok := parseIPv4(cfg.Cluster.Network.Gateway)
	if !ok || inputs.SpecialAddress(gw) != "" || cfg.Cluster.Network.PrefixLength < minNodePrefix || cfg.Cluster.Network.PrefixLength > maxProxmoxPrefix {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(gw, cfg.Cluster.Network.PrefixLength).Masked(), true
}

func validateNodes(d *Diagnostics, cfg *Config) {
	if len(cfg.Nodes.ControlPlanes) == 0 {
		d.errorf("nodes.controlPlanes", "at least one control plane is required")
	} else if n := len(cfg.Nodes.ControlPlanes); n%2 == 0 {
		d.warnf("nodes.controlPlanes", "%d control planes: etcd tolerates no more failures with %d than with %d; use an odd number", n, n, n-1)
	}

	macs := map[string]string{}
	for _, ref := range cfg.Nodes.Refs() {
		p := ref.Path
		// A node's name is the TalosCluster's rule (program.Validate).

		// A node's IP is required, IPv4 and unique by the TalosCluster's
		// rules (program.Validate); where it sits in the network is the
		// file's.
		if ip, ok := parseIPv4(ref.IP); ok {
			validateNodeIP(d, cfg, ref, ip)
		}
		validatePatches(d, p+".patches", ref.Patches)

		switch cfg.Platform {
		case PlatformProxmox:
			validateProxmoxNode(d, ref, macs)
			rejectSet(d, p, "vps", map[string]bool{
				"gateway": ref.Gateway != "", "prefixLength": d.given(p+".prefixLength", ref.PrefixLength != 0),
				"installDisk": ref.InstallDisk != "", "rescue": !reflect.ValueOf(ref.Rescue).IsZero() || d.zeroUnder(p+".rescue"),
			})
		case PlatformVPS:
			validateVPSNode(d, ref)
			rejectSet(d, p, "proxmox", map[string]bool{
				"vmId": d.given(p+".vmId", ref.VMID != 0), "mac": ref.MAC != "", "cores": d.given(p+".cores", ref.Cores != 0),
				"memory": d.given(p+".memory", ref.Memory != 0), "diskSize": d.given(p+".diskSize", ref.DiskSize != 0),
				"dataDiskSize": d.given(p+".dataDiskSize", ref.DataDiskSize != 0), "proxmoxNode": ref.ProxmoxNode != "",
			})
		}
	}
}

// rejectSet reports keys given for the other platform, in a stable order.
func rejectSet(d *Diagnostics, path, platform string, set map[string]bool) {
	for _, key := range []string{"vmId", "mac", "cores", "memory", "diskSize", "dataDiskSize", "proxmoxNode", "gateway", "prefixLength", "installDisk", "rescue"} {
		if set[key] {
			d.errorf(path+"."+key, "is only valid for platform %s", platform)
		}
	}
}

func validateNodeIP(d *Diagnostics, cfg *Config, ref NodeRef, ip netip.Addr) {
	p := ref.Path + ".ip"
	gw, gwOK := parseIPv4(cfg.Cluster.Network.Gateway)
	if ref.Gateway != "" {
		gw, gwOK = parseIPv4(ref.Gateway)
	}
	if inputs.SpecialAddress(ip) != "" {
		return // validateAddresses says why
	}
	gwOK = gwOK && inputs.SpecialAddress(gw) == ""
	if gwOK && gw == ip {
		d.errorf(p, "%s is the gateway's address", ip)
		return
	}
	var subnet netip.Prefix
	switch cfg.Platform {
	case PlatformProxmox:
		n, ok := nodeNetwork(cfg)
		if !ok {
			return
		}
		subnet = n
		if !subnet.Contains(ip) {
			d.errorf(p, "%s is outside the node network %s of gateway %s", ip, subnet, gw)
			return
		}
	case PlatformVPS:
		prefix := cfg.Cluster.Network.PrefixLength
		if ref.PrefixLength != 0 {
			prefix = ref.PrefixLength
		}
		if prefix == 32 || prefix < minNodePrefix || prefix > 32 || !gwOK {
			return // a /32 reaches its gateway through an on-link route
		}
		subnet = netip.PrefixFrom(ip, prefix).Masked()
		if !subnet.Contains(gw) {
			path := "cluster.network.gateway"
			if ref.Gateway != "" {
				path = ref.Path + ".gateway"
			}
			d.errorf(path, "%s is outside %s, the network of %s (%s); for point-to-point addressing use prefixLength 32", gw, subnet, ref.Path, ip)
			return
		}
	default:
		return
	}
	if subnet.Bits() <= maxProxmoxPrefix {
		if ip == subnet.Addr() {
			d.errorf(p, "%s is the network address of %s", ip, subnet)
		} else if ip == broadcast(subnet) {
			d.errorf(p, "%s is the broadcast address of %s", ip, subnet)
		}
	}
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
	if ref.ProxmoxNode != "" && !proxmox.IsNodeName(ref.ProxmoxNode) {
		d.errorf(p+".proxmoxNode", "%q is not a Proxmox node name", ref.ProxmoxNode)
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
func validateDNSMasqPlacement(d *Diagnostics, cfg *Config) {
	px := &cfg.Proxmox
	if px.Addressing != AddressingDHCPReservation || !px.DNSMasqEnabled() || px.DNSMasq.BridgeSpansHosts {
		return
	}
	hosts := map[string]bool{}
	for _, ref := range cfg.Nodes.Refs() {
		hosts[nodeHost(px, ref)] = true
	}
	if len(hosts) < 2 {
		return
	}
	// The bridge the VMs get: the file's, or the ProxmoxCluster's default.
	bridge := cmp.Or(px.Bridge, proxmox.DefaultBridge)
	for _, ref := range cfg.Nodes.Refs() {
		if host := nodeHost(px, ref); host != px.Node {
			d.errorf(ref.Path+".proxmoxNode", "%q is not proxmox.node (%q), and DHCP reservations are on: the dnsmasq holding them on the host reached over SSH serves only the bridge %s it sits on, which does not reach VMs on other Proxmox nodes; set proxmox.dnsmasq.bridgeSpansHosts: true if %s spans the nodes (e.g. an SDN VXLAN zone), or use addressing %s",
				host, px.Node, bridge, bridge, AddressingStatic)
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

func validateVPSNode(d *Diagnostics, ref NodeRef) {
	p := ref.Path
	if ref.Gateway != "" {
		if _, ok := parseIPv4(ref.Gateway); !ok {
			d.errorf(p+".gateway", "%q is not an IPv4 address", ref.Gateway)
		}
	}
	if ref.PrefixLength != 0 && (ref.PrefixLength < minNodePrefix || ref.PrefixLength > 32) {
		d.errorf(p+".prefixLength", "%d is out of range %d-32", ref.PrefixLength, minNodePrefix)
	}
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

func validateProxmox(d *Diagnostics, cfg *Config) {
	px := &cfg.Proxmox
	validateProxmoxEndpoint(d, px.Endpoint)
	switch {
	case px.APITokenID == "":
		d.errorf("proxmox.apiTokenId", "is required, e.g. root@pam!pulumi")
	case !proxmox.IsAPITokenID(px.APITokenID):
		d.errorf("proxmox.apiTokenId", "%q is not a token id like user@realm!tokenname", px.APITokenID)
	}
	switch {
	case !px.APITokenSecret.IsSet():
		d.errorf("proxmox.apiTokenSecret", "is required: `pulumi config set --secret --path proxmox.apiTokenSecret <uuid>`")
	case !uuidRe.MatchString(px.APITokenSecret.Reveal()):
		// The value is a credential: say what is wrong without echoing it.
		d.errorf("proxmox.apiTokenSecret", "is not a UUID, the form Proxmox issues token secrets in")
	}
	if px.Insecure {
		d.warnf("proxmox.insecure", "TLS verification of the Proxmox API is off; the API token can be intercepted")
	}
	if !proxmox.IsNodeName(px.Node) {
		d.errorf("proxmox.node", "%q is not a Proxmox node name", px.Node)
	}
	// The bridge, VLAN, datastores, CPU type, BIOS, addressing and the
	// dnsmasq paths and command are the ProxmoxCluster's own rules:
	// program.Validate names its problems by these keys (issue 25).
	if px.Addressing == AddressingStatic && px.DNSMasqEnabled() {
		d.errorf("proxmox.dnsmasq.enabled", "DHCP reservations are only used with addressing %s", AddressingDHCPReservation)
	}
	validateDNSMasqPlacement(d, cfg)
	switch px.Access {
	case AccessDirect, AccessSSHProxy:
	default:
		d.errorf("proxmox.access", "%q is not %s or %s", px.Access, AccessDirect, AccessSSHProxy)
	}
	for i, h := range px.NoProxy {
		path := fmt.Sprintf("proxmox.noProxy[%d]", i)
		switch {
		case px.Access != AccessSSHProxy:
			d.errorf(path, "is only used with access %s", AccessSSHProxy)
		case h == "*":
			d.errorf(path, "\"*\" would send nothing through the proxy; use access %s instead", AccessDirect)
		case !isNoProxyEntry(h):
			d.errorf(path, "%q is not a host name, .domain, IP or CIDR (optionally with :port)", h)
		default:
			if vmNet, ok := nodeNetwork(cfg); ok {
				if p, err := netip.ParsePrefix(h); err == nil && p.Overlaps(vmNet) {
					d.errorf(path, "%s overlaps the VM network %s, which only the proxy reaches", h, vmNet)
				}
				if a, err := netip.ParseAddr(h); err == nil && vmNet.Contains(a) {
					d.errorf(path, "%s is in the VM network %s, which only the proxy reaches", h, vmNet)
				}
			}
		}
	}
	ssh := px.SSH
	if ssh.Host != "" && !inputs.IsHost(ssh.Host) {
		d.errorf("proxmox.ssh.host", "%q is not a host name or IPv4 address", ssh.Host)
	}
	if ssh.Port < 1 || ssh.Port > maxPort {
		d.errorf("proxmox.ssh.port", "%d is out of range 1-%d", ssh.Port, maxPort)
	}
	if ssh.User == "" {
		d.errorf("proxmox.ssh.user", "must not be empty")
	}
	validateKeyFilePath(d, "proxmox.ssh.privateKeyFile", ssh.PrivateKeyFile)
	if ssh.PrivateKey.IsSet() && ssh.PrivateKeyFile != "" {
		d.errorf("proxmox.ssh", "set either privateKey or privateKeyFile, not both")
	}
	if ssh.PrivateKey.IsSet() && !strings.Contains(ssh.PrivateKey.Reveal(), "PRIVATE KEY") {
		d.errorf("proxmox.ssh.privateKey", "is not a PEM/OpenSSH private key (no \"PRIVATE KEY\" header)")
	}
	validateProxmoxHostKey(d, px)
}

func validateProxmoxEndpoint(d *Diagnostics, endpoint string) {
	const path = "proxmox.endpoint"
	if endpoint == "" {
		d.errorf(path, "is required, e.g. https://192.168.122.70:8006/")
		return
	}
	u, err := url.Parse(endpoint)
	switch {
	case err != nil || u.Host == "":
		d.errorf(path, "%q is not a URL like https://192.168.122.70:8006/", endpoint)
	case u.Scheme != "https":
		d.errorf(path, "%q must use https (the Proxmox API only listens on TLS)", endpoint)
	case u.User != nil:
		d.errorf(path, "must not carry credentials; use proxmox.apiTokenId and proxmox.apiTokenSecret")
	case strings.Contains(u.Path, "api2"):
		d.errorf(path, "%q: give the base URL without /api2/json", endpoint)
	case !inputs.IsHost(u.Hostname()):
		d.errorf(path, "%q has no valid host", endpoint)
	}
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

func parseIPv4(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return netip.Addr{}, false
	}
	return a, true
}

// isNoProxyEntry accepts what Go's (and curl's) NO_PROXY matching does:
// a CIDR, an IP, or a host name or domain with an optional leading dot and
// an optional port.
func isNoProxyEntry(s string) bool {
	if _, err := netip.ParsePrefix(s); err == nil {
		return true
	}
	host := s
	if h, port, err := net.SplitHostPort(s); err == nil {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > maxPort {
			return false
		}
		host = h
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return inputs.IsHost(strings.TrimPrefix(host, "."))
}

func broadcast(p netip.Prefix) netip.Addr {
	b := p.Addr().As4()
	hostBits := 32 - p.Bits()
	for i := ipv4BroadcastBytes - 1; i >= 0 && hostBits > 0; i-- {
		n := min(hostBits, 8)
		b[i] |= byte(1<<n - 1)
		hostBits -= n
	}
	return netip.AddrFrom4(b)
}
