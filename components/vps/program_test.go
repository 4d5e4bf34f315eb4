package vps_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/servers"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

func loadVPS(t *testing.T, src stacks.Source) *stacks.Config {
	t.Helper()
	cfg, d := stacks.Load(src)
	require.NoError(t, d.Err())
	return cfg
}

// The example stack file becomes valid arguments, its defaults applied.
func TestExampleStackFileArgs(t *testing.T) {
	t.Parallel()
	args := program.VPSArgs(loadVPS(t, stackstest.Example(t, stackstest.VPSExample)))
	require.NoError(t, args.Validate("prod"))

	assert.Equal(t, "prod", args.Cluster.Name)
	assert.Equal(t, "https://203.0.113.10:6443", args.Cluster.Endpoint)
	assert.Equal(t, []string{"siderolabs/iscsi-tools", "siderolabs/util-linux-tools"}, args.Schematic.Extensions)
	assert.Equal(t, servers.Settings{
		AllowedCIDRs:     []string{"198.51.100.0/24"},
		TalosWaitTimeout: "30m", OnDestroy: servers.OnDestroyForget,
		Gateway: "203.0.113.254", PrefixLength: 32, // cluster.network, the nodes' defaults
	}, args.VPS)
	require.Len(t, args.Nodes, 1)
	n := args.Nodes[0]
	assert.Equal(t, "node-0", n.Name)
	assert.Equal(t, talos.RoleControlPlane, n.Role)
	assert.Equal(t, "203.0.113.10", n.IP)
	assert.Zero(t, n.PrefixLength, "the node gives none: vps.prefixLength")
	assert.Empty(t, n.Gateway, "the node gives none: vps.gateway")
	assert.Equal(t, "/dev/sda", n.InstallDisk, "cluster.installDisk")
	assert.Equal(t, "203.0.113.10", n.Rescue.Host, "the node's IP")
	assert.Equal(t, 22, n.Rescue.Port)
	assert.Equal(t, "root", n.Rescue.User)
	assert.NotNil(t, n.Rescue.Password)
	assert.Equal(t, edKey, n.Rescue.HostKey)
}

// The adapter hands on the key line the command provider reads, without
// known_hosts host names or comment; what Load would refuse is passed on as
// it is, so the component refuses it rather than checking nothing.
func TestRescueHostKeyIsNormalized(t *testing.T) {
	t.Parallel()
	withKey := func(key string) stacks.Source {
		return stackstest.EditSection(t, stackstest.Example(t, stackstest.VPSExample), "nodes", func(m map[string]any) {
			cp := m["controlPlanes"].([]any)[0].(map[string]any)
			rescue := cp["rescue"].(map[string]any)
			if key == "" {
				delete(rescue, "hostKey")
			} else {
				rescue["hostKey"] = key
			}
		})
	}
	args := program.VPSArgs(loadVPS(t, withKey("203.0.113.10 "+edKey+" root@rescue")))
	assert.Equal(t, edKey, args.Nodes[0].Rescue.HostKey)
	require.NoError(t, args.Validate("prod"))

	args = program.VPSArgs(loadVPS(t, withKey("")))
	assert.Empty(t, args.Nodes[0].Rescue.HostKey, "no pin")
	require.NoError(t, args.Validate("prod"))

	cfg := loadVPS(t, withKey(""))
	cfg.Nodes.ControlPlanes[0].Rescue.HostKey = "SHA256:nThbg6kXUpJWGl7E1IGOCspRomTxdCARLviKw6E5SY8"
	args = program.VPSArgs(cfg)
	assert.Equal(t, cfg.Nodes.ControlPlanes[0].Rescue.HostKey, args.Nodes[0].Rescue.HostKey)
	var ie *inputs.Error
	require.ErrorAs(t, args.Validate("prod"), &ie)
	require.Len(t, ie.Problems, 1)
	assert.Equal(t, "nodes[0].rescue.hostKey", ie.Problems[0].Path)
}

// Workers follow the control planes; each node's own settings win over the
// cluster's.
func TestStackFileNodesAndOverrides(t *testing.T) {
	t.Parallel()
	src := stackstest.EditSection(t, stackstest.Example(t, stackstest.VPSExample), "nodes", func(m map[string]any) {
		base := m["controlPlanes"].([]any)[0].(map[string]any)
		w := map[string]any{}
		for k, v := range base {
			w[k] = v
		}
		w["name"], w["ip"], w["gateway"], w["prefixLength"], w["installDisk"] = "w-0", "203.0.113.20", "203.0.113.1", 24, "/dev/nvme0n1"
		w["patches"] = []any{"machine:\n  sysctls:\n    a.b: \"1\"\n"}
		m["workers"] = []any{w}
	})
	src = stackstest.EditSection(t, src, "vps", func(m map[string]any) {
		m["requireRescue"], m["onDestroy"], m["talosWaitTimeout"] = false, "reset", "45m"
		m["publicTcpPorts"] = []any{80, 443}
		m["rebootCommand"] = "./flip-boot.sh"
	})
	args := program.VPSArgs(loadVPS(t, src))
	require.NoError(t, args.Validate("prod"))
	require.Len(t, args.Nodes, 2)
	w := args.Nodes[1]
	assert.Equal(t, talos.RoleWorker, w.Role)
	assert.Equal(t, "203.0.113.1", w.Gateway)
	assert.Equal(t, 24, w.PrefixLength)
	assert.Equal(t, "/dev/nvme0n1", w.InstallDisk)
	require.Len(t, w.Patches, 1)
	assert.Contains(t, w.Patches[0], "a.b")
	require.NotNil(t, args.VPS.RequireRescue)
	assert.False(t, *args.VPS.RequireRescue)
	assert.Equal(t, servers.OnDestroyReset, args.VPS.OnDestroy)
	assert.Equal(t, "45m", args.VPS.TalosWaitTimeout)
	assert.Equal(t, []int{80, 443}, args.VPS.PublicTCPPorts)
	assert.Equal(t, "./flip-boot.sh", args.VPS.RebootCommand)
}
