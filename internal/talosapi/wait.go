package talosapi

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fluodata/talos-pulumi/internal/progress"
)

// until calls try every interval until it reports done, the timeout passes
// (ErrTimeout, with try's last word on why it was not done) or ctx ends:
// progress.Poll, with the reporter of opts.
func until(ctx context.Context, what string, interval, timeout time.Duration, opts []WaitOption, try func(context.Context) (bool, error)) error {
	var cfg waitConfig
	for _, o := range opts {
		o(&cfg)
	}
	return progress.Poll{
		What: what, Interval: interval, Timeout: timeout,
		Report: cfg.report, Every: cfg.every, ErrTimeout: ErrTimeout,
	}.Until(ctx, try)
}

// WaitVersion waits until node answers with Talos version want: through
// the reboot of an upgrade, while it does not answer or still runs the old
// version. The error on timeout names the node and its last answer. A node
// that reboots into the version it ran before passes at once, before it
// goes down: wait for that with WaitRebooted. opts may add a progress
// reporter (WithProgress).
func WaitVersion(ctx context.Context, api API, node, want string, poll, timeout time.Duration, opts ...WaitOption) error {
	what := fmt.Sprintf("node %s to run Talos %s", node, want)
	err := until(ctx, what, poll, timeout, opts, func(ctx context.Context) (bool, error) {
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
		return fmt.Errorf("unable to wait for %s: %w", what, err)
	}
	return nil
}

// WaitRebooted waits until node answers with a boot time later than
// bootedBefore (what BootTime said before the reboot was asked for), and
// returns the new boot time. Unlike a version, a boot time tells a node
// that came back from one that never went down. opts may add a progress
// reporter (WithProgress).
func WaitRebooted(ctx context.Context, api API, node string, bootedBefore time.Time, poll, timeout time.Duration, opts ...WaitOption) (time.Time, error) {
	var booted time.Time
	what := fmt.Sprintf("node %s to reboot", node)
	err := until(ctx, what, poll, timeout, opts, func(ctx context.Context) (bool, error) {
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
		return time.Time{}, fmt.Errorf("unable to wait for %s: %w", what, err)
	}
	return booted, nil
}

// WaitHealthy waits until every named service of node runs and passes its
// health check. Name services that have a health check (etcd, kubelet,
// apid, trustd, containerd, cri): one whose health is unknown is not
// healthy. The error on timeout names the service at fault and its state.
// opts may add a progress reporter (WithProgress).
func WaitHealthy(ctx context.Context, api API, node string, services []string, poll, timeout time.Duration, opts ...WaitOption) error {
	what := fmt.Sprintf("services %s of node %s to be healthy", strings.Join(services, ", "), node)
	err := until(ctx, what, poll, timeout, opts, func(ctx context.Context) (bool, error) {
		list, err := api.ServiceList(ctx, node)
		if err != nil {
			return false, err
		}
		return servicesHealthy(node, list, services)
	})
	if err != nil {
		return fmt.Errorf("unable to wait for %s: %w", what, err)
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
