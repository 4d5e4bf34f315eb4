package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// DefaultProgressEvery is how often a drain reports what it waits for,
// unless told otherwise: a drain of minutes that prints nothing cannot be
// told from a hung run.
const DefaultProgressEvery = 30 * time.Second

// progress reports a wait, "waiting for <what> (<elapsed>): last seen:
// <last>", on a clock of its own (a call that hangs does not hold the
// reports back) until stop; with a nil report it only keeps the state.
// It is the same as talosapi's Progress, which this package does not
// import.
type progress struct {
	what   string
	report func(string)
	start  time.Time

	mu   sync.Mutex
	last string

	stopped chan struct{}
	done    chan struct{}
	once    sync.Once
}

func startProgress(what string, report func(string), every time.Duration) *progress {
	p := &progress{what: what, report: report, start: time.Now(), last: "no answer yet"}
	if report == nil {
		return p
	}
	if every <= 0 {
		every = DefaultProgressEvery
	}
	p.stopped, p.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.stopped:
				return
			case <-t.C:
				p.report(fmt.Sprintf("waiting for %s (%s): last seen: %s", p.what, p.elapsed(), p.seen()))
			}
		}
	}()
	return p
}

func (p *progress) saw(last string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last = last
}

func (p *progress) seen() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// elapsed rounds the time since the start for a reader: to the second
// from a second on, to the millisecond below (the waits of tests).
func (p *progress) elapsed() time.Duration {
	d := time.Since(p.start)
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

// stop ends the reports; none runs after it returns.
func (p *progress) stop() {
	if p.stopped == nil {
		return
	}
	p.once.Do(func() { close(p.stopped) })
	<-p.done
}

// runStopped says why ctx ended, in the words of a run.
func runStopped(ctx context.Context) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "the run was cancelled: its time ran out"
	}
	return "the run was cancelled"
}
