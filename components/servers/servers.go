package servers

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"golang.org/x/crypto/ssh"

	"github.com/fluodata/talos-pulumi/components/image"
	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/talos"
)

// What `pulumi destroy` does to the servers (Settings.OnDestroy). Servers
// are never deleted.
const (
	// OnDestroyForget drops the nodes from the stack and leaves Talos
	// running (the default).
	OnDestroyForget = "forget"
	// OnDestroyReset wipes Talos's state and reboots each node into
	// maintenance mode (the Talos install on disk stays).
	OnDestroyReset = "reset"
)

// Defaults of the optional inputs.
const (
	// DefaultTalosWaitTimeout is how long a node's wait for its Talos API
	// lasts when Settings.TalosWaitTimeout is empty.
	DefaultTalosWaitTimeout = "30m"
)

// Bounds of the inputs (the stack file's too). MaxTalosWait bounds
// talosWaitTimeout: longer than this, a second `up` is the better way to go
// on waiting.
const (
	MinTalosWait  = time.Minute
	MaxTalosWait  = 24 * time.Hour
	minNodePrefix = inputs.MinNodePrefix
	maxPort       = inputs.MaxPort
)

// Settings are the VPS-wide settings.
type Settings struct {
	// AllowedCIDRs are the operator networks allowed to reach the Talos API
	// (50000) and the Kubernetes API (6443); empty leaves both open to the
	// internet (they still require mTLS).
	AllowedCIDRs []string `pulumi:"allowedCidrs,optional"`
	// PublicTCPPorts are the ports open to the whole internet, e.g. [80, 443] for an
	// ingress controller; every other port is closed to it by the Talos
	// firewall.
	PublicTCPPorts []int `pulumi:"publicTcpPorts,optional"`
	// ImageURL is the raw disk image the install writes (.raw.zst, .raw.xz,
	// .raw.gz or .raw); default: the Image Factory's disk image of the
	// schematic and Talos version. A query (a presigned URL) is kept.
	ImageURL string `pulumi:"imageUrl,optional"`
	// RequireRescue refuses to install unless the server runs from
	// RAM/network (a rescue system) or its host name says rescue (default
	// true). Turn it off only for a rescue system installed on a disk.
	RequireRescue *bool `pulumi:"requireRescue,optional"`
	// RebootCommand is one line of shell run on the operator's machine after
	// a node's install, to switch its boot from rescue to disk and reboot it;
	// it gets NODE_NAME, NODE_IP and RESCUE_HOST. Empty: the operator does it
	// by hand while the wait runs.
	RebootCommand string `pulumi:"rebootCommand,optional"`
	// TalosWaitTimeout is how long to wait, after a node's install, for its
	// Talos API to answer: a duration between 1m and 24h like "30m" (the
	// default).
	TalosWaitTimeout string `pulumi:"talosWaitTimeout,optional"`
	// Gateway is the IPv4 default gateway of the nodes that give none.
	Gateway string `pulumi:"gateway,optional"`
	// PrefixLength is the network length of the nodes that give none (8-32;
	// the default 32 for point-to-point addressing with the gateway outside
	// the node's network).
	PrefixLength int `pulumi:"prefixLength,optional"`
	// OnDestroy is what a destroy does to the servers (never deleted):
	// "forget" (the default) leaves Talos running, "reset" wipes each node's
	// Talos state and reboots it into maintenance mode.
	OnDestroy string `pulumi:"onDestroy,optional"`
}

// Node is one rented server.
type Node struct {
	// Name is the node's hostname and Kubernetes node name: a DNS label.
	Name string `pulumi:"name"`
	// Role is the node's machine type: controlplane or worker.
	Role talos.Role `pulumi:"role"`
	// IP is the server's public IPv4 address.
	IP string `pulumi:"ip" package:"input"`
	// PrefixLength is the length of the node's network (8-32; default:
	// vps.prefixLength).
	PrefixLength int `pulumi:"prefixLength,optional"`
	// Gateway is the node's IPv4 default gateway (default: vps.gateway).
	Gateway string `pulumi:"gateway,optional"`
	// InstallDisk is the disk Talos is written to (default /dev/sda).
	InstallDisk string `pulumi:"installDisk,optional"`
	// Patches are this node's own machine-config patches (YAML), applied
	// last.
	Patches []string `pulumi:"patches,optional" package:"input,secret"`
	// KubeSpanEndpoints are the extra addresses (ip:port) the other nodes reach
	// this node's KubeSpan at, e.g. a NAT's forwarded port; only with
	// cluster.kubeSpan.
	KubeSpanEndpoints []string `pulumi:"kubeSpanEndpoints,optional"`
	// Labels are the node's Kubernetes labels, set and kept by Talos
	// (machine.nodeLabels); a worker may not set labels under
	// kubernetes.io or k8s.io but the kubelet's own.
	Labels map[string]string `pulumi:"labels,optional"`
	// Taints are the node's Kubernetes taints, key to "Effect" or
	// "value:Effect" (NoSchedule, PreferNoSchedule, NoExecute); one
	// removed here is removed from the Node.
	Taints map[string]string `pulumi:"taints,optional"`
	// Schematic is the node's own Image Factory schematic, its keys left
	// out taken from the cluster's (e.g. only kernelArgs: the cluster's
	// extensions with them): the image its install writes and the
	// installer it upgrades with.
	Schematic *image.Schematic `pulumi:"schematic,optional"`
	// Rescue is SSH access to the provider's rescue system, which the
	// install runs in.
	Rescue Rescue `pulumi:"rescue"`
}

