package stacks

import "github.com/fluodata/talos-pulumi/components/proxmox"

// validateRestartCommand checks proxmox.dnsmasq.restartCommand
// (proxmox.RestartCommandProblem).
func validateRestartCommand(d *Diagnostics, cmd string) {
	if msg := proxmox.RestartCommandProblem(cmd); msg != "" {
		d.errorf("proxmox.dnsmasq.restartCommand", "%s", msg)
	}
}
