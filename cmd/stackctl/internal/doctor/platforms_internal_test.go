package doctor

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fluodata/talos-pulumi/stacks"
)

// Every platform a stack file may name has checks of its own.
func TestEveryPlatformHasChecks(t *testing.T) {
	t.Parallel()
	var registered []stacks.Platform
	for p := range platformChecks {
		registered = append(registered, p)
	}
	assert.ElementsMatch(t, stacks.Platforms(), registered)
}
