package stacks

import (
	"fmt"
	"slices"
	"strings"
)

// Problem is one finding about the configuration, tied to its key path.
type Problem struct {
	// Path is the config key path, e.g. `nodes.workers[1].ip`.
	Path string
	// Message says what is wrong, including the offending value.
	Message string
}

func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// Diagnostics collects every error and warning of one load, in the order the
// keys were visited, so the user can fix all of them in one edit.
type Diagnostics struct {
	Errors   []Problem
	Warnings []Problem
	// explicitZeros are the key paths the stack gives the number 0, which
	// defaults cannot tell from an absent key (see numbers.go).
	explicitZeros map[string]bool
	// objects are the objects the stack gives (noteObject).
	objects map[string]bool
	// secrets are the stack's secret values, which no message may show
	// (see scrubSecrets): problems added later are scrubbed of them too.
	secrets []string
}

// AddErrors adds problems found beyond Load (the components' own rules,
// named by stack keys), scrubbed of the stack's secrets as Load's are.
func (d *Diagnostics) AddErrors(ps ...Problem) {
	added := &Diagnostics{Errors: ps}
	scrubSecrets(added, d.secrets)
	for _, p := range added.Errors {
		d.Errors = addOnce(d.Errors, p)
	}
}

// errorf and warnf add a problem once: a pool's nodes share the pool's
// keys, so what is wrong with one is found on each.
func (d *Diagnostics) errorf(path, format string, args ...any) {
	d.Errors = addOnce(d.Errors, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

func (d *Diagnostics) warnf(path, format string, args ...any) {
	d.Warnings = addOnce(d.Warnings, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

func addOnce(ps []Problem, p Problem) []Problem {
	if slices.Contains(ps, p) {
		return ps
	}
	return append(ps, p)
}

// HasErrors reports whether any error was found.
func (d *Diagnostics) HasErrors() bool { return len(d.Errors) > 0 }

// Err returns nil without errors, or an *InvalidConfigError listing them all.
func (d *Diagnostics) Err() error {
	if !d.HasErrors() {
		return nil
	}
	return &InvalidConfigError{Problems: append([]Problem(nil), d.Errors...)}
}

// InvalidConfigError is returned when the stack config cannot be used. Its
// message lists every problem, one per line.
type InvalidConfigError struct {
	Problems []Problem
}

func (e *InvalidConfigError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "invalid stack configuration (%d problem", len(e.Problems))
	if len(e.Problems) != 1 {
		b.WriteString("s")
	}
	b.WriteString("):")
	for _, p := range e.Problems {
		b.WriteString("\n  - ")
		b.WriteString(p.String())
	}
	return b.String()
}
