// Package sdkgen generates the package's SDKs from its schema with
// Pulumi's own code generators (pkg/v3 codegen, the ones the CLI's
// language hosts run for `pulumi package gen-sdk`), without the CLI or any
// plugin: the one other package the schema names, kubernetes (the
// components' kubernetesProvider output), is loaded from the part of its
// schema kubeschema holds.
package sdkgen

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	gogen "github.com/pulumi/pulumi/pkg/v3/codegen/go"
	"github.com/pulumi/pulumi/pkg/v3/codegen/nodejs"
	"github.com/pulumi/pulumi/pkg/v3/codegen/python"
	"github.com/pulumi/pulumi/pkg/v3/codegen/schema"

	"github.com/fluodata/talos-pulumi/provider/internal/kubeschema"
)

// Languages are the SDKs Generate writes.
var Languages = []string{"nodejs", "go", "python"}

// tool is the generator's name in the files' headers.
const tool = "pulumi"

// Generate returns the files of the language's SDK (paths relative to the
// SDK's folder) for the schema.
func Generate(schemaJSON []byte, language string) (map[string][]byte, error) {
	var spec schema.PackageSpec
	if err := json.Unmarshal(schemaJSON, &spec); err != nil {
		return nil, fmt.Errorf("unable to read the schema: %w", err)
	}
	// Bound anew for each language: a generator writes into the
	// package's language settings.
	loader, err := kubeschema.Loader()
	if err != nil {
		return nil, err
	}
	pkg, diags, err := schema.BindSpec(spec, loader, schema.ValidationOptions{})
	if err != nil {
		return nil, fmt.Errorf("unable to bind the schema: %w", err)
	}
	if diags.HasErrors() {
		return nil, fmt.Errorf("unable to bind the schema: %s", diags.Error())
	}
	switch language {
	case "nodejs":
		return nodejs.GeneratePackage(tool, pkg, nil, nil, false, nil)
	case "go":
		return gogen.GeneratePackage(tool, pkg, nil)
	case "python":
		return python.GeneratePackage(tool, pkg, nil, nil)
	default:
		return nil, fmt.Errorf("unable to generate an SDK for %q: one of %v", language, Languages)
	}
}

// Write writes the files under dir, which must not exist yet.
func Write(dir string, files map[string][]byte) error {
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("unable to write the SDK: %s exists", dir)
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil { //nolint:gosec // an SDK's folders, meant to be read
			return fmt.Errorf("unable to write the SDK: %w", err)
		}
		if err := os.WriteFile(path, files[name], 0o644); err != nil { //nolint:gosec // an SDK's source files, meant to be read
			return fmt.Errorf("unable to write the SDK: %w", err)
		}
	}
	return nil
}
