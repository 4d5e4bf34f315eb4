package stacks

import (
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// Secret holds a credential read from the stack config. Its plain value never
// shows up in formatted output (errors, logs, %v); code that needs it asks
// for Reveal, and anything handed to Pulumi goes through Output, which is a
// Pulumi secret.
type Secret struct {
	value string
}

// NewSecret wraps a plain value (tests and the loader use it).
func NewSecret(v string) Secret { return Secret{value: v} }

// IsSet reports whether a non-empty value was given.
func (s Secret) IsSet() bool { return s.value != "" }

// Reveal returns the plain value. Only pass it to code that needs the
// credential itself (an API client), never to logs or resource inputs.
func (s Secret) Reveal() string { return s.value }

// Output returns the value as a Pulumi secret.
func (s Secret) Output() pulumi.StringOutput {
	return pulumi.ToSecret(pulumi.String(s.value)).(pulumi.StringOutput)
}

// String redacts the value.
func (s Secret) String() string {
	if s.value == "" {
		return "[unset]"
	}
	return "[secret]"
}

// GoString redacts the value for %#v.
func (s Secret) GoString() string { return "stacks.Secret(" + s.String() + ")" }

// Format redacts the value for every verb.
func (s Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(s.String())) }

// MarshalJSON redacts the value, so a config dumped as JSON never leaks it.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + s.String() + `"`), nil }
