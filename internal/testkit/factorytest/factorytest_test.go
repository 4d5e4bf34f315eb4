package factorytest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/image"
)

// The ids the real Image Factory gives two well-known schematics (the
// default one, with no customization, and the QEMU guest agent's, as
// factory.talos.dev lists them): the fake's canonical form is the
// factory's.
func TestSchematicIDsAreTheFactorys(t *testing.T) {
	t.Parallel()
	id, err := SchematicID([]byte("customization: {}\n"))
	require.NoError(t, err)
	assert.Equal(t, "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba", id)
	doc, err := image.SchematicYAML([]string{"siderolabs/qemu-guest-agent"}, nil)
	require.NoError(t, err)
	id, err = SchematicID([]byte(doc))
	require.NoError(t, err)
	assert.Equal(t, "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515", id)

	_, err = SchematicID([]byte("customization:\n  systemExtension: {}\n"))
	require.ErrorContains(t, err, "not found", "an unknown field is refused, as the factory refuses it")
}
