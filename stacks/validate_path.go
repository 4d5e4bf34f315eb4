package stacks

import (
	"strings"
	"unicode"

	"github.com/fluodata/talos-pulumi/components/inputs"
)

// Paths of a stack: the install disk (a device on the node), the dnsmasq
// config directory and lease file (on the Proxmox host, where the
// reservation scripts and `make doctor` use them in shell commands) and the
// SSH key file (on the operator's machine). The scripts quote every value,
// but a path is also a promise about where things go: a '..' or '.' segment
// leaves the directory it seems to name, the root directory as dnsmasq's
// conf-dir would put the reservations in / and have dnsmasq read every file
// there, and control characters, quotes and backslashes are in no real path
// of these, only in mistakes and attacks.

// pathProblem says what is wrong with p in any path field, or "".
func pathProblem(p string) string {
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

// validateHostPath checks an absolute path on the Proxmox host. A directory
// may end in '/', a file may not.
func validateHostPath(d *Diagnostics, key, p string, dir bool) {
	switch why := pathProblem(p); {
	case why != "":
		d.errorf(key, "%q %s", p, why)
	case !strings.HasPrefix(p, "/"):
		d.errorf(key, "%q must be an absolute path", p)
	case !dir && strings.HasSuffix(p, "/"):
		d.errorf(key, "%q ends in '/'; give the path of the file", p)
	case dir && strings.Contains(p, ","):
		// The scripts pass it as --conf-dir=<dir>, where dnsmasq reads what
		// follows a comma as file-name suffixes.
		d.errorf(key, "%q contains ',', which dnsmasq's conf-dir option reads as the start of its file-name suffixes", p)
	}
}

// validateDevicePath checks an install disk: a device path like /dev/sda or
// /dev/disk/by-id/..., without '.' or '..' segments.
func validateDevicePath(d *Diagnostics, key, p string) {
	switch why := pathProblem(p); {
	case !inputs.IsDevicePath(p):
		d.errorf(key, "%q is not a device path like /dev/sda", p)
	case why != "":
		d.errorf(key, "%q %s", p, why)
	}
}

// validateKeyFilePath checks proxmox.ssh.privateKeyFile, a file on the
// operator's machine: absolute, relative to the project folder or under ~/.
func validateKeyFilePath(d *Diagnostics, key, p string) {
	if p == "" {
		return
	}
	switch why := pathProblem(p); {
	case why != "":
		d.errorf(key, "%q %s", p, why)
	case strings.HasSuffix(p, "/") || p == "~":
		d.errorf(key, "%q names a directory; give the path of the key file", p)
	}
}
