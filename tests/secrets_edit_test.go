package tests

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/internals"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/program/programtest"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// No edit of the stack file replaces or rotates the machine secrets (item 1
// of issue 23): every value of each example stack file is changed in turn
// (a version lowered and raised, an address moved, a name changed, a
// number raised, a flag flipped, a list shortened), and the next run,
// reading the last run's outputs as the real one does, either refuses the
// edit before anything is registered or registers the secrets under the
// same URN with the same inputs, but for the ones whose changes it ignores.
// The talosVersion is among those: the provider replaces the secrets when
// it is lowered, even by a patch release.
func TestNoStackEditReplacesTheMachineSecrets(t *testing.T) {
	t.Parallel()
	for _, tc := range stackstest.Examples {
		t.Run(tc.Stack, func(t *testing.T) {
			t.Parallel()
			src := stackstest.Example(t, tc.File)
			e, outs, _, err := programtest.Run(t, src, tc.Stack, program.Options{})
			require.NoError(t, err)
			secrets := onlyOne(t, e, componentstest.Secrets)
			assert.Contains(t, secrets.IgnoreChanges, "talosVersion")
			last := lastOutputs(outs)

			edits := stackEdits(t, src)
			require.GreaterOrEqual(t, len(edits), 10, "every value of the example is edited")
			refused, kept := 0, 0
			for _, ed := range edits {
				e := &componentstest.Engine{StackOutputs: last}
				_, _, _, err := programtest.RunOn(t, e, ed.src, tc.Stack, program.Options{})
				if err != nil {
					assert.Empty(t, e.All(), "%s: refused, but after registering resources: %v", ed.name, err)
					refused++
					continue
				}
				got := onlyOne(t, e, componentstest.Secrets)
				assert.Equal(t, secrets.URN, got.URN, "%s: the secrets get another URN: the engine would replace them", ed.name)
				assert.Equal(t, secrets.Parent, got.Parent, ed.name)
				assert.Equal(t, secrets.IgnoreChanges, got.IgnoreChanges, ed.name)
				assert.Equal(t, withoutKeys(secrets.Inputs, secrets.IgnoreChanges), withoutKeys(got.Inputs, got.IgnoreChanges),
					"%s: the secrets' inputs change", ed.name)
				assert.Empty(t, got.ReplaceWith, ed.name)
				kept++
			}
			t.Logf("%d edits: %d refused before anything was registered, %d kept the secrets", len(edits), refused, kept)
			assert.Positive(t, kept)
		})
	}
}

func onlyOne(t *testing.T, e *componentstest.Engine, typ string) componentstest.Registered {
	t.Helper()
	rs := e.ByType(typ)
	require.Len(t, rs, 1, typ)
	return rs[0]
}

func withoutKeys(m resource.PropertyMap, keys []string) resource.PropertyMap {
	out := maps.Clone(m)
	for _, k := range keys {
		delete(out, resource.PropertyKey(k))
	}
	return out
}

// lastOutputs are a run's stack outputs as the next run reads them.
func lastOutputs(outs map[string]internals.UnsafeAwaitOutputResult) resource.PropertyMap {
	last := resource.PropertyMap{}
	for k, v := range outs {
		if v.Value == nil {
			continue
		}
		last[resource.PropertyKey(k)] = resource.NewPropertyValue(plainValue(v.Value))
	}
	return last
}

// plainValue turns typed maps of the outputs into the map[string]any
// NewPropertyValue takes.
func plainValue(v any) any {
	switch x := v.(type) {
	case map[string]map[string]string:
		m := map[string]any{}
		for k, inner := range x {
			f := map[string]any{}
			for ik, iv := range inner {
				f[ik] = iv
			}
			m[k] = f
		}
		return m
	case map[string]string:
		m := map[string]any{}
		for k, s := range x {
			m[k] = s
		}
		return m
	case map[string]talos.NodeStatus:
		m := map[string]any{}
		for k, n := range x {
			m[k] = structValue(reflect.ValueOf(n))
		}
		return m
	}
	return v
}

