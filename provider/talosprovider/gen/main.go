// Command gen writes descriptions.json from the components' doc comments
// (`go generate ./talosprovider` in the provider module).
package main

import (
	"fmt"
	"os"

	"github.com/fluodata/talos-pulumi/provider/internal/docs"
)

func main() {
	b, err := docs.Generate(docs.ComponentDirs("../.."))
	if err == nil {
		err = os.WriteFile("descriptions.json", b, 0o600)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "unable to write descriptions.json: %v\n", err)
		os.Exit(1)
	}
}
