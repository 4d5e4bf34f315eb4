package talosprovider

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/components/vps"
)

// resourceArgs are the Go arguments each component's Construct decodes its
// inputs into.
var resourceArgs = map[string]reflect.Type{
	talosToken:   reflect.TypeFor[talos.ClusterArgs](),
	proxmoxToken: reflect.TypeFor[proxmox.ClusterArgs](),
	vpsToken:     reflect.TypeFor[vps.ClusterArgs](),
}

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
//     installer image) stay inputs.
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
	seen := map[string]bool{}
	for token, goType := range resourceArgs {
		r, _ := resources[token].(map[string]any)
		if r == nil {
			return fmt.Errorf("the schema has no resource %s", token)
		}
		if err := markPlain(r["inputProperties"], goType, types, seen); err != nil {
			return fmt.Errorf("%s: %w", token, err)
		}
	}
	return moveTypesToIndex(spec, types, resources)
}

// markPlain marks plain the properties of props whose fields of the struct
// goType are plain Go values, and the properties of the types they refer
// to (each type once: seen).
func markPlain(props any, goType reflect.Type, types map[string]any, seen map[string]bool) error {
	m, _ := props.(map[string]any)
	for _, f := range reflect.VisibleFields(goType) {
		name, _, _ := strings.Cut(f.Tag.Get("pulumi"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		prop, _ := m[name].(map[string]any)
		if prop == nil {
			return fmt.Errorf("the schema has no property %q for %s.%s", name, goType, f.Name)
		}
		if err := markTypePlain(prop, f.Type, types, seen); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// markTypePlain marks plain the type spec ts of a Go value of type t, unless
// t is a pulumi input or output.
func markTypePlain(ts map[string]any, t reflect.Type, types map[string]any, seen map[string]bool) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if isInput(t) {
		return nil
	}
	ts["plain"] = true
	if ref, _ := ts["$ref"].(string); strings.HasPrefix(ref, "#/types/") {
		token := strings.TrimPrefix(ref, "#/types/")
		if seen[token] {
			return nil
		}
		seen[token] = true
		obj, _ := types[token].(map[string]any)
		if obj == nil || t.Kind() != reflect.Struct {
			return fmt.Errorf("%s refers to %s, which the schema does not define as an object", t, token)
		}
		return markPlain(obj["properties"], t, types, seen)
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		if items, _ := ts["items"].(map[string]any); items != nil {
			return markTypePlain(items, t.Elem(), types, seen)
		}
	case reflect.Map:
		if elems, _ := ts["additionalProperties"].(map[string]any); elems != nil {
			return markTypePlain(elems, t.Elem(), types, seen)
		}
	}
	return nil
}

// isInput tells whether t is a pulumi input or output (a value the
// component takes as an input, which may be unknown or secret).
func isInput(t reflect.Type) bool {
	return t.Implements(reflect.TypeFor[pulumi.Input]()) || t.Implements(reflect.TypeFor[pulumi.Output]()) ||
		reflect.PointerTo(t).Implements(reflect.TypeFor[pulumi.Output]())
}

// moveTypesToIndex renames every type token pkg:mod:Name outside the index
// module to pkg:index:ModName and rewrites every reference to it.
func moveTypesToIndex(spec, types, resources map[string]any) error {
	renamed := map[string]string{}
	for token := range types {
		pkg, mod, name := splitToken(token)
		if mod == "index" || pkg == "" {
			continue
		}
		renamed[token] = pkg + ":index:" + strings.ToUpper(mod[:1]) + mod[1:] + name
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
