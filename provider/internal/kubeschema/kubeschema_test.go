package kubeschema_test

import (
	"encoding/json"
	"testing"

	"github.com/pulumi/pulumi/pkg/v3/codegen/schema"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/provider/internal/kubeschema"
	"github.com/fluodata/talos-pulumi/provider/internal/kubeschema/source"
)

// kubernetes.json is what go generate extracts from the served module's
// schema: the go command downloads the module (the Go module proxy, or
// the module cache) as it does for a build.
func TestTheExtractedSchemaIsCurrent(t *testing.T) {
	t.Parallel()
	want, err := source.Extracted()
	require.NoError(t, err)
	assert.JSONEq(t, string(want), string(kubeschema.JSON()), "run go generate ./internal/kubeschema")
}

// Extract keeps the provider, the config and the types they use through
// other types, and nothing else; a missing type is an error.
func TestExtractKeepsWhatTheProviderUses(t *testing.T) {
	t.Parallel()
	full := `{"name": "kubernetes", "language": {"go": {"importBasePath": "x"}},
	  "config": {"variables": {"a": {"$ref": "#/types/kubernetes:index:A"}}},
	  "provider": {"inputProperties": {"b": {"$ref": "#/types/kubernetes:index:B"}}},
	  "resources": {"kubernetes:core/v1:Pod": {}},
	  "types": {"kubernetes:index:A": {"type": "object"},
	    "kubernetes:index:B": {"type": "object", "properties": {"c": {"$ref": "#/types/kubernetes:index:C"}}},
	    "kubernetes:index:C": {"type": "object"}, "kubernetes:index:Unused": {"type": "object"}}}`
	out, err := kubeschema.Extract([]byte(full), "v4.32.0")
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(out, &got))
	assert.Equal(t, "4.32.0", got["version"])
	assert.NotContains(t, got, "resources")
	types, _ := got["types"].(map[string]any)
	assert.ElementsMatch(t, []string{"kubernetes:index:A", "kubernetes:index:B", "kubernetes:index:C"}, keys(types))

	_, err = kubeschema.Extract([]byte(`{"name": "kubernetes", "provider": {"inputProperties": {"b": {"$ref": "#/types/kubernetes:index:B"}}}}`), "4.32.0")
	assert.ErrorContains(t, err, "it refers to type kubernetes:index:B, which it lacks")
	_, err = kubeschema.Extract([]byte(`{"name": "random", "provider": {}}`), "4.32.0")
	assert.ErrorContains(t, err, "not the kubernetes package's")
}

// The loader serves the kubernetes package of the extracted version, with
// its provider, and no other package or version.
func TestTheLoaderServesKubernetesOnly(t *testing.T) {
	t.Parallel()
	loader, err := kubeschema.Loader()
	require.NoError(t, err)
	pkg, err := loader.LoadPackageV2(t.Context(), &schema.PackageDescriptor{Name: "kubernetes"})
	require.NoError(t, err)
	require.NotNil(t, pkg.Provider)
	assert.NotEmpty(t, pkg.Provider.InputProperties)
	_, err = loader.LoadPackageV2(t.Context(), &schema.PackageDescriptor{Name: "random"})
	assert.ErrorContains(t, err, "only kubernetes is known")
	other := *pkg.Version
	other.Major++
	_, err = loader.LoadPackageV2(t.Context(), &schema.PackageDescriptor{Name: "kubernetes", Version: &other})
	assert.ErrorContains(t, err, "the schema is of")
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
