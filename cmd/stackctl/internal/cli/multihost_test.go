package cli

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/access"
	"github.com/fluodata/talos-pulumi/stacks"
)

// With hosts entries, the messages name each section's access and tunnel.
func TestMessagesNameEachHostsAccess(t *testing.T) {
	t.Parallel()
	cfg := &stacks.Config{Platform: stacks.PlatformProxmox, Proxmox: stacks.ProxmoxConfig{Access: stacks.AccessSSHProxy}}
	assert.Equal(t, "proxmox.access is", sshProxyKeys(cfg))
	cfg.Hosts = []stacks.HostConfig{
		{Name: "office", Proxmox: stacks.ProxmoxConfig{Access: stacks.AccessSSHProxy}},
		{Name: "edge", Proxmox: stacks.ProxmoxConfig{Access: stacks.AccessDirect}},
	}
	assert.Equal(t, "proxmox.access and hosts[0].proxmox.access are", sshProxyKeys(cfg))
	cfg.Proxmox.Access = stacks.AccessDirect
	assert.Equal(t, "hosts[0].proxmox.access is", sshProxyKeys(cfg))

	s := &access.Session{
		Tunnels: []access.Reach{
			{Section: "proxmox", Target: "root@192.168.122.70:22", Destinations: []string{"10.10.0.0/24", "k8s.lab.example.com"}},
			{Section: "hosts[0].proxmox", Host: "office", Target: "root@198.51.100.7:22", Destinations: []string{"10.20.0.0/24"}},
		},
		Direct: []access.Reach{{Section: "hosts[1].proxmox", Host: "edge", Destinations: []string{"10.30.0.0/24"}}},
	}
	assert.Equal(t, "  proxmox: root@192.168.122.70:22 -> 10.10.0.0/24, k8s.lab.example.com\n"+
		"  host office (hosts[0].proxmox): root@198.51.100.7:22 -> 10.20.0.0/24\n"+
		"  host edge (hosts[1].proxmox): direct (NO_PROXY), not through the proxy: 10.30.0.0/24\n", describeReaches(s))
}
