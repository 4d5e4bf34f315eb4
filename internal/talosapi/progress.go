package talosapi

import (
	"time"

	"github.com/fluodata/talos-pulumi/internal/progress"
)

// DefaultProgressEvery is how often a wait reports what it waits for,
// unless told otherwise: a wait of minutes that prints nothing cannot be
// told from a hung run.
const DefaultProgressEvery = progress.DefaultEvery

// WaitOption tunes a wait of this package (WaitVersion, WaitRebooted,
// WaitHealthy).
type WaitOption func(*waitConfig)

type waitConfig struct {
	report func(string)
	every  time.Duration
}

// WithProgress makes a wait report, every `every` (DefaultProgressEvery
// when not positive) while it waits, "waiting for <what> (<elapsed>): last
// seen: <its last answer or error>". report runs on a goroutine of the
// wait's own, so that a call that hangs does not hold the reports back;
// it is never called after the wait has returned.
func WithProgress(report func(message string), every time.Duration) WaitOption {
	return func(c *waitConfig) { c.report, c.every = report, every }
}

// Progress keeps what a wait saw last and reports it (progress.Progress).
type Progress = progress.Progress

// StartProgress starts reporting the wait for what (progress.Start).
func StartProgress(what string, report func(message string), every time.Duration) *Progress {
	return progress.Start(what, report, every)
}
