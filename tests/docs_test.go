package tests

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// The README is the front door: what the project is, the quick start, the
// test command and links into docs/ and CONTRIBUTING.md. Everything else lives
// in docs/, one page per topic, and what contributors need (the tests, golden
// files) in CONTRIBUTING.md. These tests keep them connected.

// readmeMaxLines keeps the README short; a longer text belongs in a docs/ page.
const readmeMaxLines = 160

// docPages lists README.md, CONTRIBUTING.md and every docs/*.md page,
// relative to the repository root, with slashes.
func docPages(t *testing.T, root string) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, pages, "docs/ has no pages")
	out := []string{"README.md", "CONTRIBUTING.md"}
	for _, p := range pages {
		rel, err := filepath.Rel(root, p)
		require.NoError(t, err)
		out = append(out, filepath.ToSlash(rel))
	}
	return out
}

func readDoc(t *testing.T, root, page string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(page)))
	require.NoError(t, err)
	return string(raw)
}

var (
	fence    = regexp.MustCompile("(?ms)^\\s*```.*?^\\s*```[^\\n]*$")
	codeSpan = regexp.MustCompile("`[^`\\n]*`")
	mdLink   = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading  = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)
)

// prose is a page without its fenced code blocks.
func prose(text string) string { return fence.ReplaceAllString(text, "") }

// anchors are the ids GitHub gives the page's headings: lower case, letters,
// digits, '-' and '_' kept, spaces made '-', everything else dropped; a
// repeated heading gets -1, -2, ...
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(prose(text), -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		id := b.String()
		if n := seen[id]; n > 0 {
			out[id+"-"+strconv.Itoa(n)] = true
		} else {
			out[id] = true
		}
		seen[id]++
	}
	return out
}

// Every relative link of the README and the docs pages reaches a file of the
// repository, and a link to a heading (#anchor) reaches a heading of that page.
func TestDocLinksResolve(t *testing.T) {
	t.Parallel()
	root := stackstest.RepoRoot(t)
	checked := 0
	for _, page := range docPages(t, root) {
		text := codeSpan.ReplaceAllString(prose(readDoc(t, root, page)), "``")
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := page
			if file != "" {
				dest = filepath.ToSlash(filepath.Join(filepath.Dir(page), file))
				_, err := os.Stat(filepath.Join(root, filepath.FromSlash(dest)))
				if !assert.NoError(t, err, "%s links to %s, which does not exist", page, target) {
					continue
				}
			}
			if anchor != "" {
				require.True(t, strings.HasSuffix(dest, ".md"), "%s: anchor %s into a file that is not Markdown", page, target)
				assert.True(t, anchors(readDoc(t, root, dest))[anchor],
					"%s links to %s: %s has no heading with the id %q", page, target, dest, anchor)
			}
			checked++
		}
	}
	assert.Greater(t, checked, 20)
}

