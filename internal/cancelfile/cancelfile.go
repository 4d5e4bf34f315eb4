// Package cancelfile tells a Pulumi program that its run was cancelled.
// The engine's first Ctrl-C lets the steps in flight finish, and a resource
// hook is one, so a hook that waits must learn of the cancel on its own.
// Two signs reach the program:
//
//   - SIGINT, to the program only (ForProgram): since Pulumi CLI 3.229 the
//     Go language host answers the engine's Cancel by interrupting the
//     program, and kills it 5 s later (pulumi-language-go's runProgram:
//     cmd.Cancel, WaitDelay). A Go program that does not catch it dies at
//     once, in the middle of a hook's drain or etcd leave; caught, the hooks
//     stop waiting and say so first. A plugin (the component provider) must
//     not catch it: the engine shuts plugins down with SIGINT.
//   - a file: `stackctl exec`, which the make targets run pulumi under,
//     creates one on the first Ctrl-C and names it in the environment of
//     pulumi, which its program and its plugins inherit. The component
//     provider's plugin gets no SIGINT, and older CLIs send none.
package cancelfile

import (
	"context"
	"os"
	"os/signal"
	"syscall"
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
// none is named. It is what a plugin uses: the engine shuts its plugins
// down with SIGINT (and kills them 5 s later), so a plugin must not catch
// that signal.
func FromEnv() context.Context {
	return fromEnv(context.Background())
}

// ForProgram is the context of a Pulumi program's run: it ends when the run
// is cancelled, on SIGINT or SIGTERM (the language host's answer to the
// engine's Cancel) or once the file the environment names exists. It lives
// as long as the process: a program calls it once.
func ForProgram() context.Context {
	//nolint:govet // the signals stay caught for the process's life: never stopped
	ctx, _ := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	return fromEnv(ctx)
}

func fromEnv(parent context.Context) context.Context {
	path := os.Getenv(Env)
	if path == "" {
		return parent
	}
	return Watch(parent, path, Poll)
}
