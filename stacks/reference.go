package stacks

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/fluodata/talos-pulumi/internal/godoc"
)

// Field describes one configuration key for the reference documentation.
type Field struct {
	// Path is the key path; list items appear as `[]`, e.g. `nodes.workers[].ip`.
	Path     string
	Type     string
	Required string
	Default  string
	Doc      string
	// Go is the struct field, for tests that compare tags with behaviour.
	Go reflect.StructField
}

// KeyDocs are the stack keys' descriptions: the doc comments of the fields
// of this package's struct types, read from its source.
type KeyDocs struct{ pkg godoc.Package }

// ReadKeyDocs reads the doc comments of the stack keys from dir, this
// package's source folder.
func ReadKeyDocs(dir string) (KeyDocs, error) {
	pkg, err := godoc.Read(dir, "json")
	if err != nil {
		return KeyDocs{}, fmt.Errorf("unable to read the stack keys' doc comments: %w", err)
	}
	return KeyDocs{pkg: pkg}, nil
}

// fieldDoc is a key's description, the field sf of the struct parent: its
// doc comment, after the platform it is only valid on (its platform tag),
// as in "proxmox: VM id ...".
func (d KeyDocs) fieldDoc(parent reflect.Type, sf reflect.StructField) string {
	text := d.pkg.Structs[parent.Name()].FieldDoc(jsonName(sf))
	if p := sf.Tag.Get("platform"); p != "" {
		return p + ": " + text
	}
	return text
}

// ComponentKeys are the keys whose rules are their platform component's
// (their tag rules:"component"): Load leaves those rules to the component,
// whose problems are named by these keys. A node's keys are "nodes[].<key>"
// (for either group); a key stands for the keys under it too.
func ComponentKeys() []string {
	var out []string
	for _, f := range Fields() {
		if f.Go.Tag.Get("rules") != "component" {
			continue
		}
		key := f.Path
		for _, group := range []string{"nodes.controlPlanes[].", "nodes.workers[]."} {
			if rest, ok := strings.CutPrefix(key, group); ok {
				key = "nodes[]." + rest
			}
		}
		if !slices.Contains(out, key) {
			out = append(out, key)
		}
	}
	return out
}

// Fields lists every configuration key, in declaration order, walking into
// objects and lists of objects; their Doc is left empty (KeyDocs.Fields).
func Fields() []Field { return KeyDocs{}.Fields() }

// Fields is the package's Fields with each key's description.
func (d KeyDocs) Fields() []Field {
	var out []Field
	d.walkFields("", reflect.TypeFor[Config](), &out)
	return out
}

func (d KeyDocs) walkFields(prefix string, t reflect.Type, out *[]Field) {
	for i := range t.NumField() {
		sf := t.Field(i)
		name := jsonName(sf)
		if name == "" {
			continue
		}
		path := join(prefix, name)
		ft := sf.Type
		*out = append(*out, Field{
			Path: path, Type: typeName(sf), Required: requiredText(sf.Tag.Get("required")),
			Default: sf.Tag.Get("default"), Doc: d.fieldDoc(t, sf), Go: sf,
		})
		switch {
		case ft.Kind() == reflect.Struct && ft != secretType && ft != patchType:
			d.walkFields(path, ft, out)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct && ft.Elem() != patchType:
			d.walkFields(path+"[]", ft.Elem(), out)
		}
	}
}

func typeName(sf reflect.StructField) string {
	t := sf.Type
	switch {
	case t == secretType:
		return "secret string"
	case t == patchType:
		return "patch"
	case t == anyMapType:
		return "object (free-form)"
	case t.Kind() == reflect.Pointer:
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		return "object"
	case reflect.Slice:
		switch {
		case t.Elem() == patchType:
			return "list of patches"
		case t.Elem().Kind() == reflect.Struct:
			return "list of objects"
		case t.Elem().Kind() == reflect.Int:
			return "list of integers"
		default:
			return "list of " + t.Elem().Kind().String() + "s"
		}
	case reflect.Map:
		return "map of " + t.Elem().Kind().String() + "s"
	case reflect.Int:
		return "integer"
	case reflect.Bool:
		return "boolean"
	default:
		return t.Kind().String()
	}
}

func requiredText(tag string) string {
	switch tag {
	case "":
		return ""
	case "true":
		return "yes"
	default:
		return "on " + tag
	}
}

var quotedRe = regexp.MustCompile(`'([^' ]+)'`)

// Markdown renders a doc string: 'token' becomes `token`.
func Markdown(doc string) string { return quotedRe.ReplaceAllString(doc, "`$1`") }

// Reference renders the configuration reference as a Markdown table.
func (d KeyDocs) Reference() string {
	var b strings.Builder
	b.WriteString("| Key | Type | Required | Default | Description |\n")
	b.WriteString("|---|---|---|---|---|\n")
	for _, f := range d.Fields() {
		def := f.Default
		if def != "" {
			def = "`" + def + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n",
			f.Path, f.Type, f.Required, escapeCell(def), escapeCell(Markdown(f.Doc)))
	}
	return b.String()
}

func escapeCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
