package talosapitest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/api/storage"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

type nodeState int

const (
	stateUp       nodeState = iota
	stateStopping           // accepted an upgrade or reboot, still answering
	stateDown
)

// Node is one simulated node.
type Node struct {
	c         *Cluster
	spec      NodeSpec
	tlsConfig *tls.Config
	addr      string // fixed at the first listen: the node keeps its port across reboots

	// Guarded by c.mu.
	state         nodeState
	version       string
	pending       string // the version it comes back with
	boots         int
	bootTime      time.Time
	healthyAt     time.Time
	etcdRunning   bool
	etcdUnhealthy bool
	neverReturns  bool
	svcProblem    map[string]string
	srv           *grpc.Server
	lis           net.Listener
	hole          net.Listener
	holeConns     []net.Conn
	gen           int
	timer         *time.Timer
	// recovery is the snapshot EtcdRecover stored, until a Bootstrap
	// restores it.
	recovery []byte
	// etcdFailure is the message of a real etcd's recovery that failed
	// (the etcd service is Failed with it), until a bootstrap succeeds or
	// EPHEMERAL is wiped; etcdDataLeft: that restore left files in the
	// data directory, which refuse a bootstrap until then.
	etcdFailure  string
	etcdDataLeft bool
	// etcdState, when set, is the etcd service's state ServiceList gives
	// ("-" for no etcd service at all), whatever the node's etcd does.
	etcdState string
	// cosi holds the node's COSI resources (see registerCOSI).
	cosi state.State
	// maintenance: booted from the ISO, waiting for its config;
	// installed: it took one in maintenance mode (its certificate is then
	// made at each boot, from the cluster's OS CA).
	maintenance, installed bool
	// notReady counts the EtcdRecover and Bootstrap calls still answered
	// FailedPrecondition, as Talos answers them until EPHEMERAL is mounted
	// and the CRI is up.
	notReady int
	// mounts are the user volumes of the last applied config, by mount
	// path: the disk each is on, "" while none matches.
	mounts map[string]string
	// formatted is how each volume was formatted, by volume ID: kept
	// across applies and reboots, gone with the disks (securestate.go).
	formatted map[string]block.EncryptionProviderType
}

// IP returns the node's address in the cluster.
func (n *Node) IP() string { return n.spec.IP }

// SetEtcdServiceState makes ServiceList give the etcd service in state
// (Talos's "Waiting", "Failed", ...; "-": no etcd service, as before
// Talos registers it); "" gives the state of what the node's etcd does.
func (n *Node) SetEtcdServiceState(state string) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.etcdState = state
}

// NotReadyForRecovery makes the next calls EtcdRecover and Bootstrap
// calls of the node answer FailedPrecondition, as Talos answers them
// before its EPHEMERAL partition is mounted ("etcd service is not ready for
// recovery yet", machined's EtcdRecover) and its CRI is up.
func (n *Node) NotReadyForRecovery(calls int) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.notReady = calls
}

// notReadyForRecovery counts down NotReadyForRecovery; c.mu held.
func (n *Node) notReadyForRecovery() bool {
	if n.notReady > 0 {
		n.notReady--
		n.c.record(n.spec.IP, "recovery-not-ready", "")
		return true
	}
	return false
}

// Hostname returns the node's hostname (its etcd member's name).
func (n *Node) Hostname() string { return n.spec.Hostname }

// Role returns the node's role.
func (n *Node) Role() Role { return n.spec.Role }

// Version returns the Talos version the node runs.
func (n *Node) Version() string {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return n.version
}

// Up reports whether the node answers and is not shutting down.
func (n *Node) Up() bool {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return n.state == stateUp
}

// Boots returns how many times the node came back from a reboot.
func (n *Node) Boots() int {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return n.boots
}

// MemberID returns the ID of the node's etcd member, if it has one.
func (n *Node) MemberID() (uint64, bool) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	if m := n.c.memberOf(n); m != nil {
		return m.id, true
	}
	return 0, false
}

