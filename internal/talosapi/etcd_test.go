package talosapi_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
)

func hostnames(ms []talosapi.EtcdMember) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Hostname)
	}
	return out
}

func TestEtcdMembersAndStatus(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(3, 1, oldVersion, reboot)...)
	cl := newClient(t, c, adminCreds(c))
	ctx := ctxT(t)

	ms, err := cl.EtcdMemberList(ctx, "10.5.0.12")
	require.NoError(t, err)
	assert.Equal(t, []string{"cp-1", "cp-2", "cp-3"}, hostnames(ms))
	assert.Equal(t, []string{"https://10.5.0.11:2380"}, ms[0].PeerURLs)
	assert.Equal(t, []string{"https://10.5.0.11:2379"}, ms[0].ClientURLs)
	id, _ := c.Node("10.5.0.11").MemberID()
	assert.Equal(t, id, ms[0].ID)

	st, err := cl.EtcdStatus(ctx, "10.5.0.13")
	require.NoError(t, err)
	id3, _ := c.Node("10.5.0.13").MemberID()
	assert.Equal(t, id3, st.MemberID)
	assert.NotZero(t, st.Leader)
	assert.Empty(t, st.Errors)

	// A worker runs no etcd: an API error, not an unreachable node.
	_, err = cl.EtcdMemberList(ctx, "10.5.0.21")
	require.Error(t, err)
	assert.Equal(t, codes.Unimplemented, status.Code(err))
	assert.Contains(t, err.Error(), "member list is only available on control plane nodes")
	assert.NotErrorIs(t, err, talosapi.ErrUnreachable)
}

