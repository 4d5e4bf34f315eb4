// Package exitcode is the one table of stackctl's exit codes, for every
// subcommand: CI scripts and the Makefile may branch on them.
package exitcode

// The codes; their meanings are in docs/ci.md's table too.
const (
	OK             = 0
	Failed         = 1   // the operation or a check failed
	Usage          = 2   // bad flags or arguments
	BadConfig      = 3   // the stack's config is invalid or unreadable
	ChangesPending = 4   // preview with --exit-code-on-changes found changes
	Locked         = 5   // another update holds the stack's lock
	Passphrase     = 6   // the secrets passphrase is missing or wrong
	NoStack        = 7   // the stack does not exist and --create was not given
	CannotRun      = 127 // exec: the command could not be started (as a shell says)
	Cancelled      = 130 // SIGINT/SIGTERM (128 + SIGINT, as a shell says)
)

// Signaled is the code of a child killed by signal sig, as a shell gives it.
func Signaled(sig int) int { return 128 + sig }
