package talosapi_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/testkit/sshtest"
)

// A port that takes the connection and says nothing: a probe the caller's
// deadline cuts short says so, as a deadline (which a wait does not take
// for the port's last answer), not that the port stayed silent.
func TestAnswersCutShortByTheCallerSaysSo(t *testing.T) {
	t.Parallel()
	addr := sshtest.Listen(t, func(net.Conn) { <-t.Context().Done() }) // takes the connection, says nothing
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	err := talosapi.Answers(ctx, addr)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "was cut short")
	assert.NotContains(t, err.Error(), "did not answer TLS within")
}
