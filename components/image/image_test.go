package image_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/image"
	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/internal/testkit/factorytest"
)

// Without kernel arguments the document is byte for byte the one earlier
// versions registered: a cluster keeps its schematic id, hence its
// installer, and no node is upgraded by this version.
func TestSchematicYAMLWithoutKernelArgsIsUnchanged(t *testing.T) {
	doc, err := image.SchematicYAML([]string{"siderolabs/qemu-guest-agent", "siderolabs/iscsi-tools"}, nil)
	require.NoError(t, err)
	assert.Equal(t, "customization:\n    systemExtensions:\n        officialExtensions:\n            - siderolabs/iscsi-tools\n            - siderolabs/qemu-guest-agent\n", doc)
	empty, err := image.SchematicYAML(nil, []string{})
	require.NoError(t, err)
	assert.Equal(t, "customization:\n    systemExtensions:\n        officialExtensions: []\n", empty)
}

// Kernel arguments are image-factory's customization.extraKernelArgs (the
// fake parses a schematic as strictly as image-factory v0.9.0 does), in
// the order given.
func TestSchematicYAMLCarriesKernelArgsInOrder(t *testing.T) {
	doc, err := image.SchematicYAML([]string{"siderolabs/iscsi-tools"}, []string{"console=ttyS0", "console=tty0"})
	require.NoError(t, err)
	assert.Contains(t, doc, "extraKernelArgs:\n        - console=ttyS0\n        - console=tty0\n")
	withArgs, err := factorytest.SchematicID([]byte(doc))
	require.NoError(t, err, "image-factory's schematic has the field")
	plain, err := image.SchematicYAML([]string{"siderolabs/iscsi-tools"}, nil)
	require.NoError(t, err)
	without, err := factorytest.SchematicID([]byte(plain))
	require.NoError(t, err)
	assert.NotEqual(t, without, withArgs)
}

func TestSchematicKeyAndSuffix(t *testing.T) {
	a := image.Schematic{Extensions: []string{"b", "a"}, KernelArgs: []string{"x=1", "y=2"}}
	b := image.Schematic{Extensions: []string{"a", "b"}, KernelArgs: []string{"x=1", "y=2"}}
	assert.Equal(t, a.Key(), b.Key(), "the extensions' order does not matter")
	assert.Equal(t, a.Suffix(), b.Suffix())
	assert.Len(t, a.Suffix(), 8)
	c := image.Schematic{Extensions: []string{"a", "b"}, KernelArgs: []string{"y=2", "x=1"}}
	assert.NotEqual(t, a.Key(), c.Key(), "the kernel arguments' order does")
	assert.Equal(t, image.Schematic{}.Key(), image.Schematic{Extensions: []string{}}.Key(), "none and an empty list are the same")
	assert.NotEqual(t, image.Schematic{ID: "x"}.Key(), image.Schematic{Extensions: []string{"x"}}.Key())
}

func TestSchematicOver(t *testing.T) {
	cluster := image.Schematic{Extensions: []string{"siderolabs/qemu-guest-agent"}, KernelArgs: []string{"quiet"}}
	for name, c := range map[string]struct {
		own, cluster, want image.Schematic
	}{
		"kernel arguments only": {image.Schematic{KernelArgs: []string{"console=ttyS0"}}, cluster, image.Schematic{Extensions: cluster.Extensions, KernelArgs: []string{"console=ttyS0"}}},
		"extensions only":       {image.Schematic{Extensions: []string{"x/y"}}, cluster, image.Schematic{Extensions: []string{"x/y"}, KernelArgs: cluster.KernelArgs}},
		"no extensions at all":  {image.Schematic{Extensions: []string{}}, cluster, image.Schematic{Extensions: []string{}, KernelArgs: cluster.KernelArgs}},
		"empty: the cluster's":  {image.Schematic{}, cluster, cluster},
		"an id is whole":        {image.Schematic{ID: "abc"}, cluster, image.Schematic{ID: "abc"}},
		"over an id":            {image.Schematic{Extensions: []string{"x/y"}}, image.Schematic{ID: "abc"}, image.Schematic{Extensions: []string{"x/y"}}},
		"nothing over an id":    {image.Schematic{}, image.Schematic{ID: "abc"}, image.Schematic{ID: "abc"}},
	} {
		assert.Equal(t, c.want, c.own.Over(c.cluster), name)
	}
}

func TestSchematicCheck(t *testing.T) {
	var p inputs.Problems
	image.Schematic{ID: "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515", KernelArgs: []string{"a"}}.Check(&p, "schematic")
	image.Schematic{KernelArgs: []string{"ok=1", "", "a\tb"}}.CheckOver(&p, "nodes[1].schematic", image.Schematic{})
	image.Schematic{KernelArgs: []string{"ok=1"}}.CheckOver(&p, "nodes[2].schematic", image.Schematic{ID: "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515"})
	image.Schematic{Extensions: []string{"x/y"}, KernelArgs: []string{"ok=1"}}.CheckOver(&p, "nodes[3].schematic", image.Schematic{ID: "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515"})
	got := map[string]string{}
	for _, pr := range p.List() {
		got[pr.Path] = pr.Message
	}
	assert.Len(t, got, 4, "%v", got)
	assert.Contains(t, got["schematic"], "set either id or kernelArgs")
	assert.Contains(t, got["nodes[1].schematic.kernelArgs[1]"], "is required")
	assert.Contains(t, got["nodes[1].schematic.kernelArgs[2]"], "holds a blank")
	assert.Contains(t, got["nodes[2].schematic.kernelArgs"], "give this schematic's extensions too")
}