// SetEtcdHealthy makes the node's etcd member healthy or not.
func (n *Node) SetEtcdHealthy(ok bool) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.etcdUnhealthy = !ok
}

// SetServiceHealth makes a service's health check pass or fail (with
// message).
func (n *Node) SetServiceHealth(id string, ok bool, message string) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	if ok {
		delete(n.svcProblem, id)
	} else {
		n.svcProblem[id] = message
	}
}

// SetNeverReturns decides whether the node comes back from its next
// reboot.
func (n *Node) SetNeverReturns(never bool) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.neverReturns = never
}

// PowerOff takes the node down at once, until PowerOn.
func (n *Node) PowerOff() { n.goDown("poweroff", 0, false) }

// PowerOn brings a node that is down back now, with the version it was to
// come back with.
func (n *Node) PowerOn() {
	n.c.mu.Lock()
	gen := n.gen
	n.c.mu.Unlock()
	n.comeUp(gen)
}

// listen serves the API on the node's port (c.mu held).
func (n *Node) listen() error {
	addr := n.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	l, err := listenOn(addr)
	if err != nil {
		return err
	}
	if n.addr == "" {
		n.addr = l.Addr().String() // before the node is published: read without the lock
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(n.tlsConfig)),
		grpc.UnaryInterceptor(n.intercept), grpc.StreamInterceptor(n.interceptStream))
	machine.RegisterMachineServiceServer(srv, &server{n: n})
	storage.RegisterStorageServiceServer(srv, &storageServer{n: n})
	n.registerCOSI(srv)
	n.srv, n.lis = srv, l
	go func() { _ = srv.Serve(l) }()
	return nil
}

// listenOn listens on addr, waiting out a moment when the port, ours a
// moment ago, is still taken.
func listenOn(addr string) (net.Listener, error) {
	var l net.Listener
	var err error
	for range 100 {
		if l, err = net.Listen("tcp", addr); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return l, err
}

// scheduleReboot: the node has accepted an upgrade or reboot (c.mu held).
// It goes down after ShutdownDelay, for downFor.
func (n *Node) scheduleReboot(reason, version string, downFor time.Duration) {
	n.pending = version
	n.state = stateStopping
	n.c.record(n.spec.IP, "stopping", reason)
	n.timer = time.AfterFunc(n.spec.ShutdownDelay, func() {
		n.c.mu.Lock()
		back := !n.neverReturns
		n.c.mu.Unlock()
		n.goDown(reason, downFor, back)
	})
}

// goDown stops the node's API: from now on it answers nothing; its
// connections are closed once in-flight calls have answered.
func (n *Node) goDown(reason string, downFor time.Duration, comeBack bool) {
	n.c.mu.Lock()
	if n.state == stateDown || n.c.closed {
		n.c.mu.Unlock()
		return
	}
	n.state = stateDown
	n.gen++
	gen := n.gen
	n.c.record(n.spec.IP, "down", reason)
	srv, lis := n.srv, n.lis
	n.srv, n.lis = nil, nil
	n.c.mu.Unlock()

	stopServer(srv)
	if lis != nil {
		// GracefulStop closes the listeners Serve has taken; one whose
		// Serve has not started yet would stay open until it does.
		_ = lis.Close()
	}

	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	if n.c.closed || n.gen != gen {
		return
	}
	// The port stays the node's while it is down: the fake clusters share
	// one secrets bundle and the same IPs, so another test's node on the
	// freed port would answer in this one's place.
	n.openHole(n.spec.Blackhole)
	if comeBack {
		n.timer = time.AfterFunc(downFor, func() { n.comeUp(gen) })
	}
}

// stopServer lets calls in flight answer (the Upgrade that caused the
// reboot), but not for long.
func stopServer(srv *grpc.Server) {
	if srv == nil {
		return
	}
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(200 * time.Millisecond):
		srv.Stop()
		<-done
	}
}