// The README stays the front door: short, with the quick start, the test
// command and a link to CONTRIBUTING.md and every docs/ page.
func TestReadmeIsTheFrontDoor(t *testing.T) {
	t.Parallel()
	root := stackstest.RepoRoot(t)
	readme := readDoc(t, root, "README.md")
	lines := strings.Count(readme, "\n")
	assert.LessOrEqual(t, lines, readmeMaxLines,
		"README.md has %d lines: move the details into a page under docs/ and link it", lines)
	for _, want := range []string{"## Prerequisites", "## Quick start", "## Develop", "## Documentation",
		"make test", ".ci/run", "make init", "make secret", "make up", "make outputs", "make destroy"} {
		assert.Contains(t, readme, want)
	}
	for _, page := range docPages(t, root)[1:] {
		assert.Contains(t, readme, "]("+page+")", "README.md's Documentation list does not link %s", page)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(readDoc(t, root, "go.mod"))
	require.NotNil(t, goVersion)
	assert.Contains(t, readme, "[Go](https://go.dev/dl/) "+goVersion[1]+" or newer", "the README's Go is go.mod's")
	assert.Contains(t, readDoc(t, root, "scripts/local.sh"), "Go "+goVersion[1]+" or newer", "make local's Go is go.mod's")
	try, _, _ := strings.Cut(readme, "## ")
	assert.Contains(t, try, "make destroy STACK=local", "the try-it commands end with the teardown")
	assert.NotContains(t, try, "make test", "the test suite is for developers: its own section")
	contributing := readDoc(t, root, "CONTRIBUTING.md")
	for _, want := range []string{"## Running the tests", "make test", "make verify", "make race", "make integration",
		"## Golden files and generated files", "## Test kits", "## Fuzzing", "## Integration tests"} {
		assert.Contains(t, contributing, want)
	}
}

// Every make target with a help text is described in docs/make-targets.md.
func TestEveryMakeTargetIsDocumented(t *testing.T) {
	t.Parallel()
	root := stackstest.RepoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	doc := readDoc(t, root, "docs/make-targets.md")
	targets := regexp.MustCompile(`(?m)^([a-zA-Z0-9_-]+):.*?##`).FindAllStringSubmatch(string(raw), -1)
	require.Greater(t, len(targets), 10)
	for _, m := range targets {
		row := regexp.MustCompile("(?m)^\\| [^|]*`" + regexp.QuoteMeta(m[1]) + "`[^|]*\\|")
		assert.Regexp(t, row, doc, "docs/make-targets.md's table has no row for `make %s`", m[1])
	}
}

// Every path docs/layout.md names in its table exists; a bare file name after
// a path is in that path's folder ("`components/vps/install.sh`, `wait-talos.sh`").
func TestLayoutNamesExistingPaths(t *testing.T) {
	t.Parallel()
	root := stackstest.RepoRoot(t)
	doc := readDoc(t, root, "docs/layout.md")
	cellPath := regexp.MustCompile("`([^`]+)`")
	checked := 0
	for _, line := range strings.Split(doc, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
			continue
		}
		dir := ""
		for _, m := range cellPath.FindAllStringSubmatch(cells[1], -1) {
			p := m[1]
			if !strings.Contains(strings.TrimSuffix(p, "/"), "/") && dir != "" {
				p = dir + "/" + p
			}
			_, err := os.Stat(filepath.Join(root, filepath.FromSlash(p)))
			assert.NoError(t, err, "docs/layout.md names %s", p)
			dir = filepath.ToSlash(filepath.Dir(strings.TrimSuffix(p, "/")))
			checked++
		}
	}
	assert.Greater(t, checked, 15)
}

// The access files the README, the examples and `make local` name are the
// ones `make outputs` writes: <ACCESS_DIR>/<stack>/kubeconfig.
func TestTheNamedKubeconfigIsTheOneMakeOutputsWrites(t *testing.T) {
	t.Parallel()
	root := stackstest.RepoRoot(t)
	accessDir := regexp.MustCompile(`(?m)^ACCESS_DIR \?= (\S+)$`).FindStringSubmatch(readDoc(t, root, "Makefile"))
	require.NotNil(t, accessDir, "the Makefile sets ACCESS_DIR")
	named := regexp.MustCompile(`KUBECONFIG=\$PWD/(\S+)`)
	files, err := filepath.Glob(filepath.Join(root, "Pulumi.*.yaml.example"))
	require.NoError(t, err)
	checked := 0
	for _, f := range append(files, filepath.Join(root, "README.md"), filepath.Join(root, "scripts", "local.sh")) {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range named.FindAllStringSubmatch(string(raw), -1) {
			assert.Regexp(t, "^"+regexp.QuoteMeta(accessDir[1])+`/[A-Za-z0-9._-]+/kubeconfig$`, m[1], "%s names %s", filepath.Base(f), m[1])
			checked++
		}
	}
	assert.GreaterOrEqual(t, checked, 3)
}
