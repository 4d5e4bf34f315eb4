// Package talosapitest is a fake Talos machine API for tests: a cluster of
// simulated nodes, each a gRPC server on a loopback port speaking the Talos
// machinery's own protobufs (machine.MachineService) with mTLS as apid
// does: its certificate issued by the OS CA of a fixed secrets bundle
// (testdata/secrets.yaml, test-only key material), clients verified
// against that CA and authorized by the role in their certificate.
//
// The nodes share one etcd membership. A node answers Version, SystemStat
// (its boot time), ServiceList, and on control planes EtcdMemberList,
// EtcdStatus and Kubeconfig (the admin kubeconfig SetKubeconfig sets, sent
// as Talos sends it); it takes Upgrade, Reboot, EtcdLeaveCluster and
// EtcdRemoveMemberByID. After an Upgrade or a Reboot it keeps answering
// for ShutdownDelay (the old version, etcd and kubelet stopping), then
// stops answering (its connections closed, its port refusing, or silent
// with Blackhole) for RebootLatency, and comes back with the installer
// image's tag as its version, a new boot time, and its services healthy
// ServiceDelay later. An Upgrade answers after UpgradeDelay, the time
// Talos takes to pull the installer image. A node with NeverReturns stays
// down. etcd follows
// etcd's own rules where a rollout meets them: a member is healthy while
// its node is up, its etcd runs and the voting members have a quorum;
// membership changes are refused as etcd refuses them ("unhealthy
// cluster", "not enough started members"); Upgrade of a control plane
// runs Talos's own etcd check unless forced.
//
// etcd has contents too (SetEtcdKeys, EtcdKeys): control planes send them
// as an etcd snapshot (EtcdSnapshot, ending with etcd's sha256 trailer),
// take one for a recovery (EtcdRecover) and bootstrap etcd (Bootstrap,
// from that snapshot with RecoverEtcd) on a cluster started with
// StartFresh, whose control planes are not etcd members until then; see
// etcddata.go. Those contents are the fake's own model, a small made-up
// snapshot, unless a real etcd holds them (StartWithEtcd and
// StartFreshWithEtcd, package realetcd): then the snapshot is etcd's own
// and a recovery restores it with etcdutl, as Talos does; see
// etcdbackend.go.
//
// Every call and every state change is recorded in an ordered event log
// (Events) that tests assert on, e.g. with MaxDown.
package talosapitest

import (
	_ "embed"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sx509 "github.com/siderolabs/crypto/x509"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"go.yaml.in/yaml/v4"
)

//go:embed testdata/secrets.yaml
var secretsYAML []byte

// Bundle returns the fixed secrets bundle whose OS CA the fake's nodes and
// clients use (the same bundle as components/talos/testdata).
func Bundle(t testing.TB) *secrets.Bundle {
	t.Helper()
	b := &secrets.Bundle{Clock: secrets.NewClock()}
	if err := yaml.Unmarshal(secretsYAML, b); err != nil {
		t.Fatalf("talosapitest: secrets bundle: %v", err)
	}
	return b
}

// Role is a node's machine type.
type Role string

// Node roles.
const (
	ControlPlane Role = "controlplane"
	Worker       Role = "worker"
)

// DefaultVersion is a node's Talos version unless its spec sets one.
const DefaultVersion = "v1.12.0"