// Rescue is SSH access to a server's rescue system.
type Rescue struct {
	// Host is the rescue system's address (default: the node's IP).
	Host string `pulumi:"host,optional" package:"input"`
	// Port is the SSH port (default 22).
	Port int `pulumi:"port,optional"`
	// User is the SSH user (default root).
	User string `pulumi:"user,optional"`
	// Password is the rescue SSH password.
	Password pulumi.StringInput `pulumi:"password" provider:"secret"`
	// HostKey is the rescue system's public key line ("ssh-ed25519 AAAA...",
	// ed25519 or ECDSA), checked by the install; any key is accepted when
	// empty.
	HostKey string `pulumi:"hostKey,optional"`
}

// gateway is the node's gateway, its own or the nodes' default.
func (n Node) gateway(s Settings) string { return cmp.Or(n.Gateway, s.Gateway) }

// prefixLength is the node's prefix length, its own or the nodes' default.
func (n Node) prefixLength(s Settings) int {
	return cmp.Or(n.PrefixLength, s.PrefixLength, DefaultPrefixLength)
}

// installDisk is the node's install disk, defaulted.
func (n Node) installDisk() string {
	if n.InstallDisk == "" {
		return talos.DefaultInstallDisk
	}
	return n.InstallDisk
}

// rescueHost is the address the install connects to, defaulted.
func (n Node) rescueHost() string {
	if n.Rescue.Host == "" {
		return n.IP
	}
	return n.Rescue.Host
}

// hostKey is the pinned key as the command provider's connection takes it:
// nil (no check) when none is pinned.
func (r Rescue) hostKey() pulumi.StringPtrInput {
	if r.HostKey == "" {
		return nil
	}
	return pulumi.String(r.HostKey)
}

// talosWait is the wait's timeout and its label (as the input spells it);
// valid after Validate.
func (s Settings) talosWait() (time.Duration, string) {
	label := s.TalosWaitTimeout
	if label == "" {
		label = DefaultTalosWaitTimeout
	}
	d, _ := time.ParseDuration(label)
	return d, label
}

// reset reports whether a destroy resets the nodes.
func (s Settings) reset() bool { return s.OnDestroy == OnDestroyReset }

// managedPorts are the ports the firewall manages itself: opening one to
// the whole internet would bypass AllowedCIDRs or expose the cluster (from
// Hubble's peer port, every node's traffic).
//
// The stack file's vps.publicTcpPorts is checked against the same ports
// (ManagedPort).
var managedPorts = map[int]string{
	TalosAPIPort: "the Talos API", constants.TrustdPort: "Talos trustd", constants.DefaultControlPlanePort: "the Kubernetes API",
	constants.KubeletPort: "the kubelet", constants.EtcdClientPort: "etcd", constants.EtcdPeerPort: "etcd",
	hubblePeerPort: "Hubble's peer service, which serves every node's network flows",
}

// ManagedPort says what a port the firewall manages itself serves ("the
// Talos API"), or "" for any other port.
func ManagedPort(port int) string { return managedPorts[port] }

