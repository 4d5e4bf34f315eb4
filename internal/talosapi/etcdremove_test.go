package talosapi_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
	"go.uber.org/zap"

	"github.com/fluodata/talos-pulumi/internal/talosapi"
)

// SafeToRemove decides as etcd's own RaftCluster.IsReadyToRemoveVotingMember
// (the check behind MemberRemove) for every cluster of one to five members,
// any of them down, a learner or not, and any of them removed: a member
// started in etcd's model is a healthy one here.
func TestSafeToRemoveDecidesAsEtcd(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 5; n++ {
		for down := 0; down < 1<<n; down++ {
			for learner := -1; learner < n; learner++ {
				report := talosapi.EtcdReport{}
				var members []*membership.Member
				for i := range n {
					id := uint64(i + 1)
					m := &membership.Member{ID: types.ID(id), RaftAttributes: membership.RaftAttributes{
						PeerURLs: []string{fmt.Sprintf("https://10.5.0.%d:2380", 11+i)}, IsLearner: i == learner,
					}}
					healthy := down&(1<<i) == 0
					if healthy {
						m.Name = fmt.Sprintf("cp-%d", i+1) // etcd's "started": it published its name
					}
					members = append(members, m)
					report.Members = append(report.Members, talosapi.MemberHealth{
						EtcdMember: talosapi.EtcdMember{ID: id, Hostname: fmt.Sprintf("cp-%d", i+1), PeerURLs: m.PeerURLs, Learner: i == learner},
						Node:       fmt.Sprintf("10.5.0.%d", 11+i), Healthy: healthy && i != learner, Problem: "its node does not answer",
					})
				}
				cluster := membership.NewClusterFromMembers(zap.NewNop(), 1, members)
				for i, m := range members {
					want := m.IsLearner || cluster.IsReadyToRemoveVotingMember(uint64(m.ID))
					err := report.SafeToRemove(report.Members[i].Node)
					assert.Equal(t, want, err == nil, "%d members, down %05b, learner %d, removing %d: %v", n, down, learner, i, err)
				}
			}
		}
	}
}

// A lost host with two of five control planes: each dead member is removed
// in turn, while the other still counts as a voter that is down.
func TestTheTwoDeadMembersOfALostHostAreRemovedOneByOne(t *testing.T) {
	t.Parallel()
	report := talosapi.EtcdReport{}
	for i := range 5 {
		report.Members = append(report.Members, talosapi.MemberHealth{
			EtcdMember: talosapi.EtcdMember{ID: uint64(i + 1), Hostname: fmt.Sprintf("cp-%d", i+1)},
			Node:       fmt.Sprintf("10.5.0.%d", 11+i), Healthy: i < 3, Problem: "its node does not answer",
		})
	}
	// A healthy member may not go: 2 healthy of the 4 left.
	err := report.SafeToRemove("10.5.0.11")
	require.ErrorIs(t, err, talosapi.ErrQuorum)
	assert.Contains(t, err.Error(), "without member cp-1 (node 10.5.0.11, id 0000000000000001), 2 of 4 voting members are healthy, a quorum is 3")

	require.NoError(t, report.SafeToRemove("10.5.0.14"), "3 healthy of the 4 left")
	report.Members = append(report.Members[:3], report.Members[4])
	require.NoError(t, report.SafeToRemove("10.5.0.15"), "then the other: 3 healthy of 3")
}
