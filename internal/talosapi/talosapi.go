// Package talosapi is a narrow client of the Talos machine API for the
// day-2 operations of a cluster: the calls a rolling upgrade, a rolling
// reboot and an etcd-first scale-down need, and the cluster's admin
// kubeconfig; nothing more.
//
// Every call goes straight to the node it is about (one connection per
// node, to its own apid on port 50000), not through an endpoint that proxies
// it: during a rolling operation any node, endpoints included, may be the
// one that is rebooting, and an answer or a failure then belongs to the node
// named in the call. Each call has a bounded timeout. A node that does not
// answer (connection refused, reset, no answer in time) is reported with
// ErrUnreachable, distinct from an answer that is an error (an API refusal,
// a missing etcd member), from a TLS failure (ErrTLS) and from a call the
// node took and did not finish in time (ErrTimeout).
//
// The helpers WaitVersion, WaitRebooted, WaitHealthy and EtcdQuorumSafe are
// the gates a rollout runs between nodes; they take their poll interval
// and timeout as parameters, and work against any API (the fake of
// talosapitest in tests). The waits report what they wait for and what
// they saw last, on a clock of their own, to the reporter of WithProgress;
// a cancelled context ends them at once, with an error that says what they
// waited for, that the run was cancelled and what they saw last.
package talosapi

import (
	"context"
	"errors"
	"time"
)

// API is the part of the Talos machine API a rolling operation uses. Node
// is the node's address as the cluster knows it (its IP); the Client maps
// it to an endpoint.
type API interface {
	// Version returns the Talos version tag the node runs ("v1.12.0").
	// A node that does not answer gives an error wrapping ErrUnreachable.
	Version(ctx context.Context, node string) (string, error)
	// BootTime returns when the node booted (the kernel's btime, to the
	// second). It changes with every reboot, which a version does not
	// when a node reboots into the same version.
	BootTime(ctx context.Context, node string) (time.Time, error)
	// Upgrade asks the node to install image (an installer image reference,
	// "ghcr.io/siderolabs/installer:v1.12.1") and reboot into it. It
	// returns once the node has accepted the request, which Talos does
	// once it has pulled the image (minutes on a slow uplink); the node
	// goes down afterwards.
	Upgrade(ctx context.Context, node, image string, opts UpgradeOptions) error
	// Reboot asks the node to reboot (default mode). It returns once the
	// node has accepted the request.
	Reboot(ctx context.Context, node string) error
	// ApplyDryRun asks the node what applying config in mode auto would
	// do, without applying it: true when it would reboot for it.
	ApplyDryRun(ctx context.Context, node string, config []byte) (reboot bool, err error)
	// Reset wipes the node's STATE and EPHEMERAL partitions and reboots it
	// into maintenance mode, without leaving etcd first (not graceful). It
	// returns once the node has accepted the request.
	Reset(ctx context.Context, node string) error
	// ApplyConfiguration applies a whole machine config to the node
	// without a reboot: Talos refuses a change that would need one. It
	// returns once the node has accepted the config; the node then
	// reconciles its services (a new static pod image, say).
	ApplyConfiguration(ctx context.Context, node string, config []byte) error
	// ServiceList returns the node's Talos services with their state and
	// health.
	ServiceList(ctx context.Context, node string) ([]Service, error)
	// EtcdMemberList returns the etcd members as the node's etcd sees them
	// (a control plane node only).
	EtcdMemberList(ctx context.Context, node string) ([]EtcdMember, error)
	// EtcdStatus returns the status of the node's own etcd member (a
	// control plane node only).
	EtcdStatus(ctx context.Context, node string) (EtcdMemberStatus, error)
	// EtcdLeaveCluster makes the node leave the etcd cluster gracefully
	// and stop its etcd.
	EtcdLeaveCluster(ctx context.Context, node string) error
	// EtcdRemoveMemberByID removes a member, by ID, through node's etcd:
	// the way to remove the member of a node that is gone. A member
	// already removed gives an error wrapping ErrMemberNotFound.
	EtcdRemoveMemberByID(ctx context.Context, node string, id uint64) error
	// Kubeconfig returns the cluster's admin kubeconfig (YAML), as the
	// node generates it: what `talosctl kubeconfig` fetches. It holds a
	// fresh cluster-admin client certificate, so it is a secret. Only a
	// control plane node has it; a worker answers with an error. It
	// needs the os:admin role.
	Kubeconfig(ctx context.Context, node string) ([]byte, error)
	// PullImage pulls an image into the node's containerd: the system
	// namespace (the kubelet's image) when system, else the CRI's (the
	// static pods'), as talosctl upgrade-k8s pre-pulls them (talos v1.13.9
	// pkg/cluster/kubernetes/talos_managed.go, prePullImages). A Talos
	// without the call answers Unimplemented. It needs the os:operator
	// role.
	PullImage(ctx context.Context, node, image string, system bool) error
	// Manifests returns the objects of the bootstrap manifests the node
	// renders (its k8s.Manifest resources, namespace controlplane, read
	// through the COSI State API, in the order of their IDs), as
	// talosctl upgrade-k8s reads them to sync them after an upgrade. A
	// worker renders none: an empty list.
	Manifests(ctx context.Context, node string) ([]map[string]any, error)
	// SecureBoot reports whether the node booted with Secure Boot
	// enforced (its SecurityState resource, as `talosctl get
	// securitystate` shows it).
	SecureBoot(ctx context.Context, node string) (bool, error)
	// Volumes returns the node's volumes as its volume manager reports
	// them (its VolumeStatus resources, `talosctl get volumestatus`).
	Volumes(ctx context.Context, node string) ([]Volume, error)
}

