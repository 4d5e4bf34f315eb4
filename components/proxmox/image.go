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

// isoPlatform names the kind of an image's ISO in its file name: the
// Secure Boot ISO of a schematic is another file than its plain one.
func isoPlatform(img *image.Image) string {
	if img.SecureBoot {
		return img.Platform + "-secureboot"
	}
	return img.Platform
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

// newImages resolves the cluster's image for the addressing mode, and one
// for each other schematic of its nodes.
func newImages(ctx *pulumi.Context, name string, args *ClusterArgs, parent pulumi.ResourceOrInvokeOption) (*image.Images, error) {
	own := map[string]image.Schematic{}
	for _, n := range args.Nodes {
		if n.Schematic != nil {
			own[n.Name] = args.schematicOf(n)
		}
	}
	return image.NewImages(ctx, name, args.Schematic, image.Args{
		TalosVersion: args.Cluster.TalosVersion,
		Platform:     imagePlatform(args.Proxmox.Addressing),
		SecureBoot:   args.Cluster.SecureBoot,
	}, own, parent)
}

// isoResourceName names the download of img's ISO on the Proxmox node at
// placement at: the cluster's schematic's as before schematics per node,
// another's with its suffix.
func isoResourceName(name, at string, img *image.Image) string {
	if img.Suffix == "" {
		return name + "-iso-" + at
	}
	return name + "-iso-" + at + "-" + img.Suffix
}

// downloadISOs puts the ISOs into the ISO datastore of every Proxmox node
// of the host that holds a VM, through the host's API (the node fetches it
// from the factory): on each, the ISO of every schematic its VMs boot. It
// returns them by the end of their resource name (the placement, and the
// schematic's suffix for a node's own), and the ISO each node boots.
func downloadISOs(ctx *pulumi.Context, name string, args *ClusterArgs, host hostView, images *image.Images, opts ...pulumi.ResourceOption) (files, byNode map[string]*download.File, err error) {
	px := host.Settings
	// Destroy deletes the ISO unless the stack keeps it (e.g. for VMs made
	// by hand from it); a kept file stays in storage, unmanaged.
	// A gone host's is dropped from the state alone (goneOptions).
	opts = append(opts, pulumi.RetainOnDelete(px.KeepISO || host.Gone))
	files, byNode = map[string]*download.File{}, map[string]*download.File{}
	for _, ref := range host.Nodes {
		img := images.Of(ref.Name)
		at := placement(Node{Host: host.Name, ProxmoxNode: ref.ProxmoxNode})
		resName := isoResourceName(name, at, img)
		key := strings.TrimPrefix(resName, name+"-iso-")
		if f, ok := files[key]; ok {
			byNode[ref.Name] = f
			continue
		}
		// ctx.Stack() is the stack the program runs as, the one the VMs'
		// stack tag names too.
		fileName := img.SchematicID.ApplyT(func(id string) string {
			return ISOFileName(ISOFile{
				Stack: ctx.Stack(), Cluster: args.Cluster.Name,
				TalosVersion: args.Cluster.TalosVersion, SchematicID: id, Platform: isoPlatform(img),
			})
		}).(pulumi.StringOutput)
		f, err := download.NewFile(ctx, resName, &download.FileArgs{
			ContentType: pulumi.String("iso"),
			DatastoreId: pulumi.String(px.ISODatastore),
			NodeName:    pulumi.String(ref.ProxmoxNode),
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
			return nil, nil, fmt.Errorf("unable to create ISO download on Proxmox node %q: %w", at, err)
		}
		files[key], byNode[ref.Name] = f, f
	}
	return files, byNode, nil
}

// isoDownloadTimeoutSeconds bounds one ISO download (about 100 MB).
const isoDownloadTimeoutSeconds = 1200

// hasGuestAgent reports whether the image runs qemu-guest-agent. With a given
// schematic id the extensions are unknown, so the agent stays off: enabling it
// without the extension makes the provider wait on create and hang shutdowns.
func hasGuestAgent(s image.Schematic) bool {
	return slices.ContainsFunc(s.Extensions, func(e string) bool {
		return strings.EqualFold(e, GuestAgentExtension)
	})
}
