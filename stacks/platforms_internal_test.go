package stacks

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Every platform a stack file may name has the file's rules, each set,
// and a name the file does not know gets rules that do nothing.
func TestEveryPlatformHasItsRules(t *testing.T) {
	t.Parallel()
	assert.ElementsMatch(t, Platforms(), slices.Collect(maps.Keys(byPlatform)))
	for _, p := range Platforms() {
		r := rulesOf(p)
		for name, set := range map[string]bool{
			"defaults": r.defaults != nil, "resolve": r.resolve != nil, "explicitZeros": r.explicitZeros != nil,
			"addresses": r.addresses != nil, "validate": r.validate != nil, "validateNode": r.validateNode != nil,
		} {
			assert.True(t, set, "%s: %s", p, name)
		}
	}
	var d Diagnostics
	cfg := &Config{Platform: "docker"}
	r := rulesOf(cfg.Platform)
	r.defaults(cfg)
	r.resolve(cfg)
	r.validate(&d, cfg)
	assert.Empty(t, d.Errors)
}
