package tests

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// TestTalosPortsComeFromTalos: Talos's and Kubernetes' ports are Talos's
// own constants (machinery's constants package), never a number or a
// string written again in the project's code (issue 49): a literal of one
// of them outside the tests is a second place for the fact.
func TestTalosPortsComeFromTalos(t *testing.T) {
	t.Parallel()
	ports := map[string]string{}
	for name, port := range map[string]int{
		"ApidPort": constants.ApidPort, "TrustdPort": constants.TrustdPort,
		"DefaultControlPlanePort": constants.DefaultControlPlanePort, "KubeSpanDefaultPort": constants.KubeSpanDefaultPort,
		"KubeletPort": constants.KubeletPort, "EtcdClientPort": constants.EtcdClientPort, "EtcdPeerPort": constants.EtcdPeerPort,
	} {
		ports[strconv.Itoa(port)] = name
	}
	root := stackstest.RepoRoot(t)
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || rel == "bin" || rel == "tools") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.Contains(rel, "test"+string(filepath.Separator)) {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok {
				return true
			}
			v := lit.Value
			if lit.Kind == token.STRING {
				v, _ = strconv.Unquote(v)
			}
			if name, ok := ports[v]; ok && (lit.Kind == token.INT || lit.Kind == token.STRING) {
				found = append(found, fset.Position(lit.Pos()).String()+": "+lit.Value+" is constants."+name)
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	assert.Empty(t, found, "use Talos's machinery constants")
}