// UpgradeOptions are the flags of an upgrade. The reboot mode is Talos's
// default; the EPHEMERAL partition is always preserved.
type UpgradeOptions struct {
	// Stage stages the upgrade to be performed after a reboot (Talos then
	// reboots twice), for when files in use block an in-place upgrade.
	Stage bool
	// Force skips Talos's own etcd health check on a control plane node.
	Force bool
	// Timeout bounds the call, the pull of the installer image included;
	// zero takes the client's (WithUpgradeTimeout).
	Timeout time.Duration
}

// Service is one Talos service of a node.
type Service struct {
	// ID is the service's name: "etcd", "kubelet", "apid".
	ID string
	// State is Talos's service state: "Running", "Starting", "Finished",
	// "Failed", ...
	State string
	// Healthy is true when the service's health check passes.
	Healthy bool
	// HealthUnknown is true when the service has no health check or has
	// not run it yet.
	HealthUnknown bool
	// HealthMessage is the last message of the health check.
	HealthMessage string
	// LastEvent is the message of the service's last event: why it
	// failed, for a Failed one ("Failed to run pre stage: ...").
	LastEvent string
}

// EtcdMember is one member of the etcd cluster.
type EtcdMember struct {
	// ID is etcd's member ID.
	ID uint64
	// Hostname is the member's name: its node's hostname.
	Hostname string
	// PeerURLs are the member's peer URLs ("https://10.0.0.2:2380").
	PeerURLs []string
	// ClientURLs are the member's client URLs.
	ClientURLs []string
	// Learner is true for a member that does not vote yet.
	Learner bool
}

// EtcdMemberStatus is the status of the etcd member a node runs.
type EtcdMemberStatus struct {
	// MemberID is the member's ID.
	MemberID uint64
	// Leader is the ID of the leader the member follows; 0 when it knows
	// none.
	Leader uint64
	// Learner is true for a member that does not vote yet.
	Learner bool
	// Errors are the member's alarms and errors ("etcdserver: no leader",
	// "NOSPACE").
	Errors []string
	// RaftIndex is the member's last raft log index; RaftAppliedIndex the
	// last one it applied: how far it has caught up.
	RaftIndex, RaftAppliedIndex uint64
}

var (
	// ErrUnreachable means the node did not answer: connection refused or
	// reset, no answer within the call's timeout. A rebooting node answers
	// so.
	ErrUnreachable = errors.New("node does not answer")
	// ErrTLS means the connection failed in the TLS handshake: the node's
	// certificate is not from the cluster's CA (a node in maintenance mode
	// answers so), or the node refused the client certificate.
	ErrTLS = errors.New("TLS handshake failed")
	// ErrTimeout means a wait ran out of time, or a node took a call and
	// did not finish it within the call's timeout.
	ErrTimeout = errors.New("timed out")
	// ErrMemberNotFound means etcd has no such member.
	ErrMemberNotFound = errors.New("etcd member not found")
	// ErrEtcdUnhealthy means an etcd member is not healthy.
	ErrEtcdUnhealthy = errors.New("etcd member not healthy")
	// ErrQuorum means etcd would lose quorum.
	ErrQuorum = errors.New("etcd would lose quorum")
)