// NodeSpec describes a simulated node.
type NodeSpec struct {
	// IP is the node's address in the cluster (etcd peer URLs, the
	// certificate's SANs); its API listens on a loopback port, see
	// Cluster.Address.
	IP string
	// Hostname defaults to the IP with dots as dashes.
	Hostname string
	// Role defaults to Worker.
	Role Role
	// Version is the Talos version tag it runs; default DefaultVersion.
	Version string
	// RebootLatency is how long it stays down in a reboot (twice that for
	// a staged upgrade).
	RebootLatency time.Duration
	// ShutdownDelay is how long it keeps answering after accepting an
	// upgrade or a reboot, with its etcd and kubelet stopping.
	ShutdownDelay time.Duration
	// UpgradeDelay is how long an Upgrade call takes before the node
	// answers it: Talos pulls the installer image before it accepts the
	// upgrade, which takes minutes on a slow uplink. A caller that gives
	// up first cancels the pull, and the node does not upgrade.
	UpgradeDelay time.Duration
	// ServiceDelay is how long its services take to be healthy after it
	// comes back (apid answers at once).
	ServiceDelay time.Duration
	// NeverReturns keeps it down after its next reboot.
	NeverReturns bool
	// Blackhole makes it silent while down: its port accepts connections
	// and never answers, as a host that is off behind a router can look.
	// Otherwise the port refuses connections.
	Blackhole bool
	// EtcdUnhealthy starts it with an unhealthy etcd member.
	EtcdUnhealthy bool
	// Services are its Talos services; default: those of its role.
	Services []string
	// Disks are the machine's disks, for the user volumes an applied
	// config asks for (see Node.Mounts); none: no volume is ever mounted.
	Disks []Disk
	// Listen is the address its API listens on (default: a loopback
	// port of the kernel's choice), e.g. "127.0.77.11:50000" for a
	// client that dials the node's own address, as the Talos provider
	// does.
	Listen string
	// Maintenance starts it as a machine booted from the ISO, before its
	// config (see maintenance.go).
	Maintenance bool
	// SecureBoot: its firmware boots with Secure Boot enforced, out of
	// setup mode (the Talos ISO enrolled its keys on the first boot). It
	// is what the node's SecurityState reports, and what a TPM-sealed key
	// needs to be enrolled (see securestate.go). A node started installed
	// under it has STATE and EPHEMERAL encrypted; otherwise not.
	SecureBoot bool
}

// Topology returns specs for a cluster of control planes (10.5.0.11,
// cp-1, ...) and workers (10.5.0.21, worker-1, ...) on one version with
// one reboot latency.
func Topology(controlPlanes, workers int, version string, reboot time.Duration) []NodeSpec {
	var out []NodeSpec
	for i := 1; i <= controlPlanes; i++ {
		out = append(out, NodeSpec{IP: fmt.Sprintf("10.5.0.%d", 10+i), Hostname: fmt.Sprintf("cp-%d", i), Role: ControlPlane, Version: version, RebootLatency: reboot})
	}
	for i := 1; i <= workers; i++ {
		out = append(out, NodeSpec{IP: fmt.Sprintf("10.5.0.%d", 20+i), Hostname: fmt.Sprintf("worker-%d", i), Role: Worker, Version: version, RebootLatency: reboot})
	}
	return out
}

// Event is one entry of the log: a call (by its gRPC method name:
// "Upgrade", "EtcdLeaveCluster", ...), a state change ("down", "up", with
// the reason in Args), or an entry a test recorded itself (Record).
type Event struct {
	Seq  int
	Time time.Time
	Node string
	Call string
	Args string
	// Err is the error the call returned, if any.
	Err string
}

func (e Event) String() string {
	s := fmt.Sprintf("#%d %s %s", e.Seq, e.Node, e.Call)
	if e.Args != "" {
		s += " " + e.Args
	}
	if e.Err != "" {
		s += " -> " + e.Err
	}
	return s
}

// Cluster is a set of simulated nodes sharing one etcd membership.
type Cluster struct {
	t      testing.TB
	bundle *secrets.Bundle
	ca     *sx509.CertificateAuthority
	admin  *sx509.PEMEncodedCertificateAndKey

	mu          sync.Mutex
	nodes       []*Node
	manifests   []Manifest // what control planes render (SetManifests)
	byIP        map[string]*Node
	members     []*member
	memberSeq   int
	events      []Event
	leaveRetry  time.Duration
	kubeconfig  []byte
	needsReboot func(node string, config []byte) bool
	onApply     func(node string, config []byte)
	closed      bool
	// bootstrapped: etcd has been bootstrapped (always, for Start);
	// control planes are members only then.
	bootstrapped bool
	etcd         etcdData
	snapStream   SnapshotStream
	// realEtcd, when set, holds etcd's contents in place of the fake's
	// model (etcd); fixed at the start, read without the lock.
	realEtcd EtcdBackend
	// bootstrapMu makes the bootstraps of a real etcd one at a time: one
	// restores and starts etcd without c.mu held.
	bootstrapMu sync.Mutex
	// adopted is the OS CA certificate taken from the first control plane
	// config a node in maintenance mode got (ca is then its CA); nil
	// until then.
	adopted []byte
	// kubeCluster is the cluster section of that config: the Kubeconfig
	// call generates an admin kubeconfig from it, as Talos does, unless
	// a test set one (kubeconfigSet).
	kubeCluster   config.ClusterConfig
	kubeconfigSet bool
}

type member struct {
	id      uint64
	node    *Node
	learner bool
}

