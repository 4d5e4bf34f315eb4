// Command sdkgen writes the package's SDKs (sdkgen.Languages) from a schema
// file into a folder per language, for the release's assets (make
// release): sdkgen <schema.json> <out>.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/fluodata/talos-pulumi/provider/internal/sdkgen"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: sdkgen <schema.json> <out>")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "sdkgen:", err)
		os.Exit(1)
	}
}

func run(schemaFile, out string) error {
	spec, err := os.ReadFile(schemaFile) //nolint:gosec // the schema file the caller names
	if err != nil {
		return fmt.Errorf("unable to read the schema: %w", err)
	}
	for _, language := range sdkgen.Languages {
		files, err := sdkgen.Generate(spec, language)
		if err != nil {
			return err
		}
		if err := sdkgen.Write(filepath.Join(out, language), files); err != nil {
			return err
		}
	}
	return nil
}
