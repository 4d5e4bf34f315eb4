// Package progress reports a wait that lasts: what it waits for, since
// when and what it saw last, on a clock of its own, and says why the wait
// ended when its run was cancelled. The Talos and Kubernetes clients'
// waits share it.
package progress

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// DefaultEvery is how often a wait reports what it waits for, unless told
// otherwise: a wait of minutes that prints nothing cannot be told from a
// hung run.
const DefaultEvery = 30 * time.Second

// nothingYet is the last state of a wait before its first answer.
const nothingYet = "no answer yet"

// Progress keeps what a wait saw last and reports it on a clock of its
// own until Stop. The zero of its report (nil) keeps the state only, for
// the wait's error. Its methods are safe for concurrent use.
type Progress struct {
	what   string
	report func(string)
	start  time.Time

	mu   sync.Mutex
	last string

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// Start starts reporting the wait for what ("node 10.0.0.2 to
// reboot") with report every `every` (DefaultEvery when not
// positive), until Stop; a nil report reports nothing.
func Start(what string, report func(message string), every time.Duration) *Progress {
	p := &Progress{what: what, report: report, start: time.Now(), last: nothingYet}
	if report == nil {
		return p
	}
	if every <= 0 {
		every = DefaultEvery
	}
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.report(p.Message())
			}
		}
	}()
	return p
}

// Saw records what the wait saw last: an answer that is not the one it
// waits for, or an error.
func (p *Progress) Saw(last string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last = last
}

// Last returns what Saw recorded last.
func (p *Progress) Last() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// Elapsed returns the time since the wait started, rounded for a reader.
func (p *Progress) Elapsed() time.Duration { return roundElapsed(time.Since(p.start)) }

// Message is the report: "waiting for <what> (<elapsed>): last seen:
// <last>".
func (p *Progress) Message() string {
	return fmt.Sprintf("waiting for %s (%s): last seen: %s", p.what, p.Elapsed(), p.Last())
}

// Stop ends the reports; none runs after it returns. It may be called
// more than once.
func (p *Progress) Stop() {
	if p.stop == nil {
		return
	}
	p.stopOnce.Do(func() { close(p.stop) })
	<-p.done
}

// Cancelled is the error of the wait when ctx ended it: the run was
// cancelled (or ran out of its own time), after how long, and what the
// wait saw last. It wraps ctx's error.
func (p *Progress) Cancelled(ctx context.Context) error {
	return fmt.Errorf("%s after %s, last seen: %s: %w", RunStopped(ctx), p.Elapsed(), p.Last(), ctx.Err())
}

// RunStopped says why ctx ended, in the words of a run: "the run was
// cancelled", or "the run was cancelled: its time ran out" for a
// deadline.
func RunStopped(ctx context.Context) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "the run was cancelled: its time ran out"
	}
	return "the run was cancelled"
}

// roundElapsed rounds a wait's elapsed time for a reader: to the second
// from a second on, to the millisecond below (the waits of tests).
func roundElapsed(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}
