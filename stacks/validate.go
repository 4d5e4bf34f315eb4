package stacks

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	jsonpatch "github.com/evanphx/json-patch"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/constants"

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
	kubeAPIPort        = constants.DefaultControlPlanePort
	ipv4BroadcastBytes = 4
)

func validate(d *Diagnostics, cfg *Config) {
	switch {
	case slices.Contains(Platforms(), cfg.Platform):
	case cfg.Platform == "":
		d.errorf("platform", "is required: set %s", platformList())
	default:
		d.errorf("platform", "%q is not a platform; use %s", string(cfg.Platform), platformList())
	}
	validateCluster(d, cfg)
	validateNodes(d, cfg)
	validateAddresses(d, cfg)
	rulesOf(cfg.Platform).validate(d, cfg)
	validateBackup(d, cfg)
	validateGitOps(d, cfg)
	validateExplicitZeros(d, cfg)
}

func validateCluster(d *Diagnostics, cfg *Config) {
	c := &cfg.Cluster
	// The name, the versions and the schematic are the TalosCluster's and
	// platform components' own rules: program.Validate names their
	// problems by these keys (issue 25). A release newer than the
	// machinery's is the front-end's warning.
	warnNewerTalos(d, c.TalosVersion)
	if c.InstallDisk != "" { // else the components' default
		validateDevicePath(d, "cluster.installDisk", c.InstallDisk)
	}

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

// validateNetwork keeps the file's own rule of the network: a Proxmox
// stack names its gateway (the VMs' network, which make doctor probes, and
// the default nameserver). Its form, the prefix length, the nameservers and
// where the addresses sit in the network are the components' rules.
func validateNetwork(d *Diagnostics, cfg *Config) {
	if cfg.Platform == PlatformProxmox && cfg.Cluster.Network.Gateway == "" {
		d.errorf("cluster.network.gateway", "is required")
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
		switch {
		case cfg.Platform != PlatformProxmox || len(cfg.Nodes.ControlPlanes) < 2 || c.Endpoint != "":
		case len(cfg.Hosts) > 0:
			// Hosts on different networks refuse a VIP (the component).
			d.warnf("cluster.endpoint", "not set: the Kubernetes endpoint is the first control plane, so the API goes down with it; give a DNS name that resolves to every control plane (docs/multi-host.md)")
		default:
			d.warnf("cluster.vip", "not set: the Kubernetes endpoint is the first control plane, so the API goes down with it")
		}
		return
	}
	// The VIP's form and place (in the node network, not the gateway, not
	// a node's IP; none on VPS) are the components' rules.
}

// nodeNetwork is the shared node subnet (Proxmox), if the gateway and the
// prefix length (or the ProxmoxCluster's default) are valid.
func nodeNetwork(cfg *Config) (netip.Prefix, bool) {
	gw, ok := parseIPv4(cfg.Cluster.Network.Gateway)
	prefix := cmp.Or(cfg.Cluster.Network.PrefixLength, proxmox.DefaultPrefixLength)
	if cfg.Platform != PlatformProxmox || !ok || inputs.SpecialAddress(gw) != "" || prefix < minNodePrefix || prefix > proxmox.MaxPrefixLength {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(gw, prefix).Masked(), true
}

func validateNodes(d *Diagnostics, cfg *Config) {
	if len(cfg.Nodes.ControlPlanes) == 0 {
		d.errorf("nodes.controlPlanes", "at least one control plane is required")
	} else if n := len(cfg.Nodes.ControlPlanes); n%2 == 0 {
		d.warnf("nodes.controlPlanes", "%d control planes: etcd tolerates no more failures with %d than with %d; use an odd number", n, n, n-1)
	}

	macs := map[string]string{}
	validateNode := rulesOf(cfg.Platform).validateNode
	for _, ref := range cfg.Nodes.Refs() {
		p := ref.Path
		// A node's name and IP (required, IPv4, unique, where it sits in
		// the network) are the components' rules (program.Validate).
		validatePatches(d, p+".patches", ref.Patches)

		if cfg.OnServers(ref.Host) {
			// A rented server of a hosts entry: a VPS node's keys.
			validateVPSNode(d, ref)
			rejectOtherPlatforms(d, ref, PlatformVPS, nil, "host")
			continue
		}
		validateNode(d, ref, macs)
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

// rejectHosts refuses hosts entries on a platform other than proxmox.
func rejectHosts(d *Diagnostics, cfg *Config) {
	if len(cfg.Hosts) > 0 || d.zeroUnder("hosts") {
		d.errorf("hosts", "is only valid for platform proxmox (this stack's platform is %s)", cfg.Platform)
	}
}

// validateProxmoxStackNode checks a Proxmox node and refuses a VPS node's keys.
func validateProxmoxStackNode(d *Diagnostics, ref NodeRef, macs map[string]string) {
	validateProxmoxNode(d, ref, macs)
	rejectOtherPlatforms(d, ref, PlatformProxmox, nil)
}

// validateVPSStackNode checks a VPS node and refuses a Proxmox node's keys.
func validateVPSStackNode(d *Diagnostics, ref NodeRef, _ map[string]string) {
	validateVPSNode(d, ref)
	rejectOtherPlatforms(d, ref, PlatformVPS, nil)
}

// rejectOtherPlatforms refuses, in the order of NodeConfig, each key of a
// node that is only valid on another platform than p (its `platform` tag)
// and that the stack gives (a 0 too), saying why with why[key] when p
// says, else naming the platform it is valid on; allowed keys aside.
func rejectOtherPlatforms(d *Diagnostics, ref NodeRef, p Platform, why map[string]string, allowed ...string) {
	v := reflect.ValueOf(*ref.NodeConfig)
	for _, sf := range reflect.VisibleFields(v.Type()) {
		platform := sf.Tag.Get("platform")
		if platform == "" || Platform(platform) == p {
			continue
		}
		key := strings.Split(sf.Tag.Get("json"), ",")[0]
		if slices.Contains(allowed, key) {
			continue
		}
		path := ref.Path + "." + key
		f := v.FieldByIndex(sf.Index)
		set := !f.IsZero()
		switch f.Kind() {
		case reflect.Int:
			set = d.given(path, set)
		case reflect.Struct:
			set = set || d.zeroUnder(path)
		}
		switch {
		case !set:
		case why[key] != "":
			d.errorf(path, "is not valid for platform %s: %s", p, why[key])
		default:
			d.errorf(path, "is only valid for platform %s", platform)
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
