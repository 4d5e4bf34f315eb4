// Package docs reads the doc comments of the components' argument and
// output types, so that the package schema describes every input and output
// in the words of the Go source, which stays their only copy. infer builds
// the schema from the types by reflection and cannot see comments; the
// provider adds them from descriptions.json, which `go generate` writes with
// this package and a test keeps current.
package docs

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"

	"github.com/fluodata/talos-pulumi/internal/godoc"
)

// Type is one struct type's documentation: its own, and each field's by the
// name its `pulumi` tag gives it.
type Type struct {
	Doc    string            `json:"doc,omitempty"`
	Fields map[string]string `json:"fields,omitempty"`
}

// Collect reads the Go packages in dirs (test files aside) and returns the
// documentation of every struct type with `pulumi`-tagged fields, keyed
// "<package>.<Type>", as infer's type tokens name them.
func Collect(dirs ...string) (map[string]Type, error) {
	out := map[string]Type{}
	for _, dir := range dirs {
		pkg, err := godoc.Read(dir, "pulumi")
		if err != nil {
			return nil, err
		}
		for name, s := range pkg.Structs {
			if td, ok := structDoc(name, s, pkg.Consts); ok {
				out[pkg.Name+"."+name] = td
			}
		}
	}
	return out, nil
}

func structDoc(typeName string, s godoc.Struct, consts map[string]string) (Type, bool) {
	td := Type{Doc: neutral(s.Doc, typeName, nil, consts), Fields: map[string]string{}}
	// The Go names of the fields, as the schema names them: a description
	// that mentions a sibling field names it the schema's way.
	names := map[string]string{}
	for _, f := range s.Fields {
		names[f.GoName] = f.Name
	}
	for _, f := range s.Fields {
		if f.Doc != "" {
			td.Fields[f.Name] = neutral(f.Doc, f.GoName, names, consts)
		}
	}
	if len(td.Fields) == 0 {
		return Type{}, false
	}
	return td, true
}

var (
	// selectorRe is a Go field of another type (NodeSpec.DataDiskSize).
	selectorRe = regexp.MustCompile(`\b[A-Z][A-Za-z0-9]*\.([A-Z][A-Za-z0-9]*)\b`)
	wordRe     = regexp.MustCompile(`\b[A-Z][A-Za-z0-9]*\b`)
)

// determiners start a noun phrase: "X is the ..." reads "The ...".
var determiners = map[string]bool{
	"the": true, "a": true, "an": true, "one": true, "how": true, "what": true, "which": true, "where": true,
	"when": true, "whether": true, "every": true, "each": true, "its": true, "their": true, "this": true, "these": true,
}

// leadVerbs are the verbs the doc comments start with after the name
// ("DiskDatastore holds the VM disks" reads "Holds the VM disks").
var leadVerbs = map[string]bool{
	"holds": true, "names": true, "selects": true, "installs": true, "makes": true, "reaches": true, "writes": true,
	"skips": true, "leaves": true, "tags": true, "resets": true, "says": true, "schedules": true, "replace": true,
	"shapes": true, "addresses": true, "takes": true, "refuses": true, "pins": true, "sets": true,
	"mounts": true, "sends": true, "stops": true, "hands": true, "joins": true, "gives": true, "limits": true,
	"describes": true, "turns": true, "boots": true, "encrypts": true,
}

// pluralVerbs are lead verbs after a plural name ("DataVolumeSettings say
// ..."), read in the singular once the name is gone ("Says ...").
var pluralVerbs = map[string]string{
	"say": "says", "send": "sends", "give": "gives", "hand": "hands", "turn": "turns", "shape": "shapes",
	"schedule": "schedules", "hold": "holds", "limit": "limits",
}

// neutral is a doc comment in the words of any language's user rather than
// Go's: without the Go name it starts with ("InstallerImage is the
// installer" is "The installer", "DiskDatastore holds ..." is "Holds ..."),
// or with the schema's name for it ("apiTokenId is user@realm!..."),
// sibling fields and other types' fields by their schema names, a package
// constant by its value, and a nil value as one left out.
func neutral(text, goName string, fields map[string]string, consts map[string]string) string {
	if text == "" {
		return ""
	}
	text = lead(text, goName, fields[goName])
	text = selectorRe.ReplaceAllStringFunc(text, func(s string) string {
		return lowerFirst(selectorRe.FindStringSubmatch(s)[1])
	})
	text = wordRe.ReplaceAllStringFunc(text, func(w string) string {
		if v, ok := consts[w]; ok && strings.HasPrefix(w, "Default") {
			return v
		}
		// A sibling's Go name (TokenSecret), not a word that happens to be
		// one (Proxmox, Name).
		if name, ok := fields[w]; ok && w != goName && strings.ToLower(w[1:]) != w[1:] {
			return name
		}
		return w
	})
	// A Replacer tries the old strings in this order at each position:
	// the first holds the second.
	return strings.NewReplacer("(nil: none)", "(none when left out)", "nil: ", "left out: ", "when nil", "when left out").Replace(text)
}

// lead rewrites the start of a doc comment that names goName (see
// neutral); schemaName is the field's name in the schema, "" for a type.
func lead(text, goName, schemaName string) string {
	rest, ok := strings.CutPrefix(text, goName+" ")
	if !ok {
		return text
	}
	verb, after, _ := strings.Cut(rest, " ")
	switch {
	case verb == "is" || verb == "are":
		first, _, _ := strings.Cut(after, " ")
		if determiners[strings.ToLower(first)] || first != "" && unicode.IsUpper(rune(first[0])) {
			return capitalize(after)
		}
		if schemaName != "" {
			return schemaName + " " + rest
		}
	case leadVerbs[verb]:
		return capitalize(rest)
	case pluralVerbs[verb] != "":
		return capitalize(pluralVerbs[verb] + " " + after)
	}
	return text
}

// capitalize upper-cases the first letter of a sentence that starts with a
// plain word (not user@realm or a path).
func capitalize(s string) string {
	word, _, _ := strings.Cut(s, " ")
	if word == "" || !unicode.IsLower(rune(word[0])) || strings.ContainsAny(strings.TrimRight(word, ",.:;"), "@/!=<>_.-0123456789") {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// lowerFirst is a Go field name as the schema spells it.
func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}

// ComponentDirs are the component packages under the repository root:
// every folder of components/ but the test kits (named ...test) and
// inputs (the rules, no input type), so that a new platform's package is
// described without being listed here.
func ComponentDirs(root string) []string {
	entries, _ := os.ReadDir(filepath.Join(root, "components"))
	var out []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasSuffix(e.Name(), "test") && e.Name() != "inputs" {
			out = append(out, filepath.Join(root, "components", e.Name()))
		}
	}
	return out
}

// Generate is descriptions.json for the packages in dirs.
func Generate(dirs []string) ([]byte, error) {
	d, err := Collect(dirs...)
	if err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("unable to encode the descriptions: %w", err)
	}
	return append(b, '\n'), nil
}
