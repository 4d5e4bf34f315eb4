// Command gen writes kubernetes.json: the part of the kubernetes schema
// the talos-anywhere schema refers to (kubeschema.Extract), from the
// kubernetes provider module the Go module proxy serves, stamped with the
// version of the kubernetes SDK in go.mod. Run by `go generate` in
// provider/internal/kubeschema.
package main

import (
	"fmt"
	"os"

	"github.com/fluodata/talos-pulumi/provider/internal/kubeschema"
	"github.com/fluodata/talos-pulumi/provider/internal/kubeschema/source"
)

func main() {
	out, err := source.Extracted()
	if err == nil {
		err = os.WriteFile("kubernetes.json", out, 0o644) //nolint:gosec // a source file of the repository
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gen: unable to write kubernetes.json from %s: %v\n", kubeschema.Module, err)
		os.Exit(1)
	}
}
