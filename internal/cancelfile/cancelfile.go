// Package cancelfile tells a Pulumi program that its run was cancelled.
// The engine does not: its first Ctrl-C lets the steps in flight finish,
// and a resource hook is one, so a hook that waits goes on waiting. `stackctl
// exec`, which the make targets run pulumi under, creates a file on the
// first Ctrl-C and names it in the environment of pulumi, which its program
// and its plugins inherit.
package cancelfile

import (
	"context"
	"os"
	"time"
)

// Env names the file that appears when the operator cancels the run.
const Env = "TALOS_CLUSTER_CANCEL_FILE"

// Poll is how often Watch looks for the file.
const Poll = time.Second

// Watch is a context cancelled once the file at path exists (looked for
// every poll) or parent ends.
func Watch(parent context.Context, path string, poll time.Duration) context.Context {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		t := time.NewTicker(poll)
		defer t.Stop()
		for {
			if _, err := os.Stat(path); err == nil {
				cancel()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return ctx
}

// FromEnv is Watch of the file the environment names, with no parent (a
// hook runs after the program's body returned); context.Background() when
// none is named.
func FromEnv() context.Context {
	path := os.Getenv(Env)
	if path == "" {
		return context.Background()
	}
	return Watch(context.Background(), path, Poll)
}
