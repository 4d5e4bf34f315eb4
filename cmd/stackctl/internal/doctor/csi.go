package doctor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/internal/pveapi"
	"github.com/fluodata/talos-pulumi/stacks"
)

// CSIVolume is a volume the Proxmox CSI plugin made on the stack's
// datastore, and where it is: its Proxmox node, and the cluster's VM it is
// attached to ("" for none: kept after its claim, or its cluster, went).
type CSIVolume struct {
	VolID, ProxmoxNode, AttachedTo string
	Size                           int64
}

// CSIVolumes lists the plugin's volumes (proxmox.CSIVolumePrefix) on the
// stack's datastore of every Proxmox node the stack uses, and which of the
// cluster's VMs each is attached to: the plugin attaches its volumes to
// those VMs only.
func CSIVolumes(ctx context.Context, api API, cfg *stacks.Config) ([]CSIVolume, error) {
	ds := cfg.Storage.ProxmoxCSI.Datastore
	attached := map[string]string{}
	nodes := map[string]bool{}
	for _, ref := range cfg.Nodes.Refs() {
		nodes[ref.ProxmoxNode] = true
		conf, err := api.VMConfig(ctx, ref.ProxmoxNode, ref.VMID)
		if err != nil {
			if errors.Is(err, pveapi.ErrNotFound) {
				continue // no VM (yet, or any more)
			}
			return nil, err
		}
		for _, v := range conf {
			if s, ok := v.(string); ok {
				volid, _, _ := strings.Cut(s, ",")
				attached[volid] = ref.Name
			}
		}
	}
	var out []CSIVolume
	for _, node := range sortedKeys(nodes) {
		vols, err := api.StorageContent(ctx, node, ds, "images")
		if err != nil {
			return nil, err
		}
		for _, v := range vols {
			_, name, _ := strings.Cut(v.VolID, ":")
			if strings.HasPrefix(name, proxmox.CSIVolumePrefix) {
				out = append(out, CSIVolume{VolID: v.VolID, ProxmoxNode: node, AttachedTo: attached[v.VolID], Size: v.Size})
			}
		}
	}
	slices.SortFunc(out, func(a, b CSIVolume) int { return strings.Compare(a.VolID, b.VolID) })
	return out, nil
}

// checkCSI checks the plugin's datastore on each Proxmox node the stack
// uses and lists the volumes the plugin left there: the StorageClass keeps
// a volume when its claim goes (Retain), and a destroyed cluster leaves
// them all. Nothing here deletes one.
func checkCSI(ctx context.Context, api API, cfg *stacks.Config, stack string) []Result {
	ds := cfg.Storage.ProxmoxCSI.Datastore
	var out []Result
	nodes := map[string]bool{}
	for _, ref := range cfg.Nodes.Refs() {
		nodes[ref.ProxmoxNode] = true
	}
	for _, node := range sortedKeys(nodes) {
		r := checkStorage(ctx, api, node, ds, "images", "storage.proxmoxCsi.datastore")
		out = append(out, r)
		if r.Level == Fail {
			return out
		}
	}
	if cfg.Storage.ProxmoxCSI.TokenID == "" {
		out = append(out, checkCSIAccess(ctx, api, cfg))
	}
	vols, err := CSIVolumes(ctx, api, cfg)
	if err != nil {
		return append(out, Result{Fail, "csi", "listing the CSI plugin's volumes: " + err.Error()})
	}
	var free, used []string
	for _, v := range vols {
		if v.AttachedTo != "" {
			used = append(used, fmt.Sprintf("%s (attached to %s)", v.VolID, v.AttachedTo))
		} else {
			free = append(free, fmt.Sprintf("%s on %s (%d GiB)", v.VolID, v.ProxmoxNode, v.Size>>30))
		}
	}
	if len(free) == 0 {
		return append(out, Result{OK, "csi", fmt.Sprintf("%d volumes of the CSI plugin on %s, all attached to this cluster's VMs%s", len(used), ds, listed(used))})
	}
	return append(out, Result{Warn, "csi", fmt.Sprintf("%d volumes of the CSI plugin on %s are attached to no VM of this cluster (kept after their claim or the cluster went; a claim's PersistentVolume may still name one): %s. Remove one that nobody needs with make csi-volume-rm STACK=%s VOLUME=<volid>",
		len(free), ds, strings.Join(free, ", "), stack)})
}

func listed(items []string) string {
	if len(items) == 0 {
		return ""
	}
	return ": " + strings.Join(items, ", ")
}

// csiAccessNeeds are what making the CSI plugin's access takes of the
// operator's token, as read from Proxmox VE's access API (pve-access-
// control: role create Sys.Modify on /access; user create
// Realm.AllocateUser on its realm; a token for another user User.Modify;
// an ACL Permissions.Modify on its path). Not tested against a real
// Proxmox VE from here: a missing one is a warning, not a failure.
func csiAccessNeeds(cfg *stacks.Config) []need {
	csi := cfg.Storage.ProxmoxCSI
	if csi.TokenID != "" {
		return nil // the operator's own token for the plugin
	}
	out := []need{
		{"/access", []string{"Sys.Modify"}, "creates the CSI plugin's role"},
		{"/access/realm/pve", []string{"Realm.AllocateUser"}, "creates the CSI plugin's user"},
		{"/access/groups", []string{"User.Modify"}, "gives the CSI plugin's user its token"},
		{"/storage/" + csi.Datastore, []string{"Permissions.Modify"}, "grants the CSI plugin its role on the datastore"},
	}
	for _, ref := range cfg.Nodes.Refs() {
		out = append(out, need{fmt.Sprintf("/vms/%d", ref.VMID), []string{"Permissions.Modify"}, "grants the CSI plugin its role on " + ref.Path + "'s VM"})
	}
	return out
}

// checkCSIAccess warns of what the operator's token lacks to make the
// plugin's role, user, ACLs and token.
func checkCSIAccess(ctx context.Context, api API, cfg *stacks.Config) Result {
	missing, err := missingPrivileges(ctx, api, csiAccessNeeds(cfg))
	if err != nil {
		return Result{Warn, "csi-perms", fmt.Sprintf("%v; the privileges for the CSI plugin's access were not checked", err)}
	}
	if len(missing) > 0 {
		return Result{Warn, "csi-perms", fmt.Sprintf("token %s seems to lack %s; grant them, or make the plugin's token yourself and give it as storage.proxmoxCsi.tokenId and tokenSecret",
			cfg.Proxmox.APITokenID, strings.Join(missing, "; "))}
	}
	return Result{OK, "csi-perms", fmt.Sprintf("token %s can make the CSI plugin's role, user, ACLs and token", cfg.Proxmox.APITokenID)}
}
