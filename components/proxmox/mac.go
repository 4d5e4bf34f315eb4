package proxmox

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
)

// MACPrefixBytes is the length of the per-cluster random MAC prefix.
const MACPrefixBytes = 2

// DeriveMAC returns the NIC address of a node: the cluster's random prefix
// (kept in Pulumi state by a random.RandomId, so it never changes for the
// life of the stack) in the first two octets, marked locally administered and
// unicast, then four octets hashed from the cluster and node names.
//
// The prefix keeps two clusters apart even when they share a cluster name
// and node names on one bridge; the hash keeps nodes apart within a cluster
// and is independent of the prefix, so collisions between derived addresses
// can be found before anything is created (see derivedMACCollisions).
func DeriveMAC(prefixHex, cluster, node string) (string, error) {
	prefix, err := hex.DecodeString(prefixHex)
	if err != nil || len(prefix) != MACPrefixBytes {
		return "", fmt.Errorf("MAC prefix %q is not %d bytes of hex", prefixHex, MACPrefixBytes)
	}
	h := nodeHash(cluster, node)
	mac := net.HardwareAddr{
		prefix[0]&^0x01 | 0x02, // clear the multicast bit, set the local bit
		prefix[1],
		h[0], h[1], h[2], h[3],
	}
	return mac.String(), nil
}

// nodeHash is the node-specific part of a derived MAC. The separator keeps
// ("a-b", "c") and ("a", "b-c") apart.
func nodeHash(cluster, node string) [4]byte {
	sum := sha256.Sum256([]byte(cluster + "\x00" + node))
	return [4]byte{sum[0], sum[1], sum[2], sum[3]}
}

// derivedMACCollisions names pairs of nodes whose derived MACs would be equal
// whatever the prefix. Node names are unique, so this takes a 32-bit hash
// collision; it is checked rather than assumed because a duplicate MAC on a
// bridge is a miserable thing to debug.
func derivedMACCollisions(cluster string, nodes []string) []string {
	seen := map[[4]byte]string{}
	var out []string
	for _, n := range nodes {
		h := nodeHash(cluster, n)
		if other, dup := seen[h]; dup {
			out = append(out, fmt.Sprintf("nodes %q and %q would get the same derived MAC; set 'mac' on one of them", other, n))
			continue
		}
		seen[h] = n
	}
	return out
}
