package stacks_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/stacks"
)

func macInvalidCases() []invalidCase {
	macs := func(cp, w0, w1 string) func() stacks.Source {
		return proxmoxWith(func(k keys) {
			for _, n := range []struct {
				role string
				i    int
				mac  string
			}{{"controlPlanes", 0, cp}, {"workers", 0, w0}, {"workers", 1, w1}} {
				if n.mac != "" {
					at(k, "nodes", n.role, n.i)["mac"] = n.mac
				}
			}
		})
	}
	return []invalidCase{
		{"duplicate MAC, dashed upper case", macs("bc:24:11:aa:bb:01", "BC-24-11-AA-BB-01", ""),
			"nodes.workers[0].mac", "bc:24:11:aa:bb:01 is already the MAC of nodes.controlPlanes[0]"},
		{"duplicate MAC, dotted", macs("bc:24:11:aa:bb:01", "", "bc24.11aa.bb01"),
			"nodes.workers[1].mac", "bc:24:11:aa:bb:01 is already the MAC of nodes.controlPlanes[0]"},
		{"duplicate MAC, dotted upper case against dashed", macs("", "BC24.11AA.BB01", "bc-24-11-aa-bb-01"),
			"nodes.workers[1].mac", "bc:24:11:aa:bb:01 is already the MAC of nodes.workers[0]"},
		{"all-zero MAC", macs("", "00:00:00:00:00:00", ""), "nodes.workers[0].mac", "00:00:00:00:00:00 is the all-zero address"},
		{"all-zero MAC, dotted", macs("", "", "0000.0000.0000"), "nodes.workers[1].mac", "all-zero address"},
		{"broadcast MAC", macs("ff-ff-ff-ff-ff-ff", "", ""), "nodes.controlPlanes[0].mac", "ff:ff:ff:ff:ff:ff is a multicast address"},
		{"multicast MAC, dotted", macs("", "0100.5e00.0001", ""), "nodes.workers[0].mac", "01:00:5e:00:00:01 is a multicast address"},
		{"EUI-64 is no NIC address", macs("", "02:00:5e:10:00:00:00:01", ""), "nodes.workers[0].mac", "is not a MAC address like 52:54:00:12:34:56"},
		{"MAC with a space", macs("", "bc:24:11:aa:bb:01 ", ""), "nodes.workers[0].mac", "is not a MAC address"},
	}
}

// Every configured MAC reaches the program in one spelling: lower-case hex
// pairs joined by colons, whatever spelling the stack uses.
func TestMACsAreNormalisedAtLoad(t *testing.T) {
	t.Parallel()
	k := proxmoxKeys()
	at(k, "nodes", "controlPlanes", 0)["mac"] = "BC-24-11-00-00-10"
	at(k, "nodes", "workers", 0)["mac"] = "bc24.1100.0020"
	at(k, "nodes", "workers", 1)["mac"] = "BC:24:11:00:00:21"
	cfg, d := stacks.Load(proxmoxSource(k))
	require.NoError(t, d.Err())
	var got []string
	for _, n := range cfg.Nodes.All() {
		got = append(got, n.MAC)
	}
	assert.Equal(t, []string{"bc:24:11:00:00:10", "bc:24:11:00:00:20", "bc:24:11:00:00:21"}, got)
}
