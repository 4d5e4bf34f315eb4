package sdkgen_test

import (
	"encoding/json"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/provider/internal/sdkgen"
	"github.com/fluodata/talos-pulumi/provider/talosprovider"
)

var updateGoSDK = flag.Bool("update-go-sdk", false, "rewrite the committed Go SDK in "+committedGoSDK)

// committedGoSDK is the Go SDK's folder at its import path
// (talosprovider.GoImportBase), from this folder: a module of its own, so
// that a Go program can `go get` it.
var committedGoSDK = filepath.Join("..", "..", "..", "sdk", "go", talosprovider.Name)

// versionedSchema is the golden schema at this source's version (VERSION):
// the SDK names the plugin version its programs ask the engine for.
func versionedSchema(t *testing.T) []byte {
	t.Helper()
	var spec map[string]any
	require.NoError(t, json.Unmarshal(goldenSchema(t), &spec))
	spec["version"] = talosprovider.Version()
	out, err := json.Marshal(spec)
	require.NoError(t, err)
	return out
}

// The committed Go SDK is what the generator writes from the schema, at
// the source's version (make schema rewrites it), and its module requires
// the Pulumi and Kubernetes SDKs the provider is built with.
func TestTheCommittedGoSDKIsCurrent(t *testing.T) {
	t.Parallel()
	files, err := sdkgen.Generate(versionedSchema(t), "go")
	require.NoError(t, err)
	want := map[string]string{}
	prefix := talosprovider.Name + "/"
	for name, body := range files {
		if rest, ok := strings.CutPrefix(name, prefix); ok {
			want[rest] = string(body)
		}
	}
	require.Contains(t, want, "init.go")
	if *updateGoSDK {
		require.NoError(t, filepath.WalkDir(committedGoSDK, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() == "go.mod" || d.Name() == "go.sum" {
				return err
			}
			return os.Remove(path)
		}))
		for name, body := range want {
			path := filepath.Join(committedGoSDK, filepath.FromSlash(name))
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))  //nolint:gosec // source folders, meant to be read
			require.NoError(t, os.WriteFile(path, []byte(body), 0o644)) //nolint:gosec // source files, meant to be read
		}
	}
	got := map[string]string{}
	require.NoError(t, filepath.WalkDir(committedGoSDK, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "go.mod" || d.Name() == "go.sum" {
			return err
		}
		rel, err := filepath.Rel(committedGoSDK, path)
		if err != nil {
			return err
		}
		body, err := os.ReadFile(path) //nolint:gosec // the repository's own files
		got[filepath.ToSlash(rel)] = string(body)
		return err
	}))
	assert.Equal(t, want, got, "the committed Go SDK is stale: run `make schema`")

	mod, err := os.ReadFile(filepath.Join(committedGoSDK, "go.mod"))
	require.NoError(t, err)
	assert.Contains(t, string(mod), "module "+talosprovider.GoImportBase+"\n")
	providerMod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	require.NoError(t, err)
	for _, dep := range []string{"github.com/pulumi/pulumi/sdk/v3", "github.com/pulumi/pulumi-kubernetes/sdk/v4"} {
		re := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(dep) + ` (v\S+)`)
		ours := re.FindStringSubmatch(string(providerMod))
		require.NotNil(t, ours, dep)
		assert.Regexp(t, re, string(mod))
		if m := re.FindStringSubmatch(string(mod)); m != nil {
			assert.Equal(t, ours[1], m[1], "%s: the SDK's module requires the provider's version", dep)
		}
	}
}

// The committed Go SDK builds as its own module, from what its go.mod and
// go.sum name (all in the module cache the provider's build fills).
func TestTheCommittedGoSDKBuilds(t *testing.T) {
	t.Parallel()
	env := append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=readonly", "GOWORK=off")
	run(t, committedGoSDK, env, "go", "build", "./...")
}
