package proxmox

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fluodata/talos-pulumi/components/talos"
)

// EjectHookSuffix names (after the cluster's name) the hook that empties a
// VM's CD-ROM, before the VM's eject resource is created.
const EjectHookSuffix = "-eject-iso"

// ejectTimeout bounds one eject: a config update, retried by the client
// on transient failures.
const ejectTimeout = 2 * time.Minute

// Eject empties the CD-ROM of the VM the eject resource's environment names
// (PVE_NODE, PVE_VMID) through the Proxmox API, in the program, with the
// project's client (TLS as the stack says, the CA of SSL_CERT_FILE like the
// Proxmox provider): the "boot order fix" of the Ansible playbooks, made
// unnecessary for booting by the disk-first boot order but still needed so
// that no VM refers to an ISO file a later version deletes. It runs once
// Talos runs from disk, once per VM (the eject resource is replaced with
// its VM); a failure fails the eject's create, and the next `up` ejects
// again.
func Eject(ctx context.Context, api API, log talos.Logger, env map[string]string) error {
	node := env["PVE_NODE"]
	vmid, err := strconv.Atoi(env["PVE_VMID"])
	if node == "" || err != nil || vmid <= 0 {
		return fmt.Errorf("unable to eject the ISO: the eject's environment names no VM (PVE_NODE %q, PVE_VMID %q)", node, env["PVE_VMID"])
	}
	ctx, cancel := context.WithTimeout(ctx, ejectTimeout)
	defer cancel()
	if err := api.EjectCDROM(ctx, node, vmid, cdromInterface); err != nil {
		if errors.Is(err, context.Canceled) {
			return err
		}
		return fmt.Errorf("%w; the API token needs VM.Config.CDROM on /vms/%d (make doctor checks it); run 'pulumi up' again to retry", err, vmid)
	}
	log.Info(fmt.Sprintf("ejected the Talos ISO from VM %d on %s: it runs from its disk", vmid, node))
	return nil
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
