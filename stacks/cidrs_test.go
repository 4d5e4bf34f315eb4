package stacks_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fluodata/talos-pulumi/program"
)

// Operator CIDRs that let every address in warn as an empty list does:
// one entry covering a whole family, or several together.
func TestOperatorCIDRsCoveringEverythingWarn(t *testing.T) {
	t.Parallel()
	many := make([]any, 0, 600)
	for i := range 600 {
		many = append(many, fmt.Sprintf("10.%d.%d.0/24", i/256, i%256))
	}
	cases := []struct {
		cidrs    []any
		wantPath []string
		wantMsg  string
		wantErr  bool
	}{
		{[]any{"0.0.0.0/0"}, []string{"vps.allowedCidrs[0]"}, "0.0.0.0/0 is every IPv4 address: the Talos API (50000) and Kubernetes API (6443) accept connections from the whole internet", false},
		{[]any{"198.51.100.0/24", "::/0"}, []string{"vps.allowedCidrs[1]"}, "::/0 is every IPv6 address", false},
		{[]any{"198.51.100.0/24", "0.0.0.0/1", "128.0.0.0/1"}, []string{"vps.allowedCidrs"}, "0.0.0.0/1, 128.0.0.0/1 together cover every IPv4 address", false},
		{[]any{"128.0.0.0/2", "0.0.0.0/1", "192.0.0.0/3", "224.0.0.0/3"}, []string{"vps.allowedCidrs"}, "128.0.0.0/2, 0.0.0.0/1, 192.0.0.0/3, 224.0.0.0/3 together", false},
		{[]any{"0.0.0.0/0", "::/0"}, []string{"vps.allowedCidrs[0]", "vps.allowedCidrs[1]"}, "whole internet", false},
		// 224.0.0.0/3 is missing.
		{[]any{"0.0.0.0/1", "128.0.0.0/2", "192.0.0.0/3"}, nil, "", false},
		// The bad entry is an error; the others still cover everything.
		{[]any{"0.0.0.0/1", "128.0.0.0/1", "203.0.113.7/33"}, []string{"vps.allowedCidrs"}, "together cover every IPv4 address", true},
		{[]any{"198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32"}, nil, "", false},
		{many, nil, "", false},
	}
	for _, tc := range cases {
		name := fmt.Sprint(tc.cidrs)
		if len(name) > 80 {
			name = name[:80]
		}
		k := vpsKeys()
		at(k, "vps")["allowedCidrs"] = tc.cidrs
		_, d := program.Validate(vpsSource(k))
		assert.Equal(t, tc.wantErr, d.HasErrors(), "%s: %v", name, d.Err())
		var paths []string
		for _, w := range d.Warnings {
			paths = append(paths, w.Path)
			assert.Contains(t, w.Message, tc.wantMsg, name)
		}
		assert.Equal(t, tc.wantPath, paths, name)
	}
}
