// Command talos-cluster is the Pulumi program of this project: it turns one
// stack config file into a Talos Kubernetes cluster. Everything but wiring
// lives in program, components and stacks.
package main

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
)

func main() {
	var src stacks.Source
	pulumi.Run(func(ctx *pulumi.Context) error {
		return program.Run(ctx, src)
	}, stacks.CaptureSource(&src))
}
