// Command pulumi-resource-talos-cluster serves the project's components
// (TalosCluster, ProxmoxCluster, VpsCluster) as the Pulumi package
// talos-cluster, for programs in any language: `pulumi package add` builds
// it from this folder (PulumiPlugin.yaml).
package main

import (
	"context"
	"fmt"
	"os"

	p "github.com/pulumi/pulumi-go-provider"

	"github.com/fluodata/talos-pulumi/provider/talosprovider"
)

func main() {
	prov, err := talosprovider.New()
	if err != nil {
		fmt.Fprintf(os.Stderr, "unable to build the provider: %v\n", err)
		os.Exit(1)
	}
	if err := p.RunProvider(context.Background(), talosprovider.Name, talosprovider.Version, prov); err != nil {
		fmt.Fprintf(os.Stderr, "unable to run the provider: %v\n", err)
		os.Exit(1)
	}
}
