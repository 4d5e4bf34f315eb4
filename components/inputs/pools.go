package inputs

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
)

// MaxPoolCount bounds a pool's count: a typo (1000 for 10) is refused
// rather than creating machines by the hundred.
const MaxPoolCount = 100

// PoolNodeName is the name of a pool's node n (0-based): stable, so that a
// node keeps its name, machine and address while the count changes, and a
// lower count removes the highest-numbered nodes.
func PoolNodeName(pool string, n int) string { return fmt.Sprintf("%s-%d", pool, n) }

// PoolAddress is the address of a pool's node n: first plus n. False when
// first is not an IPv4 address or the sum runs past 255.255.255.255.
func PoolAddress(first string, n int) (string, bool) {
	a, err := netip.ParseAddr(first)
	if err != nil || !a.Is4() {
		return "", false
	}
	b := a.As4()
	v := uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3]) + uint64(n)
	if n < 0 || v > 0xffffffff {
		return "", false
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}).String(), true
}

// PoolMember is one node of a pool: its index, name and address.
type PoolMember struct {
	Index    int
	Name, IP string
}

// PoolMembers are a pool's nodes (PoolNodeName, PoolAddress; an address
// that cannot be derived stays firstIP, for the node checks to name);
// none for a count out of range, which CheckPool refuses.
func PoolMembers(pool string, count int, firstIP string) []PoolMember {
	if PoolCountProblem(count) != "" {
		return nil
	}
	out := make([]PoolMember, 0, count)
	for n := range count {
		ip, ok := PoolAddress(firstIP, n)
		if !ok {
			ip = firstIP
		}
		out = append(out, PoolMember{Index: n, Name: PoolNodeName(pool, n), IP: ip})
	}
	return out
}

// PoolCountProblem is what is wrong with a pool's count; "" when nothing.
func PoolCountProblem(count int) string {
	if count < 0 || count > MaxPoolCount {
		return fmt.Sprintf("%d is not a pool size: 0 to %d", count, MaxPoolCount)
	}
	return ""
}

// CheckPool records the problems of a pool's own inputs at path (its
// name, count and first address); its nodes' are checked as nodes.
func (p *Problems) CheckPool(path, name string, count int, firstIP string) {
	p.DNSLabel(path+".name", name)
	if msg := PoolCountProblem(count); msg != "" {
		p.Add(path+".count", "%s", msg)
	} else if _, ok := PoolAddress(firstIP, count-1); count > 0 && !ok {
		if _, valid := PoolAddress(firstIP, 0); valid {
			p.Add(path+".ip", "%s plus %d nodes runs past 255.255.255.255", firstIP, count)
		}
	}
}

// nodePath matches a node's input path (nodes[3]) in a path or a message.
var nodePath = regexp.MustCompile(`\bnodes\[(\d+)\]`)

// NamePoolNodes renames the problems of a pool's nodes, which a component
// checks as nodes (nodes[k], the pools' nodes after the listed ones,
// counts[i] nodes for pool i), to their pool's inputs (pools[i]), in
// paths and messages, each problem once: what is wrong with one node of
// a pool is wrong with each.
func (p *Problems) NamePoolNodes(listed int, counts []int) {
	rename := func(s string) string {
		return nodePath.ReplaceAllStringFunc(s, func(m string) string {
			k, _ := strconv.Atoi(nodePath.FindStringSubmatch(m)[1])
			start := listed
			for i, c := range counts {
				if k >= start && k < start+c {
					return fmt.Sprintf("pools[%d]", i)
				}
				start += c
			}
			return m
		})
	}
	var out []Problem
	for _, pr := range p.list {
		pr = Problem{Path: rename(pr.Path), Message: rename(pr.Message)}
		if !slices.Contains(out, pr) {
			out = append(out, pr)
		}
	}
	p.list = out
}
