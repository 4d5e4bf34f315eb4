package tests

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// The components are a package for any program: they take their Args and
// nothing else. They import neither the stack file's package nor the
// program's adapter, and touch no files (the adapter reads key files).
// program is the one place that turns a stack file into the
// components' Args and builds them: other code that reads stack files
// (stackctl's doctor and adopt, the ssh-proxy helper) uses only the
// components' names and constants.
func TestComponentsImportNeitherStacksNorFiles(t *testing.T) {
	t.Parallel()
	root := stackstest.RepoRoot(t)
	forbidden := map[string]string{
		"github.com/fluodata/talos-pulumi/stacks":  "the stack file's package",
		"github.com/fluodata/talos-pulumi/program": "the program's adapter",
		"os":        "the file system",
		"io/ioutil": "the file system",
		"io/fs":     "the file system",
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "provider" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		require.NoError(t, err)
		var stacks bool
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			stacks = stacks || p == "github.com/fluodata/talos-pulumi/stacks"
			// The test kits beside the components may use whatever they fake.
			if strings.HasPrefix(rel, "components"+string(filepath.Separator)) && !strings.Contains(rel, "test"+string(filepath.Separator)) {
				if why, bad := forbidden[p]; bad {
					t.Errorf("%s imports %s (%s)", rel, p, why)
				}
			}
		}
		if stacks && !strings.HasPrefix(rel, "program"+string(filepath.Separator)) {
			src, err := os.ReadFile(path) //nolint:gosec // the repository's own source
			require.NoError(t, err)
			for _, builder := range builders.FindAllString(string(src), -1) {
				t.Errorf("%s reads stack files and builds a component (%s): only program turns a stack file into Args", rel, builder)
			}
		}
		return nil
	})
	require.NoError(t, err)
}

// builders are the calls and literals that make a component or its Args.
var builders = regexp.MustCompile(`\b(proxmox|vps|talos)\.(NewCluster\w*|ClusterArgs\{|ClusterSettings\{)`)

// One Role type (issue 25): a node's machine type is defined once, in the
// rollout core; the stack front-end and TalosCluster alias it. The test kits
// (fakes of Talos) may have their own.
func TestOneRoleType(t *testing.T) {
	t.Parallel()
	root := stackstest.RepoRoot(t)
	defined := regexp.MustCompile(`(?m)^type Role\s+string\b`)
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// The generated SDKs (sdk/) have their own Role enum.
			if path != root && (strings.HasPrefix(d.Name(), ".") || strings.HasSuffix(d.Name(), "test") || path == filepath.Join(root, "sdk")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path) //nolint:gosec // the repository's own source
		if err != nil {
			return err
		}
		if defined.Match(src) {
			rel, _ := filepath.Rel(root, path)
			found = append(found, rel)
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join("internal", "rollout", "rollout.go")}, found)
}

// internal/ is one layer (issue 25): the Talos, Kubernetes and Proxmox
// clients and their fakes, the rollout core and small helpers. None of its
// packages imports the stack front-end, the adapter, the components or the
// commands: the import graph goes stacks -> program -> components ->
// internal.
func TestInternalIsTheBottomLayer(t *testing.T) {
	t.Parallel()
	root := stackstest.RepoRoot(t)
	above := []string{"stacks", "program", "components", "cmd", "provider"}
	err := filepath.WalkDir(filepath.Join(root, "internal"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, path)
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			for _, a := range above {
				if p == "github.com/fluodata/talos-pulumi/"+a || strings.HasPrefix(p, "github.com/fluodata/talos-pulumi/"+a+"/") {
					t.Errorf("%s imports %s: internal/ is the bottom layer", rel, p)
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
}

// No platform imports another (issue 49): a platform (components/proxmox,
// vps, docker) composes machine kinds (components/servers: rented servers
// installed from rescue; a platform's own VMs or containers) and the
// TalosCluster, as Talos's provisioners embed a shared kit and never
// import each other; and a machine kind imports no platform.
func TestNoPlatformImportsAnother(t *testing.T) {
	t.Parallel()
	const module = "github.com/fluodata/talos-pulumi/components/"
	platforms := []string{"proxmox", "vps", "docker"}
	kinds := []string{"servers"}
	root := stackstest.RepoRoot(t)
	for _, pkg := range append(slices.Clone(platforms), kinds...) {
		files, err := filepath.Glob(filepath.Join(root, "components", pkg, "*.go"))
		require.NoError(t, err)
		require.NotEmpty(t, files, pkg)
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
			require.NoError(t, err)
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				other, ok := strings.CutPrefix(path, module)
				if ok && other != pkg && slices.Contains(platforms, other) {
					t.Errorf("%s imports the platform %s: put what both need in a machine kind's package (components/servers) or in components/talos", file, other)
				}
			}
		}
	}
}
