package talosapi

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// MemberHealth is one etcd member and whether it is healthy.
type MemberHealth struct {
	EtcdMember
	// Node is the control plane node (one of those given to EtcdHealth)
	// whose address is in the member's peer URLs; empty when none is.
	Node string
	// Healthy is true when the member's node answered EtcdStatus for it
	// with a leader, no errors, and the member votes.
	Healthy bool
	// Problem says why the member is not healthy.
	Problem string
}

func (m MemberHealth) String() string {
	node := m.Node
	if node == "" {
		node = "unknown node " + strings.Join(m.PeerURLs, ",")
	} else {
		node = "node " + node
	}
	return fmt.Sprintf("%s (%s, id %016x)", m.Hostname, node, m.ID)
}

// EtcdReport is the etcd membership with each member's health.
type EtcdReport struct {
	Members []MemberHealth
}

// EtcdHealth reads the etcd membership (from the first control plane, in
// the order given, that lists it) and the status of every control plane's
// own member, all calls at once. A member is healthy when its node answers
// EtcdStatus for it with a leader and no errors, and it is not a learner.
// Give every control plane node, one that is gone or leaving included: a
// member whose peer URLs name none of them is reported as on an unknown
// node. It fails only when no control plane lists the members.
func EtcdHealth(ctx context.Context, api API, controlPlanes []string) (EtcdReport, error) {
	type answer struct {
		members   []EtcdMember
		listErr   error
		status    EtcdMemberStatus
		statusErr error
	}
	answers := make([]answer, len(controlPlanes))
	var wg sync.WaitGroup
	for i, node := range controlPlanes {
		wg.Go(func() {
			answers[i].members, answers[i].listErr = api.EtcdMemberList(ctx, node)
		})
		wg.Go(func() {
			answers[i].status, answers[i].statusErr = api.EtcdStatus(ctx, node)
		})
	}
	wg.Wait()

	var members []EtcdMember
	var listErrs []error
	for _, a := range answers {
		if a.listErr == nil {
			members = a.members
			break
		}
		listErrs = append(listErrs, a.listErr)
	}
	if members == nil {
		if len(listErrs) == 0 {
			return EtcdReport{}, errors.New("unable to list the etcd members: no control plane given")
		}
		return EtcdReport{}, fmt.Errorf("unable to list the etcd members from any control plane: %w", errors.Join(listErrs...))
	}

	type seen struct {
		node   string
		status EtcdMemberStatus
	}
	byID := map[uint64]seen{}
	statusErr := map[string]error{}
	for i, node := range controlPlanes {
		if answers[i].statusErr != nil {
			statusErr[node] = answers[i].statusErr
			continue
		}
		byID[answers[i].status.MemberID] = seen{node, answers[i].status}
	}

	var r EtcdReport
	for _, m := range members {
		h := MemberHealth{EtcdMember: m, Node: nodeOf(m, controlPlanes)}
		s, ok := byID[m.ID]
		switch {
		case ok && h.Node == "":
			h.Node = s.node
		case !ok && h.Node != "" && statusErr[h.Node] != nil:
			h.Problem = statusErr[h.Node].Error()
		case !ok && h.Node != "":
			h.Problem = "its node answers for no such member"
		case !ok:
			h.Problem = "its node is not one of the control planes"
		}
		switch {
		case h.Problem != "":
		case m.Learner || s.status.Learner:
			h.Problem = "it is a learner, not yet a voting member"
		case len(s.status.Errors) > 0:
			h.Problem = "it reports " + strings.Join(s.status.Errors, "; ")
		case s.status.Leader == 0:
			h.Problem = "it has no leader"
		default:
			h.Healthy = true
		}
		r.Members = append(r.Members, h)
	}
	return r, nil
}

// nodeOf returns the control plane whose address is the host of one of the
// member's peer URLs.
func nodeOf(m EtcdMember, controlPlanes []string) string {
	for _, u := range m.PeerURLs {
		p, err := url.Parse(u)
		if err != nil {
			continue
		}
		if slices.Contains(controlPlanes, p.Hostname()) {
			return p.Hostname()
		}
	}
	return ""
}

// Member returns the member of node, if any.
func (r EtcdReport) Member(node string) (MemberHealth, bool) {
	for _, m := range r.Members {
		if m.Node == node {
			return m, true
		}
	}
	return MemberHealth{}, false
}