// openHole takes the port with a listener that accepts and, when silent,
// never answers (a blackholed node); otherwise it resets each connection
// at once, as a host without the port open does (c.mu held).
func (n *Node) openHole(silent bool) {
	l, err := listenOn(n.addr)
	if err != nil {
		n.c.record(n.spec.IP, "error", "hole: "+err.Error())
		return
	}
	n.hole = l
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			if !silent {
				if tc, ok := conn.(*net.TCPConn); ok {
					_ = tc.SetLinger(0)
				}
				_ = conn.Close()
				continue
			}
			n.c.mu.Lock()
			n.holeConns = append(n.holeConns, conn)
			n.c.mu.Unlock()
		}
	}()
}

func (n *Node) closeHole() {
	if n.hole != nil {
		_ = n.hole.Close()
		n.hole = nil
	}
	for _, conn := range n.holeConns {
		_ = conn.Close()
	}
	n.holeConns = nil
}

// comeUp ends a reboot: the API answers again, with the new version and
// boot time; a control plane without an etcd member joins again, as Talos
// does.
func (n *Node) comeUp(gen int) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	if n.c.closed || n.state != stateDown || n.gen != gen {
		return
	}
	n.closeHole()
	if n.installed {
		if n.c.adopted == nil {
			// A worker's certificate comes from a control plane: none
			// has its config yet.
			n.timer = time.AfterFunc(50*time.Millisecond, func() { n.comeUp(gen) })
			return
		}
		cfg, err := n.c.serverTLS(n.spec)
		if err != nil {
			n.c.record(n.spec.IP, "error", "certificate: "+err.Error())
			return
		}
		n.tlsConfig = cfg
	}
	if err := n.listen(); err != nil {
		n.c.record(n.spec.IP, "error", "listen: "+err.Error())
		return
	}
	n.state = stateUp
	n.version = n.pending
	n.boots++
	bt := time.Now().Truncate(time.Second)
	if !bt.After(n.bootTime) {
		bt = n.bootTime.Add(time.Second)
	}
	n.bootTime = bt
	n.healthyAt = time.Now().Add(n.spec.ServiceDelay)
	if n.maintenance {
		// A machine booted from the ISO runs no etcd until its config.
		n.c.record(n.spec.IP, "up", n.version)
		return
	}
	if n.spec.Role == ControlPlane && n.c.bootstrapped && n.c.memberOf(n) == nil {
		n.c.join(n)
	}
	n.etcdRunning = n.spec.Role == ControlPlane && n.c.bootstrapped
	n.c.record(n.spec.IP, "up", n.version)
}

func (n *Node) shutdown() {
	n.c.mu.Lock()
	srv, lis := n.srv, n.lis
	n.srv, n.lis = nil, nil
	n.closeHole()
	n.c.mu.Unlock()
	if srv != nil {
		srv.Stop()
		_ = lis.Close()
	}
}

// rules are apid's authorization of the calls the fake serves.
var rules = map[string]role.Set{
	"Version":              role.MakeSet(role.Admin, role.Operator, role.Reader),
	"SystemStat":           role.MakeSet(role.Admin, role.Operator, role.Reader),
	"ServiceList":          role.MakeSet(role.Admin, role.Operator, role.Reader),
	"EtcdMemberList":       role.MakeSet(role.Admin, role.Operator, role.Reader),
	"EtcdStatus":           role.MakeSet(role.Admin, role.Operator, role.Reader),
	"Reboot":               role.MakeSet(role.Admin, role.Operator),
	"ImagePull":            role.MakeSet(role.Admin, role.Operator),
	"Reset":                role.MakeSet(role.Admin),
	"ApplyConfiguration":   role.MakeSet(role.Admin),
	"Upgrade":              role.MakeSet(role.Admin),
	"EtcdLeaveCluster":     role.MakeSet(role.Admin),
	"EtcdRemoveMemberByID": role.MakeSet(role.Admin),
	"Kubeconfig":           role.MakeSet(role.Admin),
	"Bootstrap":            role.MakeSet(role.Admin),
	"EtcdRecover":          role.MakeSet(role.Admin),
	"EtcdSnapshot":         role.MakeSet(role.Admin, role.Operator, role.EtcdBackup),
	// COSI reads (/cosi.resource.State/Get, List), as machined authorizes
	// them (talos v1.13.9 internal/app/machined/pkg/system/services/machined.go:118-119).
	"Get":  role.MakeSet(role.Admin, role.Operator, role.Reader),
	"List": role.MakeSet(role.Admin, role.Operator, role.Reader),
}

