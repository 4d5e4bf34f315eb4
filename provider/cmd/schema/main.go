// Command schema prints the package's schema, as the plugin of this
// version gives it to the CLI, for the release's assets (make release).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/blang/semver"
	p "github.com/pulumi/pulumi-go-provider"
	"github.com/pulumi/pulumi-go-provider/integration"

	"github.com/fluodata/talos-pulumi/provider/talosprovider"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "schema:", err)
		os.Exit(1)
	}
}

func run() error {
	prov, err := talosprovider.New()
	if err != nil {
		return err
	}
	version, err := semver.Parse(talosprovider.Version())
	if err != nil {
		return fmt.Errorf("unable to read the version %q: %w", talosprovider.Version(), err)
	}
	s, err := integration.NewServer(context.Background(), talosprovider.Name, version, integration.WithProvider(prov))
	if err != nil {
		return fmt.Errorf("unable to serve the provider: %w", err)
	}
	resp, err := s.GetSchema(p.GetSchemaRequest{})
	if err != nil {
		return fmt.Errorf("unable to get the schema: %w", err)
	}
	_, err = fmt.Println(resp.Schema)
	return err
}
