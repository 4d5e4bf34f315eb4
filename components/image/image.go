// Package image resolves the cluster's Talos image with the Image Factory:
// the schematic (a given id, or one registered from a list of official
// extensions) and the factory URLs for a platform. Both platforms use it:
// Proxmox boots the ISO, a VPS gets the raw disk image written from rescue.
package image

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumiverse/pulumi-talos/sdk/go/talos/imagefactory"
	"go.yaml.in/yaml/v3"

	"github.com/fluodata/talos-pulumi/components/inputs"
)

// Factory platforms. The metal images boot into maintenance mode and wait
// for a config; nocloud also reads its address from a cloud-init drive.
const (
	PlatformMetal   = "metal"
	PlatformNocloud = "nocloud"
)

// FactoryHost is the Image Factory the Talos provider talks to (its
// default; the provider calls it from the operator's machine).
const FactoryHost = "factory.talos.dev"

// Schematic selects the Image Factory schematic: an existing id, or one
// registered from a list of official system extensions.
type Schematic struct {
	// ID is an existing schematic id (64 hex digits); excludes extensions.
	ID string `pulumi:"id,optional"`
	// Extensions are official system extensions, e.g.
	// siderolabs/qemu-guest-agent, to register a schematic from.
	Extensions []string `pulumi:"extensions,optional"`
	// KernelArgs are the extra kernel arguments the schematic's images
	// boot with (the ISO, the disk image and the installed system), e.g.
	// console=ttyS0; in the order given. Excludes id.
	KernelArgs []string `pulumi:"kernelArgs,optional"`
}

// Key names the schematic's content: the same for the same schematic,
// whatever the order of its extensions (a list left out and an empty one
// are the same).
func (s Schematic) Key() string {
	if s.ID != "" {
		return "id:" + s.ID
	}
	exts := slices.Sorted(slices.Values(s.Extensions))
	return "extensions:" + strings.Join(exts, ",") + ";kernelArgs:" + strings.Join(s.KernelArgs, " ")
}

// Suffix is a short stable name of the schematic's content for the names
// of the resources made for it (its registration, its ISOs): 8 hex digits
// of the sha256 of its Key.
func (s Schematic) Suffix() string {
	sum := sha256.Sum256([]byte(s.Key()))
	return hex.EncodeToString(sum[:4])
}

// Over is a node's own schematic s over the cluster's: a key left out is
// the cluster's, so a pool that only adds kernel arguments keeps the
// cluster's extensions. An id is a whole schematic: it takes nothing from
// the cluster's, and gives nothing to a node's (CheckOver refuses that).
func (s Schematic) Over(cluster Schematic) Schematic {
	if s.ID != "" || cluster.ID != "" {
		if s.ID == "" && s.Extensions == nil && s.KernelArgs == nil {
			return cluster
		}
		return s
	}
	out := s
	if out.Extensions == nil {
		out.Extensions = cluster.Extensions
	}
	if out.KernelArgs == nil {
		out.KernelArgs = cluster.KernelArgs
	}
	return out
}

// CheckOver records the problems of a node's own schematic s, the input at
// path, over the cluster's: its own (Check), and kernel arguments without
// extensions over a cluster's schematic id, whose extensions are unknown
// here.
func (s Schematic) CheckOver(p *inputs.Problems, path string, cluster Schematic) {
	s.Check(p, path)
	if cluster.ID != "" && s.ID == "" && s.Extensions == nil && s.KernelArgs != nil {
		p.Add(path+".kernelArgs", "cannot be added to the cluster's schematic id, whose extensions are not known here: give this schematic's extensions too, or an id of its own")
	}
}

// Args select the image.
type Args struct {
	TalosVersion string
	// SchematicID is an existing schematic; empty registers one from
	// Extensions.
	SchematicID string
	Extensions  []string
	KernelArgs  []string
	// Platform is the factory platform (PlatformMetal, PlatformNocloud).
	Platform string
	// SecureBoot takes the factory's signed Secure Boot ISO, disk image
	// and installer of the schematic instead of the plain ones.
	SecureBoot bool
}

// Image is the resolved image: its schematic and the factory's URLs.
type Image struct {
	SchematicID pulumi.StringOutput
	// ISOURL is the boot ISO.
	ISOURL pulumi.StringOutput
	// DiskImageURL is the compressed raw disk image.
	DiskImageURL pulumi.StringOutput
	// Installer is the installer image reference for machine.install.image.
	Installer pulumi.StringOutput
	Platform  string
	// SecureBoot says the URLs are the signed Secure Boot ones.
	SecureBoot bool
	// Suffix names the resources made for a node's own schematic
	// (Schematic.Suffix); empty for the cluster's.
	Suffix string
}

// SchematicYAML is the Image Factory schematic for a list of official
// extensions, sorted so that the same set always yields the same schematic,
// and extra kernel arguments in their order (image-factory's
// customization.extraKernelArgs). Without kernel arguments the document is
// the one earlier versions registered, so existing clusters keep their
// schematic id.
func SchematicYAML(extensions, kernelArgs []string) (string, error) {
	exts := slices.Clone(extensions)
	slices.Sort(exts)
	customization := map[string]any{"systemExtensions": map[string]any{"officialExtensions": exts}}
	if len(kernelArgs) > 0 {
		customization["extraKernelArgs"] = slices.Clone(kernelArgs)
	}
	doc := map[string]any{"customization": customization}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return "", fmt.Errorf("unable to render schematic: %w", err)
	}
	return string(out), nil
}

