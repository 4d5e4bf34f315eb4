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
	a := DeriveMAC("proxmox-homelab", "homelab", "cp-0")
	assert.Equal(t, a, DeriveMAC("proxmox-homelab", "homelab", "cp-0"), "same inputs, same MAC")

	// Over many names the first octet takes every value the hash gives it;
	// each must still be a locally administered unicast address.
	for i := range 512 {
		mac := DeriveMAC("s", "c", fmt.Sprintf("n-%d", i))
		hw, err := net.ParseMAC(mac)
		require.NoError(t, err)
		assert.Equal(t, byte(0), hw[0]&0x01, "%s: unicast", mac)
		assert.Equal(t, byte(0x02), hw[0]&0x02, "%s: locally administered", mac)
	}

	assert.NotEqual(t, a, DeriveMAC("proxmox-staging", "homelab", "cp-0"), "another stack, another MAC")
	assert.NotEqual(t, a, DeriveMAC("proxmox-homelab", "homelab2", "cp-0"), "the cluster name is part of the hash")
	assert.NotEqual(t, DeriveMAC("s", "a-b", "c"), DeriveMAC("s", "a", "b-c"), "names are separated")
}

func TestNodeMACsUniqueAcross400Nodes(t *testing.T) {
	t.Parallel()
	var nodes []NodeMAC
	for i := range 200 {
		for _, role := range []string{"cp", "worker"} {
			nodes = append(nodes, NodeMAC{Name: fmt.Sprintf("%s-%d", role, i)})
		}
	}
	macs, problems := NodeMACs("proxmox-homelab", "homelab", nodes)
	assert.Empty(t, problems)
	seen := map[string]string{}
	for n, mac := range macs {
		if other, dup := seen[mac]; dup {
			t.Fatalf("%s and %s share %s", other, n, mac)
		}
		seen[mac] = n
	}
	assert.Len(t, macs, 400)
}

func TestNodeMACsGivenWinsAndClashesAreFound(t *testing.T) {
	t.Parallel()
	derived := DeriveMAC("st", "homelab", "worker-1")
	macs, problems := NodeMACs("st", "homelab", []NodeMAC{
		{Name: "cp-0", MAC: "BC:24:11:00:00:10"},
		{Name: "worker-0", MAC: derived},
		{Name: "worker-1"},
		{Name: "worker-2"},
	})
	assert.Equal(t, "bc:24:11:00:00:10", macs["cp-0"], "a given MAC wins, in lower case")
	assert.Equal(t, DeriveMAC("st", "homelab", "worker-2"), macs["worker-2"])
	require.Len(t, problems, 1)
	assert.Equal(t, `node "worker-1": its derived MAC `+derived+` is the MAC of "worker-0"; set 'mac' on "worker-1"`, problems[0])

	// A repeated name derives the same MAC: the check sees derived clashes.
	_, problems = NodeMACs("st", "homelab", []NodeMAC{{Name: "cp-0"}, {Name: "worker-0"}, {Name: "cp-0"}})
	require.Len(t, problems, 1)
	assert.Contains(t, problems[0], `node "cp-0": its derived MAC`)
}
