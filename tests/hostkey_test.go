package tests

import (
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// The keys pinned in the example stacks, without their comments.
const (
	examplePVEKey    = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINa7eG/pBlvgisjquRHxcNSZhmgYkxhl3ScZ5sP47kKX"
	exampleRescueKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEONt2yazdFZHClu6cvjSAE8PwBKuH8NrEluMIX2CTD2"
)

// connection is a remote command's connection input, unwrapped from the
// secret it travels in when a credential is part of it.
func connection(t *testing.T, r componentstest.Registered) resource.PropertyMap {
	t.Helper()
	c := r.Inputs["connection"]
	if c.IsSecret() {
		c = c.SecretValue().Element
	}
	require.True(t, c.IsObject(), "%s has a connection", r.Name)
	return c.ObjectValue()
}

// hostKeyOf is the connection's hostKey, "" when there is none.
func hostKeyOf(t *testing.T, r componentstest.Registered) string {
	t.Helper()
	v, ok := connection(t, r)["hostKey"]
	if !ok || v.IsNull() {
		return ""
	}
	if v.IsSecret() {
		v = v.SecretValue().Element
	}
	return v.StringValue()
}

func TestProxmoxReservationsCheckThePinnedHostKey(t *testing.T) {
	t.Parallel()
	e, _ := deploy(t, stackstest.Example(t, stackstest.ProxmoxExample))
	dhcp := e.Named(t, componentstest.RemoteCommand, "homelab-dhcp-reservations")
	assert.Equal(t, examplePVEKey, hostKeyOf(t, dhcp), "the example's pin, as the provider parses it")

	// A known_hosts line with a comment reaches the provider as the bare key.
	src := edit(t, stackstest.Example(t, stackstest.ProxmoxExample), "proxmox", func(m map[string]any) {
		m["ssh"].(map[string]any)["hostKey"] = "pve.lan,192.168.122.70 " + examplePVEKey + " root@pve"
	})
	e, _ = deploy(t, src)
	assert.Equal(t, examplePVEKey, hostKeyOf(t, e.Named(t, componentstest.RemoteCommand, "homelab-dhcp-reservations")))

	src = edit(t, stackstest.Example(t, stackstest.ProxmoxExample), "proxmox", func(m map[string]any) {
		delete(m["ssh"].(map[string]any), "hostKey")
	})
	e, _ = deploy(t, src)
	dhcp = e.Named(t, componentstest.RemoteCommand, "homelab-dhcp-reservations")
	assert.Empty(t, hostKeyOf(t, dhcp), "nothing pinned: no hostKey")
	assert.Equal(t, "192.168.122.70", connection(t, dhcp)["host"].StringValue())
}

func TestVPSInstallsCheckThePinnedHostKey(t *testing.T) {
	t.Parallel()
	e, _ := deploy(t, stackstest.Example(t, stackstest.VPSExample))
	install := e.Named(t, componentstest.RemoteCommand, "prod-install-node-0")
	assert.Equal(t, exampleRescueKey, hostKeyOf(t, install))
	assert.Contains(t, install.IgnoreChanges, "connection", "a new pin, like a new password, never re-images a node")

	// One node pinned (as ssh-keyscan prints it), one not.
	src := edit(t, stackstest.Example(t, stackstest.VPSExample), "nodes", func(m map[string]any) {
		base := m["controlPlanes"].([]any)[0].(map[string]any)
		rescue := base["rescue"].(map[string]any)
		rescue["hostKey"] = "203.0.113.10 " + exampleRescueKey
		other := map[string]any{"name": "node-1", "ip": "203.0.113.11", "rescue": map[string]any{"user": "root", "password": rescue["password"]}}
		m["workers"] = []any{other}
	})
	e, _ = deploy(t, src)
	assert.Equal(t, exampleRescueKey, hostKeyOf(t, e.Named(t, componentstest.RemoteCommand, "prod-install-node-0")))
	unpinned := e.Named(t, componentstest.RemoteCommand, "prod-install-node-1")
	assert.Empty(t, hostKeyOf(t, unpinned))
	assert.Equal(t, "203.0.113.11", connection(t, unpinned)["host"].StringValue())
	assert.Contains(t, unpinned.IgnoreChanges, "connection")
}
