package program_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/program"
)

// A preferred port that is free is taken; one something listens on is
// replaced by a free one, and two replaced ports never come out the same.
func TestFreeLocalPorts(t *testing.T) {
	t.Parallel()
	taken := make([]int, 2)
	for i := range taken {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		taken[i] = l.Addr().(*net.TCPAddr).Port
	}
	free, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	freePort := free.Addr().(*net.TCPAddr).Port
	require.NoError(t, free.Close())

	ports, err := program.FreeLocalPorts([]int{freePort, taken[0], taken[1]})
	require.NoError(t, err)
	require.Len(t, ports, 3)
	assert.Equal(t, freePort, ports[0], "a free preferred port is kept")
	assert.NotContains(t, taken, ports[1])
	assert.NotContains(t, taken, ports[2])
	assert.NotEqual(t, ports[1], ports[2])
	for _, p := range ports[1:] {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		require.NoError(t, err, "port %d is free again once chosen", p)
		_ = l.Close()
	}
}
