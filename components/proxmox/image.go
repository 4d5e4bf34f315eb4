package proxmox

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/muhlba91/pulumi-proxmoxve/sdk/v7/go/proxmoxve/download"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/image"
)

// GuestAgentExtension is the system extension that runs qemu-guest-agent.
const GuestAgentExtension = "siderolabs/qemu-guest-agent"

// imagePlatform is the factory platform for an addressing mode: nocloud
// reads the static address from the VM's cloud-init drive.
func imagePlatform(addressing string) string {
	if addressing == AddressingStatic {
		return image.PlatformNocloud
	}
	return image.PlatformMetal
}

// ISOFile is what a stack's ISO file stands for: whose it is and what it
// holds.
type ISOFile struct {
	Stack, Cluster                      string
	TalosVersion, SchematicID, Platform string
}

// isoPartMax bounds each part of an ISO file name, so that the whole stays
// far below the 255 characters Proxmox accepts (download-url's filename).
const isoPartMax = 40

// isoUnsafeRe matches what Proxmox's normalize_content_filename replaces with
// '_' (pve-storage, src/PVE/Storage.pm).
var isoUnsafeRe = regexp.MustCompile(`[^a-zA-Z0-9_.-]`)

// ISOFileName names the ISO in Proxmox storage:
// talos-<version>-<schematic>-<platform>-<stack>-<cluster>-<hash>-amd64.iso,
// so no other version, schematic or stack overwrites or deletes it. Parts are
// reduced to what Proxmox keeps and cut to isoPartMax; the hash keeps them apart
// (docs/decisions/0004-upstream-behaviours.md#proxmox-normalizes-stored-file-names).
func ISOFileName(f ISOFile) string {
	id := f.SchematicID
	if len(id) > 12 {
		id = id[:12]
	}
	sum := sha256.Sum256([]byte(strings.Join([]string{f.Stack, f.Cluster, f.TalosVersion, f.SchematicID, f.Platform}, "\x00")))
	raw := []string{"talos", f.TalosVersion, id, f.Platform, f.Stack, f.Cluster, hex.EncodeToString(sum[:4]), "amd64"}
	parts := make([]string, 0, len(raw))
	for _, p := range raw {
		p = isoUnsafeRe.ReplaceAllString(p, "_")
		if len(p) > isoPartMax {
			p = p[:isoPartMax]
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "-") + ".iso"
}

// newImage resolves the cluster's image for the addressing mode.
func newImage(ctx *pulumi.Context, name string, args *ClusterArgs, parent pulumi.ResourceOrInvokeOption) (*image.Image, error) {
	return image.New(ctx, name, image.Args{
		TalosVersion: args.Cluster.TalosVersion,
		SchematicID:  args.Schematic.ID,
		Extensions:   args.Schematic.Extensions,
		Platform:     imagePlatform(args.Proxmox.Addressing),
	}, parent)
}

// downloadISOs puts the ISO into the ISO datastore of every Proxmox node of
// the host that holds a VM, through the host's API (the node fetches it from
// the factory), and returns them by placement (the node; host/node on a
// hosts entry, whose resource names end so too).
func downloadISOs(ctx *pulumi.Context, name string, args *ClusterArgs, host hostView, img *image.Image, opts ...pulumi.ResourceOption) (map[string]*download.File, error) {
	px := host.Settings
	// Destroy deletes the ISO unless the stack keeps it (e.g. for VMs made
	// by hand from it); a kept file stays in storage, unmanaged.
	// A gone host's is dropped from the state alone (goneOptions).
	opts = append(opts, pulumi.RetainOnDelete(px.KeepISO || host.Gone))
	// ctx.Stack() is the stack the program runs as, the one the VMs' stack
	// tag names too.
	fileName := img.SchematicID.ApplyT(func(id string) string {
		return ISOFileName(ISOFile{
			Stack: ctx.Stack(), Cluster: args.Cluster.Name,
			TalosVersion: args.Cluster.TalosVersion, SchematicID: id, Platform: img.Platform,
		})
	}).(pulumi.StringOutput)
	out := map[string]*download.File{}
	for _, node := range proxmoxNodes(host.Nodes) {
		at := placement(Node{Host: host.Name, ProxmoxNode: node})
		f, err := download.NewFile(ctx, name+"-iso-"+at, &download.FileArgs{
			ContentType: pulumi.String("iso"),
			DatastoreId: pulumi.String(px.ISODatastore),
			NodeName:    pulumi.String(node),
			Url:         img.ISOURL,
			FileName:    fileName,
			// The name already pins version and schematic; without this the
			// provider re-downloads whenever the factory's Content-Length
			// answer differs from the stored file (it compares sizes on
			// every refresh).
			Overwrite: pulumi.Bool(false),
			// A file of this name that the provider does not manage is this
			// stack's own ISO (the name says whose and what): the one
			// keepIso left behind, or one a lost state forgot. Proxmox
			// refuses to download over it; with this the provider deletes
			// it and downloads it again instead of failing "File already
			// exists in the datastore" (bpg v0.95.0,
			// fwprovider/nodes/resource_download_file.go, Create).
			OverwriteUnmanaged: pulumi.Bool(true),
			UploadTimeout:      pulumi.Int(isoDownloadTimeoutSeconds),
		}, opts...)
		if err != nil {
			return nil, fmt.Errorf("unable to create ISO download on Proxmox node %q: %w", at, err)
		}
		out[at] = f
	}
	return out, nil
}

// isoDownloadTimeoutSeconds bounds one ISO download (about 100 MB).
const isoDownloadTimeoutSeconds = 1200

// proxmoxNodes lists the Proxmox nodes hosting a VM, sorted.
func proxmoxNodes(nodes []Node) []string {
	var out []string
	for _, n := range nodes {
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
func hasGuestAgent(s image.Schematic) bool {
	return slices.ContainsFunc(s.Extensions, func(e string) bool {
		return strings.EqualFold(e, GuestAgentExtension)
	})
}
