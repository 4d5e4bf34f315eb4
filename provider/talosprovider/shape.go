package talosprovider

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/inputs"
)

// shape makes the schema infer generated one the SDK generators handle and
// that says what the components take:
//
//   - Plain: every input the component's Go arguments hold as a plain Go
//     value (a string, a struct, a list of structs...) is `plain` in the
//     schema, down to the fields of nested types and the items of lists and
//     maps. infer marks only top-level primitives plain, so the SDKs offered
//     Input<...> for cluster, proxmox, nodes or vps and their fields: a
//     program passing another resource's output compiled and failed at run
//     time. Inputs the Go arguments hold as pulumi inputs (the secrets, the
//     installer image) stay inputs, and so do the fields tagged
//     `package:"input"` (inputs.PackageTag), which resolveInputs waits for.
//   - Index: every object type moves into the index module, named after its
//     Go package and type (talos-cluster:proxmox:Node becomes
//     talos-cluster:index:ProxmoxNode). infer names a type's module after
//     its Go package; modules with types and no resource are what some
//     SDK generators mishandle (the Node.js one of CLI 3.219 wrote a
//     types/index.ts that did not compile). Type tokens are not in any
//     state, so renaming them changes no stack; resource tokens stay.
func shape(spec map[string]any) error {
	types, _ := spec["types"].(map[string]any)
	resources, _ := spec["resources"].(map[string]any)
	pkg, _ := spec["name"].(string)
	w := &walker{pkg: pkg, types: types, seen: map[string]bool{}}
	for token, goType := range resourceArgs {
		r, _ := resources[token].(map[string]any)
		if r == nil {
			return fmt.Errorf("the schema has no resource %s", token)
		}
		if err := w.object(r["inputProperties"], goType, nil); err != nil {
			return fmt.Errorf("%s: %w", token, err)
		}
	}
	for _, d := range w.pending() {
		return fmt.Errorf("the default of %s.%s is on no input", d.in, strings.Join(d.path, "."))
	}
	for token, e := range enumTypes(pkg) {
		if _, taken := types[token]; taken {
			return fmt.Errorf("enum %s: the name is taken", token)
		}
		types[token] = e
	}
	pruneTypes(spec, types)
	providerRefs(spec)
	return moveTypesToIndex(spec, types, resources)
}

// foreignProvider is how infer refers to another package's provider named
// by a `provider:"type=<pkg>@<version>:index:Provider"` tag (the
// components' kubernetesProvider output): as a resource of that package,
// which it is not.
var foreignProvider = regexp.MustCompile(`^(/([a-z0-9-]+)/v[^/]+/schema\.json)#/resources/([a-z0-9-]+):index:Provider$`)

// providerRefs points every reference to another package's provider at
// its schema's provider, `/<pkg>/<version>/schema.json#/provider`, the
// form the schema binder resolves (as pulumi-eks's outputs do).
func providerRefs(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if ref, ok := e.(string); ok && k == "$ref" {
				if m := foreignProvider.FindStringSubmatch(ref); m != nil && m[2] == m[3] {
					v[k] = m[1] + "#/provider"
				}
				continue
			}
			providerRefs(e)
		}
	case []any:
		for _, e := range v {
			providerRefs(e)
		}
	}
}

// pruneTypes deletes the types no resource refers to, directly or through
// other types (a type every use of which got a fork of its own).
func pruneTypes(spec, types map[string]any) {
	used := map[string]bool{}
	collectRefs(spec["resources"], used)
	for done := map[string]bool{}; len(done) < len(used); {
		for token := range used {
			if !done[token] {
				done[token] = true
				collectRefs(types[token], used)
			}
		}
	}
	for token := range types {
		if !used[token] {
			delete(types, token)
		}
	}
}

// collectRefs adds the type tokens v refers to.
func collectRefs(v any, used map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if ref, ok := e.(string); ok && k == "$ref" && strings.HasPrefix(ref, "#/types/") {
				used[strings.TrimPrefix(ref, "#/types/")] = true
				continue
			}
			collectRefs(e, used)
		}
	case []any:
		for _, e := range v {
			collectRefs(e, used)
		}
	}
}

