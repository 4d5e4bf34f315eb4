package proxmox

import (
	"crypto/sha256"
	"fmt"
	"net"
	"strings"
)

// DeriveMAC returns the NIC address of a node that has no configured MAC: a
// pure function of the stack, cluster and node names, so it is the same on
// every run, after a destroy and a new `up` too (the DHCP reservation made
// for it then still matches), and on another machine. The first octet is
// marked locally administered and unicast; the other 46 bits are hashed.
//
// The stack name keeps two clusters apart that share a cluster name and
// node names on one bridge (a second stack of the same environment); the
// separators keep ("a-b", "c") and ("a", "b-c") apart.
func DeriveMAC(stack, cluster, node string) string {
	sum := sha256.Sum256([]byte("talos-cluster-mac\x00" + stack + "\x00" + cluster + "\x00" + node))
	mac := net.HardwareAddr{
		sum[0]&^0x01 | 0x02, // clear the multicast bit, set the local bit
		sum[1], sum[2], sum[3], sum[4], sum[5],
	}
	return mac.String()
}

// NodeMAC is one node's name and configured MAC ("" to derive it).
type NodeMAC struct {
	Name, MAC string
}

// NodeMACs returns every node's MAC: the configured one, normalised to
// lower-case colon form, or the derived one. It reports, before anything is created,
// every pair of nodes that would share an address: a derived MAC equal to
// another derived one (a 46-bit hash collision, checked rather than assumed
// because a duplicate MAC on a bridge is miserable to debug) or to a
// configured one.
func NodeMACs(stack, cluster string, nodes []NodeMAC) (map[string]string, []string) {
	out := map[string]string{}
	owner := map[string]string{} // MAC -> node
	var problems []string
	// Configured MACs first: they win, and a derived MAC that hits one is
	// the derived node's problem.
	for _, n := range nodes {
		if n.MAC == "" {
			continue
		}
		mac := canonicalMAC(n.MAC)
		out[n.Name] = mac
		owner[mac] = n.Name
	}
	for _, n := range nodes {
		if n.MAC != "" {
			continue
		}
		mac := DeriveMAC(stack, cluster, n.Name)
		if other, clash := owner[mac]; clash {
			problems = append(problems, fmt.Sprintf("node %q: its derived MAC %s is the MAC of %q; set 'mac' on %q", n.Name, mac, other, n.Name))
			continue
		}
		out[n.Name] = mac
		owner[mac] = n.Name
	}
	return out, problems
}

// canonicalMAC is a MAC in the one spelling Proxmox VE takes and dnsmasq and
// the clash check compare: lower-case hex pairs joined by colons. The stack
// loader already hands MACs on in this form; anything else that parses (a
// dashed or dotted spelling) is converted, the rest only lower-cased.
func canonicalMAC(mac string) string {
	if hw, err := net.ParseMAC(mac); err == nil {
		return hw.String()
	}
	return strings.ToLower(mac)
}
