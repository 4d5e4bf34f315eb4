package doctor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/internal/kubeapi"
	"github.com/fluodata/talos-pulumi/internal/pveapi"
	"github.com/fluodata/talos-pulumi/stacks"
)

// CSIVolume is a volume the Proxmox CSI plugin made on the stack's
// datastore, and where it is: its Proxmox node, the VM it is attached to
// ("" for none: kept after its claim, or its cluster, went; another
// cluster's VM is named "VM <id> (<name>)"), and the PersistentVolume of
// the stack's cluster that names it ("" for none, or not read).
type CSIVolume struct {
	VolID, ProxmoxNode, AttachedTo string
	ClaimedBy                      string
	Size                           int64
}

// Free reports whether nothing known uses the volume: no VM has it
// attached and no PersistentVolume of the cluster names it.
func (v CSIVolume) Free() bool { return v.AttachedTo == "" && v.ClaimedBy == "" }

// CSIDriver is the Proxmox CSI plugin's driver name, in the
// PersistentVolumes it provisions.
const CSIDriver = "csi.proxmox.sinextra.dev"

// CSIClaims are the PersistentVolumes of the plugin in pvs by the volume
// each names, "<storage>:<disk>": the plugin's volume handle is
// <region>/<zone>/<storage>/<disk> (proxmox-csi-plugin pkg/volume). Each
// says "PersistentVolume <name>" and its claim.
func CSIClaims(pvs []kubeapi.PersistentVolume) map[string]string {
	out := map[string]string{}
	for _, pv := range pvs {
		parts := strings.Split(pv.VolumeHandle, "/")
		if pv.Driver != CSIDriver || len(parts) != 4 {
			continue
		}
		by := "PersistentVolume " + pv.Name
		if pv.Claim != "" {
			by += " (claim " + pv.Claim + ")"
		}
		out[parts[2]+":"+parts[3]] = by
	}
	return out
}

// CSIVolumes lists the plugin's volumes (proxmox.CSIVolumePrefix) on the
// stack's datastore of every Proxmox node the stack uses, which VM each is
// attached to (every VM on those nodes is read: another cluster's plugin
// shares the datastore and the placeholder owner vm-9999), and which of
// claims (CSIClaims of the stack's cluster; nil when not read) names it.
func CSIVolumes(ctx context.Context, api API, cfg *stacks.Config, claims map[string]string) ([]CSIVolume, error) {
	ds := cfg.Storage.ProxmoxCSI.Datastore
	attached := map[string]string{}
	nodes := map[string]bool{}
	own := map[int]string{}
	for _, ref := range cfg.Nodes.Refs() {
		nodes[ref.ProxmoxNode] = true
		own[ref.VMID] = ref.Name
	}
	vms, err := api.VMs(ctx)
	if err != nil {
		return nil, err
	}
	// The stack's own VMs, then every other guest on its nodes.
	guests := []pveapi.ClusterVM{}
	for _, ref := range cfg.Nodes.Refs() {
		guests = append(guests, pveapi.ClusterVM{VMID: ref.VMID, Node: ref.ProxmoxNode, Name: ref.Name})
	}
	for _, vm := range vms {
		if _, mine := own[vm.VMID]; !mine && nodes[vm.Node] {
			guests = append(guests, vm)
		}
	}
	for _, vm := range guests {
		conf, err := api.VMConfig(ctx, vm.Node, vm.VMID)
		if err != nil {
			if errors.Is(err, pveapi.ErrNotFound) {
				continue // gone since the listing
			}
			return nil, err
		}
		name, ok := own[vm.VMID]
		if !ok {
			name = fmt.Sprintf("VM %d (%s), not of this cluster", vm.VMID, vm.Name)
		}
		for _, v := range conf {
			if s, ok := v.(string); ok {
				volid, _, _ := strings.Cut(s, ",")
				attached[volid] = name
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
				out = append(out, CSIVolume{VolID: v.VolID, ProxmoxNode: node, AttachedTo: attached[v.VolID], ClaimedBy: claims[v.VolID], Size: v.Size})
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
func checkCSI(ctx context.Context, env Env, api API, cfg *stacks.Config, stack string) []Result {
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
	claims, claimsErr := env.CSIClaims(ctx, stack)
	vols, err := CSIVolumes(ctx, api, cfg, claims)
	if err != nil {
		return append(out, Result{Fail, "csi", "listing the CSI plugin's volumes: " + err.Error()})
	}
	var free, used []string
	for _, v := range vols {
		switch {
		case v.AttachedTo != "":
			used = append(used, fmt.Sprintf("%s (attached to %s)", v.VolID, v.AttachedTo))
		case v.ClaimedBy != "":
			used = append(used, fmt.Sprintf("%s (named by %s)", v.VolID, v.ClaimedBy))
		default:
			free = append(free, fmt.Sprintf("%s on %s (%d GiB)", v.VolID, v.ProxmoxNode, v.Size>>30))
		}
	}
	if len(free) == 0 {
		return append(out, Result{OK, "csi", fmt.Sprintf("%d volumes of the CSI plugin on %s, all in use%s", len(used), ds, listed(used))})
	}
	if claimsErr != nil && !errors.Is(claimsErr, ErrNoCluster) {
		return append(out, Result{Warn, "csi", fmt.Sprintf("%d volumes of the CSI plugin on %s are attached to no VM on the stack's Proxmox nodes, but the cluster's PersistentVolumes could not be read (%v), so any of them may still be a claim's: %s",
			len(free), ds, claimsErr, strings.Join(free, ", "))})
	}
	return append(out, Result{Warn, "csi", fmt.Sprintf("%d volumes of the CSI plugin on %s are attached to no VM on the stack's Proxmox nodes and named by no PersistentVolume of the cluster (kept after their claim or the cluster went): %s. Remove one that nobody needs with make csi-volume-rm STACK=%s VOLUME=<volid>",
		len(free), ds, strings.Join(free, ", "), stack)})
}

// ErrNoCluster is CSIClaims' answer for a stack without a cluster (no
// kubeconfig output: never made, or destroyed): no PersistentVolume of it
// can name a volume.
var ErrNoCluster = errors.New("the stack has no cluster (no kubeconfig output)")

// CSIClaims reads the plugin's PersistentVolumes of the stack's cluster
// (CSIClaims of them), through the kubeconfig of its outputs; nil with
// ErrNoCluster for a stack without a cluster, nil with another error when
// they could not be read.
func (env Env) CSIClaims(ctx context.Context, stack string) (map[string]string, error) {
	if env.StackOutputs == nil {
		return nil, errors.New("the stack's outputs are not read here")
	}
	outs, err := env.StackOutputs(ctx, stack)
	if err != nil {
		return nil, err
	}
	kc, _ := outs["kubeconfig"].(string)
	if kc == "" {
		return map[string]string{}, ErrNoCluster
	}
	timeout := env.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	k, err := kubeapi.New([]byte(kc), kubeapi.WithTimeout(timeout))
	if err != nil {
		return nil, err
	}
	defer k.Close()
	pvs, err := k.PersistentVolumes(ctx)
	if err != nil {
		return nil, err
	}
	return CSIClaims(pvs), nil
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
