// Command stackctl holds the operator tools of this project that are not the
// Pulumi program itself. `stackctl doctor --stack NAME` checks what `pulumi
// up` of a stack will need.
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/fluodata/talos-pulumi/internal/stackctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := stackctl.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
