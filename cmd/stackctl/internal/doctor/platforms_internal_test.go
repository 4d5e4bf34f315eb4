package doctor

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fluodata/talos-pulumi/stacks"
)

// Every platform a stack file may name has checks of its own.
func TestEveryPlatformHasChecks(t *testing.T) {
	t.Parallel()
	assert.ElementsMatch(t, stacks.Platforms(), slices.Collect(maps.Keys(platformChecks)))
}