// intercept records every call, refuses calls while the node is down (a
// call that slipped in as it went down) and authorizes by the role in the
// client certificate.
func (n *Node) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	idx, err := n.admit(ctx, path.Base(info.FullMethod), describe(req))
	var resp any
	if err == nil {
		resp, err = handler(ctx, req)
	}
	n.failed(idx, err)
	return resp, err
}

// interceptStream does what intercept does for the streaming calls
// (Kubeconfig, EtcdSnapshot, EtcdRecover), whose request is read by the handler: their event has no
// arguments.
func (n *Node) interceptStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	idx, err := n.admit(ss.Context(), path.Base(info.FullMethod), "")
	if err == nil {
		err = handler(srv, ss)
	}
	n.failed(idx, err)
	return err
}

// admit records a call and returns its event's index, with the error that
// refuses it: the node is down, or the client's role does not allow it.
func (n *Node) admit(ctx context.Context, call, args string) (int, error) {
	n.c.mu.Lock()
	idx := n.c.record(n.spec.IP, call, args)
	down, maintenance := n.state == stateDown, n.maintenance
	n.c.mu.Unlock()
	if down {
		return idx, status.Error(codes.Unavailable, "node is rebooting")
	}
	if maintenance {
		if !maintenanceCalls[call] {
			return idx, status.Errorf(codes.Unimplemented, "%s is not implemented in maintenance mode", call)
		}
		return idx, nil
	}
	return idx, authorize(ctx, call)
}

// failed sets the error of the call's event, if any.
func (n *Node) failed(idx int, err error) {
	if err == nil {
		return
	}
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.c.events[idx].Err = err.Error()
}

func authorize(ctx context.Context, call string) error {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return status.Error(codes.Unauthenticated, "no peer")
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		return status.Error(codes.Unauthenticated, "no client certificate")
	}
	have, _ := role.Parse(ti.State.PeerCertificates[0].Subject.Organization)
	need, ok := rules[call]
	if !ok {
		need = role.MakeSet(role.Admin)
	}
	if !have.IncludesAny(need) {
		return status.Error(codes.PermissionDenied, "not authorized")
	}
	return nil
}

func describe(req any) string {
	switch r := req.(type) {
	case *machine.UpgradeRequest:
		return fmt.Sprintf("image=%s stage=%t force=%t preserve=%t mode=%s", r.GetImage(), r.GetStage(), r.GetForce(), r.GetPreserve(), r.GetRebootMode())
	case *machine.ImagePullRequest:
		return "namespace=" + r.GetNamespace().String() + " image=" + r.GetReference()
	case *machine.RebootRequest:
		return "mode=" + r.GetMode().String()
	case *machine.ApplyConfigurationRequest:
		return fmt.Sprintf("mode=%s bytes=%d", r.GetMode(), len(r.GetData()))
	case *machine.EtcdRemoveMemberByIDRequest:
		return fmt.Sprintf("member=%016x", r.GetMemberId())
	case *machine.BootstrapRequest:
		return fmt.Sprintf("recover=%t skipHashCheck=%t", r.GetRecoverEtcd(), r.GetRecoverSkipHashCheck())
	case *machine.EtcdMemberListRequest:
		if r.GetQueryLocal() {
			return "local"
		}
	}
	return ""
}

// InstallerVersion returns the Talos version an installer image installs:
// its tag ("ghcr.io/siderolabs/installer:v1.12.1" -> "v1.12.1"; a digest
// after the tag is ignored).
func InstallerVersion(image string) (string, error) {
	ref, _, _ := strings.Cut(image, "@")
	slash := strings.LastIndex(ref, "/")
	colon := strings.LastIndex(ref, ":")
	if colon <= slash || colon == len(ref)-1 {
		return "", fmt.Errorf("installer image %q has no version tag", image)
	}
	return ref[colon+1:], nil
}

