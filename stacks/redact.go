package stacks

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// No message may show a secret, nor a value given for a secret key. Two
// layers keep it so: where a value is described (a type error), a key that
// is or holds a credential gets its kind only ("got a number"), never its
// text; and Load scrubs every credential it knows of from every message it
// returns, so a validator that quotes a value by mistake leaks nothing.

// secretHolders caches which config types are or contain a Secret.
var secretHolders sync.Map // reflect.Type -> bool

// holdsSecret reports whether a value of type t is, or contains, a Secret:
// a wrong value given there may be the credential itself (a password given
// as a number, `rescue: <password>` one level too high).
func holdsSecret(t reflect.Type) bool {
	if v, ok := secretHolders.Load(t); ok {
		return v.(bool)
	}
	r := holdsSecretUncached(t, map[reflect.Type]bool{})
	secretHolders.Store(t, r)
	return r
}

func holdsSecretUncached(t reflect.Type, seen map[reflect.Type]bool) bool {
	if t == secretType {
		return true
	}
	if seen[t] {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		return holdsSecretUncached(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if holdsSecretUncached(t.Field(i).Type, seen) {
				return true
			}
		}
	}
	return false
}

// describeKind names the kind of a decoded value without its content, for
// messages about keys that hold credentials.
func describeKind(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	default:
		return "null"
	}
}

// describerFor is describe, or describeKind where the target type holds a
// credential.
func describerFor(t reflect.Type) func(any) string {
	if holdsSecret(t) {
		return describeKind
	}
	return describe
}

// describeRawFor describes a top-level value as the engine hands it over
// (JSON text, or a plain string that is not JSON): by kind only when its key
// holds credentials or was set with --secret.
func describeRawFor(t reflect.Type, keyIsSecret bool, raw string) string {
	if keyIsSecret || holdsSecret(t) {
		if v, err := parseJSON(raw); err == nil {
			return describeKind(v)
		}
		return "a string"
	}
	return describe(raw)
}

// minScrubLen is the shortest credential text scrubbed from messages: a
// shorter one would blank out ordinary words, and is no secret anyway.
const minScrubLen = 6

// Prefix lengths of the truncations messages use (truncate, short): a long
// credential may show up cut at one of them.
var truncations = []int{40, 60}

// scrubSecrets replaces every credential in secrets, as it is and as %q
// would print it, and the prefixes truncated messages show of it, by
// "[secret]" in every error and warning.
func scrubSecrets(d *Diagnostics, secrets []string) {
	var forms []string
	for _, s := range secrets {
		if len(s) < minScrubLen {
			continue
		}
		quoted := strconv.Quote(s)
		forms = append(forms, s, quoted[1:len(quoted)-1])
		for _, n := range truncations {
			if len(s) > n {
				forms = append(forms, s[:n])
			}
		}
	}
	if len(forms) == 0 {
		return
	}
	// Longest first, so that a secret's text goes before its prefixes.
	slices.SortStableFunc(forms, func(a, b string) int { return len(b) - len(a) })
	// Paths are key names the program defines (or unknown keys, reported
	// by name): they stay as they are, so every problem keeps its key.
	scrub := func(ps []Problem) {
		for i := range ps {
			for _, f := range forms {
				ps[i].Message = strings.ReplaceAll(ps[i].Message, f, "[secret]")
			}
		}
	}
	scrub(d.Errors)
	scrub(d.Warnings)
}
