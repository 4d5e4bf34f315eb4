package tests

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// ruleLayers hold the rules of the inputs: the stack file's front-end, the
// adapter and the components (and the version rules of internal/).
var ruleLayers = []string{"stacks", "program", "components", filepath.Join("internal", "talosversion")}

// A rule is defined once (issue 25): the components own the rules of their
// inputs, and the stack file's front-end checks its keys with the same
// functions (components/inputs), not with a copy. The test finds the two
// forms the copies took: the same regular expression compiled in two
// places, and two tables (maps) that say the same things (three or more
// equal string values, as the VPS firewall's managed ports were, once in
// stacks and once in components/vps), and the same problem message written
// in two packages (a format of 20 characters or more given to Add, errorf,
// warnf or Sprintf, as the Proxmox token id's was in stacks and in
// components/proxmox), and the same function body (of two statements or
// more) written twice, as machineIPv4 was in components/proxmox and
// components/vps.
func TestARuleIsDefinedOnce(t *testing.T) {
	t.Parallel()
	root := stackstest.RepoRoot(t)
	regexps := map[string][]string{}
	type table struct {
		at     string
		values []string
	}
	var tables []table
	messages := map[string]map[string]string{} // message format -> package dir -> where
	bodies := map[string][]string{}            // a function's body -> where
	for _, layer := range ruleLayers {
		err := filepath.WalkDir(filepath.Join(root, layer), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			if strings.Contains(rel, "test"+string(filepath.Separator)) {
				return nil // the test kits fake whatever they need
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, 0)
			require.NoError(t, err)
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.FuncDecl:
					// Functions only: methods of two types may well share a
					// body (each type's Problems), a rule is a function.
					if n.Recv == nil && n.Body != nil && len(n.Body.List) >= 2 {
						var b strings.Builder
						require.NoError(t, printer.Fprint(&b, token.NewFileSet(), n.Body))
						bodies[b.String()] = append(bodies[b.String()], fmt.Sprintf("%s:%d %s", rel, fset.Position(n.Pos()).Line, n.Name.Name))
					}
				case *ast.CallExpr:
					if format, ok := problemFormat(n); ok {
						if messages[format] == nil {
							messages[format] = map[string]string{}
						}
						messages[format][filepath.Dir(rel)] = fmt.Sprintf("%s:%d", rel, fset.Position(n.Pos()).Line)
					}
					if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "MustCompile" && len(n.Args) == 1 {
						if lit, ok := n.Args[0].(*ast.BasicLit); ok {
							re, _ := strconv.Unquote(lit.Value)
							regexps[re] = append(regexps[re], fmt.Sprintf("%s:%d", rel, fset.Position(n.Pos()).Line))
						}
					}
				case *ast.CompositeLit:
					if _, isMap := n.Type.(*ast.MapType); isMap {
						var values []string
						for _, e := range n.Elts {
							if kv, ok := e.(*ast.KeyValueExpr); ok {
								if lit, ok := kv.Value.(*ast.BasicLit); ok && lit.Kind == token.STRING {
									s, _ := strconv.Unquote(lit.Value)
									values = append(values, s)
								}
							}
						}
						if len(values) >= 3 {
							tables = append(tables, table{fmt.Sprintf("%s:%d", rel, fset.Position(n.Pos()).Line), values})
						}
					}
				}
				return true
			})
			return nil
		})
		require.NoError(t, err)
	}
	for re, at := range regexps {
		if len(at) > 1 {
			t.Errorf("the rule %q is defined %d times (%s): define it once (components/inputs) and call it", re, len(at), strings.Join(at, ", "))
		}
	}
	for _, at := range bodies {
		if len(at) > 1 {
			t.Errorf("one function body is written %d times (%s): keep one and call it", len(at), strings.Join(at, ", "))
		}
	}
	for format, at := range messages {
		if len(at) > 1 {
			t.Errorf("the message %q is written in %d packages (%s): a rule that says it is defined twice; define it once and call it", format, len(at), strings.Join(slices.Sorted(maps.Values(at)), ", "))
		}
	}
	for i, a := range tables {
		for _, b := range tables[i+1:] {
			var same []string
			for _, v := range a.values {
				if slices.Contains(b.values, v) && !slices.Contains(same, v) {
					same = append(same, v)
				}
			}
			if len(same) >= 3 {
				t.Errorf("the tables at %s and %s say the same things (%q): keep one and use it from the other", a.at, b.at, same)
			}
		}
	}
}

// problemFormat is the message format a call gives a problem (the first
// argument of Sprintf, the second of Add, errorf and warnf), when it is a
// literal long enough to say something of its own.
func problemFormat(call *ast.CallExpr) (string, bool) {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return "", false
	}
	arg := map[string]int{"Sprintf": 0, "Add": 1, "errorf": 1, "warnf": 1}
	i, ok := arg[sel.Sel.Name]
	if !ok || len(call.Args) <= i {
		return "", false
	}
	lit, ok := call.Args[i].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, _ := strconv.Unquote(lit.Value)
	return s, len(s) >= 20 && strings.Contains(s, " ")
}
