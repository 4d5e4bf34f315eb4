package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/fluodata/talos-pulumi/internal/progress"
)

// Readyz asks the API server's /readyz: nil when it answers 200 (every
// readiness check passes), the *APIError with the failing checks when it
// answers otherwise.
func (c *Client) Readyz(ctx context.Context) error {
	if err := c.do(ctx, http.MethodGet, "/readyz", nil, "", nil, nil); err != nil {
		return fmt.Errorf("/readyz did not answer ok: %w", err)
	}
	return nil
}

// Server is the URL of the API server the client calls.
func (c *Client) Server() string { return c.server }

// Wait bounds and reports a wait of this package (WaitReady, WaitNodesReady).
type Wait struct {
	// Interval between two questions (DefaultWaitInterval when not
	// positive); Timeout of the whole wait (required).
	Interval, Timeout time.Duration
	// Report receives what the wait waits for and its last answer every
	// Every (progress.DefaultEvery when not positive); nil reports nothing.
	Report func(message string)
	Every  time.Duration
}

// DefaultWaitInterval is how often a wait asks the API server.
const DefaultWaitInterval = 5 * time.Second

func (w Wait) poll(what string) progress.Poll {
	if w.Interval <= 0 {
		w.Interval = DefaultWaitInterval
	}
	return progress.Poll{What: what, Interval: w.Interval, Timeout: w.Timeout, Report: w.Report, Every: w.Every}
}

// WaitReady waits until /readyz answers ok streak times in a row (at least
// once): an API behind a VIP that just moved, or a load balancer with one
// server up, can answer once and then not. A timeout's error wraps
// progress.ErrTimeout and says what /readyz answered last.
func (c *Client) WaitReady(ctx context.Context, streak int, w Wait) error {
	streak = max(streak, 1)
	run := 0
	what := fmt.Sprintf("the Kubernetes API at %s to answer /readyz", c.server)
	var refused error
	err := w.poll(what).Until(ctx, func(ctx context.Context) (bool, error) {
		if err := c.Readyz(ctx); err != nil {
			if refused = c.refusal(err); refused != nil {
				return true, nil //nolint:nilerr // the refusal is in refused
			}
			run = 0
			return false, err
		}
		run++
		if run >= streak {
			return true, nil
		}
		return false, fmt.Errorf("/readyz answered ok %d of %d times in a row", run, streak)
	})
	if err == nil {
		err = refused
	}
	if err != nil {
		return fmt.Errorf("unable to wait for %s: %w", what, err)
	}
	return nil
}

// refusal is err when it says the API server refuses the kubeconfig's
// credentials (401, 403), nil otherwise. A real kube-apiserver takes the
// TLS handshake of any client certificate and answers 401 for one its
// client CA did not issue (the project's agreement test with the real
// one shows it): that never changes by waiting, so a wait stops at once.
func (c *Client) refusal(err error) error {
	if !errors.Is(err, ErrUnauthorized) {
		return nil
	}
	return fmt.Errorf("%w; the API server at %s does not take the kubeconfig's client certificate: it is not of this cluster's Kubernetes CA (the stack's machine secrets are another cluster's, or another cluster answers at this address)", err, c.server)
}

// WaitNodesReady waits until at least count Nodes have their Ready
// condition True. Its last answer names the nodes that are not Ready yet.
func (c *Client) WaitNodesReady(ctx context.Context, count int, w Wait) error {
	what := fmt.Sprintf("%d nodes to be Ready (%s)", count, c.server)
	var refused error
	err := w.poll(what).Until(ctx, func(ctx context.Context) (bool, error) {
		nodes, err := c.Nodes(ctx)
		if err != nil {
			if refused = c.refusal(err); refused != nil {
				return true, nil //nolint:nilerr // the refusal is in refused
			}
			return false, err
		}
		var notReady []string
		for _, n := range nodes {
			if !n.Ready {
				notReady = append(notReady, n.Name)
			}
		}
		ready := len(nodes) - len(notReady)
		if ready >= count {
			return true, nil
		}
		slices.Sort(notReady)
		msg := fmt.Sprintf("%d of %d nodes Ready", ready, count)
		if len(notReady) > 0 {
			msg += ", not Ready: " + strings.Join(notReady, ", ")
		}
		if len(nodes) < count {
			msg += fmt.Sprintf(", %d not registered yet", count-len(nodes))
		}
		return false, errors.New(msg)
	})
	if err == nil {
		err = refused
	}
	if err != nil {
		return fmt.Errorf("unable to wait for %s: %w", what, err)
	}
	return nil
}