func TestEtcdQuorumSafe(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	cps := []string{"10.5.0.11", "10.5.0.12", "10.5.0.13"}

	t.Run("three healthy members: any one may go", func(t *testing.T) {
		t.Parallel()
		c := talosapitest.Start(t, talosapitest.Topology(3, 1, oldVersion, reboot)...)
		cl := newClient(t, c, adminCreds(c))
		for _, down := range append([]string{"", "10.5.0.21"}, cps...) {
			assert.NoError(t, talosapi.EtcdQuorumSafe(ctx, cl, cps, down), down)
		}
	})

	t.Run("an unhealthy member: none may go", func(t *testing.T) {
		t.Parallel()
		specs := talosapitest.Topology(3, 0, oldVersion, reboot)
		specs[2].EtcdUnhealthy = true
		c := talosapitest.Start(t, specs...)
		cl := newClient(t, c, adminCreds(c))
		id3, _ := c.Node("10.5.0.13").MemberID()
		err := talosapi.EtcdQuorumSafe(ctx, cl, cps, "10.5.0.11")
		require.Error(t, err)
		assert.ErrorIs(t, err, talosapi.ErrEtcdUnhealthy)
		assert.Contains(t, err.Error(), "unable to confirm that etcd keeps a quorum without node 10.5.0.11: member cp-3 (node 10.5.0.13, id ")
		assert.Contains(t, err.Error(), "is not healthy: it reports etcdserver: no leader")
		assert.Contains(t, err.Error(), "id "+hex16(id3))
		assert.ErrorIs(t, talosapi.EtcdQuorumSafe(ctx, cl, cps, ""), talosapi.ErrEtcdUnhealthy)

		// For good, the sick member may go (a scale-down), a healthy one
		// may not: 1 healthy of the 2 left is no quorum.
		r, err := talosapi.EtcdHealth(ctx, cl, cps)
		require.NoError(t, err)
		assert.NoError(t, r.SafeToRemove("10.5.0.13"))
		err = r.SafeToRemove("10.5.0.11")
		require.ErrorIs(t, err, talosapi.ErrQuorum)
		assert.Contains(t, err.Error(), "1 of 2 voting members are healthy, a quorum is 2 (not healthy: cp-3 (node 10.5.0.13, id ")
		assert.ErrorIs(t, r.SafeToRemove("10.5.0.99"), talosapi.ErrMemberNotFound)
	})

	t.Run("a dead member the run removes: the others may be touched, no control plane", func(t *testing.T) {
		t.Parallel()
		c := talosapitest.Start(t, talosapitest.Topology(3, 1, oldVersion, reboot)...)
		cl := newClient(t, c, adminCreds(c))
		c.Node("10.5.0.13").PowerOff()
		// A worker (no member goes down): the leaving member's health
		// does not count, its vote does: 2 of 3 keep the quorum.
		require.NoError(t, talosapi.EtcdQuorumSafe(ctx, cl, cps, "", "10.5.0.13"))
		// A control plane would leave 1 healthy of 3 voters.
		err := talosapi.EtcdQuorumSafe(ctx, cl, cps, "10.5.0.11", "10.5.0.13")
		require.ErrorIs(t, err, talosapi.ErrQuorum)
		assert.Contains(t, err.Error(), "1 of 3 voting members are healthy, a quorum is 2")
		// Not leaving: refused as before.
		assert.ErrorIs(t, talosapi.EtcdQuorumSafe(ctx, cl, cps, ""), talosapi.ErrEtcdUnhealthy)
		// Another member down is not excused by one that leaves (etcd
		// then has no leader at all).
		c.Node("10.5.0.12").SetEtcdHealthy(false)
		assert.Error(t, talosapi.EtcdQuorumSafe(ctx, cl, cps, "", "10.5.0.13"))
	})

	t.Run("a member whose node is down", func(t *testing.T) {
		t.Parallel()
		c := talosapitest.Start(t, talosapitest.Topology(3, 0, oldVersion, reboot)...)
		cl := newClient(t, c, adminCreds(c))
		c.Node("10.5.0.11").PowerOff()
		err := talosapi.EtcdQuorumSafe(ctx, cl, cps, "10.5.0.12")
		require.ErrorIs(t, err, talosapi.ErrEtcdUnhealthy)
		assert.Contains(t, err.Error(), "member cp-1 (node 10.5.0.11, id ")
		assert.Contains(t, err.Error(), "node does not answer")
	})

	t.Run("two members: neither may go", func(t *testing.T) {
		t.Parallel()
		c := talosapitest.Start(t, talosapitest.Topology(2, 0, oldVersion, reboot)...)
		cl := newClient(t, c, adminCreds(c))
		require.NoError(t, talosapi.EtcdQuorumSafe(ctx, cl, cps[:2], ""))
		err := talosapi.EtcdQuorumSafe(ctx, cl, cps[:2], "10.5.0.12")
		require.ErrorIs(t, err, talosapi.ErrQuorum)
		assert.Contains(t, err.Error(), "without member cp-2 (node 10.5.0.12, id ")
		assert.Contains(t, err.Error(), "1 of 2 voting members are healthy, a quorum is 2")
		// Removed for good, one may: one member of one is a quorum.
		r, err := talosapi.EtcdHealth(ctx, cl, cps[:2])
		require.NoError(t, err)
		assert.NoError(t, r.SafeToRemove("10.5.0.12"))
	})

	t.Run("one member: it may not go", func(t *testing.T) {
		t.Parallel()
		c := talosapitest.Start(t, talosapitest.Topology(1, 0, oldVersion, reboot)...)
		cl := newClient(t, c, adminCreds(c))
		require.ErrorIs(t, talosapi.EtcdQuorumSafe(ctx, cl, cps[:1], "10.5.0.11"), talosapi.ErrQuorum)
		r, err := talosapi.EtcdHealth(ctx, cl, cps[:1])
		require.NoError(t, err)
		err = r.SafeToRemove("10.5.0.11")
		require.ErrorIs(t, err, talosapi.ErrQuorum)
		assert.Contains(t, err.Error(), "member cp-1 (node 10.5.0.11, id ")
		assert.Contains(t, err.Error(), "is the last one")
	})

	t.Run("a member on no given control plane", func(t *testing.T) {
		t.Parallel()
		c := talosapitest.Start(t, talosapitest.Topology(3, 0, oldVersion, reboot)...)
		cl := newClient(t, c, adminCreds(c))
		err := talosapi.EtcdQuorumSafe(ctx, cl, cps[:2], "")
		require.ErrorIs(t, err, talosapi.ErrEtcdUnhealthy)
		assert.Contains(t, err.Error(), "member cp-3 (unknown node https://10.5.0.13:2380, id ")
		assert.Contains(t, err.Error(), "its node is not one of the control planes")
	})

	t.Run("no control plane answers", func(t *testing.T) {
		t.Parallel()
		c := talosapitest.Start(t, talosapitest.Topology(1, 0, oldVersion, reboot)...)
		cl := newClient(t, c, adminCreds(c))
		c.Node("10.5.0.11").PowerOff()
		err := talosapi.EtcdQuorumSafe(ctx, cl, cps[:1], "")
		require.ErrorIs(t, err, talosapi.ErrUnreachable)
		assert.Contains(t, err.Error(), "unable to confirm that etcd is healthy: unable to list the etcd members from any control plane: unable to list the etcd members from node 10.5.0.11: node does not answer")
	})
}

func hex16(id uint64) string { return fmt.Sprintf("%016x", id) }

