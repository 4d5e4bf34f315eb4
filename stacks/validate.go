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
	validatePools(d, cfg)
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

// rejectHosts refuses hosts entries on a platform other than proxmox.
func rejectHosts(d *Diagnostics, cfg *Config) {
	if len(cfg.Hosts) > 0 || d.zeroUnder("hosts") {
		d.errorf("hosts", "is only valid for platform proxmox (this stack's platform is %s)", cfg.Platform)
	}
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
