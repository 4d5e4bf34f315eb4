// Package kubeschema is the part of the kubernetes package's schema that
// the talos-anywhere schema refers to: the components' kubernetesProvider
// output is the kubernetes package's provider
// (`/kubernetes/v4.32.0/schema.json#/provider`, as pulumi-eks's outputs
// are). Binding the schema, and generating the SDKs from it
// (provider/internal/sdkgen, `make release`), loads that package; the CLI
// loads it from the kubernetes plugin, which this package's own code needs
// without a plugin or network.
//
// kubernetes.json is extracted (Extract, `go generate`) from the schema of
// the kubernetes provider module the Go module proxy serves (Module):
// the package's name and language settings, its config, its provider and
// the types they use, stamped with the version of the kubernetes SDK the
// components are built with. The proxy refuses the provider module of that
// version, so Module is the newest it serves; the SDK tests compile the
// generated TypeScript SDK against the npm @pulumi/kubernetes of that
// version, which holds the two to the same Provider.
package kubeschema

import (
	"context"
	_ "embed" // kubernetes.json
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/blang/semver"
	"github.com/pulumi/pulumi/pkg/v3/codegen/schema"
)

// Module is the module (path@version) whose
// cmd/pulumi-resource-kubernetes/schema.json Extract reads.
const Module = "github.com/pulumi/pulumi-kubernetes/provider/v4@v4.0.0-20260115033456-f47bc2d6f199"

// SchemaFile is the schema's path in Module.
const SchemaFile = "cmd/pulumi-resource-kubernetes/schema.json"

// SDKModule is the kubernetes SDK module whose version (in the provider's
// go.mod) the extracted schema is stamped with.
const SDKModule = "github.com/pulumi/pulumi-kubernetes/sdk/v4"

//go:generate go run ./gen

//go:embed kubernetes.json
var kubernetesJSON []byte

// JSON is the extracted schema.
func JSON() []byte { return kubernetesJSON }

// kept are the top-level sections of the kubernetes schema Extract keeps.
var kept = []string{"name", "displayName", "description", "homepage", "license", "repository", "publisher", "language", "config", "provider"}

// Extract is the part of the kubernetes package's full schema that
// another package refers to through its provider, with version: the
// sections in kept and every type the config and the provider use,
// directly or through other types.
func Extract(full []byte, version string) ([]byte, error) {
	var spec map[string]any
	if err := json.Unmarshal(full, &spec); err != nil {
		return nil, fmt.Errorf("unable to read the kubernetes schema: %w", err)
	}
	if spec["name"] != "kubernetes" || spec["provider"] == nil {
		return nil, fmt.Errorf("unable to extract from the schema of %v: not the kubernetes package's", spec["name"])
	}
	out := map[string]any{"version": strings.TrimPrefix(version, "v")}
	for _, key := range kept {
		if v, ok := spec[key]; ok {
			out[key] = v
		}
	}
	all, _ := spec["types"].(map[string]any)
	types := map[string]any{}
	pending := refs(nil, out["config"], out["provider"])
	for len(pending) > 0 {
		token := pending[0]
		pending = pending[1:]
		if _, done := types[token]; done {
			continue
		}
		t, ok := all[token]
		if !ok {
			return nil, fmt.Errorf("unable to extract from the kubernetes schema: it refers to type %s, which it lacks", token)
		}
		types[token] = t
		pending = refs(pending, t)
	}
	out["types"] = types
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("unable to write the kubernetes schema: %w", err)
	}
	return append(b, '\n'), nil
}

// refs appends the local type tokens the values refer to ("$ref":
// "#/types/<token>"), sorted per value.
func refs(to []string, values ...any) []string {
	for _, v := range values {
		var found []string
		var walk func(any)
		walk = func(v any) {
			switch v := v.(type) {
			case map[string]any:
				for k, e := range v {
					if ref, ok := e.(string); ok && k == "$ref" && strings.HasPrefix(ref, "#/types/") {
						found = append(found, strings.TrimPrefix(ref, "#/types/"))
						continue
					}
					walk(e)
				}
			case []any:
				for _, e := range v {
					walk(e)
				}
			}
		}
		walk(v)
		sort.Strings(found)
		to = append(to, found...)
	}
	return to
}

// Loader loads the kubernetes package from the extracted schema, and no
// other package.
func Loader() (schema.Loader, error) {
	var spec schema.PackageSpec
	if err := json.Unmarshal(kubernetesJSON, &spec); err != nil {
		return nil, fmt.Errorf("unable to read the kubernetes schema: %w", err)
	}
	pkg, err := schema.ImportSpec(spec, nil, schema.NewNullLoader(), schema.ValidationOptions{})
	if err != nil {
		return nil, fmt.Errorf("unable to bind the kubernetes schema: %w", err)
	}
	return loader{pkg: pkg}, nil
}

// loader serves one package.
type loader struct{ pkg *schema.Package }

func (l loader) LoadPackage(name string, version *semver.Version) (*schema.Package, error) {
	return l.LoadPackageV2(context.Background(), &schema.PackageDescriptor{Name: name, Version: version})
}

func (l loader) LoadPackageV2(_ context.Context, d *schema.PackageDescriptor) (*schema.Package, error) {
	if d.Name != l.pkg.Name {
		return nil, fmt.Errorf("unable to load package %s: only %s is known", d.Name, l.pkg.Name)
	}
	if d.Version != nil && l.pkg.Version != nil && !d.Version.EQ(*l.pkg.Version) {
		return nil, fmt.Errorf("unable to load package %s %s: the schema is of %s", d.Name, d.Version, l.pkg.Version)
	}
	return l.pkg, nil
}
