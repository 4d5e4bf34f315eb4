package doctor

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/fluodata/talos-pulumi/components/image"
	"github.com/fluodata/talos-pulumi/components/proxmox"
)

// need is what the program does on one ACL path, and the privileges it
// takes there.
type need struct {
	path  string
	privs []string
	why   string
}

// vmPrivileges are what the Proxmox provider and the program's own hooks do
// to a VM: create it (VM.Allocate and each part of its config), read it,
// power it off on a destroy (VM.PowerMgmt), eject the ISO (VM.Config.CDROM).
var vmPrivileges = []string{
	"VM.Allocate", "VM.Audit", "VM.Config.CDROM", "VM.Config.CPU", "VM.Config.Disk", "VM.Config.HWType",
	"VM.Config.Memory", "VM.Config.Network", "VM.Config.Options", "VM.PowerMgmt",
}

// neededPrivileges lists, per ACL path, the privileges the stack's `up` and
// `destroy` take on Proxmox VE of the given major version (the ISO's
// download-url needs Sys.Audit and Sys.Modify on the node besides the
// datastore's Datastore.AllocateTemplate; a NIC on a bridge needs SDN.Use
// on its zone since 8.0; the guest agent's reads are VM.Monitor before 9.0
// and VM.GuestAgent.Audit since).
func neededPrivileges(s section, major int) []need {
	px := proxmoxHost(s.view)
	var out []need
	nodes := map[string]bool{}
	bridges := map[string]bool{px.Bridge: true}
	for _, ref := range s.refs {
		nodes[ref.ProxmoxNode] = true
		privs := slices.Clone(vmPrivileges)
		if px.Addressing == proxmox.AddressingStatic {
			privs = append(privs, "VM.Config.Cloudinit")
		}
		if major >= 9 {
			privs = append(privs, "VM.GuestAgent.Audit")
		} else {
			privs = append(privs, "VM.Monitor")
		}
		out = append(out, need{fmt.Sprintf("/vms/%d", ref.VMID), privs, ref.Path + "'s VM: created, configured, powered off on destroy, its ISO ejected"})
	}
	for _, n := range sortedKeys(nodes) {
		out = append(out, need{"/nodes/" + n, []string{"Sys.Audit", "Sys.Modify"}, "the node downloads the Talos ISO (download-url)"})
	}
	out = append(out,
		need{"/storage/" + px.ISODatastore, []string{"Datastore.AllocateTemplate", "Datastore.Audit"}, s.key("isoDatastore") + " holds the Talos ISO"},
		need{"/storage/" + px.DiskDatastore, []string{"Datastore.AllocateSpace", "Datastore.Audit"}, s.key("diskDatastore") + " holds the VM disks"},
	)
	if major >= 8 {
		for _, b := range sortedKeys(bridges) {
			out = append(out, need{"/sdn/zones/localnetwork/" + b, []string{"SDN.Use"}, "the VMs' NICs attach to " + s.key("bridge") + " " + b})
		}
	}
	return out
}

// checkPrivileges reads the token's privileges (/access/permissions) on
// every path the stack's runs touch through a section's API and names each
// one missing, with why it is needed, before a run fails half-way on a 403.
func checkPrivileges(ctx context.Context, api API, s section, version string) Result {
	major, _ := pveVersion(version)
	missing, err := missingPrivileges(ctx, api, neededPrivileges(s, major))
	if err != nil {
		return Result{Warn, "perms", fmt.Sprintf("%v; the token's privileges were not checked", err)}
	}
	if len(missing) > 0 {
		return Result{Fail, "perms", fmt.Sprintf("token %s lacks %s; grant them to the token (Datacenter > Permissions), or to its user with privilege separation off",
			s.APITokenID, strings.Join(missing, "; "))}
	}
	return Result{OK, "perms", fmt.Sprintf("token %s holds every privilege the stack's runs take (Proxmox VE %d)", s.APITokenID, major)}
}

// missingPrivileges reads the token's privileges on each need's path and
// names the ones it lacks, with why they are needed.
func missingPrivileges(ctx context.Context, api API, needs []need) ([]string, error) {
	var missing []string
	for _, n := range needs {
		have, err := api.Permissions(ctx, n.path)
		if err != nil {
			return nil, err
		}
		var lacks []string
		for _, p := range n.privs {
			if !have[p] {
				lacks = append(lacks, p)
			}
		}
		if len(lacks) > 0 {
			missing = append(missing, fmt.Sprintf("%s on %s (%s)", strings.Join(lacks, ", "), n.path, n.why))
		}
	}
	return missing, nil
}

// FactoryProbeURL is what each Proxmox node is asked to fetch to show that
// it reaches the Image Factory it downloads the Talos ISO from.
var FactoryProbeURL = "https://" + image.FactoryHost + "/versions"

// checkFactory has each Proxmox node of the stack fetch the Image Factory
// (query-url-metadata, as the ISO's download does): a node behind a
// firewall or without DNS fails the first `up` minutes in.
func checkFactory(ctx context.Context, api API, node string) Result {
	if _, err := api.QueryURLMetadata(ctx, node, FactoryProbeURL); err != nil {
		return Result{Fail, "factory", fmt.Sprintf("Proxmox node %s cannot fetch %s, where it downloads the Talos ISO from: %v; "+
			"let it reach %s on port 443 (DNS, firewall, proxy)", node, FactoryProbeURL, err, image.FactoryHost)}
	}
	return Result{OK, "factory", fmt.Sprintf("Proxmox node %s reaches the Image Factory (%s)", node, image.FactoryHost)}
}