// server implements the calls of machine.MachineService the fake serves;
// the others answer Unimplemented.
type server struct {
	machine.UnimplementedMachineServiceServer
	n *Node
}

func (s *server) meta() *common.Metadata { return &common.Metadata{Hostname: s.n.spec.Hostname} }

func (s *server) lock() func() {
	s.n.c.mu.Lock()
	return s.n.c.mu.Unlock
}

func (s *server) Version(context.Context, *emptypb.Empty) (*machine.VersionResponse, error) {
	defer s.lock()()
	return &machine.VersionResponse{Messages: []*machine.Version{{
		Metadata: s.meta(),
		Version:  &machine.VersionInfo{Tag: s.n.version, Sha: "fake", Os: "linux", Arch: "amd64"},
		Platform: &machine.PlatformInfo{Name: "metal", Mode: "metal"},
	}}}, nil
}

func (s *server) SystemStat(context.Context, *emptypb.Empty) (*machine.SystemStatResponse, error) {
	defer s.lock()()
	return &machine.SystemStatResponse{Messages: []*machine.SystemStat{{
		Metadata: s.meta(), BootTime: uint64(s.n.bootTime.Unix()), //nolint:gosec // a boot time after 1970
	}}}, nil
}

func (s *server) Upgrade(ctx context.Context, req *machine.UpgradeRequest) (*machine.UpgradeResponse, error) {
	version, err := InstallerVersion(req.GetImage())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	n := s.n
	unlock := s.lock()
	if n.state != stateUp {
		unlock()
		return nil, status.Error(codes.FailedPrecondition, errRebootInProgress.Error())
	}
	if n.spec.Role == ControlPlane && !req.GetForce() {
		if err := n.c.validateForUpgrade(); err != nil {
			unlock()
			return nil, fmt.Errorf("error validating etcd for upgrade: %w", err)
		}
	}
	pull := n.spec.UpgradeDelay
	unlock()
	if pull > 0 {
		// Talos pulls the installer image inside the call, with the
		// call's context: a caller that gives up stops the pull.
		select {
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-time.After(pull):
		}
	}
	defer s.lock()()
	if n.state != stateUp { // it went down during the pull
		return nil, status.Error(codes.FailedPrecondition, errRebootInProgress.Error())
	}
	down := n.spec.RebootLatency
	if req.GetStage() {
		down *= 2
	}
	n.scheduleReboot("upgrade", version, down)
	return &machine.UpgradeResponse{Messages: []*machine.Upgrade{{
		Metadata: s.meta(), Ack: "Upgrade request received", ActorId: fmt.Sprintf("fake-%d", len(n.c.events)),
	}}}, nil
}

// ImagePull pulls nothing: the image is there at once (its event says
// which, in which namespace).
func (s *server) ImagePull(context.Context, *machine.ImagePullRequest) (*machine.ImagePullResponse, error) {
	defer s.lock()()
	return &machine.ImagePullResponse{Messages: []*machine.ImagePull{{Metadata: s.meta()}}}, nil
}

func (s *server) Reboot(context.Context, *machine.RebootRequest) (*machine.RebootResponse, error) {
	defer s.lock()()
	n := s.n
	if n.state != stateUp {
		return nil, status.Error(codes.FailedPrecondition, errRebootInProgress.Error())
	}
	n.scheduleReboot("reboot", n.version, n.spec.RebootLatency)
	return &machine.RebootResponse{Messages: []*machine.Reboot{{Metadata: s.meta(), ActorId: fmt.Sprintf("fake-%d", len(n.c.events))}}}, nil
}