func TestEtcdLeaveCluster(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(3, 1, oldVersion, reboot)...)
	cl := newClient(t, c, adminCreds(c))
	ctx := ctxT(t)
	cps := c.IPs(talosapitest.ControlPlane)

	require.NoError(t, talosapi.EtcdQuorumSafe(ctx, cl, cps, "10.5.0.13"))
	require.NoError(t, cl.EtcdLeaveCluster(ctx, "10.5.0.13"))
	c.Record("10.5.0.13", "vm.delete", "")
	for _, node := range cps[:2] {
		ms, err := cl.EtcdMemberList(ctx, node)
		require.NoError(t, err)
		assert.Equal(t, []string{"cp-1", "cp-2"}, hostnames(ms), node)
	}
	svcs, err := cl.ServiceList(ctx, "10.5.0.13")
	require.NoError(t, err)
	for _, s := range svcs {
		if s.ID == "etcd" {
			assert.Equal(t, "Finished", s.State, "Talos stops etcd after the leave")
		}
	}
	// The order a scale-down test asserts.
	var order []string
	for _, e := range c.Events("EtcdLeaveCluster", "vm.delete") {
		order = append(order, e.Node+" "+e.Call)
	}
	assert.Equal(t, []string{"10.5.0.13 EtcdLeaveCluster", "10.5.0.13 vm.delete"}, order)

	// Again: no such member.
	err = cl.EtcdLeaveCluster(ctx, "10.5.0.13")
	require.ErrorIs(t, err, talosapi.ErrMemberNotFound)
	assert.Contains(t, err.Error(), "unable to make node 10.5.0.13 leave etcd: etcd member not found")
	// A worker has no etcd.
	err = cl.EtcdLeaveCluster(ctx, "10.5.0.21")
	assert.Equal(t, codes.Unimplemented, status.Code(err))

	// Down to one: etcd lets the last but one leave, and refuses the last.
	require.NoError(t, cl.EtcdLeaveCluster(ctx, "10.5.0.12"))
	err = cl.EtcdLeaveCluster(ctx, "10.5.0.11")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "etcdserver: re-configuration failed due to not enough started members")
	assert.Equal(t, []string{"cp-1"}, c.Members())
}

func TestEtcdLeaveRefusedByEtcd(t *testing.T) {
	t.Parallel()
	specs := talosapitest.Topology(3, 0, oldVersion, reboot)
	specs[1].EtcdUnhealthy = true
	c := talosapitest.Start(t, specs...)
	cl := newClient(t, c, adminCreds(c))
	ctx := ctxT(t)

	err := cl.EtcdLeaveCluster(ctx, "10.5.0.11")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unable to make node 10.5.0.11 leave etcd: ")
	assert.Contains(t, err.Error(), "etcdserver: unhealthy cluster")
	assert.NotErrorIs(t, err, talosapi.ErrUnreachable)
	assert.Len(t, c.Members(), 3)

	// Talos retries that refusal for minutes: the call runs into its
	// timeout, on a connected node.
	c.SetLeaveRetry(time.Minute)
	cl2, err := talosapi.New(adminCreds(c), talosapi.WithAddress(c.Address), talosapi.WithTimeouts(time.Second, 100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl2.Close() })
	_, err = cl2.Version(ctx, "10.5.0.11") // connect first
	require.NoError(t, err)
	err = cl2.EtcdLeaveCluster(ctx, "10.5.0.11")
	require.ErrorIs(t, err, talosapi.ErrTimeout)
	assert.NotErrorIs(t, err, talosapi.ErrUnreachable)
	assert.Contains(t, err.Error(), "the node took the call and did not answer within 100ms")
}

func TestEtcdRemoveMemberOfAGoneNode(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(3, 0, oldVersion, reboot)...)
	cl := newClient(t, c, adminCreds(c))
	ctx := ctxT(t)
	cps := c.IPs(talosapitest.ControlPlane)

	id3, _ := c.Node("10.5.0.13").MemberID()
	c.Node("10.5.0.13").PowerOff()
	// The gate of a reboot refuses (a member is down); removing that very
	// member is safe.
	require.ErrorIs(t, talosapi.EtcdQuorumSafe(ctx, cl, cps, "10.5.0.13"), talosapi.ErrEtcdUnhealthy)
	r, err := talosapi.EtcdHealth(ctx, cl, cps)
	require.NoError(t, err)
	m, ok := r.Member("10.5.0.13")
	require.True(t, ok)
	assert.Equal(t, id3, m.ID)
	require.NoError(t, r.SafeToRemove("10.5.0.13"))

	// Removing a healthy member while another is down: etcd refuses.
	id2, _ := c.Node("10.5.0.12").MemberID()
	err = cl.EtcdRemoveMemberByID(ctx, "10.5.0.11", id2)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "etcdserver: unhealthy cluster")

	require.NoError(t, cl.EtcdRemoveMemberByID(ctx, "10.5.0.11", m.ID))
	ms, err := cl.EtcdMemberList(ctx, "10.5.0.12")
	require.NoError(t, err)
	assert.Equal(t, []string{"cp-1", "cp-2"}, hostnames(ms))
	require.NoError(t, talosapi.EtcdQuorumSafe(ctx, cl, cps[:2], ""))

	err = cl.EtcdRemoveMemberByID(ctx, "10.5.0.11", m.ID)
	require.ErrorIs(t, err, talosapi.ErrMemberNotFound)
	assert.Contains(t, err.Error(), "unable to remove etcd member "+hex16(id3)+" through node 10.5.0.11")
}
