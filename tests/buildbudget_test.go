package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// What make test compiles, held to a budget so that CI's cold run (issue 53:
// 15 minutes on 2 cores, from over 60) does not creep back. Compile time
// follows the Go source compiled: the pulumi-kubernetes SDK's helm/v3
// package alone pulled in 63 generated API-group packages, 23 MB of source
// and 12 of the 21 CPU-minutes of a cold `go test ./...`. Raise a budget only
// for a dependency worth its minutes, and say which in the commit.
const (
	// budgetSourceMB is the non-standard Go source of every package make
	// test compiles (tests and their dependencies): 67.4 MB when set, 90.2
	// with helm/v3.
	budgetSourceMB = 70
	// budgetPackages is the number of packages the largest test binary
	// links (stackctl's restore: Pulumi's engine packages and etcd's
	// server). 1413 when set.
	budgetPackages = 1450
)

// heavyPackages are packages of dependencies that cost minutes to compile
// and that nothing here needs: what imports them names a lighter way.
var heavyPackages = map[string]string{
	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/helm/v3": "internal/helmrelease registers the release",
	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/yaml":    "every API group of the SDK; take the group's package",
}

type listedPackage struct {
	ImportPath, Dir, ForTest string
	Standard                 bool
	GoFiles, CgoFiles        []string
	Deps                     []string
	Imports                  []string
}

func TestWhatMakeTestCompilesKeepsToItsBudget(t *testing.T) {
	t.Parallel()
	root := stackstest.RepoRoot(t)
	cmd := exec.Command("go", "list", "-deps", "-test", "-json=ImportPath,Dir,ForTest,Standard,GoFiles,CgoFiles,Deps,Imports", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, stderr.String())

	var source int64
	seen := map[string]bool{}
	largest, largestName := 0, ""
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		if strings.HasSuffix(p.ImportPath, ".test") && len(p.Deps) > largest {
			largest, largestName = len(p.Deps), p.ImportPath
		}
		for _, imp := range p.Imports {
			if why, heavy := heavyPackages[imp]; heavy && !strings.HasPrefix(p.ImportPath, "github.com/pulumi/pulumi-kubernetes/") {
				t.Errorf("%s imports %s: %s", p.ImportPath, imp, why)
			}
		}
		if p.Standard || p.ForTest != "" || seen[p.ImportPath] {
			continue
		}
		seen[p.ImportPath] = true
		for _, f := range append(p.GoFiles, p.CgoFiles...) {
			if !filepath.IsAbs(f) {
				f = filepath.Join(p.Dir, f)
			}
			if info, err := os.Stat(f); err == nil {
				source += info.Size()
			}
		}
	}
	t.Logf("make test compiles %.1f MB of Go source; the largest test binary, %s, links %d packages", float64(source)/1e6, largestName, largest)
	assert.LessOrEqual(t, float64(source)/1e6, float64(budgetSourceMB), "MB of Go source compiled (see budgetSourceMB)")
	assert.LessOrEqual(t, largest, budgetPackages, "packages linked into %s (see budgetPackages)", largestName)
}
