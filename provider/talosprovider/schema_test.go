package talosprovider_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/blang/semver"
	p "github.com/pulumi/pulumi-go-provider"
	"github.com/pulumi/pulumi-go-provider/integration"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/provider/internal/docs"
	"github.com/fluodata/talos-pulumi/provider/talosprovider"
)

var update = flag.Bool("update", false, "rewrite testdata/schema.json and descriptions.json")

func server(t *testing.T) integration.Server {
	t.Helper()
	prov, err := talosprovider.New()
	require.NoError(t, err)
	s, err := integration.NewServer(t.Context(), talosprovider.Name, semver.MustParse(talosprovider.TestServerVersion),
		integration.WithProvider(prov))
	require.NoError(t, err)
	return s
}

// The schema is what `pulumi package add` generates every language's SDK
// from: a change to it is a change of the package's interface, so it is
// kept as a golden file (go test ./talosprovider -update rewrites it).
func TestSchemaIsCurrent(t *testing.T) {
	t.Parallel()
	resp, err := server(t).GetSchema(p.GetSchemaRequest{})
	require.NoError(t, err)
	got := resp.Schema + "\n"
	golden := filepath.Join("testdata", "schema.json")
	if *update {
		require.NoError(t, os.WriteFile(golden, []byte(got), 0o600))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), got, "the schema changed: review it and run go test ./talosprovider -update")
}

// descriptions.json is what `go generate` makes of the components' doc
// comments now.
func TestDescriptionsAreCurrent(t *testing.T) {
	t.Parallel()
	got, err := docs.Generate(docs.ComponentDirs(filepath.Join("..", "..")))
	require.NoError(t, err)
	if *update {
		require.NoError(t, os.WriteFile("descriptions.json", got, 0o600))
	}
	want, err := os.ReadFile("descriptions.json")
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got), "doc comments changed: run go generate ./talosprovider (or -update)")
}

// Every component, input, output, type and property is described, and
// every credential is a secret.
func TestSchemaDescribesEverythingAndMarksSecrets(t *testing.T) {
	t.Parallel()
	resp, err := server(t).GetSchema(p.GetSchemaRequest{})
	require.NoError(t, err)
	var spec struct {
		Resources map[string]struct {
			Description     string                    `json:"description"`
			IsComponent     bool                      `json:"isComponent"`
			InputProperties map[string]map[string]any `json:"inputProperties"`
			Properties      map[string]map[string]any `json:"properties"`
		} `json:"resources"`
		Types map[string]struct {
			Description string                    `json:"description"`
			Properties  map[string]map[string]any `json:"properties"`
		} `json:"types"`
	}
	require.NoError(t, json.Unmarshal([]byte(resp.Schema), &spec))
	require.ElementsMatch(t, slices.Collect(maps.Keys(talosprovider.ResourceArgs)), keys(spec.Resources))
	undescribed := func(where string, props map[string]map[string]any) {
		for name, prop := range props {
			if d, _ := prop["description"].(string); strings.TrimSpace(d) == "" {
				t.Errorf("%s.%s has no description", where, name)
			}
		}
	}
	secrets := map[string]bool{}
	for token, r := range spec.Resources {
		assert.True(t, r.IsComponent, token)
		assert.NotEmpty(t, r.Description, token)
		undescribed(token+" input", r.InputProperties)
		undescribed(token+" output", r.Properties)
		for name, prop := range r.InputProperties {
			if prop["secret"] == true {
				secrets[token+" input "+name] = true
			}
		}
		for name, prop := range r.Properties {
			if prop["secret"] == true {
				secrets[token+" output "+name] = true
			}
		}
	}
	for token, ty := range spec.Types {
		assert.NotEmpty(t, ty.Description, token)
		undescribed(token, ty.Properties)
		for name, prop := range ty.Properties {
			if prop["secret"] == true {
				secrets[token+" "+name] = true
			}
		}
	}
	for _, want := range []string{
		"talos-anywhere:index:TalosCluster output kubeconfig", "talos-anywhere:index:TalosCluster output talosconfig",
		"talos-anywhere:index:ProxmoxCluster output kubeconfig", "talos-anywhere:index:ProxmoxCluster output talosconfig",
		"talos-anywhere:index:VpsCluster output kubeconfig", "talos-anywhere:index:VpsCluster output talosconfig",
		"talos-anywhere:index:DockerCluster output kubeconfig", "talos-anywhere:index:DockerCluster output talosconfig",
		"talos-anywhere:index:ProxmoxHostSettings apiTokenSecret", "talos-anywhere:index:ProxmoxSSHSettings privateKey",
		"talos-anywhere:index:VpsRescue password",
	} {
		assert.True(t, secrets[want], "%s must be secret; secret: %v", want, secrets)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Every description reads for a user of any language (the doc comments go
// through docs' neutral): no default by its Go constant's name, no nil, no
// Go selector of another type's field.
func TestSchemaDescriptionsHaveNoGo(t *testing.T) {
	t.Parallel()
	resp, err := server(t).GetSchema(p.GetSchemaRequest{})
	require.NoError(t, err)
	var spec any
	require.NoError(t, json.Unmarshal([]byte(resp.Schema), &spec))
	goish := regexp.MustCompile(`\bDefault[A-Z]\w+|\bnil\b|\b[A-Z][a-z]+[A-Z]\w*\.[A-Z]\w*\b`)
	var walk func(path string, v any)
	count := 0
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if d, ok := e.(string); ok && k == "description" {
					count++
					assert.NotRegexp(t, goish, d, "%s", path)
					continue
				}
				walk(path+"/"+k, e)
			}
		case []any:
			for i, e := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		}
	}
	walk("", spec)
	assert.Greater(t, count, 150)
}

// Every platform component has the TalosCluster's outputs, under the same
// names and types: the skeleton of a cluster component (the Go SDK's
// construct reads a component's own fields only, so they cannot be one
// embedded struct; this holds them together instead).
func TestEveryComponentHasTheClusterOutputs(t *testing.T) {
	t.Parallel()
	type out struct{ name, typ string }
	outputs := func(ty reflect.Type) []out {
		var o []out
		for i := range ty.NumField() {
			f := ty.Field(i) // its own fields: not the embedded ResourceState's urn
			if name := strings.Split(f.Tag.Get("pulumi"), ",")[0]; name != "" && !f.Anonymous {
				o = append(o, out{name, f.Type.String()})
			}
		}
		return o
	}
	cluster := outputs(reflect.TypeFor[talos.Cluster]())
	require.Len(t, cluster, 10)
	for token, c := range talosprovider.ComponentOutputs {
		assert.Subset(t, outputs(c), cluster, "%s has every output of a TalosCluster", token)
	}
}

// No description of the schema starts with a Go or schema name: an IDE
// shows them to users of every language ("KubeSpanSettings turn on ..."
// reads as Go).
func TestDescriptionsDoNotStartWithAName(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("testdata", "schema.json"))
	require.NoError(t, err)
	var spec any
	require.NoError(t, json.Unmarshal(raw, &spec))
	camel := regexp.MustCompile(`^(?:[A-Z][a-z0-9]+[A-Z][a-z]|[a-z]+[A-Z][a-z])[A-Za-z0-9]*\b`)
	checked := 0
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if d, ok := v["description"].(string); ok {
				checked++
				assert.False(t, camel.MatchString(d), "%s: %q starts with a name", path, d)
			}
			for k, e := range v {
				walk(path+"/"+k, e)
			}
		case []any:
			for _, e := range v {
				walk(path, e)
			}
		}
	}
	walk("", spec)
	assert.Greater(t, checked, 100)
}
