package stacks

import (
	"maps"
	"reflect"
	"slices"
	"strings"
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

// A local stack says why a container has none of the keys of a machine:
// one reason for each node key that is some platform's own.
func TestLocalSaysWhyForEveryMachineKey(t *testing.T) {
	t.Parallel()
	var tagged []string
	for _, sf := range reflect.VisibleFields(reflect.TypeFor[NodeConfig]()) {
		if sf.Tag.Get("platform") != "" {
			tagged = append(tagged, strings.Split(sf.Tag.Get("json"), ",")[0])
		}
	}
	assert.ElementsMatch(t, tagged, append(slices.Collect(maps.Keys(containerCannot)), containerTakes...))
}
