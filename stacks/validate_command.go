package stacks

import (
	"strings"
	"unicode"
)

// validateRestartCommand checks proxmox.dnsmasq.restartCommand, shell code
// the reservation scripts run on the Proxmox host through `sh -c` (so it
// cannot end or reshape the script around it). Empty, dnsmasq would never
// read the reservations; on several lines or with other control characters
// it is a paste mistake, as for vps.rebootCommand.
func validateRestartCommand(d *Diagnostics, cmd string) {
	const path = "proxmox.dnsmasq.restartCommand"
	switch {
	case strings.TrimSpace(cmd) == "":
		d.errorf(path, "must not be empty: dnsmasq reads the reservations only when restarted, e.g. %q", DefaultDNSMasqRestart)
	case strings.ContainsAny(cmd, "\n\r"):
		d.errorf(path, "must be one line; put longer logic in a script on the host and call it")
	case strings.ContainsFunc(cmd, func(r rune) bool { return r != '\t' && unicode.IsControl(r) }):
		d.errorf(path, "%q contains a control character", cmd)
	}
}
