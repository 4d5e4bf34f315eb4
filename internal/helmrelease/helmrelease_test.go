package helmrelease_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/helmrelease"
)

// sdkModule is the pulumi-kubernetes Go SDK whose helm/v3.NewRelease the
// package stands in for.
const sdkModule = "github.com/pulumi/pulumi-kubernetes/sdk/v4"

// The release registers as the SDK's NewRelease does, read from the SDK
// of go.mod's version in the module cache (without compiling it): its
// type token, its compat marker, its plugin version, and input and output
// names the SDK's types carry.
func TestReleaseRegistersAsTheSDKDoes(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}} {{.Version}}", sdkModule).Output()
	require.NoError(t, err)
	dir, version, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	require.NotEmpty(t, dir, "go mod download %s", sdkModule)
	assert.Equal(t, "v"+helmrelease.PluginVersion, version, "the kubernetes SDK in go.mod")

	release := parse(t, filepath.Join(dir, "go", "kubernetes", "helm", "v3", "release.go"))
	assert.Contains(t, stringArgs(release, "RegisterResource"), helmrelease.Type)
	assert.Contains(t, stringArgs(release, "StringPtr"), "true", "args.Compat = pulumi.StringPtr(\"true\")")
	utilities := parse(t, filepath.Join(dir, "go", "kubernetes", "utilities", "pulumiUtilities.go"))
	assert.Contains(t, stringArgs(utilities, "MustParse"), helmrelease.PluginVersion, "PkgResourceDefaultOpts")

	args := tags(t, release, "releaseArgs")
	for _, key := range []string{"chart", "compat", "name", "version", "namespace", "values", "repositoryOpts", "timeout", "maxHistory"} {
		assert.Contains(t, args, key, "an input of the SDK's releaseArgs")
	}
	types := parse(t, filepath.Join(dir, "go", "kubernetes", "helm", "v3", "pulumiTypes.go"))
	assert.Contains(t, tags(t, types, "RepositoryOpts"), "repo")
	status, ok := reflect.TypeFor[helmrelease.Release]().FieldByName("Status")
	require.True(t, ok)
	assert.Contains(t, tags(t, release, "Release"), status.Tag.Get("pulumi"))
}

// A release registers its type, the plugin version and the inputs set,
// nothing for the ones left out.
func TestNewRegistersTheInputsSet(t *testing.T) {
	t.Parallel()
	m := &recorder{}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		_, err := helmrelease.New(ctx, "lab-cilium", helmrelease.Args{
			Name: pulumi.String("cilium"), Chart: pulumi.String("cilium"), Version: pulumi.String("1.18.4"),
			Namespace: pulumi.String("kube-system"), Repo: pulumi.String("https://helm.cilium.io"),
			Values: pulumi.Map{"ipam": pulumi.Map{"mode": pulumi.String("kubernetes")}}, TimeoutSeconds: 600, MaxHistory: 5,
		})
		if err != nil {
			return err
		}
		_, err = helmrelease.New(ctx, "lab-csi", helmrelease.Args{Chart: pulumi.String("oci://example/chart")})
		return err
	}, pulumi.WithMocks("project", "stack", m))
	require.NoError(t, err)

	m.mu.Lock()
	defer m.mu.Unlock()
	require.Len(t, m.got, 2)
	for _, got := range m.got {
		assert.Equal(t, helmrelease.Type, got.TypeToken)
		assert.Equal(t, helmrelease.PluginVersion, got.RegisterRPC.GetVersion())
	}
	full, bare := m.got["lab-cilium"].Inputs, m.got["lab-csi"].Inputs
	assert.Equal(t, resource.NewPropertyMapFromMap(map[string]any{
		"name": "cilium", "chart": "cilium", "version": "1.18.4", "namespace": "kube-system", "compat": "true",
		"repositoryOpts": map[string]any{"repo": "https://helm.cilium.io"},
		"values":         map[string]any{"ipam": map[string]any{"mode": "kubernetes"}},
		"timeout":        600, "maxHistory": 5,
	}), full)
	assert.Equal(t, resource.NewPropertyMapFromMap(map[string]any{"chart": "oci://example/chart", "compat": "true"}), bare)

	err = pulumi.RunErr(func(ctx *pulumi.Context) error {
		_, err := helmrelease.New(ctx, "lab-none", helmrelease.Args{})
		return err
	}, pulumi.WithMocks("project", "stack", &recorder{}))
	assert.ErrorContains(t, err, "no chart")
}

type recorder struct {
	mu  sync.Mutex
	got map[string]pulumi.MockResourceArgs
}

func (r *recorder) NewResource(args pulumi.MockResourceArgs) (string, resource.PropertyMap, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.got == nil {
		r.got = map[string]pulumi.MockResourceArgs{}
	}
	r.got[args.Name] = args
	return args.Name + "-id", args.Inputs, nil
}

func (r *recorder) Call(pulumi.MockCallArgs) (resource.PropertyMap, error) {
	return resource.PropertyMap{}, nil
}

func parse(t *testing.T, path string) *ast.File {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	require.NoError(t, err, "the SDK's source (go mod download %s)", sdkModule)
	return f
}

// stringArgs are the string literals passed to every call of the function
// (or method) name in f.
func stringArgs(f *ast.File, name string) []string {
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); !ok || sel.Sel.Name != name {
			return true
		}
		for _, arg := range call.Args {
			if lit, ok := arg.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				s, _ := strconv.Unquote(lit.Value)
				found = append(found, s)
			}
		}
		return true
	})
	return found
}

// tags are the pulumi tags of the fields of the struct type name in f.
func tags(t *testing.T, f *ast.File, name string) []string {
	t.Helper()
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		spec, ok := n.(*ast.TypeSpec)
		if !ok || spec.Name.Name != name {
			return true
		}
		st, ok := spec.Type.(*ast.StructType)
		if !ok {
			return false
		}
		for _, field := range st.Fields.List {
			if field.Tag != nil {
				raw, _ := strconv.Unquote(field.Tag.Value)
				found = append(found, reflect.StructTag(raw).Get("pulumi"))
			}
		}
		return false
	})
	require.NotEmpty(t, found, "struct %s in the SDK", name)
	return found
}
