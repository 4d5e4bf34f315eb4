package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/doctor"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/exitcode"
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/stacks"
)

// csiAPI is what removing a volume of the CSI plugin asks of Proxmox:
// *pveapi.Client.
type csiAPI interface {
	doctor.API
	DeleteVolume(ctx context.Context, node, volid string, poll time.Duration) error
}

// csiVolumeRmCmd is `stackctl csi-volume-rm`: it deletes one volume the
// Proxmox CSI plugin left on the stack's datastore, named by the operator
// (`make doctor` lists them). It refuses a volume that is not the plugin's
// (vm-9999-pvc-* on storage.proxmoxCsi.datastore), or that one of the
// cluster's VMs has attached: Proxmox itself would delete an attached
// volume of the plugin's placeholder owner.
func csiVolumeRmCmd(ctx context.Context, args []string, stdout, stderr io.Writer, newAPI func(*stacks.Config) (csiAPI, error)) int {
	fs := flag.NewFlagSet("csi-volume-rm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stack := fs.String("stack", os.Getenv("STACK"), "stack name (default: $STACK)")
	volume := fs.String("volume", "", "the volume to delete, as make doctor lists it: <datastore>:vm-9999-pvc-...")
	configJSON := fs.String("config-json", "", "read `pulumi config --show-secrets --json` output from this file instead of running pulumi")
	outputsJSON := fs.String("outputs-json", "", "read `pulumi stack output --json --show-secrets` output from this file instead of running pulumi")
	pulumiPath := fs.String("pulumi", "pulumi", "path of the pulumi CLI that reads the stack's config")
	if err := fs.Parse(args); err != nil {
		return exitcode.Usage
	}
	if *stack == "" || *volume == "" || fs.NArg() > 0 {
		_, _ = fmt.Fprintln(stderr, "stackctl csi-volume-rm: --stack and --volume are required")
		return exitcode.Usage
	}
	fail := func(code int, format string, a ...any) int {
		_, _ = fmt.Fprintf(stderr, "stackctl csi-volume-rm: "+format+"\n", a...)
		return code
	}
	raw, err := readConfigJSON(ctx, *pulumiPath, *configJSON, *stack, nil)
	if err != nil {
		return fail(exitcode.BadConfig, "%v", err)
	}
	src, err := stacks.SourceFromConfigJSON(raw)
	if err != nil {
		return fail(exitcode.BadConfig, "%v", err)
	}
	cfg, diags := stacks.Load(src)
	if err := diags.Err(); err != nil {
		return fail(exitcode.BadConfig, "%v", err)
	}
	csi := cfg.Storage.ProxmoxCSI
	if !csi.Enabled() {
		return fail(exitcode.Usage, "stack %s has no storage.proxmoxCsi section", *stack)
	}
	if !strings.HasPrefix(*volume, csi.Datastore+":"+proxmox.CSIVolumePrefix) {
		return fail(exitcode.Usage, "%q is not a volume of the CSI plugin on %s (%s:%s...): nothing else is deleted here", *volume, csi.Datastore, csi.Datastore, proxmox.CSIVolumePrefix)
	}
	api, err := newAPI(cfg)
	if err != nil {
		return fail(exitcode.Failed, "%v", err)
	}
	env := doctor.DefaultEnv().WithPulumi(*pulumiPath)
	env.StackOutputs = stackOutputs(*pulumiPath, *outputsJSON)
	// The cluster's PersistentVolumes: a bound volume whose pod is not
	// running is attached to no VM, yet it is a claim's data.
	claims, err := env.CSIClaims(ctx, *stack)
	if err != nil && !errors.Is(err, doctor.ErrNoCluster) {
		return fail(exitcode.Failed, "the cluster's PersistentVolumes could not be read (%v): a volume is deleted only when none of them names it; run this where the cluster's API answers (with proxmox.access: ssh-proxy, inside `make proxy`'s environment)", err)
	}
	vols, err := doctor.CSIVolumes(ctx, api, cfg, claims)
	if err != nil {
		return fail(exitcode.Failed, "%v", err)
	}
	for _, v := range vols {
		if v.VolID != *volume {
			continue
		}
		if v.AttachedTo != "" {
			return fail(exitcode.Failed, "%s is attached to %s: a pod uses it; delete its claim, or the pod, first", v.VolID, v.AttachedTo)
		}
		if v.ClaimedBy != "" {
			return fail(exitcode.Failed, "%s is named by %s: its data is a claim's; delete the claim (and the PersistentVolume the Retain policy keeps) first", v.VolID, v.ClaimedBy)
		}
		if err := api.DeleteVolume(ctx, v.ProxmoxNode, v.VolID, time.Second); err != nil {
			return fail(exitcode.Failed, "%v", err)
		}
		_, _ = fmt.Fprintf(stdout, "deleted %s on %s (%d GiB)\n", v.VolID, v.ProxmoxNode, v.Size>>30)
		return exitcode.OK
	}
	return fail(exitcode.Failed, "no volume %s on %s of the stack's Proxmox nodes", *volume, csi.Datastore)
}
