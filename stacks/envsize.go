package stacks

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The Go language host passes the whole stack config in one environment
// string, PULUMI_CONFIG, which Linux caps at MAX_ARG_STRLEN (128 KiB): a larger
// config fails execve before the program can name the key to blame
// (docs/decisions/0004-upstream-behaviours.md#the-stack-config-travels-in-one-environment-string).

// maxEnvString is MAX_ARG_STRLEN with 4 KiB pages: the longest environment
// string, NUL included, execve takes (envsize_internal_test.go execs one).
const maxEnvString = 32 * 4096

// configEnvName is the variable the Go language host passes the config in.
const configEnvName = "PULUMI_CONFIG"

// tooLargeMarker is in every message about the limit (TooLargeProblems).
const tooLargeMarker = `"argument list too long"`

// configEnvLen is the length of the PULUMI_CONFIG string the language host
// builds from values, NUL included.
func configEnvLen(values map[string]string) int {
	b, err := json.Marshal(values)
	if err != nil {
		return 0
	}
	return len(configEnvName) + len("=") + len(b) + 1
}

// checkConfigSize reports a config that the program could not be started
// with, at the key that makes it large: the deepest one holding at least
// half of the biggest top-level key (one patch, one Helm value), else that
// top-level key itself, with its largest parts.
func checkConfigSize(d *Diagnostics, src Source) {
	size := configEnvLen(src.Values)
	if size <= maxEnvString {
		return
	}
	part, parts := largestPart(src)
	var list string
	if len(parts) > 1 {
		names := make([]string, len(parts))
		for i, p := range parts {
			names[i] = fmt.Sprintf("%s (%s)", p.path, formatSizeShort(p.n))
		}
		list = "; its largest parts: " + strings.Join(names, ", ")
	}
	d.errorf(part.path, "holds %s of the stack config's %s%s: the Pulumi CLI starts the program with the whole config in one environment variable (%s), which Linux limits to %s, so preview, up and destroy would fail with %s; make the config at least %s smaller (a large manifest inlined in a patch: list its URL in Talos's cluster.extraManifests instead)",
		formatSize(part.n), formatSize(size), list, configEnvName, formatSize(maxEnvString), tooLargeMarker, formatSize(size-maxEnvString))
}

// maxParts is how many parts of a large key a message lists.
const maxParts = 3

// largestPart finds the key to name for a config that is too large, with
// its share of PULUMI_CONFIG in bytes, and its largest parts when none of
// them holds half of it.
func largestPart(src Source) (sizedPath, []sizedPath) {
	var bigKey string
	big := -1
	for k, v := range src.Values {
		if n := encodedLen(k) + 1 + encodedLen(v); n > big || (n == big && k < bigKey) {
			bigKey, big = k, n
		}
	}
	key, ours := strings.CutPrefix(bigKey, src.Project+":")
	if !ours {
		return sizedPath{bigKey, big}, nil
	}
	v, err := parseJSON(src.Values[bigKey])
	if err != nil {
		return sizedPath{key, big}, nil
	}
	at, v := dominant(sizedPath{key, big}, v)
	children := members(at.path, v)
	slices.SortStableFunc(children, func(a, b sizedChild) int { return b.n - a.n })
	var parts []sizedPath
	for _, c := range children[:min(maxParts, len(children))] {
		p, _ := dominant(c.sizedPath, c.v)
		parts = append(parts, p)
	}
	return at, parts
}

type sizedPath struct {
	path string
	n    int
}

type sizedChild struct {
	sizedPath
	v any
}

// dominant descends from v at p into the member or item that holds at
// least half of it, as long as there is one.
func dominant(p sizedPath, v any) (sizedPath, any) {
	for {
		children := members(p.path, v)
		if len(children) == 0 {
			return p, v
		}
		best := children[0]
		for _, c := range children[1:] {
			if c.n > best.n || (c.n == best.n && c.path < best.path) {
				best = c
			}
		}
		if 2*best.n < p.n {
			return p, v
		}
		p, v = best.sizedPath, best.v
	}
}

// members lists the members or items of v with their paths and sizes.
func members(path string, v any) []sizedChild {
	var out []sizedChild
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			out = append(out, sizedChild{sizedPath{join(path, k), jsonEncodedLen(x[k])}, x[k]})
		}
	case []any:
		for i, c := range x {
			out = append(out, sizedChild{sizedPath{fmt.Sprintf("%s[%d]", path, i), jsonEncodedLen(c)}, c})
		}
	}
	return out
}

// encodedLen is the room s takes in PULUMI_CONFIG: a JSON string, quotes
// and escapes included.
func encodedLen(s string) int {
	b, err := json.Marshal(s)
	if err != nil {
		return len(s)
	}
	return len(b)
}

// jsonEncodedLen is the room a decoded value takes in PULUMI_CONFIG, where
// it is JSON text inside a JSON string (every quote escaped once more).
func jsonEncodedLen(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return encodedLen(string(b)) - len(`""`)
}

// formatSize is a size for messages, exact in bytes where KiB round.
func formatSize(n int) string {
	if n < 1024 || n%1024 == 0 {
		return formatSizeShort(n)
	}
	return fmt.Sprintf("%s (%d bytes)", formatSizeShort(n), n)
}

func formatSizeShort(n int) string {
	switch {
	case n == 1:
		return "1 byte"
	case n < 1024:
		return fmt.Sprintf("%d bytes", n)
	case n%1024 == 0:
		return fmt.Sprintf("%d KiB", n/1024)
	default:
		return fmt.Sprintf("%.1f KiB", float64(n)/1024)
	}
}

// TooLargeProblems returns the problems of a Load error that say the config
// is too large to start the program with: the Pulumi CLI fails on them with
// a bare "argument list too long", so a wrapper that runs it should print
// them first.
func TooLargeProblems(err error) []Problem {
	var invalid *InvalidConfigError
	if !errors.As(err, &invalid) {
		return nil
	}
	var out []Problem
	for _, p := range invalid.Problems {
		if strings.Contains(p.Message, tooLargeMarker) {
			out = append(out, p)
		}
	}
	return out
}
