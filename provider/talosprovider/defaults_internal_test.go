package talosprovider

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Every input listed as derived from other inputs is one a defaulter
// fills on the probe: a stale entry would hide nothing and say something
// untrue.
func TestDerivedDefaultsAreFilled(t *testing.T) {
	t.Parallel()
	var found []filled
	for _, d := range defaulters {
		probe := probeOf(d.args)
		walkFilled(probe, d.apply(probe), &found)
	}
	for _, key := range derivedDefaults {
		assert.True(t, slices.ContainsFunc(found, func(f filled) bool { return f.holder.String()+"."+f.prop == key }),
			"%s: no defaulter fills it: drop it from derivedDefaults", key)
	}
}
