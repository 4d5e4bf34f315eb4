// Command stackctl holds the operator tools of this project besides the
// Pulumi program: `stackctl doctor` checks what `pulumi up` of a stack will
// need; `stackctl preview|up|refresh|destroy|outputs` run the program for CI
// through the Automation API.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/cli"
)

func main() {
	// Ctrl-C and CI cancellation (SIGTERM) cancel the running operation:
	// pulumi gets one interrupt, saves its state and releases the lock.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
