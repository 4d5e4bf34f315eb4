package stacks

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
)

// SchemaFile is where the JSON Schema of a stack file lives, from the
// repository's root.
const SchemaFile = "docs/stack-file.schema.json"

// JSONSchema is the JSON Schema (draft-07, what editors' YAML language
// servers read) of a whole stack file, Pulumi.<stack>.yaml, generated from
// the same doc comments and tags as the configuration reference: every key of the
// project's namespace with its type and description, unknown keys refused
// as the loader refuses them, secrets only in the encrypted form `pulumi
// config set --secret` writes. Keys of other namespaces (provider config,
// `pulumi:tags`) are left free.
func JSONSchema(docs KeyDocs) ([]byte, error) {
	props, required := docs.objectProperties(reflect.TypeFor[Config](), Namespace+":")
	doc := map[string]any{
		"$schema":     "http://json-schema.org/draft-07/schema#",
		"$id":         "https://github.com/fluodata/talos-pulumi/" + SchemaFile,
		"title":       "talos-cluster stack file (Pulumi.<stack>.yaml)",
		"description": "Generated from stacks/types.go by `make docs`; the keys are described in docs/configuration.md.",
		"type":        "object",
		"properties": map[string]any{
			"secretsprovider": map[string]any{"type": "string", "description": "The stack's secrets provider (set by `pulumi stack init`)."},
			"encryptedkey":    map[string]any{"type": "string"},
			"encryptionsalt":  map[string]any{"type": "string", "description": "The passphrase secrets provider's salt (set by `pulumi stack init`)."},
			"environment":     map[string]any{"description": "Pulumi ESC environments the stack imports."},
			"config": map[string]any{
				"type":       "object",
				"properties": props,
				"required":   required,
			},
		},
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("unable to encode the stack file's schema: %w", err)
	}
	return append(out, '\n'), nil
}

// fieldSchema is the schema of one field of the struct parent, its
// description from its doc comment and its default from its tag.
func (d KeyDocs) fieldSchema(parent reflect.Type, sf reflect.StructField) map[string]any {
	s := d.typeSchema(sf.Type)
	desc := Markdown(d.fieldDoc(parent, sf))
	if def := sf.Tag.Get("default"); def != "" {
		desc += " Default: `" + def + "`."
		if v, ok := typedDefault(sf.Type, def); ok {
			s["default"] = v
		}
	}
	if sf.Type == reflect.TypeFor[Platform]() {
		var names []string
		for _, p := range Platforms() {
			names = append(names, string(p))
		}
		s["enum"] = names
	}
	s["description"] = desc
	return s
}

// typeSchema is the schema of a Go type of the stack's structs.
func (d KeyDocs) typeSchema(t reflect.Type) map[string]any {
	switch t {
	case secretType:
		return map[string]any{
			"type":                 "object",
			"properties":           map[string]any{"secure": map[string]any{"type": "string"}},
			"required":             []string{"secure"},
			"additionalProperties": false,
		}
	case patchType:
		return map[string]any{"type": []string{"object", "string"}}
	case anyMapType:
		return map[string]any{"type": "object"}
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		props, required := d.objectProperties(t, "")
		s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
		if len(required) > 0 {
			s["required"] = required
		}
		return s
	case reflect.Slice:
		return map[string]any{"type": "array", "items": d.typeSchema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": d.typeSchema(t.Elem())}
	case reflect.Int, reflect.Int64:
		return map[string]any{"type": "integer"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	default:
		return map[string]any{"type": "string"}
	}
}

// objectProperties are the schemas of a struct's keys, each named prefix +
// its JSON name, and the keys required everywhere (required:"true"; a key
// required on one platform only is the loader's to check).
func (d KeyDocs) objectProperties(t reflect.Type, prefix string) (map[string]any, []string) {
	props := map[string]any{}
	var required []string
	for i := range t.NumField() {
		sf := t.Field(i)
		name := jsonName(sf)
		if name == "" {
			continue
		}
		props[prefix+name] = d.fieldSchema(t, sf)
		if sf.Tag.Get("required") == "true" {
			required = append(required, prefix+name)
		}
	}
	return props, required
}

// typedDefault is a default tag as a value of the field's type, when it is
// one (a tag like "proxmox: ...; vps: none" is prose for the description).
func typedDefault(t reflect.Type, def string) (any, bool) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		n, err := strconv.Atoi(def)
		return n, err == nil
	case reflect.Bool:
		b, err := strconv.ParseBool(def)
		return b, err == nil
	default:
		return nil, false
	}
}