// Reset wipes the node: it leaves etcd's member list untouched (not
// graceful) and comes back in maintenance mode, which the fake models as
// a node that no longer answers the cluster's API.
func (s *server) Reset(_ context.Context, in *machine.ResetRequest) (*machine.ResetResponse, error) {
	defer s.lock()()
	n := s.n
	if n.state != stateUp {
		return nil, status.Error(codes.FailedPrecondition, errRebootInProgress.Error())
	}
	var wiped []string
	for _, p := range in.GetSystemPartitionsToWipe() {
		wiped = append(wiped, p.GetLabel())
	}
	n.c.record(n.spec.IP, "wipe", strings.Join(wiped, ","))
	n.state = stateStopping
	if len(wiped) == 1 && wiped[0] == "EPHEMERAL" && in.GetReboot() {
		// Talos's disaster recovery of a control plane: its etcd data
		// goes with EPHEMERAL, its machine config (STATE) stays, and it
		// reboots into the cluster, its etcd waiting for a bootstrap once
		// no control plane holds etcd data any more.
		if m := n.c.memberOf(n); m != nil {
			n.c.remove(m)
		}
		n.etcdRunning, n.etcdUnhealthy = false, false // its broken member's data is gone
		// So are an uploaded snapshot (/var/lib/etcd.snapshot) and what a
		// failed recovery left: both on EPHEMERAL.
		n.recovery, n.etcdFailure, n.etcdDataLeft = nil, "", false
		delete(n.formatted, constants.EphemeralPartitionLabel) // formatted anew at the next boot
		if len(n.c.members) == 0 {
			n.c.bootstrapped = false
			n.c.etcd.keys, n.c.etcd.revision = map[string]string{}, 0
			if n.c.realEtcd != nil {
				n.c.realEtcd.Stop()
			}
		}
		n.timer = time.AfterFunc(n.spec.ShutdownDelay, func() { n.goDown("reset", n.spec.RebootLatency, true) })
		return &machine.ResetResponse{Messages: []*machine.Reset{{Metadata: s.meta(), ActorId: fmt.Sprintf("fake-%d", len(n.c.events))}}}, nil
	}
	// Down once the call has answered (goDown takes the lock held here).
	n.timer = time.AfterFunc(n.spec.ShutdownDelay, func() { n.goDown("reset", 0, false) })
	return &machine.ResetResponse{Messages: []*machine.Reset{{Metadata: s.meta(), ActorId: fmt.Sprintf("fake-%d", len(n.c.events))}}}, nil
}

func (s *server) ApplyConfiguration(_ context.Context, in *machine.ApplyConfigurationRequest) (*machine.ApplyConfigurationResponse, error) {
	unlock := s.lock()
	n := s.n
	if n.state != stateUp {
		unlock()
		return nil, status.Error(codes.FailedPrecondition, errRebootInProgress.Error())
	}
	onApply, needsReboot, maintenance := n.c.onApply, n.c.needsReboot, n.maintenance
	unlock()
	if maintenance && !in.GetDryRun() {
		if _, err := s.applyInMaintenance(in.GetData()); err != nil {
			return nil, err
		}
		if onApply != nil {
			onApply(n.spec.IP, in.GetData())
		}
		return &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{Metadata: s.meta(), Mode: machine.ApplyConfigurationRequest_REBOOT,
			ModeDetails: "Applied configuration with a reboot"}}}, nil
	}
	if in.GetDryRun() {
		// What Talos answers in mode auto: the mode it would apply in.
		mode := machine.ApplyConfigurationRequest_NO_REBOOT
		if needsReboot != nil && needsReboot(n.spec.IP, in.GetData()) {
			mode = machine.ApplyConfigurationRequest_REBOOT
		}
		s.n.c.Record(n.spec.IP, "dry-run", mode.String())
		return &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{Metadata: s.meta(), Mode: mode}}}, nil
	}
	// The tests' stand-in configs are not all whole machine configs: a
	// config that does not load mounts nothing.
	mounts, _ := provisionVolumes(in.GetData(), n.spec.Disks)
	func() {
		defer s.lock()()
		n.mounts = mounts
		n.provisionEncryption(loadConfig(in.GetData()))
	}()
	if onApply != nil {
		onApply(n.spec.IP, in.GetData())
	}
	return &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{Metadata: s.meta(), Mode: in.GetMode()}}}, nil
}