// SafeWithout reports whether node may go down: every member is healthy
// and the healthy voting members left without node's member keep a
// quorum. With node "" it checks health alone, and that the cluster has a
// quorum. The error names the member at fault. The members of leaving
// (control planes this run removes) may be unhealthy, a dead machine's:
// they still vote until removed, so the quorum counts them as voters that
// are not healthy.
func (r EtcdReport) SafeWithout(node string, leaving ...string) error {
	for _, m := range r.Members {
		if !m.Healthy && !slices.Contains(leaving, m.Node) {
			return fmt.Errorf("member %s is not healthy: %s: %w", m, m.Problem, ErrEtcdUnhealthy)
		}
	}
	return r.quorumWithout(node)
}

// quorumWithout reports whether the healthy voting members other than
// node's keep a quorum of the voting members.
func (r EtcdReport) quorumWithout(node string) error {
	voters, healthy := 0, 0
	var leaving *MemberHealth
	var sick []string
	for i, m := range r.Members {
		if m.Learner {
			continue
		}
		voters++
		switch {
		case node != "" && m.Node == node:
			leaving = &r.Members[i]
		case m.Healthy:
			healthy++
		default:
			sick = append(sick, m.String())
		}
	}
	quorum := voters/2 + 1
	if voters > 0 && healthy >= quorum {
		return nil
	}
	var b strings.Builder
	if leaving != nil {
		fmt.Fprintf(&b, "without member %s, ", leaving)
	}
	fmt.Fprintf(&b, "%d of %d voting members are healthy, a quorum is %d", healthy, voters, quorum)
	if len(sick) > 0 {
		fmt.Fprintf(&b, " (not healthy: %s)", strings.Join(sick, ", "))
	}
	return fmt.Errorf("%s: %w", b.String(), ErrQuorum)
}

// SafeToRemove reports whether node's member may be removed for good (a
// scale-down, or a dead machine's member): after the removal, the healthy
// voting members are a quorum of the voting members left, and one is
// left. That is etcd's own rule (IsReadyToRemoveVotingMember,
// server/etcdserver/api/membership/cluster.go): other members may be down,
// so that the two dead members of a lost host can be removed one after the
// other. node's own member may be unhealthy; a learner never counts. A node
// without a member gives an error wrapping ErrMemberNotFound.
func (r EtcdReport) SafeToRemove(node string) error {
	leaving, ok := r.Member(node)
	if !ok {
		return fmt.Errorf("node %s has no etcd member: %w", node, ErrMemberNotFound)
	}
	if leaving.Learner {
		return nil
	}
	voters, healthy := 0, 0
	var sick []string
	for _, m := range r.Members {
		if m.ID == leaving.ID || m.Learner {
			continue
		}
		voters++
		if m.Healthy {
			healthy++
		} else {
			sick = append(sick, fmt.Sprintf("%s: %s", m, m.Problem))
		}
	}
	if voters == 0 {
		return fmt.Errorf("member %s is the last one: %w", leaving, ErrQuorum)
	}
	if quorum := voters/2 + 1; healthy < quorum {
		return fmt.Errorf("without member %s, %d of %d voting members are healthy, a quorum is %d (not healthy: %s): %w",
			leaving, healthy, voters, quorum, strings.Join(sick, "; "), ErrQuorum)
	}
	return nil
}

// EtcdQuorumSafe is the gate before and after taking a control plane down:
// every etcd member is healthy, and the cluster keeps a quorum with down
// (a control plane node, or "" for the health check alone) gone. A cluster
// of one or two voting members never passes with a member down. The
// error names the member at fault.
func EtcdQuorumSafe(ctx context.Context, api API, controlPlanes []string, down string, leaving ...string) error {
	what := "that etcd is healthy"
	if down != "" {
		what = "that etcd keeps a quorum without node " + down
	}
	r, err := EtcdHealth(ctx, api, controlPlanes)
	if err != nil {
		return fmt.Errorf("unable to confirm %s: %w", what, err)
	}
	if err := r.SafeWithout(down, leaving...); err != nil {
		return fmt.Errorf("unable to confirm %s: %w", what, err)
	}
	return nil
}
