package program

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/stacks"
)

// The registry has one entry for each platform a stack file may name, and
// no other; a platform Load refuses deploys nothing.
func TestEveryPlatformIsRegisteredOnce(t *testing.T) {
	t.Parallel()
	assert.ElementsMatch(t, stacks.Platforms(), slices.Collect(maps.Keys(platforms)))
	for _, p := range stacks.Platforms() {
		_, none := platformOf(&stacks.Config{Platform: p}).(noPlatform)
		assert.False(t, none, "%s has a component", p)
		typ, ok := ComponentType(p)
		assert.True(t, ok, "%s", p)
		assert.Regexp(t, `^talos-cluster:index:[A-Z][a-z]+Cluster$`, typ, "%s", p)
	}
	_, ok := ComponentType("docker")
	assert.False(t, ok)
	_, err := platformOf(&stacks.Config{Platform: "docker"}).deploy(nil, &stacks.Config{}, Options{})
	require.ErrorContains(t, err, `unable to deploy platform "docker": it has no component`)
}
