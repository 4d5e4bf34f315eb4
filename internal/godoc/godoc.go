// Package godoc reads the doc comments of a package's struct types and their
// tagged fields. The comments are the only copy of what a stack key or a
// component input means: the configuration reference, the stack file's JSON
// Schema and the package schema are all written from them.
package godoc

import (
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

// Package is the documentation of one Go package.
type Package struct {
	Name string
	// Structs are the struct types with a field tagged with the tag key
	// Read was given, by type name.
	Structs map[string]Struct
	// Consts are the package's constants with a literal value (strings
	// unquoted), by name.
	Consts map[string]string
}

// Struct is one struct type's doc comment and its tagged fields, in
// declaration order.
type Struct struct {
	Doc    string
	Fields []Field
}

// Field is one tagged field: its Go name, the name its tag gives it, its doc
// comment ("" when it has none).
type Field struct {
	GoName, Name, Doc string
}

// FieldDoc is the doc comment of the field the tag names name, "" when it has none.
func (s Struct) FieldDoc(name string) string {
	for _, f := range s.Fields {
		if f.Name == name {
			return f.Doc
		}
	}
	return ""
}

// Read parses the Go files of dir (test files aside) and returns the
// documentation of its struct types whose fields carry tagKey (`json`,
// `pulumi`); the name before the tag's first comma names the field.
func Read(dir, tagKey string) (Package, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return Package{}, fmt.Errorf("unable to read package %s: %w", dir, err)
	}
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			return Package{}, fmt.Errorf("unable to parse %s: %w", name, err)
		}
		files = append(files, f)
	}
	out := Package{Structs: map[string]Struct{}, Consts: map[string]string{}}
	if len(files) == 0 {
		return out, nil
	}
	pkg, err := doc.NewFromFiles(fset, files, "x", doc.PreserveAST)
	if err != nil {
		return Package{}, fmt.Errorf("unable to read the documentation of %s: %w", dir, err)
	}
	out.Name = pkg.Name
	addConsts(out.Consts, pkg.Consts)
	for _, t := range pkg.Types {
		addConsts(out.Consts, t.Consts)
		if s, ok := readStruct(t, tagKey); ok {
			out.Structs[t.Name] = s
		}
	}
	return out, nil
}

func readStruct(t *doc.Type, tagKey string) (Struct, bool) {
	var st *ast.StructType
	for _, spec := range t.Decl.Specs {
		if ts, ok := spec.(*ast.TypeSpec); ok && ts.Name.Name == t.Name {
			st, _ = ts.Type.(*ast.StructType)
		}
	}
	if st == nil {
		return Struct{}, false
	}
	s := Struct{Doc: Clean(t.Doc)}
	for _, f := range st.Fields.List {
		if f.Tag == nil || len(f.Names) == 0 {
			continue
		}
		tag := reflect.StructTag(strings.Trim(f.Tag.Value, "`")).Get(tagKey)
		name, _, _ := strings.Cut(tag, ",")
		if name == "" || name == "-" {
			continue
		}
		text := ""
		if f.Doc != nil {
			text = Clean(f.Doc.Text())
		}
		for _, id := range f.Names {
			s.Fields = append(s.Fields, Field{GoName: id.Name, Name: name, Doc: text})
		}
	}
	return s, len(s.Fields) > 0
}

func addConsts(out map[string]string, values []*doc.Value) {
	for _, v := range values {
		for _, spec := range v.Decl.Specs {
			vs, ok := spec.(*ast.ValueSpec)
			if !ok {
				continue
			}
			for i, id := range vs.Names {
				if i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
					out[id.Name] = strings.Trim(lit.Value, "`\"")
				}
			}
		}
	}
}

// Clean joins a comment's lines into paragraphs, as a description reads
// them.
func Clean(s string) string {
	paras := strings.Split(strings.TrimSpace(s), "\n\n")
	for i, p := range paras {
		paras[i] = strings.Join(strings.Fields(p), " ")
	}
	return strings.Join(paras, "\n\n")
}