// Start starts a node per spec; everything stops at the end of the test.
// Control planes are etcd members from the start.
func Start(t testing.TB, specs ...NodeSpec) *Cluster {
	t.Helper()
	return start(t, true, specs, nil)
}

// StartFresh starts a cluster whose etcd is not bootstrapped yet: its
// control planes have their config and wait for etcd, as Talos nodes do
// before the bootstrap (no member, etcd not running). A Bootstrap on one
// of them makes it the first member; the other control planes then join
// (at once if up, else when they come up).
func StartFresh(t testing.TB, specs ...NodeSpec) *Cluster {
	t.Helper()
	return start(t, false, specs, nil)
}

func start(t testing.TB, bootstrapped bool, specs []NodeSpec, realEtcd EtcdBackend) *Cluster {
	t.Helper()
	b := Bundle(t)
	ca, err := sx509.NewCertificateAuthorityFromCertificateAndKey(b.Certs.OS)
	if err != nil {
		t.Fatalf("talosapitest: OS CA: %v", err)
	}
	admin, err := b.GenerateTalosAPIClientCertificate(role.MakeSet(role.Admin))
	if err != nil {
		t.Fatalf("talosapitest: admin certificate: %v", err)
	}
	c := &Cluster{
		t: t, bundle: b, ca: ca, admin: admin, byIP: map[string]*Node{}, kubeconfig: []byte(DefaultKubeconfig),
		bootstrapped: bootstrapped, etcd: newEtcdData(), realEtcd: realEtcd,
	}
	t.Cleanup(c.stop)
	for _, s := range specs {
		c.add(s)
	}
	return c
}