// Check records the problems of the settings at prefix (e.g. "vps.").
func (s *Settings) Check(p *inputs.Problems, prefix string) {
	at := func(path string) string { return prefix + path }
	for i, c := range s.AllowedCIDRs {
		path := at(fmt.Sprintf("allowedCidrs[%d]", i))
		pfx, err := netip.ParsePrefix(c)
		switch {
		case err != nil:
			p.Add(path, "%q is not a CIDR like 203.0.113.0/24", c)
		case inputs.HostBitsProblem(c, pfx) != "":
			p.Add(path, "%s", inputs.HostBitsProblem(c, pfx))
		}
	}
	for i, port := range s.PublicTCPPorts {
		path := at(fmt.Sprintf("publicTcpPorts[%d]", i))
		switch {
		case inputs.PortProblem(port) != "":
			p.Add(path, "%s", inputs.PortProblem(port))
		case managedPorts[port] != "":
			p.Add(path, "%d is %s; its access is managed by %sallowedCidrs and the cluster's own rules", port, managedPorts[port], prefix)
		case slices.Index(s.PublicTCPPorts, port) != i:
			p.Add(path, "%d is listed twice", port)
		}
	}
	if s.ImageURL != "" {
		if msg := ImageURLProblem(s.ImageURL); msg != "" {
			p.Add(at("imageUrl"), "%s", msg)
		}
	}
	if strings.ContainsAny(s.RebootCommand, "\r\n") {
		p.Add(at("rebootCommand"), "must be one line; put longer logic in a script and call it")
	}
	if s.TalosWaitTimeout != "" {
		if d, err := time.ParseDuration(s.TalosWaitTimeout); err != nil || d < MinTalosWait || d > MaxTalosWait {
			p.Add(at("talosWaitTimeout"), "%q is not a duration between 1m and 24h, e.g. 30m", s.TalosWaitTimeout)
		}
	}
	switch s.OnDestroy {
	case "", OnDestroyForget, OnDestroyReset:
	default:
		p.Add(at("onDestroy"), "%q is not '%s' (leave Talos running) or '%s' (wipe and reboot into maintenance mode)", s.OnDestroy, OnDestroyForget, OnDestroyReset)
	}
}

// checkPrefixLength records a problem unless n is a node network's prefix
// length.
func checkPrefixLength(p *inputs.Problems, path string, n int) {
	if msg := inputs.RangeProblem(n, minNodePrefix, 32); msg != "" {
		p.Add(path, "%s", msg)
	}
}

// CheckServers records, for a component whose nodes include rented
// servers (with their defaults, see WithDefaults), the problems of the
// servers' settings at prefix (e.g. "hosts[1].vps.") and of each server's
// network, disk and rescue access under nodePath(i) (e.g. "nodes[4]").
// Names, IPs, roles and the VIP are that component's to check.
func CheckServers(p *inputs.Problems, s Settings, nodes []Node, prefix string, nodePath func(i int) string) {
	s.Check(p, prefix)
	CheckDefaultNetwork(p, s, nodes, prefix)
	CheckNodes(p, s, nodes, prefix, nodePath)
}

// checkDevicePath records a problem unless s is a device path like
// /dev/sda (the install script writes to it).
func checkDevicePath(p *inputs.Problems, path, s string) {
	if msg := inputs.DevicePathProblem(s); msg != "" {
		p.Add(path, "%s", msg)
	}
}

func (r *Rescue) check(p *inputs.Problems, prefix string) {
	at := func(path string) string { return prefix + path }
	if r.Host != "" {
		p.Host(at("host"), r.Host)
	}
	if msg := inputs.PortProblem(r.Port); msg != "" {
		p.Add(at("port"), "%s", msg)
	}
	p.Required(at("user"), r.User)
	if r.Password == nil {
		p.Add(at("password"), "is required")
	}
	if r.HostKey != "" {
		if msg := hostKeyProblem(r.HostKey); msg != "" {
			p.Add(at("hostKey"), "%s", msg)
		}
	}
}

// hostKeyProblem says why the command provider cannot check a host key
// with s, or "". pulumi-command reads hostKey with ssh.ParseAuthorizedKey
// and offers only that key's type as host-key algorithm: a fingerprint is
// no key, and an RSA key makes it offer SHA-1 signatures only, which
// OpenSSH 8.8 and later refuse.
func hostKeyProblem(s string) string {
	if strings.ContainsAny(strings.TrimSpace(s), "\r\n") {
		return "holds several lines; pin one key"
	}
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(s))
	if err != nil {
		return "is not a public key line like \"ssh-ed25519 AAAA...\" (as `ssh-keyscan -t ed25519 <host>` prints it)"
	}
	if _, isCert := key.(*ssh.Certificate); isCert {
		return "is a host certificate; pin the host's plain public key"
	}
	if key.Type() == ssh.KeyAlgoRSA {
		return "is an RSA key, for which the install could only offer SHA-1 signatures, which OpenSSH 8.8 and later refuse; pin the host's ed25519 key"
	}
	return ""
}

// DefaultRequireRescue is RequireRescue's default: the install checks that
// the server runs a rescue system.
const DefaultRequireRescue = true

// requiresRescue is RequireRescue, its default when left out.
func (s Settings) requiresRescue() bool {
	if s.RequireRescue == nil {
		return DefaultRequireRescue
	}
	return *s.RequireRescue
}

// Defaults of the optional inputs of a VpsCluster (the stack file's are
// these).
const (
	// DefaultRescuePort and DefaultRescueUser are how rescue systems take
	// SSH logins.
	DefaultRescuePort = 22
	DefaultRescueUser = "root"
	// DefaultPrefixLength is a rented server's usual point-to-point /32,
	// its gateway outside it.
	DefaultPrefixLength = 32
)

