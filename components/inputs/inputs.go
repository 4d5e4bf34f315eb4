// Package inputs checks a component's arguments the way the stack file is
// checked: every problem is collected, each names the input's path (as the
// component's schema spells it, e.g. nodes[1].ip), and nothing is
// registered while any remains. The components are also served to other
// languages, whose programs reach them without the stack file's validation.
package inputs

import (
	"fmt"
	"net/netip"
	"strings"
)

// Problem is one invalid input.
type Problem struct {
	Path    string
	Message string
}

func (p Problem) String() string { return p.Path + ": " + p.Message }

// Problems collects the invalid inputs of one component.
type Problems struct {
	list []Problem
}

// Add records a problem at path.
func (p *Problems) Add(path, format string, args ...any) {
	p.list = append(p.list, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// List returns the problems in the order they were found.
func (p *Problems) List() []Problem { return p.list }

// Err is nil without problems, or one error listing all of them.
func (p *Problems) Err(component, name string) error {
	if len(p.list) == 0 {
		return nil
	}
	return &Error{Component: component, Name: name, Problems: p.list}
}

// Error lists every invalid input of a component; nothing was registered.
type Error struct {
	Component string // e.g. TalosCluster
	Name      string // the resource name
	Problems  []Problem
}

// Paths are the invalid inputs' paths, in order, each once.
func (e *Error) Paths() []string {
	var out []string
	for _, p := range e.Problems {
		if len(out) == 0 || out[len(out)-1] != p.Path {
			out = append(out, p.Path)
		}
	}
	return out
}

func (e *Error) Error() string {
	lines := make([]string, 0, len(e.Problems))
	for _, p := range e.Problems {
		lines = append(lines, "  - "+p.String())
	}
	return fmt.Sprintf("invalid arguments of %s %q (nothing was created):\n%s", e.Component, e.Name, strings.Join(lines, "\n"))
}

// Required records a problem when s is empty.
func (p *Problems) Required(path, s string) bool {
	if strings.TrimSpace(s) == "" {
		p.Add(path, "is required")
		return false
	}
	return true
}

// IPv4 records a problem unless s is an IPv4 address.
func (p *Problems) IPv4(path, s string) {
	if a, err := netip.ParseAddr(s); err != nil || !a.Is4() {
		p.Add(path, "%q is not an IPv4 address", s)
	}
}

// MachineIPv4 records a problem unless s is the IPv4 address of a machine
// (not loopback, multicast, ... see SpecialAddress).
func (p *Problems) MachineIPv4(path, s string) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil || !a.Is4():
		p.Add(path, "%q is not an IPv4 address", s)
	case SpecialAddress(a) != "":
		p.Add(path, "%s is %s", a, SpecialAddress(a))
	}
}

// MachineIP records a problem unless s is the IPv4 or IPv6 address
// (without a zone) of a machine, as a nameserver is.
func (p *Problems) MachineIP(path, s string) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil || a.Zone() != "":
		p.Add(path, "%q is not an IP address", s)
	case SpecialAddress(a) != "":
		p.Add(path, "%s is %s", s, SpecialAddress(a))
	}
}

// HostBitsProblem says that the prefix s, parsed as pfx, has host bits
// set and what was likely meant, or "".
func HostBitsProblem(s string, pfx netip.Prefix) string {
	if pfx.Masked() == pfx {
		return ""
	}
	return fmt.Sprintf("%q has host bits set; did you mean %s?", s, pfx.Masked())
}

// Host records a problem unless s is a host name or IPv4 address (IsHost).
func (p *Problems) Host(path, s string) {
	if !IsHost(s) {
		p.Add(path, "%q is not a host name or IPv4 address", s)
	}
}

// CIDR records a problem unless s is an IPv4 or IPv6 prefix like 10.0.0.0/24.
func (p *Problems) CIDR(path, s string) {
	if _, err := netip.ParsePrefix(s); err != nil {
		p.Add(path, "%q is not an address prefix like 10.0.0.10/24", s)
	}
}

// DNSLabel records a problem unless s is a lower-case DNS label, as a node
// name must be (hostname, Kubernetes node name, part of resource names).
func (p *Problems) DNSLabel(path, s string) {
	if !IsDNSLabel(s) {
		p.Add(path, "%q must be a DNS label: lowercase letters, digits and '-', at most 63 characters", s)
	}
}

// PackageTag is the struct tag that marks a field of a component's
// arguments the component package takes as an input although the
// component holds it as a plain Go value: `package:"input"`, or
// `package:"input,secret"` for one that may be a secret (a machine-config
// patch). A program in another language may pass another resource's
// output there (a server's address, a StackReference's value); the
// provider waits for it, checks it with the component's rules once known
// and passes the plain value on. Plain fields without the tag decide which
// resources exist or how they are named, and must be known before the up.
const PackageTag = "package"

// PackageInput tells whether a field with the struct tag tag is an input
// of the component package (PackageTag), and whether it may be a secret.
func PackageInput(tag string) (input, secret bool) {
	for i, v := range strings.Split(tag, ",") {
		switch {
		case i == 0:
			input = v == "input"
		case v == "secret":
			secret = input
		}
	}
	return input, secret
}
