package tests

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// goldenFlag finds a test's flag that rewrites what the test compares
// against, a package-level boolean flag named update or update-something.
var goldenFlag = regexp.MustCompile(`(?m)^var\s+\w+\s*=\s*flag\.Bool\("(update[A-Za-z0-9_-]*)"`)

// makeRecipe is the recipe of a make target, its tab-indented lines, with
// the Makefile's simple variables ($(PROVIDER_DIR), ...) expanded, and the
// recipes of the targets it runs through $(MAKE) after it.
func makeRecipe(t *testing.T, makefile, target string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(target) + `:.*\n((?:\t.*\n)*)`).FindStringSubmatch(makefile)
	require.NotNil(t, m, "the Makefile has no target %s", target)
	recipe := m[1]
	for _, v := range regexp.MustCompile(`(?m)^([A-Z_]+)\s*[:?]?=\s*(\S+)\s*$`).FindAllStringSubmatch(makefile, -1) {
		recipe = strings.ReplaceAll(recipe, "$("+v[1]+")", v[2])
	}
	out := recipe
	for _, sub := range regexp.MustCompile(`\$\(MAKE\)((?:[ \t]+[^\s;&|]+)+)`).FindAllStringSubmatch(recipe, -1) {
		for _, word := range strings.Fields(sub[1]) {
			if !strings.HasPrefix(word, "-") && !strings.Contains(word, "=") {
				out += makeRecipe(t, makefile, word)
			}
		}
	}
	return out
}

// `make verify` regenerates everything the tests compare against: every
// golden-file flag a test defines is set on its package by the recipe of
// verify or of a target it runs (docs, schema), in the package's own module
// (`cd provider && ...` for the component provider's). A new golden test
// whose flag is missing there would let a stale file pass CI.
func TestVerifyRegeneratesEveryGoldenFile(t *testing.T) {
	t.Parallel()
	root := stackstest.RepoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	lines := strings.Split(makeRecipe(t, string(raw), "verify"), "\n")

	found := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path) //nolint:gosec // the repository's own test files
		if err != nil {
			return err
		}
		flags := goldenFlag.FindAllStringSubmatch(string(src), -1)
		if len(flags) == 0 {
			return nil
		}
		module := filepath.Dir(path)
		for module != root {
			if _, err := os.Stat(filepath.Join(module, "go.mod")); err == nil {
				break
			}
			module = filepath.Dir(module)
		}
		pkg, err := filepath.Rel(module, filepath.Dir(path))
		if err != nil {
			return err
		}
		in := ""
		if module != root {
			rel, err := filepath.Rel(root, module)
			if err != nil {
				return err
			}
			in = `cd ` + regexp.QuoteMeta(filepath.ToSlash(rel)) + `\s.*`
		}
		for _, m := range flags {
			found++
			set := regexp.MustCompile(in + regexp.QuoteMeta("./"+filepath.ToSlash(pkg)) + `\s(.*\s)?-` + regexp.QuoteMeta(m[1]) + `(\s|$)`)
			ok := false
			for _, l := range lines {
				ok = ok || set.MatchString(l)
			}
			assert.True(t, ok, "%s defines -%s: make verify must run `go test ./%s ... -%s` (in %s)", path, m[1], filepath.ToSlash(pkg), m[1], module)
		}
		return nil
	})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, found, 4, "the golden-file flags were not found")
}
