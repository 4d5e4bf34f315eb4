package tests

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// MACs given in a dashed or dotted spelling reach the VM's NIC, the dnsmasq
// reservation and the stack output in colon form, the only one Proxmox VE
// takes and the one dnsmasq's lease file uses.
func TestProxmoxGivenMACsInOtherSpellingsArriveInColonForm(t *testing.T) {
	t.Parallel()
	src := edit(t, stackstest.Example(t, stackstest.ProxmoxExample), "nodes", func(m map[string]any) {
		ws := m["workers"].([]any)
		ws[0].(map[string]any)["mac"] = "BC-24-11-00-00-20"
		ws[1].(map[string]any)["mac"] = "BC24.1100.0021"
	})
	e, outs := deploy(t, src)
	stdin := e.One(t, componentstest.RemoteCommand).Inputs["stdin"].StringValue()
	for name, want := range map[string]string{"worker-0": "bc:24:11:00:00:20", "worker-1": "bc:24:11:00:00:21"} {
		vm := e.Named(t, componentstest.VM, "homelab-vm-"+name)
		assert.Equal(t, want, obj(vm.Inputs["networkDevices"].ArrayValue()[0], "macAddress").StringValue(), name)
		assert.Equal(t, want, outs["macs"].Value.(map[string]string)[name], name)
		assert.Contains(t, stdin, "dhcp-host="+want+",", "reservation of %s", name)
	}
	assert.NotContains(t, stdin, "BC-24")
	assert.NotContains(t, stdin, "bc24.")
	assert.NotContains(t, stdin, "bc-24")
}
