package proxmox

import (
	"fmt"
	"slices"
	"strings"

	"github.com/muhlba91/pulumi-proxmoxve/sdk/v7/go/proxmoxve/download"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumiverse/pulumi-talos/sdk/go/talos/imagefactory"
	"gopkg.in/yaml.v3"

	"github.com/fluodata/talos-pulumi/stacks"
)

// GuestAgentExtension is the system extension that runs qemu-guest-agent.
const GuestAgentExtension = "siderolabs/qemu-guest-agent"

// Image platforms of the Image Factory. The metal ISO boots into maintenance
// mode and waits for a config; the nocloud ISO also reads the address from
// the VM's cloud-init drive.
const (
	platformMetal   = "metal"
	platformNocloud = "nocloud"
)

// imagePlatform is the factory platform for an addressing mode.
func imagePlatform(addressing string) string {
	if addressing == stacks.AddressingStatic {
		return platformNocloud
	}
	return platformMetal
}

// SchematicYAML is the Image Factory schematic for a list of official
// extensions, sorted so that the same set always yields the same schematic.
func SchematicYAML(extensions []string) (string, error) {
	exts := slices.Clone(extensions)
	slices.Sort(exts)
	doc := map[string]any{"customization": map[string]any{"systemExtensions": map[string]any{"officialExtensions": exts}}}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return "", fmt.Errorf("unable to render schematic: %w", err)
	}
	return string(out), nil
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

// image is the cluster's Talos image: schematic, ISO URL and installer.
type image struct {
	SchematicID pulumi.StringOutput
	ISOURL      pulumi.StringOutput
	Installer   pulumi.StringOutput
	Platform    string
}

// newImage resolves the schematic (a given id, or one registered with the
// Image Factory from the extension list) and its URLs.
func newImage(ctx *pulumi.Context, name string, cfg *stacks.Config, parent pulumi.ResourceOrInvokeOption) (*image, error) {
	img := &image{Platform: imagePlatform(cfg.Proxmox.Addressing)}
	if id := cfg.Cluster.Schematic.ID; id != "" {
		img.SchematicID = pulumi.String(id).ToStringOutput()
	} else {
		doc, err := SchematicYAML(cfg.Cluster.Schematic.Extensions)
		if err != nil {
			return nil, err
		}
		sch, err := imagefactory.NewSchematic(ctx, name+"-schematic", &imagefactory.SchematicArgs{
			Schematic: pulumi.String(doc),
		}, parent)
		if err != nil {
			return nil, fmt.Errorf("unable to create image schematic: %w", err)
		}
		// The schematic id is the resource id; the resource has no other output.
		img.SchematicID = sch.ID().ToStringOutput()
	}
	urls := imagefactory.GetUrlsOutput(ctx, imagefactory.GetUrlsOutputArgs{
		TalosVersion: pulumi.String(cfg.Cluster.TalosVersion),
		SchematicId:  img.SchematicID,
		Platform:     pulumi.String(img.Platform),
	}, parent).Urls()
	img.ISOURL = urls.Iso()
	img.Installer = urls.Installer()
	return img, nil
}

// downloadISOs puts the ISO into the ISO datastore of every Proxmox node that
// hosts a VM, through the Proxmox API (the node fetches it from the factory).
func downloadISOs(ctx *pulumi.Context, name string, cfg *stacks.Config, img *image, opts ...pulumi.ResourceOption) (map[string]*download.File, error) {
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
