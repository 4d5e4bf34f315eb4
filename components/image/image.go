// Package image resolves the cluster's Talos image with the Image Factory:
// the schematic (a given id, or one registered from a list of official
// extensions) and the factory URLs for a platform. Both platforms use it:
// Proxmox boots the ISO, a VPS gets the raw disk image written from rescue.
package image

import (
	"fmt"
	"slices"

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
}

// Args select the image.
type Args struct {
	TalosVersion string
	// SchematicID is an existing schematic; empty registers one from
	// Extensions.
	SchematicID string
	Extensions  []string
	// Platform is the factory platform (PlatformMetal, PlatformNocloud).
	Platform string
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

// New resolves the schematic (registering it with the factory unless an id
// is given; the schematic resource is named <name>-schematic) and its URLs.
func New(ctx *pulumi.Context, name string, a Args, parent pulumi.ResourceOrInvokeOption) (*Image, error) {
	img := &Image{Platform: a.Platform}
	if a.SchematicID != "" {
		img.SchematicID = pulumi.String(a.SchematicID).ToStringOutput()
	} else {
		doc, err := SchematicYAML(a.Extensions)
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
		TalosVersion: pulumi.String(a.TalosVersion),
		SchematicId:  img.SchematicID,
		Platform:     pulumi.String(a.Platform),
	}, parent).Urls()
	img.ISOURL = urls.Iso()
	img.DiskImageURL = urls.DiskImage()
	img.Installer = urls.Installer()
	return img, nil
}

// Check records the problems of the schematic, the input at path: an id
// or extensions, not both; an id of the Image Factory's form; extensions
// named as the Image Factory lists them, each once.
func (s Schematic) Check(p *inputs.Problems, path string) {
	if s.ID != "" && len(s.Extensions) > 0 {
		p.Add(path, "set either id or extensions, not both")
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