// walker walks the input properties of the schema and the Go arguments
// together: it marks plain what the components take plain (markTypePlain),
// turns the fields of enums into references to their enum types and sets
// the defaults.
type walker struct {
	pkg   string
	types map[string]any
	seen  map[string]bool
	// applied counts the defaults set, by index in defaults.
	applied map[int]bool
}

// pending are the defaults no walk has set.
func (w *walker) pending() []schemaDefault {
	var out []schemaDefault
	for i, d := range defaults {
		if !w.applied[i] {
			out = append(out, d)
		}
	}
	return out
}

// pathDefault is a default under way down its path: rest is the path
// from the current struct.
type pathDefault struct {
	index int
	rest  []string
}

// object walks the properties props of the Go struct goType; inherited are
// the defaults that reach into it from a parent's path.
func (w *walker) object(props any, goType reflect.Type, inherited []pathDefault) error {
	m, _ := props.(map[string]any)
	here := inherited
	for i, d := range defaults {
		if d.in == goType {
			here = append(here, pathDefault{index: i, rest: d.path})
		}
	}
	for _, f := range reflect.VisibleFields(goType) {
		name, ok := inputName(f)
		if !ok {
			continue
		}
		prop, _ := m[name].(map[string]any)
		if prop == nil {
			return fmt.Errorf("the schema has no property %q for %s.%s", name, goType, f.Name)
		}
		if token := enumOf(w.pkg, goType, name, f.Type); token != "" {
			if err := setEnum(prop, token); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		var below []pathDefault
		for _, d := range here {
			if d.rest[0] != name {
				continue
			}
			if len(d.rest) == 1 {
				if err := checkDefault(prop, defaults[d.index].value); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				prop["default"] = defaults[d.index].value
				if w.applied == nil {
					w.applied = map[int]bool{}
				}
				w.applied[d.index] = true
				continue
			}
			below = append(below, pathDefault{index: d.index, rest: d.rest[1:]})
		}
		if len(below) > 0 {
			if err := w.fork(prop, below); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		if input, _ := inputs.PackageInput(f.Tag.Get(inputs.PackageTag)); input {
			// An input of the package (resolveInputs waits for it):
			// neither it nor its items are plain.
			continue
		}
		if err := w.value(prop, f.Type, below); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// fork points prop at a copy of the object type it refers to, named by
// the default's forks, so that defaults set below reach this use only.
func (w *walker) fork(prop map[string]any, below []pathDefault) error {
	d := defaults[below[0].index]
	name := d.forks[len(d.path)-len(below[0].rest)-1]
	if name == "" {
		return nil
	}
	ref, _ := prop["$ref"].(string)
	old := strings.TrimPrefix(ref, "#/types/")
	obj, _ := w.types[old].(map[string]any)
	if obj == nil {
		return fmt.Errorf("refers to %q, no object type to copy as %s", ref, name)
	}
	pkg, mod, _ := splitToken(old)
	token := pkg + ":" + mod + ":" + name
	if _, ok := w.types[token]; !ok {
		var copied map[string]any
		if err := deepCopy(obj, &copied); err != nil {
			return err
		}
		w.types[token] = copied
	}
	prop["$ref"] = "#/types/" + token
	return nil
}

// value walks the type spec ts of a Go value of type t: plain unless t is
// a pulumi input or output, and into the object type it refers to, or the
// items of a list or map.
func (w *walker) value(ts map[string]any, t reflect.Type, below []pathDefault) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if isInput(t) {
		return nil
	}
	ts["plain"] = true
	if ref, _ := ts["$ref"].(string); strings.HasPrefix(ref, "#/types/") {
		token := strings.TrimPrefix(ref, "#/types/")
		if w.seen[token] {
			if len(below) > 0 {
				return fmt.Errorf("%s is walked twice with defaults of its own: give it a fork", token)
			}
			return nil
		}
		w.seen[token] = true
		obj, _ := w.types[token].(map[string]any)
		if obj == nil {
			if _, enum := enumTypeOf(w.pkg, token); enum && t.Kind() == reflect.String {
				return nil
			}
			if t.Kind() != reflect.Struct {
				return fmt.Errorf("%s refers to %s, which the schema does not define as an object", t, token)
			}
		}
		if t.Kind() != reflect.Struct {
			return fmt.Errorf("%s refers to %s, which the schema does not define as an object", t, token)
		}
		return w.object(obj["properties"], t, below)
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		if items, _ := ts["items"].(map[string]any); items != nil {
			return w.value(items, t.Elem(), below)
		}
	case reflect.Map:
		if elems, _ := ts["additionalProperties"].(map[string]any); elems != nil {
			return w.value(elems, t.Elem(), below)
		}
	}
	if len(below) > 0 {
		return fmt.Errorf("a default's path goes on below %s, which has no properties", t)
	}
	return nil
}

// enumTypeOf tells whether token is one of the enums' tokens.
func enumTypeOf(pkg, token string) (string, bool) {
	for _, e := range enums {
		if token == pkg+":index:"+e.name {
			return e.name, true
		}
	}
	return "", false
}

// deepCopy copies a JSON value.
func deepCopy(v any, out any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// inputName is the input's name of a field of a component's Go arguments
// (its `pulumi` tag), false for a field that is no input (Go only).
func inputName(f reflect.StructField) (string, bool) {
	name, _, _ := strings.Cut(f.Tag.Get("pulumi"), ",")
	return name, name != "" && name != "-" && f.IsExported()
}

// isInput tells whether t is a pulumi input or output (a value the
// component takes as an input, which may be unknown or secret).
func isInput(t reflect.Type) bool {
	return t.Implements(reflect.TypeFor[pulumi.Input]()) || t.Implements(reflect.TypeFor[pulumi.Output]()) ||
		reflect.PointerTo(t).Implements(reflect.TypeFor[pulumi.Output]())
}

// typePrefixes name the types of a Go package whose name is not the
// prefix its types keep in the schema: the rented servers' settings, node
// and rescue moved from package vps to the machine kind's own package,
// and keep their names (VpsSettings, ...) for the SDKs already generated.
var typePrefixes = map[string]string{"servers": "Vps"}

// moveTypesToIndex renames every type token pkg:mod:Name outside the index
// module to pkg:index:ModName and rewrites every reference to it.
func moveTypesToIndex(spec, types, resources map[string]any) error {
	renamed := map[string]string{}
	for token := range types {
		pkg, mod, name := splitToken(token)
		if mod == "index" || pkg == "" {
			continue
		}
		prefix, ok := typePrefixes[mod]
		if !ok {
			prefix = strings.ToUpper(mod[:1]) + mod[1:]
		}
		renamed[token] = pkg + ":index:" + prefix + name
	}
	moved := map[string]any{}
	for old, tok := range renamed {
		_, clashType := types[tok]
		_, clashResource := resources[tok]
		_, clashMoved := moved[tok]
		if clashType || clashResource || clashMoved {
			return fmt.Errorf("type %s cannot move to %s: the name is taken", old, tok)
		}
		moved[tok] = types[old]
	}
	for old, tok := range renamed {
		delete(types, old)
		types[tok] = moved[tok]
	}
	rewriteRefs(spec, renamed)
	return nil
}

// rewriteRefs replaces every "$ref" to a renamed type in v.
func rewriteRefs(v any, renamed map[string]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if ref, ok := e.(string); ok && k == "$ref" {
				if tok, ok := renamed[strings.TrimPrefix(ref, "#/types/")]; ok && strings.HasPrefix(ref, "#/types/") {
					v[k] = "#/types/" + tok
				}
				continue
			}
			rewriteRefs(e, renamed)
		}
	case []any:
		for _, e := range v {
			rewriteRefs(e, renamed)
		}
	}
}
