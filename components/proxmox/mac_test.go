package proxmox

import (
	"fmt"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDeriveMACStableLocalUnicast(t *testing.T) {
	t.Parallel()
	a, err := DeriveMAC("a1b2", "homelab", "cp-0")
	require.NoError(t, err)
	b, err := DeriveMAC("a1b2", "homelab", "cp-0")
	require.NoError(t, err)
	assert.Equal(t, a, b, "same inputs, same MAC")

	// A prefix with the multicast bit set and the local bit clear must still
	// give a locally administered unicast address.
	for _, prefix := range []string{"a1b2", "0100", "ffff", "0000", "fdfe"} {
		mac, err := DeriveMAC(prefix, "homelab", "worker-0")
		require.NoError(t, err)
		hw, err := net.ParseMAC(mac)
		require.NoError(t, err)
		assert.Equal(t, byte(0), hw[0]&0x01, "%s: unicast", mac)
		assert.Equal(t, byte(0x02), hw[0]&0x02, "%s: locally administered", mac)
	}

	other, err := DeriveMAC("a1b3", "homelab", "cp-0")
	require.NoError(t, err)
	assert.NotEqual(t, a, other, "another cluster's prefix, another MAC")
	renamed, err := DeriveMAC("a1b2", "homelab2", "cp-0")
	require.NoError(t, err)
	assert.NotEqual(t, a, renamed, "the cluster name is part of the hash")

	for _, bad := range []string{"", "a1", "a1b2c3", "zzzz"} {
		_, err := DeriveMAC(bad, "homelab", "cp-0")
		assert.Error(t, err, bad)
	}
}

func TestDeriveMACUniqueAcross200Nodes(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	var names []string
	for i := range 200 {
		for _, role := range []string{"cp", "worker"} {
			names = append(names, fmt.Sprintf("%s-%d", role, i))
		}
	}
	for _, n := range names {
		mac, err := DeriveMAC("a1b2", "homelab", n)
		require.NoError(t, err)
		if other, dup := seen[mac]; dup {
			t.Fatalf("%s and %s share %s", other, n, mac)
		}
		seen[mac] = n
	}
	assert.Empty(t, derivedMACCollisions("homelab", names))
}

func TestDerivedMACCollisionsAreFound(t *testing.T) {
	t.Parallel()
	// Find a real 32-bit collision of the node hash by brute force would be
	// slow; a repeated name is the same hash and shows the check works.
	problems := derivedMACCollisions("homelab", []string{"cp-0", "worker-0", "cp-0"})
	require.Len(t, problems, 1)
	assert.Contains(t, problems[0], `"cp-0"`)
	assert.Contains(t, problems[0], "set 'mac'")
}
