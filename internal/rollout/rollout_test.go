package rollout_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/rollout"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
)

func ops(t *testing.T, c *talosapitest.Cluster) rollout.Ops {
	t.Helper()
	crt, key := c.AdminCert()
	api, err := talosapi.New(talosapi.Credentials{CA: c.CA(), Cert: crt, Key: key}, talosapi.WithAddress(c.Address))
	require.NoError(t, err)
	t.Cleanup(func() { _ = api.Close() })
	return rollout.Ops{API: api, ControlPlanes: c.IPs(talosapitest.ControlPlane),
		Timing: rollout.Timing{Poll: 5 * time.Millisecond, Reboot: time.Second, Healthy: time.Second, RebootStart: 20 * time.Millisecond, Drain: time.Second}}
}

func cp(ip, name string) rollout.Node {
	return rollout.Node{Name: name, IP: ip, Role: rollout.ControlPlane}
}

// The gate's policy by the number of control planes: one is only checked
// for health (nothing keeps a quorum without it), two never lose one,
// three lose one.
func TestGateByControlPlaneCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	one := talosapitest.Start(t, talosapitest.Topology(1, 0, "v1.12.0", 10*time.Millisecond)...)
	require.NoError(t, ops(t, one).Gate(ctx, cp("10.5.0.11", "cp-1")))

	two := talosapitest.Start(t, talosapitest.Topology(2, 0, "v1.12.0", 10*time.Millisecond)...)
	err := ops(t, two).Gate(ctx, cp("10.5.0.11", "cp-1"))
	require.ErrorIs(t, err, talosapi.ErrQuorum)
	assert.Contains(t, err.Error(), "unable to touch node cp-1 (10.5.0.11)")

	three := talosapitest.Start(t, talosapitest.Topology(3, 0, "v1.12.0", 10*time.Millisecond)...)
	require.NoError(t, ops(t, three).Gate(ctx, cp("10.5.0.12", "cp-2")))
	three.Node("10.5.0.13").SetEtcdHealthy(false)
	err = ops(t, three).Gate(ctx, cp("10.5.0.12", "cp-2"))
	require.ErrorIs(t, err, talosapi.ErrEtcdUnhealthy)
	assert.Contains(t, err.Error(), "member cp-3")
}

// The last etcd member is never removed; a member already gone is success.
func TestRemoveRefusesTheLastMemberAndToleratesAGoneOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	one := talosapitest.Start(t, talosapitest.Topology(1, 0, "v1.12.0", 10*time.Millisecond)...)
	err := ops(t, one).Remove(ctx, cp("10.5.0.11", "cp-1"))
	require.ErrorIs(t, err, talosapi.ErrQuorum)
	assert.Contains(t, err.Error(), "is the last one")
	assert.Empty(t, one.Events("EtcdLeaveCluster"))

	three := talosapitest.Start(t, talosapitest.Topology(3, 0, "v1.12.0", 10*time.Millisecond)...)
	o := ops(t, three)
	require.NoError(t, o.Remove(ctx, cp("10.5.0.13", "cp-3")))
	require.NoError(t, o.Remove(ctx, cp("10.5.0.13", "cp-3")), "a second removal (a resumed run) finds no member and succeeds")
	assert.Len(t, three.Events("EtcdLeaveCluster"), 1)
	assert.Equal(t, []string{"cp-1", "cp-2"}, three.Members())
}