// CheckDefaultNetwork records the problems of the servers' default
// gateway and prefix length (settings at prefix, e.g. "vps.").
func CheckDefaultNetwork(p *inputs.Problems, s Settings, nodes []Node, prefix string) {
	checkPrefixLength(p, prefix+"prefixLength", s.PrefixLength)
	if s.Gateway != "" {
		p.MachineIPv4(prefix+"gateway", s.Gateway)
	} else if slices.ContainsFunc(nodes, func(n Node) bool { return n.Gateway == "" }) {
		p.Add(prefix+"gateway", "is required: a node gives no gateway of its own")
	}
}

// checkNodeNetwork records where the node at path sits against its
// gateway (its own or the settings' at prefix: the message names the node
// either way), once both are valid: a node's own gateway, one outside its
// network (but for a /32, whose gateway is reached by an on-link route),
// and the network and broadcast addresses of its network.
func checkNodeNetwork(p *inputs.Problems, s Settings, n Node, path, prefix string) {
	ip, ok := inputs.MachineIPv4(n.IP)
	gw, gwOK := inputs.MachineIPv4(n.gateway(s))
	length, gwPath := n.prefixLength(s), path+".gateway"
	if n.Gateway == "" {
		gwPath = prefix + "gateway"
	}
	if !ok || !gwOK || length < minNodePrefix || length > 32 {
		return
	}
	subnet := netip.PrefixFrom(ip, length).Masked()
	if msg := inputs.HostAddressProblem(ip, gw, subnet); msg != "" {
		p.Add(path+".ip", "%s", msg)
	} else if length < 32 && !subnet.Contains(gw) {
		p.Add(gwPath, "%s is outside %s, the network of %s (%s); for point-to-point addressing use prefixLength 32", gw, subnet, path, ip)
	}
}

// CheckNodes records the problems of each server's own network, disk and
// rescue access: node i's under nodePath(i) (e.g. "nodes[4]"), the
// settings at prefix (e.g. "vps.").
func CheckNodes(p *inputs.Problems, s Settings, nodes []Node, prefix string, nodePath func(i int) string) {
	for i, n := range nodes {
		np := nodePath(i)
		if n.PrefixLength != 0 {
			checkPrefixLength(p, np+".prefixLength", n.PrefixLength)
		}
		if n.Gateway != "" {
			p.MachineIPv4(np+".gateway", n.Gateway)
		}
		checkNodeNetwork(p, s, n, np, prefix)
		if n.InstallDisk != "" {
			checkDevicePath(p, np+".installDisk", n.InstallDisk)
		}
		n.Rescue.check(p, np+".rescue.")
	}
}

// Deps are what the component talks to besides the engine: seams for tests
// and for the program. The zero value is the real thing.
type Deps struct {
	// Probe tells whether a node already runs Talos in maintenance mode
	// (TalosMaintenanceProbe on port 50000 when nil).
	Probe MaintenanceProbe
	// Talos are the TalosCluster's seams (its day-2 hooks).
	Talos talos.Deps
}

// WithDefaults returns the settings with every optional input that is
// empty set to its default; nothing in s is changed.
func (s Settings) WithDefaults() Settings {
	if s.TalosWaitTimeout == "" {
		s.TalosWaitTimeout = DefaultTalosWaitTimeout
	}
	if s.OnDestroy == "" {
		s.OnDestroy = OnDestroyForget
	}
	if s.PrefixLength == 0 {
		s.PrefixLength = DefaultPrefixLength
	}
	if s.RequireRescue == nil {
		require := DefaultRequireRescue
		s.RequireRescue = &require
	}
	return s
}

// WithDefaults returns the node with its install disk's and rescue
// access's defaults.
func (n Node) WithDefaults() Node {
	if n.InstallDisk == "" {
		n.InstallDisk = talos.DefaultInstallDisk
	}
	if n.Rescue.Port == 0 {
		n.Rescue.Port = DefaultRescuePort
	}
	if n.Rescue.User == "" {
		n.Rescue.User = DefaultRescueUser
	}
	return n
}

// SecureBootRefusal is why rented servers take no Secure Boot: Talos is
// written to their disks from a rescue system, and enrolling Talos's keys
// needs the firmware in setup mode, which only the server's console
// reaches; nor is a TPM known to be there.
const SecureBootRefusal = "a rented server is installed from its rescue system, which cannot put the server's firmware in setup mode to enroll Talos's Secure Boot keys, nor tell that it has a TPM to seal disk keys to; leave it out (Secure Boot is for Proxmox VMs)"
