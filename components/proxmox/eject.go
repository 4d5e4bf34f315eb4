package proxmox

import (
	"net/url"
	"strings"
)

// EjectCommand is the shell command that empties a VM's CD-ROM through the
// Proxmox API once Talos runs from disk (the "boot order fix" of the Ansible
// playbooks, made unnecessary for booting by the disk-first boot order but
// still needed so that no VM refers to an ISO file a later version deletes).
//
// It runs on the operator's machine (which reaches the API anyway) with curl.
// The API token comes on stdin as a header line (`-H @-`), so it never shows
// in a process list, the command text or Pulumi's diff. PVE_API (see APIURL),
// PVE_NODE and PVE_VMID come from the environment, so no value is ever parsed
// by the shell. curl retries transient failures (timeouts, 5xx)
// and fails on any other HTTP error with the API's message.
func EjectCommand(insecure bool) string {
	var b strings.Builder
	b.WriteString("curl --silent --show-error --fail-with-body --max-time 30 --retry 3")
	if insecure {
		b.WriteString(" --insecure")
	}
	b.WriteString(` -X PUT -H @- --data-urlencode "` + cdromInterface + `=none,media=cdrom"`)
	b.WriteString(` "${PVE_API}/nodes/${PVE_NODE}/qemu/${PVE_VMID}/config"`)
	return b.String()
}

// APIURL is the base of the Proxmox API (…/api2/json) for an endpoint such
// as https://pve:8006/. The endpoint was validated as an https URL.
func APIURL(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return strings.TrimRight(endpoint, "/") + "/api2/json"
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/api2/json"
	u.RawQuery, u.Fragment = "", ""
	return u.String()
}

// AuthHeader is the API-token header line curl reads from stdin.
func AuthHeader(tokenID, secret string) string {
	return "Authorization: PVEAPIToken=" + tokenID + "=" + secret + "\n"
}