func (c *Cluster) add(s NodeSpec) {
	c.t.Helper()
	if s.IP == "" || net.ParseIP(s.IP) == nil {
		c.t.Fatalf("talosapitest: node spec without a valid IP: %+v", s)
	}
	if _, dup := c.byIP[s.IP]; dup {
		c.t.Fatalf("talosapitest: two nodes with IP %s", s.IP)
	}
	if s.Hostname == "" {
		s.Hostname = strings.ReplaceAll(s.IP, ".", "-")
	}
	if s.Role == "" {
		s.Role = Worker
	}
	if s.Version == "" {
		s.Version = DefaultVersion
	}
	if s.Services == nil {
		s.Services = defaultServices(s.Role)
	}
	n := &Node{
		c: c, spec: s, addr: s.Listen, maintenance: s.Maintenance,
		state: stateUp, version: s.Version, pending: s.Version,
		bootTime:      time.Now().Add(-time.Hour).Truncate(time.Second),
		etcdUnhealthy: s.EtcdUnhealthy, neverReturns: s.NeverReturns,
		svcProblem: map[string]string{},
	}
	if !s.Maintenance {
		n.formatted = installedVolumes(s.SecureBoot)
	}
	var err error
	if s.Maintenance {
		n.tlsConfig, err = maintenanceTLS(s.IP)
	} else {
		n.tlsConfig, err = c.serverTLS(s)
	}
	if err != nil {
		c.t.Fatalf("talosapitest: server certificate of %s: %v", s.IP, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := n.listen(); err != nil {
		c.t.Fatalf("talosapitest: listen for %s: %v", s.IP, err)
	}
	c.nodes = append(c.nodes, n)
	c.byIP[s.IP] = n
	if s.Role == ControlPlane && c.bootstrapped && !s.Maintenance {
		c.join(n)
	}
}

func defaultServices(r Role) []string {
	if r == ControlPlane {
		return []string{"apid", "containerd", "cri", "etcd", "kubelet", "machined", "syslogd", "trustd", "udevd"}
	}
	return []string{"apid", "containerd", "cri", "kubelet", "machined", "syslogd", "udevd"}
}

// withoutHealthCheck are the services Talos runs without a health check:
// their health is unknown.
var withoutHealthCheck = map[string]bool{"machined": true, "syslogd": true, "udevd": true}

func (c *Cluster) stop() {
	c.mu.Lock()
	c.closed = true
	var srvs []*Node
	for _, n := range c.nodes {
		if n.timer != nil {
			n.timer.Stop()
		}
		srvs = append(srvs, n)
	}
	c.mu.Unlock()
	for _, n := range srvs {
		n.shutdown()
	}
}

// join adds n's etcd member with a fresh ID (c.mu held).
func (c *Cluster) join(n *Node) {
	c.memberSeq++
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%s#%d", n.spec.Hostname, c.memberSeq)
	c.members = append(c.members, &member{id: h.Sum64() | 1, node: n})
	n.etcdRunning = true
}

// record appends an event (c.mu held) and returns its index.
func (c *Cluster) record(node, call, args string) int {
	c.events = append(c.events, Event{Seq: len(c.events) + 1, Time: time.Now(), Node: node, Call: call, Args: args})
	return len(c.events) - 1
}

// Record adds an event of the test's own (a VM deleted, a step of a
// rollout) to the log, ordered with the nodes' events.
func (c *Cluster) Record(node, call, args string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.record(node, call, args)
}

// Events returns the log, or its events of the given calls.
func (c *Cluster) Events(calls ...string) []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Event
	for _, e := range c.events {
		if len(calls) == 0 || slices.Contains(calls, e.Call) {
			out = append(out, e)
		}
	}
	return out
}

// MaxDown returns the most nodes of a role ("" for any) that were out at
// the same time, from the log: a node is out from its "stopping" (it has
// accepted a reboot and stops its etcd and kubelet) or "down" to its "up".
func (c *Cluster) MaxDown(r Role) int {
	down := map[string]bool{}
	most := 0
	for _, e := range c.Events("stopping", "down", "up") {
		if n := c.Node(e.Node); n == nil || (r != "" && n.spec.Role != r) {
			continue
		}
		down[e.Node] = e.Call != "up"
		cnt := 0
		for _, d := range down {
			if d {
				cnt++
			}
		}
		most = max(most, cnt)
	}
	return most
}

// SetLeaveRetry makes EtcdLeaveCluster retry a removal etcd refuses as
// "unhealthy cluster" for d before it fails, as Talos does (for five
// minutes). Default 0: it fails at once.
func (c *Cluster) SetLeaveRetry(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leaveRetry = d
}

// SetNeedsReboot is how the nodes answer a dry-run apply (what mode auto
// would do): needsReboot says whether a config would need a reboot on a
// node (none by default).
func (c *Cluster) SetNeedsReboot(needsReboot func(node string, config []byte) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.needsReboot = needsReboot
}

// OnApply sets what happens when a node takes a config through
// ApplyConfiguration (a test makes its fake API server run the config's
// Kubernetes version, say). It runs with the node's IP and the config,
// before the call returns.
func (c *Cluster) OnApply(f func(node string, config []byte)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onApply = f
}

// DefaultKubeconfig is the admin kubeconfig the control planes give until
// SetKubeconfig: laid out as Talos generates it, with placeholders (base64
// of plain text) for the certificates and the key.
const DefaultKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: https://10.5.0.10:6443
    certificate-authority-data: ZmFrZSBLdWJlcm5ldGVzIENB
users:
- name: admin@fake
  user:
    client-certificate-data: ZmFrZSBhZG1pbiBjZXJ0aWZpY2F0ZQ==
    client-key-data: ZmFrZSBhZG1pbiBrZXk=
contexts:
- context:
    cluster: fake
    namespace: default
    user: admin@fake
  name: admin@fake
current-context: admin@fake
`

// SetKubeconfig sets the admin kubeconfig the control planes give from now
// on (a copy of data).
func (c *Cluster) SetKubeconfig(data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kubeconfig = slices.Clone(data)
	c.kubeconfigSet = true
}

// Node returns the node with that IP, or nil.
func (c *Cluster) Node(ip string) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byIP[ip]
}

// Nodes returns the nodes in the order of their specs.
func (c *Cluster) Nodes() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.nodes)
}

// IPs returns the IPs of the nodes of a role ("" for all), in spec order.
func (c *Cluster) IPs(r Role) []string {
	var out []string
	for _, n := range c.Nodes() {
		if r == "" || n.spec.Role == r {
			out = append(out, n.spec.IP)
		}
	}
	return out
}

// Address returns the loopback address of the node's API. For a node the
// cluster does not have (a machine that is gone), it is an address where
// nothing listens.
func (c *Cluster) Address(node string) string {
	if n := c.Node(node); n != nil {
		return n.addr
	}
	return "127.0.0.1:1"
}

// Members returns the hostnames of the etcd members, in join order.
func (c *Cluster) Members() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, m := range c.members {
		out = append(out, m.node.spec.Hostname)
	}
	return out
}

// CA returns the OS CA certificate (PEM): what a talosconfig's ca holds.
func (c *Cluster) CA() []byte { return c.bundle.Certs.OS.Crt }

// AdminCert returns the os:admin client certificate and key (PEM) of the
// cluster's talosconfig.
func (c *Cluster) AdminCert() (crt, key []byte) { return c.admin.Crt, c.admin.Key }

// ClientCert issues a client certificate with other roles (os:reader,
// os:operator) from the OS CA.
func (c *Cluster) ClientCert(roles ...role.Role) (crt, key []byte) {
	c.t.Helper()
	p, err := c.bundle.GenerateTalosAPIClientCertificate(role.MakeSet(roles...))
	if err != nil {
		c.t.Fatalf("talosapitest: client certificate: %v", err)
	}
	return p.Crt, p.Key
}

// Talosconfig returns the cluster's admin talosconfig, as `talosctl gen
// config` writes it, with the node IPs as endpoints.
func (c *Cluster) Talosconfig() string {
	c.t.Helper()
	cfg := clientconfig.NewConfig("fake", c.IPs(ControlPlane), c.CA(), c.admin)
	raw, err := cfg.Bytes()
	if err != nil {
		c.t.Fatalf("talosapitest: talosconfig: %v", err)
	}
	return string(raw)
}

// ---- etcd (c.mu held) ----

func (c *Cluster) memberOf(n *Node) *member {
	for _, m := range c.members {
		if m.node == n {
			return m
		}
	}
	return nil
}

func (c *Cluster) memberByID(id uint64) *member {
	for _, m := range c.members {
		if m.id == id {
			return m
		}
	}
	return nil
}

// running reports whether the member's etcd process is up and well,
// quorum aside.
func (c *Cluster) running(m *member) bool {
	n := m.node
	return n.state == stateUp && n.etcdRunning && !n.etcdUnhealthy && !time.Now().Before(n.healthyAt)
}

func (c *Cluster) voters() (voters, running int) {
	for _, m := range c.members {
		if m.learner {
			continue
		}
		voters++
		if c.running(m) {
			running++
		}
	}
	return voters, running
}

func (c *Cluster) hasQuorum() bool {
	v, r := c.voters()
	return v > 0 && r >= v/2+1
}

func (c *Cluster) healthy(m *member) bool { return m != nil && c.running(m) && c.hasQuorum() }

// leader is the lowest running voter, when there is a quorum.
func (c *Cluster) leader() uint64 {
	if !c.hasQuorum() {
		return 0
	}
	var id uint64
	for _, m := range c.members {
		if !m.learner && c.running(m) && (id == 0 || m.id < id) {
			id = m.id
		}
	}
	return id
}

var (
	errNoLeader         = errors.New("etcdserver: no leader")
	errUnhealthyCluster = errors.New("etcdserver: unhealthy cluster")
	errNotEnoughStarted = errors.New("etcdserver: re-configuration failed due to not enough started members")
	errMemberNotFound   = errors.New("etcdserver: member not found")
	errEtcdNotRunning   = errors.New("etcd is not running on this node")
	errRebootInProgress = errors.New("a reboot of this node is in progress")
)

// mayRemove applies etcd's strict reconfiguration check (mayRemoveMember)
// to removing x through the member via (nil: through any member).
func (c *Cluster) mayRemove(x, via *member) error {
	if !c.hasQuorum() {
		return errNoLeader
	}
	if x.learner {
		return nil
	}
	voters, running := c.voters()
	others := voters - 1
	if others < others/2+1 { // every other voter has started: only the last one cannot go
		return errNotEnoughStarted
	}
	if !c.running(x) && x != via {
		return nil // a member that is down is not part of the active quorum
	}
	if running-1 < 1+(voters-1)/2 {
		return errUnhealthyCluster
	}
	return nil
}

func (c *Cluster) remove(x *member) {
	c.members = slices.DeleteFunc(c.members, func(m *member) bool { return m == x })
	x.node.etcdRunning = false
}

// validateForUpgrade is Talos's check before it upgrades a control plane
// node (etcd's ValidateForUpgrade, with preserve always on).
func (c *Cluster) validateForUpgrade() error {
	if len(c.members) == 2 {
		return fmt.Errorf("etcd member count(%d) is insufficient to maintain quorum if upgrade commences", len(c.members))
	}
	for _, m := range c.members {
		if !c.healthy(m) {
			return fmt.Errorf("etcd member %016x is not healthy; all members must be healthy to perform an upgrade: context deadline exceeded", m.id)
		}
	}
	return nil
}
