// Package shell quotes values for the POSIX shell scripts this project
// generates (run over SSH on hosts, or locally by the command provider).
package shell

import "strings"

// Quote single-quotes s so that sh reads it back unchanged.
func Quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
