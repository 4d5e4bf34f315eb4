package stacks

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// warnOpenCIDRs warns when vps.allowedCidrs lets every address of a family
// in: one entry like 0.0.0.0/0, or several that together cover the whole
// space (0.0.0.0/1 and 128.0.0.0/1). That opens the Talos and Kubernetes APIs
// to the whole internet as an empty list does, but reads as a restriction.
// Invalid entries are reported elsewhere and ignored here.
func warnOpenCIDRs(d *Diagnostics, cidrs []string) {
	for _, family := range []struct {
		all  netip.Prefix
		name string
	}{
		{netip.MustParsePrefix("0.0.0.0/0"), "IPv4"},
		{netip.MustParsePrefix("::/0"), "IPv6"},
	} {
		var set []netip.Prefix
		var idx []int
		for i, c := range cidrs {
			p, err := netip.ParsePrefix(c)
			if err != nil || p.Addr().Is4() != family.all.Addr().Is4() {
				continue
			}
			set = append(set, p.Masked())
			idx = append(idx, i)
		}
		if !coversPrefix(family.all, set) {
			continue
		}
		const open = "the Talos API (50000) and Kubernetes API (6443) accept connections from the whole internet, as with an empty list (they still require mTLS)"
		if i := slices.IndexFunc(set, func(p netip.Prefix) bool { return p.Bits() == 0 }); i >= 0 {
			d.warnf(fmt.Sprintf("vps.allowedCidrs[%d]", idx[i]), "%s is every %s address: %s", cidrs[idx[i]], family.name, open)
			continue
		}
		// Name the entries that matter: not those inside another one.
		var names []string
		for j, p := range set {
			redundant := slices.ContainsFunc(set[:j], func(q netip.Prefix) bool { return q.Bits() <= p.Bits() && q.Contains(p.Addr()) }) ||
				slices.ContainsFunc(set[j+1:], func(q netip.Prefix) bool { return q.Bits() < p.Bits() && q.Contains(p.Addr()) })
			if !redundant {
				names = append(names, cidrs[idx[j]])
			}
		}
		d.warnf("vps.allowedCidrs", "%s together cover every %s address: %s", strings.Join(names, ", "), family.name, open)
	}
}

// coversPrefix reports whether the union of set covers every address of p.
// It splits p in halves only while some entry lies strictly inside it, so it
// visits at most (entries x prefix bits) prefixes.
func coversPrefix(p netip.Prefix, set []netip.Prefix) bool {
	inside := false
	for _, q := range set {
		if q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
			return true
		}
		if q.Bits() > p.Bits() && p.Contains(q.Addr()) {
			inside = true
		}
	}
	if !inside {
		return false
	}
	lo, hi := halves(p)
	return coversPrefix(lo, set) && coversPrefix(hi, set)
}

// halves splits a prefix (not a host address) into its two halves.
func halves(p netip.Prefix) (netip.Prefix, netip.Prefix) {
	bits := p.Bits()
	b := p.Addr().AsSlice()
	lo := netip.PrefixFrom(p.Addr(), bits+1)
	b[bits/8] |= 0x80 >> (bits % 8)
	hiAddr, _ := netip.AddrFromSlice(b)
	return lo, netip.PrefixFrom(hiAddr, bits+1)
}