// structValue is a struct output as the SDK sends it: its fields by their
// pulumi names, nil ones left out (pulumi sdk/go/pulumi/rpc.go,
// marshalInputImpl: a null field is not set).
func structValue(v reflect.Value) map[string]any {
	out := map[string]any{}
	for i := range v.NumField() {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("pulumi"), ",")
		f := v.Field(i)
		if name == "" || f.Kind() == reflect.Pointer && f.IsNil() {
			continue
		}
		f = reflect.Indirect(f)
		if f.CanInt() {
			out[name] = float64(f.Int())
			continue
		}
		out[name] = f.Interface()
	}
	return out
}

type stackEdit struct {
	name string
	src  stacks.Source
}

var (
	versionRe = regexp.MustCompile(`^(v?)(\d+)\.(\d+)\.(\d+)$`)
	ipv4Re    = regexp.MustCompile(`^(\d+\.\d+\.\d+\.)(\d+)$`)
)

// stackEdits are src with one value changed, for every value of it.
func stackEdits(t *testing.T, src stacks.Source) []stackEdit {
	t.Helper()
	var out []stackEdit
	for _, key := range slices.Sorted(maps.Keys(src.Values)) {
		raw := src.Values[key]
		var v any
		if json.Unmarshal([]byte(raw), &v) != nil {
			v = raw // a plain string value
		}
		for _, m := range mutations(key, v) {
			b, err := json.Marshal(m.value)
			require.NoError(t, err)
			s := src
			s.Values = maps.Clone(src.Values)
			if str, ok := m.value.(string); ok && m.path == key {
				s.Values[key] = str
			} else {
				s.Values[key] = string(b)
			}
			out = append(out, stackEdit{name: m.path + ": " + m.what, src: s})
		}
	}
	return out
}

type mutation struct {
	path, what string
	value      any // the whole top-level value, with the one change
}

// mutations are v with one leaf changed, for every leaf (the whole value
// each time).
func mutations(path string, v any) []mutation {
	var out []mutation
	var walk func(p string, cur any, set func(any) any)
	walk = func(p string, cur any, set func(any) any) {
		switch x := cur.(type) {
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(x)) {
				walk(p+"."+k, x[k], func(nv any) any {
					c := maps.Clone(x)
					c[k] = nv
					return set(c)
				})
			}
		case []any:
			if len(x) > 1 {
				out = append(out, mutation{p, "the last item removed", set(slices.Clone(x[:len(x)-1]))})
			}
			for i := range x {
				walk(fmt.Sprintf("%s[%d]", p, i), x[i], func(nv any) any {
					c := slices.Clone(x)
					c[i] = nv
					return set(c)
				})
			}
		case string:
			for _, s := range changedStrings(x) {
				out = append(out, mutation{p, fmt.Sprintf("%q -> %q", x, s), set(s)})
			}
		case float64:
			out = append(out, mutation{p, fmt.Sprintf("%v -> %v", x, x+1), set(x + 1)})
		case bool:
			out = append(out, mutation{p, fmt.Sprintf("%v -> %v", x, !x), set(!x)})
		}
	}
	walk(strings.TrimPrefix(path, "talos-cluster:"), v, func(nv any) any { return nv })
	return out
}

// changedStrings are other values of s of the same kind: a version one
// patch lower and one minor higher, the next address, a longer name.
func changedStrings(s string) []string {
	if m := versionRe.FindStringSubmatch(s); m != nil {
		major, minor, patch := atoi(m[2]), atoi(m[3]), atoi(m[4])
		out := []string{fmt.Sprintf("%s%d.%d.0", m[1], major, minor+1)}
		if patch > 0 {
			out = append(out, fmt.Sprintf("%s%d.%d.%d", m[1], major, minor, patch-1))
		}
		return out
	}
	if m := ipv4Re.FindStringSubmatch(s); m != nil {
		return []string{fmt.Sprintf("%s%d", m[1], (atoi(m[2])+1)%250+1)}
	}
	return []string{s + "b"}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
