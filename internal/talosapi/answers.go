package talosapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// answerTimeout bounds one Answers call: a rescue system refuses the port
// at once, a filtered port must not hold a wait's report back.
const answerTimeout = 10 * time.Second

// Answers reports whether a Talos API listens at addr (host:port): nil
// once a TLS server there takes the connection. Any answer of a TLS
// server counts, the handshake done or refused: maintenance mode answers
// without a client certificate, a configured node's apid asks for the
// cluster's and may refuse the handshake without one. Nothing is sent but
// the handshake, and the certificate is not checked: this says that Talos
// runs, not whose it is. A refused, unreachable or silent port is an error
// saying which.
func Answers(parent context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(parent, answerTimeout)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if parent.Err() != nil {
			return fmt.Errorf("the connection to %s was cut short: %w", addr, parent.Err())
		}
		return fmt.Errorf("unable to connect to %s: %w", addr, err)
	}
	defer func() { _ = raw.Close() }()
	conn := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // see above: any TLS server is an answer
	err = conn.HandshakeContext(ctx)
	var alert tls.AlertError
	var opErr *net.OpError
	switch {
	case err == nil, errors.As(err, &alert):
		return nil
	case errors.As(err, &opErr) && opErr.Op == "remote error":
		return nil // a TLS alert of the server: it speaks TLS
	case parent.Err() != nil:
		// The caller's deadline or cancellation cut the handshake short:
		// that says nothing about the port.
		return fmt.Errorf("the handshake with %s was cut short: %w", addr, parent.Err())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%s took the connection and did not answer TLS within %s", addr, answerTimeout)
	default:
		return fmt.Errorf("%s took the connection, then: %w", addr, err)
	}
}

// WaitAnswering waits until a Talos API answers at addr (Answers): a
// freshly installed machine that boots Talos. A timeout's error wraps
// ErrTimeout and says what the port did last. opts may add a progress
// reporter (WithProgress).
func WaitAnswering(ctx context.Context, addr string, poll, timeout time.Duration, opts ...WaitOption) error {
	what := "the Talos API at " + addr + " to answer"
	err := until(ctx, what, poll, timeout, opts, func(ctx context.Context) (bool, error) {
		if err := Answers(ctx, addr); err != nil {
			return false, err
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("unable to wait for %s: %w", what, err)
	}
	return nil
}