func (s *server) ServiceList(context.Context, *emptypb.Empty) (*machine.ServiceListResponse, error) {
	defer s.lock()()
	n := s.n
	booting := time.Now().Before(n.healthyAt)
	var out []*machine.ServiceInfo
	for _, id := range n.spec.Services {
		if id == "etcd" && n.etcdState == "-" {
			continue
		}
		info := &machine.ServiceInfo{Id: id, State: "Running", Health: &machine.ServiceHealth{Healthy: true}}
		switch {
		case withoutHealthCheck[id]:
			info.Health = &machine.ServiceHealth{Unknown: true}
		case n.state == stateStopping && (id == "etcd" || id == "kubelet"):
			info.State, info.Health = "Stopping", &machine.ServiceHealth{Unknown: true}
		case booting && id != "apid":
			info.State, info.Health = "Starting", &machine.ServiceHealth{Unknown: true}
		case id == "etcd" && n.etcdState != "":
			info.State, info.Health = n.etcdState, &machine.ServiceHealth{Unknown: true}
		case id == "etcd" && n.etcdFailure != "":
			// A recovery whose restore failed: Talos's service runner
			// leaves the service Failed with the pre stage's error.
			info.State, info.Health = "Failed", &machine.ServiceHealth{Unknown: true}
			info.Events = &machine.ServiceEvents{Events: []*machine.ServiceEvent{{Msg: n.etcdFailure, State: "Failed"}}}
		case id == "etcd" && !n.etcdRunning && n.spec.Role == ControlPlane && !n.c.bootstrapped:
			// Talos's etcd service waits in its pre-state for a bootstrap
			// (or a recovery) on a control plane of a cluster without one.
			info.State, info.Health = "Preparing", &machine.ServiceHealth{Unknown: true}
		case id == "etcd" && !n.etcdRunning:
			info.State, info.Health = "Finished", &machine.ServiceHealth{Unknown: true}
		case id == "etcd" && !n.c.healthy(n.c.memberOf(n)):
			info.Health = &machine.ServiceHealth{LastMessage: "context deadline exceeded"}
		}
		if p, ok := n.svcProblem[id]; ok && info.State == "Running" && !info.Health.GetUnknown() {
			info.Health = &machine.ServiceHealth{LastMessage: p}
		}
		out = append(out, info)
	}
	return &machine.ServiceListResponse{Messages: []*machine.ServiceList{{Metadata: s.meta(), Services: out}}}, nil
}

// onControlPlane is Talos's refusal of etcd calls on workers.
func (s *server) onControlPlane(api string) error {
	if s.n.spec.Role != ControlPlane {
		return status.Errorf(codes.Unimplemented, "%s is only available on control plane nodes", api)
	}
	return nil
}

func (s *server) EtcdMemberList(_ context.Context, req *machine.EtcdMemberListRequest) (*machine.EtcdMemberListResponse, error) {
	if err := s.onControlPlane("member list"); err != nil {
		return nil, err
	}
	defer s.lock()()
	n := s.n
	self := n.c.memberOf(n)
	switch {
	case self == nil || !n.etcdRunning || n.state != stateUp:
		return nil, errEtcdNotRunning
	case !req.GetQueryLocal() && !n.c.healthy(self):
		return nil, errNoLeader
	}
	var members []*machine.EtcdMember
	for _, m := range n.c.members {
		ip := m.node.spec.IP
		members = append(members, &machine.EtcdMember{
			Id: m.id, Hostname: m.node.spec.Hostname, IsLearner: m.learner,
			PeerUrls:   []string{"https://" + net.JoinHostPort(ip, "2380")},
			ClientUrls: []string{"https://" + net.JoinHostPort(ip, "2379")},
		})
	}
	return &machine.EtcdMemberListResponse{Messages: []*machine.EtcdMembers{{Metadata: s.meta(), Members: members}}}, nil
}

