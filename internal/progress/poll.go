package progress

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrTimeout is what a Poll's error wraps when its time ran out (unless
// the Poll names an error of its own).
var ErrTimeout = errors.New("timed out")

// Poll is one wait that asks the same question until the answer is yes:
// the Talos, Kubernetes and node waits of a run all wait this way, so that
// every one reports, stops on a cancelled run and times out alike.
type Poll struct {
	// What the wait waits for, for its reports and errors ("node 10.0.0.2
	// to reboot").
	What string
	// Interval between two questions (positive); the first is immediate.
	Interval time.Duration
	// Timeout of the whole wait.
	Timeout time.Duration
	// Report receives "waiting for <What> (<elapsed>): last seen: <the
	// last answer>" every Every (DefaultEvery when not positive) while
	// the wait lasts, on a goroutine of the wait's own; nil reports
	// nothing.
	Report func(message string)
	Every  time.Duration
	// ErrTimeout is wrapped by the error of a wait whose time ran out
	// (ErrTimeout of this package when nil).
	ErrTimeout error
}

// Until calls try every Interval until it reports done, the Timeout passes
// (an error wrapping ErrTimeout, with try's last word on why it was not
// done) or ctx ends (Progress.Cancelled: the error says so, with try's last
// word). try gets a context that ends with the wait.
func (w Poll) Until(ctx context.Context, try func(context.Context) (bool, error)) error {
	if w.Interval <= 0 {
		return errors.New("the poll interval must be positive")
	}
	timeoutErr := w.ErrTimeout
	if timeoutErr == nil {
		timeoutErr = ErrTimeout
	}
	p := Start(w.What, w.Report, w.Every)
	defer p.Stop()
	wctx, cancel := context.WithTimeout(ctx, w.Timeout)
	defer cancel()
	t := time.NewTicker(w.Interval)
	defer t.Stop()
	var last error
	for {
		done, why := try(wctx)
		if done {
			return nil
		}
		if ctx.Err() != nil {
			// The call was cut short by the cancellation: it says
			// nothing about what is waited for.
			return p.Cancelled(ctx)
		}
		// A call cut short by the wait's own deadline says nothing new.
		if why != nil && (last == nil || !errors.Is(why, context.DeadlineExceeded)) {
			last = why
			p.Saw(why.Error())
		}
		select {
		case <-ctx.Done():
			return p.Cancelled(ctx)
		case <-wctx.Done():
			if ctx.Err() != nil {
				return p.Cancelled(ctx)
			}
			if last == nil {
				return fmt.Errorf("%w after %s", timeoutErr, w.Timeout)
			}
			return fmt.Errorf("%w after %s, last: %w", timeoutErr, w.Timeout, last)
		case <-t.C:
		}
	}
}
