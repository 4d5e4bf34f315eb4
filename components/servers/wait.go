package servers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/rollout"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
)

// TalosWaitHookSuffix names (after the cluster's name) the hook that waits
// for each freshly installed node's Talos API, before the node's wait
// resource is created.
const TalosWaitHookSuffix = "-talos-wait"

// RunWait waits in the program, with the project's own client, until the
// node of env (Wait.Env) answers on the Talos API port: any TLS answer
// there means that Talos runs (talosapi.Answers). It says what it waits
// for, and what the operator has to do (env HINT), when it starts and in
// every report (timing.ProgressEvery), and stops when ctx is cancelled.
func RunWait(ctx context.Context, log talos.Logger, env map[string]string, timing rollout.Timing) error {
	timing = timing.WithDefaults()
	timeout, err := talos.EnvSeconds(env, "WAIT_TIMEOUT", 30*time.Minute)
	if err != nil {
		return err
	}
	node, ip, port := env["NODE_NAME"], env["NODE_IP"], env["TALOS_PORT"]
	if ip == "" {
		return errors.New("unable to wait for the node's Talos API: NODE_IP is not set")
	}
	if port == "" {
		port = fmt.Sprint(TalosAPIPort)
	}
	label := env["WAIT_LABEL"]
	if label == "" {
		label = timeout.String()
	}
	hint := env["HINT"]
	if hint != "" {
		log.Info(hint)
	}
	addr := net.JoinHostPort(ip, port)
	log.Status(fmt.Sprintf("waiting up to %s for the Talos API of %s at %s", label, node, addr))
	report := func(msg string) {
		if hint != "" {
			msg += ". " + hint
		}
		log.Status(msg)
	}
	start := time.Now()
	err = talosapi.WaitAnswering(ctx, addr, timing.Poll, timeout, talosapi.WithProgress(report, timing.ProgressEvery))
	switch {
	case err == nil:
		log.Info(fmt.Sprintf("%s answers on port %s after %s: Talos is up", node, port, time.Since(start).Round(time.Second)))
		return nil
	case errors.Is(err, context.Canceled), ctx.Err() != nil:
		return err
	default:
		return fmt.Errorf("%s (%s) does not answer on port %s within %s: %w; check in the provider's console that it boots "+
			"from its disk, not the rescue system, and that port %s is reachable from here; then run 'pulumi up' again: "+
			"it goes on waiting, the install is not repeated", node, ip, port, label, err, port)
	}
}