func (s *server) EtcdStatus(context.Context, *emptypb.Empty) (*machine.EtcdStatusResponse, error) {
	if err := s.onControlPlane("etcd status"); err != nil {
		return nil, err
	}
	defer s.lock()()
	n := s.n
	self := n.c.memberOf(n)
	if self == nil || !n.etcdRunning || n.state != stateUp {
		return nil, errEtcdNotRunning
	}
	st := &machine.EtcdMemberStatus{
		MemberId: self.id, ProtocolVersion: "3.6.0", StorageVersion: "3.6.0",
		DbSize: 4 << 20, DbSizeInUse: 2 << 20, RaftIndex: 1000, RaftTerm: 2, RaftAppliedIndex: 1000,
		IsLearner: self.learner,
	}
	if n.c.healthy(self) {
		st.Leader = n.c.leader()
	} else {
		st.Errors = []string{errNoLeader.Error()}
	}
	return &machine.EtcdStatusResponse{Messages: []*machine.EtcdStatus{{Metadata: s.meta(), MemberStatus: st}}}, nil
}

func (s *server) EtcdLeaveCluster(ctx context.Context, _ *machine.EtcdLeaveClusterRequest) (*machine.EtcdLeaveClusterResponse, error) {
	if err := s.onControlPlane("etcd leave"); err != nil {
		return nil, err
	}
	n := s.n
	start := time.Now()
	for {
		n.c.mu.Lock()
		self := n.c.memberOf(n)
		if self == nil {
			n.c.mu.Unlock()
			return nil, fmt.Errorf("failed to leave cluster: %w", errMemberNotFound)
		}
		err := n.c.mayRemove(self, nil)
		if err == nil {
			n.c.remove(self)
			n.c.mu.Unlock()
			return &machine.EtcdLeaveClusterResponse{Messages: []*machine.EtcdLeaveCluster{{Metadata: s.meta()}}}, nil
		}
		retry := n.c.leaveRetry
		n.c.mu.Unlock()
		// Talos retries "unhealthy cluster" (a member not yet connected
		// to a quorum), nothing else.
		if !errors.Is(err, errUnhealthyCluster) || time.Since(start) >= retry {
			return nil, fmt.Errorf("failed to leave cluster: failed to remove member %d: %w", self.id, err)
		}
		select {
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (s *server) EtcdRemoveMemberByID(_ context.Context, req *machine.EtcdRemoveMemberByIDRequest) (*machine.EtcdRemoveMemberByIDResponse, error) {
	if err := s.onControlPlane("etcd remove member"); err != nil {
		return nil, err
	}
	defer s.lock()()
	n := s.n
	self := n.c.memberOf(n)
	switch {
	case self == nil || !n.etcdRunning:
		return nil, errEtcdNotRunning
	case !n.c.healthy(self):
		return nil, errNoLeader
	}
	x := n.c.memberByID(req.GetMemberId())
	if x == nil {
		return nil, fmt.Errorf("failed to remove member %d: %w", req.GetMemberId(), errMemberNotFound)
	}
	if err := n.c.mayRemove(x, self); err != nil {
		return nil, fmt.Errorf("failed to remove member %d: %w", x.id, err)
	}
	n.c.remove(x)
	return &machine.EtcdRemoveMemberByIDResponse{Messages: []*machine.EtcdRemoveMemberByID{{Metadata: s.meta()}}}, nil
}

// Kubeconfig sends the cluster's admin kubeconfig as Talos does: one chunk
// of a tar.gz holding the file kubeconfig, the gzip stream closed but not
// the tar archive. A worker refuses it as Talos does.
func (s *server) Kubeconfig(_ *emptypb.Empty, stream grpc.ServerStreamingServer[common.Data]) error {
	if err := s.onControlPlane("kubeconfig"); err != nil {
		return err
	}
	s.n.c.mu.Lock()
	data := bytes.Clone(s.n.c.kubeconfig)
	cl := s.n.c.kubeCluster
	if s.n.c.kubeconfigSet {
		cl = nil
	}
	s.n.c.mu.Unlock()
	if cl != nil {
		var err error
		if data, err = adminKubeconfig(cl); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
	}

	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "kubeconfig", Size: int64(len(data)), ModTime: time.Now(), Mode: 0o600})
	if err == nil {
		_, err = tw.Write(data)
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return stream.Send(&common.Data{Bytes: buf.Bytes()})
}
