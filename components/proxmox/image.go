package proxmox

import (
	"fmt"
	"slices"
	"strings"

	"github.com/muhlba91/pulumi-proxmoxve/sdk/v7/go/proxmoxve/download"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/image"
	"github.com/fluodata/talos-pulumi/stacks"
)

// GuestAgentExtension is the system extension that runs qemu-guest-agent.
const GuestAgentExtension = "siderolabs/qemu-guest-agent"

// imagePlatform is the factory platform for an addressing mode: nocloud
// reads the static address from the VM's cloud-init drive.
func imagePlatform(addressing string) string {
	if addressing == stacks.AddressingStatic {
		return image.PlatformNocloud
	}
	return image.PlatformMetal
}

// ISOFileName names the ISO in Proxmox storage. The factory's own basename
// (metal-amd64.iso) is the same for every version and schematic, so a new
// version would otherwise overwrite, or be mistaken for, the old one.
func ISOFileName(talosVersion, schematicID, platform string) string {
	id := schematicID
	if len(id) > 12 {
		id = id[:12]
	}
	return fmt.Sprintf("talos-%s-%s-%s-amd64.iso", talosVersion, id, platform)
}

// newImage resolves the cluster's image for the addressing mode.
func newImage(ctx *pulumi.Context, name string, cfg *stacks.Config, parent pulumi.ResourceOrInvokeOption) (*image.Image, error) {
	return image.New(ctx, name, image.Args{
		TalosVersion: cfg.Cluster.TalosVersion,
		SchematicID:  cfg.Cluster.Schematic.ID,
		Extensions:   cfg.Cluster.Schematic.Extensions,
		Platform:     imagePlatform(cfg.Proxmox.Addressing),
	}, parent)
}

// downloadISOs puts the ISO into the ISO datastore of every Proxmox node that
// hosts a VM, through the Proxmox API (the node fetches it from the factory).
func downloadISOs(ctx *pulumi.Context, name string, cfg *stacks.Config, img *image.Image, opts ...pulumi.ResourceOption) (map[string]*download.File, error) {
	// Destroy deletes the ISO unless the stack keeps it (e.g. for VMs made
	// by hand from it); a kept file stays in storage, unmanaged.
	opts = append(opts, pulumi.RetainOnDelete(cfg.Proxmox.KeepISO))
	fileName := img.SchematicID.ApplyT(func(id string) string {
		return ISOFileName(cfg.Cluster.TalosVersion, id, img.Platform)
	}).(pulumi.StringOutput)
	out := map[string]*download.File{}
	for _, node := range proxmoxNodes(cfg) {
		f, err := download.NewFile(ctx, name+"-iso-"+node, &download.FileArgs{
			ContentType: pulumi.String("iso"),
			DatastoreId: pulumi.String(cfg.Proxmox.ISODatastore),
			NodeName:    pulumi.String(node),
			Url:         img.ISOURL,
			FileName:    fileName,
			// The name already pins version and schematic; without this the
			// provider re-downloads whenever the factory's Content-Length
			// answer differs from the stored file.
			Overwrite:     pulumi.Bool(false),
			UploadTimeout: pulumi.Int(isoDownloadTimeoutSeconds),
		}, opts...)
		if err != nil {
			return nil, fmt.Errorf("unable to create ISO download on Proxmox node %q: %w", node, err)
		}
		out[node] = f
	}
	return out, nil
}

// isoDownloadTimeoutSeconds bounds one ISO download (about 100 MB).
const isoDownloadTimeoutSeconds = 1200

// proxmoxNodes lists the Proxmox nodes hosting a VM, sorted.
func proxmoxNodes(cfg *stacks.Config) []string {
	var out []string
	for _, n := range cfg.Nodes.All() {
		if !slices.Contains(out, n.ProxmoxNode) {
			out = append(out, n.ProxmoxNode)
		}
	}
	slices.Sort(out)
	return out
}

// hasGuestAgent reports whether the image runs qemu-guest-agent. With a given
// schematic id the extensions are unknown, so the agent stays off: enabling it
// without the extension makes the provider wait on create and hang shutdowns.
func hasGuestAgent(cfg *stacks.Config) bool {
	return slices.ContainsFunc(cfg.Cluster.Schematic.Extensions, func(e string) bool {
		return strings.EqualFold(e, GuestAgentExtension)
	})
}
