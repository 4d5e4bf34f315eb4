package talosapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// until calls try every interval until it reports done, the timeout passes
// (ErrTimeout, with try's last word on why it was not done) or ctx ends.
// try's first call is immediate.
func until(ctx context.Context, interval, timeout time.Duration, try func(context.Context) (bool, error)) error {
	if interval <= 0 {
		return errors.New("the poll interval must be positive")
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	var last error
	for {
		done, why := try(wctx)
		if done {
			return nil
		}
		// A call cut short by the wait's own deadline says nothing new.
		if why != nil && (last == nil || !errors.Is(why, context.DeadlineExceeded)) {
			last = why
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if last == nil {
				return fmt.Errorf("%w after %s", ErrTimeout, timeout)
			}
			return fmt.Errorf("%w after %s, last: %w", ErrTimeout, timeout, last)
		case <-t.C:
		}
	}
}

// WaitVersion waits until node answers with Talos version want: through
// the reboot of an upgrade, while it does not answer or still runs the old
// version. The error on timeout names the node and its last answer. A node
// that reboots into the version it ran before passes at once, before it
// goes down: wait for that with WaitRebooted.
func WaitVersion(ctx context.Context, api API, node, want string, poll, timeout time.Duration) error {
	err := until(ctx, poll, timeout, func(ctx context.Context) (bool, error) {
		got, err := api.Version(ctx, node)
		if err != nil {
			return false, err
		}
		if got != want {
			return false, fmt.Errorf("node %s runs Talos %s", node, got)
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("unable to wait for node %s to run Talos %s: %w", node, want, err)
	}
	return nil
}

// WaitRebooted waits until node answers with a boot time later than
// bootedBefore (what BootTime said before the reboot was asked for), and
// returns the new boot time. Unlike a version, a boot time tells a node
// that came back from one that never went down.
func WaitRebooted(ctx context.Context, api API, node string, bootedBefore time.Time, poll, timeout time.Duration) (time.Time, error) {
	var booted time.Time
	err := until(ctx, poll, timeout, func(ctx context.Context) (bool, error) {
		bt, err := api.BootTime(ctx, node)
		if err != nil {
			return false, err
		}
		if !bt.After(bootedBefore) {
			return false, fmt.Errorf("node %s has not rebooted (booted at %s)", node, bt.UTC().Format(time.RFC3339))
		}
		booted = bt
		return true, nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("unable to wait for node %s to reboot: %w", node, err)
	}
	return booted, nil
}

// WaitHealthy waits until every named service of node runs and passes its
// health check. Name services that have a health check (etcd, kubelet,
// apid, trustd, containerd, cri): one whose health is unknown is not
// healthy. The error on timeout names the service at fault and its state.
func WaitHealthy(ctx context.Context, api API, node string, services []string, poll, timeout time.Duration) error {
	err := until(ctx, poll, timeout, func(ctx context.Context) (bool, error) {
		list, err := api.ServiceList(ctx, node)
		if err != nil {
			return false, err
		}
		return servicesHealthy(node, list, services)
	})
	if err != nil {
		return fmt.Errorf("unable to wait for services %s of node %s to be healthy: %w", strings.Join(services, ", "), node, err)
	}
	return nil
}

func servicesHealthy(node string, list []Service, want []string) (bool, error) {
	byID := make(map[string]Service, len(list))
	for _, s := range list {
		byID[s.ID] = s
	}
	for _, id := range want {
		s, ok := byID[id]
		switch {
		case !ok:
			return false, fmt.Errorf("node %s has no service %s", node, id)
		case s.State != "Running":
			return false, fmt.Errorf("service %s of node %s is %s", id, node, s.State)
		case s.HealthUnknown:
			return false, fmt.Errorf("service %s of node %s runs, health not known yet", id, node)
		case !s.Healthy:
			msg := ""
			if s.HealthMessage != "" {
				msg = ": " + s.HealthMessage
			}
			return false, fmt.Errorf("service %s of node %s runs, unhealthy%s", id, node, msg)
		}
	}
	return true, nil
}