// New resolves the schematic (registering it with the factory unless an id
// is given; the schematic resource is named <name>-schematic) and its URLs.
func New(ctx *pulumi.Context, name string, a Args, parent pulumi.ResourceOrInvokeOption) (*Image, error) {
	return newNamed(ctx, name+"-schematic", a, parent)
}

// Images are the images of a cluster's nodes: the cluster's, and one for
// each other schematic its nodes have.
type Images struct {
	// Cluster is the cluster's schematic's image.
	Cluster *Image
	byNode  map[string]*Image
}

// Of is the image of the node: its own schematic's, or the cluster's.
func (im *Images) Of(node string) *Image {
	if img, ok := im.byNode[node]; ok {
		return img
	}
	return im.Cluster
}

// Installers are the installer images of the nodes with a schematic of
// their own, by node name (talos.Machines.Installers).
func (im *Images) Installers() map[string]pulumi.StringInput {
	out := map[string]pulumi.StringInput{}
	for node, img := range im.byNode {
		out[node] = img.Installer
	}
	return out
}

// NewImages resolves the cluster's image as New does, and once each other
// schematic of nodes (node name to its schematic, Over the cluster's): its
// registration is named <name>-schematic-<suffix> (Schematic.Suffix), so
// that it stays the same whichever nodes have it. A node whose schematic
// is the cluster's gets the cluster's image.
func NewImages(ctx *pulumi.Context, name string, cluster Schematic, a Args, nodes map[string]Schematic, parent pulumi.ResourceOrInvokeOption) (*Images, error) {
	a.SchematicID, a.Extensions, a.KernelArgs = cluster.ID, cluster.Extensions, cluster.KernelArgs
	img, err := New(ctx, name, a, parent)
	if err != nil {
		return nil, err
	}
	im := &Images{Cluster: img, byNode: map[string]*Image{}}
	bySchematic := map[string]*Image{cluster.Key(): img}
	for _, node := range slices.Sorted(maps.Keys(nodes)) {
		s := nodes[node]
		key := s.Key()
		if _, ok := bySchematic[key]; !ok {
			a.SchematicID, a.Extensions, a.KernelArgs = s.ID, s.Extensions, s.KernelArgs
			own, err := newNamed(ctx, name+"-schematic-"+s.Suffix(), a, parent)
			if err != nil {
				return nil, err
			}
			own.Suffix = s.Suffix()
			bySchematic[key] = own
		}
		im.byNode[node] = bySchematic[key]
	}
	return im, nil
}

// newNamed is New with the schematic resource's name.
func newNamed(ctx *pulumi.Context, schematicName string, a Args, parent pulumi.ResourceOrInvokeOption) (*Image, error) {
	img := &Image{Platform: a.Platform, SecureBoot: a.SecureBoot}
	if a.SchematicID != "" {
		img.SchematicID = pulumi.String(a.SchematicID).ToStringOutput()
	} else {
		doc, err := SchematicYAML(a.Extensions, a.KernelArgs)
		if err != nil {
			return nil, err
		}
		sch, err := imagefactory.NewSchematic(ctx, schematicName, &imagefactory.SchematicArgs{
			Schematic: pulumi.String(doc),
		}, parent)
		if err != nil {
			return nil, fmt.Errorf("unable to create image schematic: %w", err)
		}
		// The schematic id is the resource id; the resource has no other output.
		img.SchematicID = sch.ID().ToStringOutput()
	}
	urls := imagefactory.GetUrlsOutput(ctx, imagefactory.GetUrlsOutputArgs{
		TalosVersion: pulumi.String(a.TalosVersion),
		SchematicId:  img.SchematicID,
		Platform:     pulumi.String(a.Platform),
	}, parent).Urls()
	img.ISOURL, img.DiskImageURL, img.Installer = urls.Iso(), urls.DiskImage(), urls.Installer()
	if a.SecureBoot {
		// The factory's signed image: its boot loader enrolls Talos's
		// keys in firmware that is in setup mode, and its installer
		// keeps the node on signed images through upgrades.
		img.ISOURL, img.DiskImageURL, img.Installer = urls.IsoSecureboot(), urls.DiskImageSecureboot(), urls.InstallerSecureboot()
	}
	return img, nil
}

// Check records the problems of the schematic, the input at path: an id
// or extensions and kernel arguments, not both; an id of the Image
// Factory's form; extensions named as the Image Factory lists them, each
// once; kernel arguments without blanks.
func (s Schematic) Check(p *inputs.Problems, path string) {
	if s.ID != "" && len(s.Extensions) > 0 {
		p.Add(path, "set either id or extensions, not both")
	}
	if s.ID != "" && len(s.KernelArgs) > 0 {
		p.Add(path, "set either id or kernelArgs, not both: a schematic id carries its own kernel arguments")
	}
	for i, arg := range s.KernelArgs {
		at := fmt.Sprintf("%s.kernelArgs[%d]", path, i)
		if p.Required(at, arg) && strings.ContainsFunc(arg, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
			p.Add(at, "%q holds a blank: give each kernel argument as its own item, e.g. console=ttyS0", arg)
		}
	}
	if s.ID != "" && !inputs.IsSchematicID(s.ID) {
		p.Add(path+".id", "%q is not a schematic id (64 lowercase hex digits)", s.ID)
	}
	for i, ext := range s.Extensions {
		at := fmt.Sprintf("%s.extensions[%d]", path, i)
		if p.Required(at, ext) && !inputs.IsExtension(ext) {
			p.Add(at, "%q is not an extension name like siderolabs/qemu-guest-agent", ext)
		}
		if ext != "" {
			if j := slices.Index(s.Extensions, ext); j != i {
				p.Add(at, "%q is already listed at extensions[%d]", ext, j)
			}
		}
	}
}
