package inputs

import (
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// The syntax rules of the inputs, each defined once: the components check
// their Args with them, and the stack file's front-end (package stacks)
// checks its keys with the same ones (tests/rules_test.go fails on a rule
// defined twice).
var (
	versionRe           = regexp.MustCompile(`^v(\d+)\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?$`)
	labelRe             = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	kubernetesVersionRe = regexp.MustCompile(`^v?\d+\.\d+\.\d+$`)
	schematicIDRe       = regexp.MustCompile(`^[0-9a-f]{64}$`)
	devicePathRe        = regexp.MustCompile(`^/dev/[A-Za-z0-9][A-Za-z0-9/_.:-]*$`)
	hostnameRe          = regexp.MustCompile(`^([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$`)
	// numericLabelRe is a host-name label that a resolver may read as a
	// number: inet_aton, which ssh, curl and glibc's getaddrinfo fall back
	// to, takes decimal, octal (leading 0) and hex (0x) parts and fewer
	// than four of them, so "10.10.0.300" is no host name, and "127.1" or
	// "0x7f000001" is 127.0.0.1.
	numericLabelRe = regexp.MustCompile(`^(?i:[0-9]+|0x[0-9a-f]*)$`)
	chartVersionRe = regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?$`)
	// extensionRe is an Image Factory system extension, owner/name.
	extensionRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*/[a-z0-9][a-z0-9._-]*$`)
)

// Bounds shared by the platforms.
const (
	// MaxPort is the highest TCP port.
	MaxPort = 65535
	// MaxClusterNameLength keeps VM tags and file names readable.
	MaxClusterNameLength = 40
	// MinNodePrefix is the shortest prefix of a node's network: a /7 or
	// shorter is a typo, not a network of machines.
	MinNodePrefix = 8
)

// IsChartVersion reports whether s is a Helm chart version like 1.18.4
// (semantic, no v prefix).
func IsChartVersion(s string) bool { return chartVersionRe.MatchString(s) }

// IsExtension reports whether s names an Image Factory system extension
// like siderolabs/qemu-guest-agent.
func IsExtension(s string) bool { return extensionRe.MatchString(s) }

// MachineIPv4 is s as the IPv4 address of a machine, if it is one (no
// special address, SpecialAddress).
func MachineIPv4(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() || SpecialAddress(a) != "" {
		return netip.Addr{}, false
	}
	return a, true
}

// SpecialAddress says why a is no address of a machine to configure
// (loopback, unspecified, multicast, link-local, the broadcast address), or
// "".
func SpecialAddress(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case a.IsLoopback():
		return "a loopback address: it reaches the machine that uses it, not another one"
	case a.IsUnspecified() || (a.Is4() && a.As4()[0] == 0):
		return "an unspecified address (0.0.0.0/8, ::): it names no machine"
	case a.IsMulticast():
		return "a multicast address: it names a group, not one machine"
	case a.IsLinkLocalUnicast():
		return "a link-local address (169.254.0.0/16, fe80::/10): it is valid on one link only and never routed"
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "the broadcast address: it names every machine on the link"
	}
	return ""
}

// PathProblem says what is wrong with a path input, or "". The scripts
// quote every value, but a path is also a promise about where things go: a
// '..' or '.' segment leaves the directory it seems to name, the root
// directory is no place of ours, and control characters, quotes and
// backslashes are in no real path of these, only in mistakes and attacks.
func PathProblem(p string) string {
	for _, r := range p {
		switch {
		case unicode.IsControl(r):
			return "contains a control character"
		case r == '\'' || r == '"' || r == '`' || r == '\\':
			return "contains a quote or backslash (" + string(r) + "), which no path here needs"
		}
	}
	if p == "/" {
		return "is the root directory"
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." || seg == "." {
			return "has a '" + seg + "' segment; give the path without it"
		}
	}
	return ""
}

