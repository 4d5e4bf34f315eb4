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
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
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
		fset := token.NewFileSet()
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("unable to read package %s: %w", dir, err)
		}
		var files []*ast.File
		for _, e := range entries {
			name := e.Name()
			if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
			if err != nil {
				return nil, fmt.Errorf("unable to parse %s: %w", name, err)
			}
			files = append(files, f)
		}
		if len(files) == 0 {
			continue
		}
		pkg, err := doc.NewFromFiles(fset, files, "x", doc.PreserveAST)
		if err != nil {
			return nil, fmt.Errorf("unable to read the documentation of %s: %w", dir, err)
		}
		for _, t := range pkg.Types {
			if td, ok := structDoc(t); ok {
				out[pkg.Name+"."+t.Name] = td
			}
		}
	}
	return out, nil
}

func structDoc(t *doc.Type) (Type, bool) {
	var st *ast.StructType
	for _, spec := range t.Decl.Specs {
		if ts, ok := spec.(*ast.TypeSpec); ok && ts.Name.Name == t.Name {
			st, _ = ts.Type.(*ast.StructType)
		}
	}
	if st == nil {
		return Type{}, false
	}
	td := Type{Doc: clean(t.Doc), Fields: map[string]string{}}
	for _, f := range st.Fields.List {
		if f.Tag == nil || f.Doc == nil {
			continue
		}
		tag := reflect.StructTag(strings.Trim(f.Tag.Value, "`")).Get("pulumi")
		name, _, _ := strings.Cut(tag, ",")
		if name == "" || name == "-" {
			continue
		}
		td.Fields[name] = clean(f.Doc.Text())
	}
	if len(td.Fields) == 0 {
		return Type{}, false
	}
	return td, true
}

// clean joins a comment's lines into paragraphs, as a schema description
// reads them.
func clean(s string) string {
	paras := strings.Split(strings.TrimSpace(s), "\n\n")
	for i, p := range paras {
		paras[i] = strings.Join(strings.Fields(p), " ")
	}
	return strings.Join(paras, "\n\n")
}

// ComponentDirs are the component packages whose types the schema holds,
// under the repository root.
func ComponentDirs(root string) []string {
	var out []string
	for _, p := range []string{"talos", "proxmox", "vps", "image"} {
		out = append(out, filepath.Join(root, "components", p))
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
