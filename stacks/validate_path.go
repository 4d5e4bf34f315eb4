package stacks

import (
	"strings"

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

// validateDevicePath checks an install disk (inputs.DevicePathProblem).
func validateDevicePath(d *Diagnostics, key, p string) {
	if msg := inputs.DevicePathProblem(p); msg != "" {
		d.errorf(key, "%s", msg)
	}
}

// validateKeyFilePath checks proxmox.ssh.privateKeyFile, a file on the
// operator's machine: absolute, relative to the project folder or under ~/.
func validateKeyFilePath(d *Diagnostics, key, p string) {
	if p == "" {
		return
	}
	switch why := inputs.PathProblem(p); {
	case why != "":
		d.errorf(key, "%q %s", p, why)
	case strings.HasSuffix(p, "/") || p == "~":
		d.errorf(key, "%q names a directory; give the path of the key file", p)
	}
}
