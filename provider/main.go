// Command pulumi-resource-talos-anywhere serves the project's components
// (TalosCluster, ProxmoxCluster, VpsCluster) as the Pulumi package
// talos-anywhere, for programs in any language: `pulumi package add` builds
// it from this folder (PulumiPlugin.yaml).
package main

import (
	"context"
	"fmt"
	"os"

	p "github.com/pulumi/pulumi-go-provider"

	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/cancelfile"
	"github.com/fluodata/talos-pulumi/provider/talosprovider"
)

func main() {
	// The engine tells a component nothing about the operation it runs
	// for: `make destroy` (and whoever runs `pulumi destroy --run-program`
	// with it) says so in the environment.
	deps := talos.Deps{Destroy: os.Getenv(talos.DestroyEnv) == "1", Context: cancelfile.FromEnv()}
	prov, err := talosprovider.NewWith(talosprovider.Options{Talos: deps})
	if err != nil {
		fmt.Fprintf(os.Stderr, "unable to build the provider: %v\n", err)
		os.Exit(1)
	}
	if err := p.RunProvider(context.Background(), talosprovider.Name, talosprovider.Version(), prov); err != nil {
		fmt.Fprintf(os.Stderr, "unable to run the provider: %v\n", err)
		os.Exit(1)
	}
}
