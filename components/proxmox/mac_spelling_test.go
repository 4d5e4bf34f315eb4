package proxmox

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A configured MAC in a dashed or dotted spelling comes out in colon form,
// and still clashes with a derived MAC it equals.
func TestNodeMACsNormaliseSpellings(t *testing.T) {
	t.Parallel()
	derived := DeriveMAC("st", "homelab", "worker-1")
	dotted := strings.ToUpper(strings.ReplaceAll(derived, ":", ""))
	dotted = dotted[0:4] + "." + dotted[4:8] + "." + dotted[8:12]
	macs, problems := NodeMACs("st", "homelab", []NodeMAC{
		{Name: "cp-0", MAC: "BC-24-11-00-00-10"},
		{Name: "worker-0", MAC: dotted},
		{Name: "worker-1"},
	})
	assert.Equal(t, "bc:24:11:00:00:10", macs["cp-0"])
	assert.Equal(t, derived, macs["worker-0"])
	assert.Equal(t, []string{`node "worker-1": its derived MAC ` + derived + ` is the MAC of "worker-0"; set 'mac' on "worker-1"`}, problems)
}