// DevicePathProblem says what is wrong with an install disk (a device
// path like /dev/sda or /dev/disk/by-id/...), or "".
func DevicePathProblem(p string) string {
	if !IsDevicePath(p) {
		return fmt.Sprintf("%q is not a device path like /dev/sda", p)
	}
	if why := PathProblem(p); why != "" {
		return fmt.Sprintf("%q %s", p, why)
	}
	return ""
}

// IsReleaseVersion reports whether s is a release version like v1.12.4 or
// v1.13.0-beta.1 (Talos's).
func IsReleaseVersion(s string) bool { return versionRe.MatchString(s) }

// IsDNSLabel reports whether s is a lower-case DNS label: a node or
// cluster name (hostname, Kubernetes node name, part of resource names).
func IsDNSLabel(s string) bool { return labelRe.MatchString(s) }

// IsKubernetesVersion reports whether s is a Kubernetes version like 1.34.1
// (a v prefix allowed).
func IsKubernetesVersion(s string) bool { return kubernetesVersionRe.MatchString(s) }

// IsSchematicID reports whether s is an Image Factory schematic id (64 hex
// digits).
func IsSchematicID(s string) bool { return schematicIDRe.MatchString(s) }

// IsDevicePath reports whether s looks like a block device path (/dev/sda,
// /dev/disk/by-id/...).
func IsDevicePath(s string) bool { return devicePathRe.MatchString(s) }

// IsHost reports whether s is an IPv4 address or a host name, and not a
// name a resolver would read as an address (203.0.113.999, 127.1): no
// top-level domain is numeric (RFC 3696, section 2), so no real name is
// refused.
func IsHost(s string) bool {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Is4()
	}
	return len(s) <= 253 && hostnameRe.MatchString(s) && !NumericHost(s)
}

// NumericHost reports whether s, a syntactically valid host name, ends in a
// label a resolver may take as (part of) an IPv4 address.
func NumericHost(s string) bool {
	labels := strings.Split(s, ".")
	return numericLabelRe.MatchString(labels[len(labels)-1])
}

// HostAddressProblem says why ip cannot be a machine's address in the
// IPv4 network subnet whose gateway is gw: it is the gateway's address, or
// the network's or its broadcast address (a /31 or /32 has neither: RFC
// 3021 makes both of a /31's addresses hosts); or "". Whether subnet holds
// ip is the caller's to check.
func HostAddressProblem(ip, gw netip.Addr, subnet netip.Prefix) string {
	subnet = subnet.Masked()
	if ip == gw {
		return fmt.Sprintf("%s is the gateway's address", ip)
	}
	if subnet.Bits() > 30 {
		return ""
	}
	b := subnet.Addr().As4()
	hostBits := 32 - subnet.Bits()
	for i := len(b) - 1; i >= 0 && hostBits > 0; i-- {
		n := min(hostBits, 8)
		b[i] |= byte(1<<n - 1)
		hostBits -= n
	}
	switch ip {
	case subnet.Addr():
		return fmt.Sprintf("%s is the network address of %s", ip, subnet)
	case netip.AddrFrom4(b):
		return fmt.Sprintf("%s is the broadcast address of %s", ip, subnet)
	}
	return ""
}

// RangeProblem says why n is not in lo-hi, or "".
func RangeProblem(n, lo, hi int) string {
	if n < lo || n > hi {
		return fmt.Sprintf("%d is out of range %d-%d", n, lo, hi)
	}
	return ""
}

// PortProblem says why n is no TCP port, or "".
func PortProblem(n int) string { return RangeProblem(n, 1, MaxPort) }

// URLPortProblem says why the port of u is no TCP port, or "" (also when
// u gives none): url.Parse takes any digits.
func URLPortProblem(u *url.URL) string {
	if u.Port() == "" {
		return ""
	}
	if n, err := strconv.Atoi(u.Port()); err != nil || PortProblem(n) != "" {
		return fmt.Sprintf("port %s is out of range 1-%d", u.Port(), MaxPort)
	}
	return ""
}
