package talosapi

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// ApidPort is the port of the Talos API on every node.
const ApidPort = constants.ApidPort

// Default per-call timeouts. Reads answer in milliseconds on a healthy
// node. Changes take longer: on a control plane node Talos checks every
// etcd member's health before it accepts an upgrade. An upgrade takes
// longest: Talos pulls the installer image (hundreds of megabytes) before
// it answers the call, minutes on a slow uplink, so it has a cap of its own
// that matches the rollout's bound of an upgrade's reboot.
const (
	DefaultReadTimeout    = 10 * time.Second
	DefaultChangeTimeout  = 60 * time.Second
	DefaultUpgradeTimeout = 15 * time.Minute
)

// Credentials are the cluster's Talos API client credentials, PEM-encoded:
// the OS CA (which signs every node's apid certificate) and a client
// certificate it issued, with its key.
type Credentials struct {
	CA, Cert, Key []byte
}

// CredentialsFromTalosconfig reads the credentials of the current context of
// a talosconfig (the YAML `talosctl gen config` writes). Its endpoints and
// nodes are not used: the Client connects to each node it is asked about.
func CredentialsFromTalosconfig(text string) (Credentials, error) {
	cfg, err := clientconfig.FromString(text)
	if err != nil {
		return Credentials{}, fmt.Errorf("unable to read talosconfig: %w", err)
	}
	cc, ok := cfg.Contexts[cfg.Context]
	if !ok || cc == nil {
		return Credentials{}, fmt.Errorf("unable to read talosconfig: its current context %q is not among its contexts", cfg.Context)
	}
	var c Credentials
	for _, f := range []struct {
		name string
		in   string
		out  *[]byte
	}{{"ca", cc.CA, &c.CA}, {"crt", cc.Crt, &c.Cert}, {"key", cc.Key, &c.Key}} {
		if f.in == "" {
			return Credentials{}, fmt.Errorf("unable to read talosconfig: context %q has no %s", cfg.Context, f.name)
		}
		if *f.out, err = base64.StdEncoding.DecodeString(f.in); err != nil {
			return Credentials{}, fmt.Errorf("unable to read talosconfig: context %q: %s is not base64: %w", cfg.Context, f.name, err)
		}
	}
	return c, c.check()
}

// CredentialsFromClientConfiguration takes the credentials as the Pulumi
// Talos provider's ClientConfiguration holds them (caCertificate,
// clientCertificate, clientKey of talos.machine.Secrets): base64 of PEM.
// Plain PEM is accepted as well.
func CredentialsFromClientConfiguration(caCertificate, clientCertificate, clientKey string) (Credentials, error) {
	var c Credentials
	for _, f := range []struct {
		name string
		in   string
		out  *[]byte
	}{{"caCertificate", caCertificate, &c.CA}, {"clientCertificate", clientCertificate, &c.Cert}, {"clientKey", clientKey, &c.Key}} {
		b, err := pemOrBase64(f.in)
		if err != nil {
			return Credentials{}, fmt.Errorf("unable to read client configuration: %s %w", f.name, err)
		}
		*f.out = b
	}
	return c, c.check()
}

func pemOrBase64(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("is empty")
	}
	if strings.HasPrefix(s, "-----BEGIN ") {
		return []byte(s + "\n"), nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("is neither PEM nor base64: %w", err)
	}
	if !strings.HasPrefix(strings.TrimSpace(string(b)), "-----BEGIN ") {
		return nil, errors.New("is base64, but not of PEM")
	}
	return b, nil
}

func (c Credentials) check() error {
	_, err := c.TLSConfig()
	return err
}

// TLSConfig is the mTLS configuration of a connection to a node: the node's
// certificate is verified against the CA, the client certificate is
// presented.
func (c Credentials) TLSConfig() (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.CA) {
		return nil, errors.New("unable to load the Talos CA: no PEM certificate in it")
	}
	cert, err := tls.X509KeyPair(c.Cert, c.Key)
	if err != nil {
		return nil, fmt.Errorf("unable to load the Talos client certificate: %w", err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// Option configures a Client.
type Option func(*Client)

// WithAddress sets how a node's name maps to the address of its Talos API
// (default: the node and port 50000). Tests point nodes at loopback ports.
func WithAddress(address func(node string) string) Option {
	return func(c *Client) { c.address = address }
}

// Address is the address of a Talos API given as a host or as host:port:
// the host and ApidPort when it has no port.
func Address(hostOrHostPort string) string {
	if _, _, err := net.SplitHostPort(hostOrHostPort); err == nil {
		return hostOrHostPort
	}
	return net.JoinHostPort(hostOrHostPort, strconv.Itoa(ApidPort))
}

// WithTimeouts sets the timeouts of one call: read for Version, BootTime,
// ServiceList, EtcdMemberList, EtcdStatus and Kubeconfig; change for the
// others but Upgrade (see WithUpgradeTimeout).
func WithTimeouts(read, change time.Duration) Option {
	return func(c *Client) { c.readTimeout, c.changeTimeout = read, change }
}

// WithUpgradeTimeout sets the timeout of an Upgrade call
// (DefaultUpgradeTimeout when not positive), which includes Talos's pull of the installer
// image; UpgradeOptions.Timeout overrides it for one call.
func WithUpgradeTimeout(d time.Duration) Option {
	return func(c *Client) { c.upgradeTimeout = d }
}

// WithDialOptions adds gRPC dial options, e.g. the machinery's
// client.WithDefaultGRPCDialOptions dialer that reads the proxy
// environment on every dial.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *Client) { c.dialOpts = append(c.dialOpts, opts...) }
}

// Client is the API over Talos's machinery client, one connection per node.
// It is safe for concurrent use. Close it when done.
type Client struct {
	tlsConfig                  *tls.Config
	address                    func(string) string
	readTimeout, changeTimeout time.Duration
	upgradeTimeout             time.Duration
	dialOpts                   []grpc.DialOption

	mu     sync.Mutex
	conns  map[string]*client.Client
	closed bool
}

var _ API = (*Client)(nil)

// New returns a Client with the cluster's credentials.
func New(creds Credentials, opts ...Option) (*Client, error) {
	tc, err := creds.TLSConfig()
	if err != nil {
		return nil, err
	}
	c := &Client{
		tlsConfig:      tc,
		address:        Address,
		readTimeout:    DefaultReadTimeout,
		changeTimeout:  DefaultChangeTimeout,
		upgradeTimeout: DefaultUpgradeTimeout,
		conns:          map[string]*client.Client{},
	}
	for _, o := range opts {
		o(c)
	}
	if c.upgradeTimeout <= 0 {
		c.upgradeTimeout = DefaultUpgradeTimeout
	}
	return c, nil
}

// NewFromTalosconfig returns a Client with the credentials of a
// talosconfig's current context.
func NewFromTalosconfig(talosconfig string, opts ...Option) (*Client, error) {
	creds, err := CredentialsFromTalosconfig(talosconfig)
	if err != nil {
		return nil, err
	}
	return New(creds, opts...)
}

// Close closes every connection.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var errs []error
	for node, tc := range c.conns {
		errs = append(errs, tc.Close())
		delete(c.conns, node)
	}
	return errors.Join(errs...)
}

// conn returns the node's connection, made on first use. grpc-go dials
// lazily and reconnects by itself, but with a backoff that grows to two
// minutes: call drops a connection whose node did not answer, so that the
// next call dials afresh and sees a node back from a reboot at once.
func (c *Client) conn(node string) (*client.Client, error) {
	if node == "" {
		return nil, errors.New("no node given")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("client closed")
	}
	if tc, ok := c.conns[node]; ok {
		return tc, nil
	}
	opts := []client.OptionFunc{
		client.WithTLSConfig(c.tlsConfig.Clone()),
		client.WithEndpoints(c.address(node)),
	}
	if len(c.dialOpts) > 0 {
		opts = append(opts, client.WithGRPCDialOptions(c.dialOpts...))
	}
	tc, err := client.New(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("unable to create a client for node %s: %w", node, err)
	}
	c.conns[node] = tc
	return tc, nil
}

func (c *Client) drop(node string, tc *client.Client) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conns[node] == tc {
		delete(c.conns, node)
		_ = tc.Close() //nolint:errcheck // a connection being thrown away
	}
}

// call runs f against the node's connection within timeout and classifies
// its error.
func (c *Client) call(ctx context.Context, node string, timeout time.Duration, f func(context.Context, *client.Client) error) error {
	tc, err := c.conn(node)
	if err != nil {
		return err
	}
	own := time.Now().Add(timeout)
	cctx, cancel := context.WithDeadline(ctx, own)
	defer cancel()
	err = f(cctx, tc)
	if err == nil {
		return nil
	}
	pd, ok := ctx.Deadline()
	callerBinds := ok && !pd.After(own)
	err = classify(ctx, err, timeout, callerBinds, tc.Conn().GetState() == connectivity.Ready)
	if errors.Is(err, ErrUnreachable) && brokenConnection(err.Error()) {
		// Was it the network, or a handshake the node refused after the
		// client thought it done (TLS 1.3 sends the verdict on the client
		// certificate after the client's Finished, and grpc-go may report
		// the broken pipe of its next write instead)?
		if perr := probeTLS(ctx, c.address(node), c.tlsConfig); perr != nil {
			err = &classifiedError{kind: ErrTLS, err: perr}
		}
	}
	if errors.Is(err, ErrUnreachable) || errors.Is(err, ErrTLS) || errors.Is(err, ErrTimeout) {
		c.drop(node, tc)
	}
	return err
}

// probeWait bounds the wait for the node's verdict on the client
// certificate in probeTLS: it comes half a round trip after the handshake.
const probeWait = 500 * time.Millisecond

// probeTLS connects to addr with the client's TLS configuration and waits
// briefly for the node to refuse the client certificate. It returns the
// TLS error, or nil: the node cannot be reached, or the handshake is fine.
func probeTLS(ctx context.Context, addr string, cfg *tls.Config) error {
	ctx, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	if host, _, err := net.SplitHostPort(addr); err == nil && cfg.ServerName == "" {
		cfg.ServerName = host
	}
	conn, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", addr)
	if err != nil {
		if isTLSFailure(err.Error()) {
			return err
		}
		return nil
	}
	defer conn.Close() //nolint:errcheck // a probe
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(d) //nolint:errcheck // a probe
	}
	// Read before writing anything: a write after the node closed the
	// connection would be answered with a reset that can discard its alert.
	var b [1]byte
	if _, err := conn.Read(b[:]); err != nil && isTLSFailure(err.Error()) {
		return err
	}
	return nil
}

// brokenConnection tells a connection that broke once made, as one the
// node closed after the handshake breaks, from one that could not be made.
func brokenConnection(msg string) bool {
	for _, m := range []string{"broken pipe", "connection reset", "EOF", "server preface"} {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

func isTLSFailure(msg string) bool {
	for _, m := range tlsMarkers {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// classifiedError keeps the original error (and its gRPC status) and adds
// the sentinel that says what kind of failure it is.
type classifiedError struct {
	kind, err error
	detail    string
}

func (e *classifiedError) Error() string {
	if e.detail != "" {
		return e.kind.Error() + " " + e.detail + ": " + e.err.Error()
	}
	return e.kind.Error() + ": " + e.err.Error()
}

func (e *classifiedError) Unwrap() []error { return []error{e.kind, e.err} }

// tlsMarkers are what grpc-go's connection errors say when the TLS
// handshake, rather than the network, failed: the server's certificate
// does not verify, or the server sent an alert about the client's.
var tlsMarkers = []string{"x509:", "remote error: tls:", "tls: failed to verify", "tls: first record", "tls: bad certificate"}

// classify tells the caller's cancellation or deadline (callerBinds: the
// caller's deadline came before the call's own), a node that does not
// answer, a TLS failure, a node that took the call but did not finish it in
// time (connected: the connection is up) and an API error apart.
func classify(parent context.Context, err error, timeout time.Duration, callerBinds, connected bool) error {
	if parent.Err() != nil {
		// The caller gave up (or its deadline passed): not the node's fault.
		return &classifiedError{kind: parent.Err(), err: err}
	}
	st, ok := status.FromError(err)
	if !ok {
		if errors.Is(err, context.DeadlineExceeded) {
			return &classifiedError{kind: ErrUnreachable, err: err, detail: "within " + timeout.String()}
		}
		return err
	}
	msg := st.Message()
	switch st.Code() {
	case codes.Unavailable:
		if isTLSFailure(msg) {
			return &classifiedError{kind: ErrTLS, err: err}
		}
		return &classifiedError{kind: ErrUnreachable, err: err}
	case codes.DeadlineExceeded:
		// The server enforces the deadline too, and its answer can come
		// just before the caller's context expires.
		if callerBinds {
			return &classifiedError{kind: context.DeadlineExceeded, err: err}
		}
		if connected {
			return &classifiedError{kind: ErrTimeout, err: err, detail: "(the node took the call and did not answer within " + timeout.String() + ")"}
		}
		return &classifiedError{kind: ErrUnreachable, err: err, detail: "within " + timeout.String()}
	case codes.Canceled:
		// Not the caller's cancellation: the connection closed under the call.
		return &classifiedError{kind: ErrUnreachable, err: err}
	}
	if strings.Contains(msg, "member not found") {
		return &classifiedError{kind: ErrMemberNotFound, err: err}
	}
	return err
}

// Version implements API.
func (c *Client) Version(ctx context.Context, node string) (string, error) {
	var tag string
	err := c.call(ctx, node, c.readTimeout, func(ctx context.Context, tc *client.Client) error {
		resp, err := tc.Version(ctx)
		if err != nil {
			return err
		}
		for _, m := range resp.GetMessages() {
			if t := m.GetVersion().GetTag(); t != "" {
				tag = t
				return nil
			}
		}
		return errors.New("the answer holds no version")
	})
	if err != nil {
		return "", fmt.Errorf("unable to get the Talos version of node %s: %w", node, err)
	}
	return tag, nil
}

// BootTime implements API, with the machine API's SystemStat (which the
// machinery client does not wrap).
func (c *Client) BootTime(ctx context.Context, node string) (time.Time, error) {
	var boot uint64
	err := c.call(ctx, node, c.readTimeout, func(ctx context.Context, tc *client.Client) error {
		resp, err := client.FilterMessages(tc.MachineClient.SystemStat(ctx, &emptypb.Empty{}))
		if err != nil {
			return err
		}
		for _, m := range resp.GetMessages() {
			if m.GetBootTime() != 0 {
				boot = m.GetBootTime()
				return nil
			}
		}
		return errors.New("the answer holds no boot time")
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("unable to get the boot time of node %s: %w", node, err)
	}
	return time.Unix(int64(boot), 0), nil //nolint:gosec // seconds since 1970 fit an int64
}

// Upgrade implements API. Preserve is always set: Talos 1.8 and newer
// ignore it (they always keep EPHEMERAL), older ones would otherwise wipe
// it and make a control plane leave etcd. The call lasts as long as Talos
// pulls the installer image, up to opts.Timeout (the client's upgrade
// timeout when zero).
func (c *Client) Upgrade(ctx context.Context, node, image string, opts UpgradeOptions) error {
	timeout := c.upgradeTimeout
	if opts.Timeout > 0 {
		timeout = opts.Timeout
	}
	err := c.call(ctx, node, timeout, func(ctx context.Context, tc *client.Client) error {
		// MachineService.Upgrade, not the LifecycleService that machinery
		// v1.13 prefers: that service is new in Talos v1.13, and the node
		// asked to upgrade runs the release before (v1.12 for a move to
		// v1.13), which does not serve it; v1.13 keeps this one, deprecated.
		_, err := tc.UpgradeWithOptions(ctx, //nolint:staticcheck // see above: older nodes lack LifecycleService
			client.WithUpgradeImage(image),
			client.WithUpgradeRebootMode(machine.UpgradeRequest_DEFAULT),
			client.WithUpgradePreserve(true),
			client.WithUpgradeStage(opts.Stage),
			client.WithUpgradeForce(opts.Force),
		)
		return err
	})
	if err != nil {
		return fmt.Errorf("unable to upgrade node %s to %s: %w", node, image, err)
	}
	return nil
}

// Reboot implements API.
func (c *Client) Reboot(ctx context.Context, node string) error {
	err := c.call(ctx, node, c.changeTimeout, func(ctx context.Context, tc *client.Client) error {
		return tc.Reboot(ctx)
	})
	if err != nil {
		return fmt.Errorf("unable to reboot node %s: %w", node, err)
	}
	return nil
}

// PullImage implements API. The pull may take as long as an upgrade's.
func (c *Client) PullImage(ctx context.Context, node, image string, system bool) error {
	ns := common.ContainerdNamespace_NS_CRI
	if system {
		ns = common.ContainerdNamespace_NS_SYSTEM
	}
	err := c.call(ctx, node, c.upgradeTimeout, func(ctx context.Context, tc *client.Client) error {
		return tc.ImagePull(ctx, ns, image) //nolint:staticcheck // upgrade-k8s's call in Talos 1.13 (removed in 1.18)
	})
	if err != nil {
		return fmt.Errorf("unable to pull %s on node %s: %w", image, node, err)
	}
	return nil
}

// ApplyDryRun implements API.
func (c *Client) ApplyDryRun(ctx context.Context, node string, config []byte) (bool, error) {
	reboot := false
	err := c.call(ctx, node, c.readTimeout, func(ctx context.Context, tc *client.Client) error {
		resp, err := tc.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: config, Mode: machine.ApplyConfigurationRequest_AUTO, DryRun: true})
		if err != nil {
			return err
		}
		for _, m := range resp.GetMessages() {
			reboot = reboot || m.GetMode() == machine.ApplyConfigurationRequest_REBOOT
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("unable to ask node %s what a config change needs: %w", node, err)
	}
	return reboot, nil
}

// Reset implements API.
func (c *Client) Reset(ctx context.Context, node string) error {
	err := c.call(ctx, node, c.changeTimeout, func(ctx context.Context, tc *client.Client) error {
		return tc.ResetGeneric(ctx, &machine.ResetRequest{
			Graceful: false, Reboot: true,
			SystemPartitionsToWipe: []*machine.ResetPartitionSpec{{Label: "STATE", Wipe: true}, {Label: "EPHEMERAL", Wipe: true}},
		})
	})
	if err != nil {
		return fmt.Errorf("unable to reset node %s: %w", node, err)
	}
	return nil
}

// ResetEphemeral wipes a control plane's EPHEMERAL partition (its etcd
// data, its pods' storage) and reboots it, keeping its machine config:
// the first step of Talos's disaster recovery of the control planes
// (`talosctl reset --graceful=false --reboot
// --system-labels-to-wipe=EPHEMERAL`). Not graceful: a control plane
// without etcd quorum cannot leave etcd.
func (c *Client) ResetEphemeral(ctx context.Context, node string) error {
	err := c.call(ctx, node, c.changeTimeout, func(ctx context.Context, tc *client.Client) error {
		return tc.ResetGeneric(ctx, &machine.ResetRequest{
			Graceful: false, Reboot: true,
			SystemPartitionsToWipe: []*machine.ResetPartitionSpec{{Label: "EPHEMERAL", Wipe: true}},
		})
	})
	if err != nil {
		return fmt.Errorf("unable to reset the EPHEMERAL partition of node %s: %w", node, err)
	}
	return nil
}

// ApplyConfiguration implements API.
func (c *Client) ApplyConfiguration(ctx context.Context, node string, config []byte) error {
	err := c.call(ctx, node, c.changeTimeout, func(ctx context.Context, tc *client.Client) error {
		_, err := tc.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: config, Mode: machine.ApplyConfigurationRequest_NO_REBOOT})
		return err
	})
	if err != nil {
		return fmt.Errorf("unable to apply a config to node %s: %w", node, err)
	}
	return nil
}

// ServiceList implements API.
func (c *Client) ServiceList(ctx context.Context, node string) ([]Service, error) {
	var out []Service
	err := c.call(ctx, node, c.readTimeout, func(ctx context.Context, tc *client.Client) error {
		resp, err := tc.ServiceList(ctx)
		if err != nil {
			return err
		}
		out = nil
		for _, m := range resp.GetMessages() {
			for _, s := range m.GetServices() {
				svc := Service{
					ID: s.GetId(), State: s.GetState(),
					Healthy: s.GetHealth().GetHealthy(), HealthUnknown: s.GetHealth() == nil || s.GetHealth().GetUnknown(),
					HealthMessage: s.GetHealth().GetLastMessage(),
				}
				if events := s.GetEvents().GetEvents(); len(events) > 0 {
					svc.LastEvent = events[len(events)-1].GetMsg()
				}
				out = append(out, svc)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("unable to list the services of node %s: %w", node, err)
	}
	return out, nil
}

// EtcdMemberList implements API. The list is etcd's linearizable one (not
// the node's local view), so it needs a quorum.
func (c *Client) EtcdMemberList(ctx context.Context, node string) ([]EtcdMember, error) {
	var out []EtcdMember
	err := c.call(ctx, node, c.readTimeout, func(ctx context.Context, tc *client.Client) error {
		resp, err := tc.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})
		if err != nil {
			return err
		}
		out = nil
		for _, m := range resp.GetMessages() {
			for _, e := range m.GetMembers() {
				out = append(out, EtcdMember{
					ID: e.GetId(), Hostname: e.GetHostname(),
					PeerURLs: e.GetPeerUrls(), ClientURLs: e.GetClientUrls(), Learner: e.GetIsLearner(),
				})
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("unable to list the etcd members from node %s: %w", node, err)
	}
	return out, nil
}

// EtcdStatus implements API.
func (c *Client) EtcdStatus(ctx context.Context, node string) (EtcdMemberStatus, error) {
	var out EtcdMemberStatus
	err := c.call(ctx, node, c.readTimeout, func(ctx context.Context, tc *client.Client) error {
		resp, err := tc.EtcdStatus(ctx)
		if err != nil {
			return err
		}
		for _, m := range resp.GetMessages() {
			if s := m.GetMemberStatus(); s != nil {
				out = EtcdMemberStatus{
					MemberID: s.GetMemberId(), Leader: s.GetLeader(), Learner: s.GetIsLearner(), Errors: s.GetErrors(),
					RaftIndex: s.GetRaftIndex(), RaftAppliedIndex: s.GetRaftAppliedIndex(),
				}
				return nil
			}
		}
		return errors.New("the answer holds no member status")
	})
	if err != nil {
		return EtcdMemberStatus{}, fmt.Errorf("unable to get the etcd status of node %s: %w", node, err)
	}
	return out, nil
}

// EtcdLeaveCluster implements API. Talos retries the removal for up to five
// minutes while etcd calls the cluster unhealthy, so on an unhealthy
// cluster this call runs into its timeout: check EtcdQuorumSafe first.
func (c *Client) EtcdLeaveCluster(ctx context.Context, node string) error {
	err := c.call(ctx, node, c.changeTimeout, func(ctx context.Context, tc *client.Client) error {
		return tc.EtcdLeaveCluster(ctx, &machine.EtcdLeaveClusterRequest{})
	})
	if err != nil {
		return fmt.Errorf("unable to make node %s leave etcd: %w", node, err)
	}
	return nil
}

// EtcdRemoveMemberByID implements API.
func (c *Client) EtcdRemoveMemberByID(ctx context.Context, node string, id uint64) error {
	err := c.call(ctx, node, c.changeTimeout, func(ctx context.Context, tc *client.Client) error {
		return tc.EtcdRemoveMemberByID(ctx, &machine.EtcdRemoveMemberByIDRequest{MemberId: id})
	})
	if err != nil {
		return fmt.Errorf("unable to remove etcd member %016x through node %s: %w", id, node, err)
	}
	return nil
}

// Bounds of what Kubeconfig reads: an admin kubeconfig is a few kilobytes.
const (
	// maxKubeconfig bounds the kubeconfig file.
	maxKubeconfig = 1 << 20
	// maxArchive bounds the archive it comes in, packed and unpacked.
	maxArchive = 2 * maxKubeconfig
)

// errArchiveTooLarge is the error of an archive beyond maxArchive.
var errArchiveTooLarge = fmt.Errorf("the answer is larger than %d bytes", maxArchive)

// Kubeconfig implements API. Talos sends the kubeconfig as a stream of
// chunks of a tar.gz holding one file, kubeconfig (its Copy protocol). The
// stream is read here rather than with the machinery client's Kubeconfig:
// that one reads it through ReadStream, which takes a deadline or a
// cancellation in the middle of the stream for its end, so a node that
// stops answering would give "EOF" instead of ErrUnreachable or
// ErrTimeout.
func (c *Client) Kubeconfig(ctx context.Context, node string) ([]byte, error) {
	var out []byte
	err := c.call(ctx, node, c.readTimeout, func(ctx context.Context, tc *client.Client) error {
		stream, err := tc.MachineClient.Kubeconfig(ctx, &emptypb.Empty{})
		if err != nil {
			return err
		}
		var archive bytes.Buffer
		for {
			d, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			if md := d.GetMetadata(); md.GetError() != "" {
				// An error the node reports inside the stream (as
				// apid does for a call it proxies).
				if st := status.FromProto(md.GetStatus()); st.Code() != codes.OK {
					return st.Err()
				}
				return errors.New(md.GetError())
			}
			if archive.Len()+len(d.GetBytes()) > maxArchive {
				return errArchiveTooLarge
			}
			archive.Write(d.GetBytes())
		}
		out, err = untarKubeconfig(archive.Bytes())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("unable to get the kubeconfig from node %s: %w", node, err)
	}
	return out, nil
}

// untarKubeconfig returns the file kubeconfig of the tar.gz Talos sends,
// having read the archive to its end (which checks the gzip checksum).
func untarKubeconfig(archive []byte) ([]byte, error) {
	if len(archive) == 0 {
		return nil, errors.New("the answer is empty")
	}
	zr, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		return nil, fmt.Errorf("the answer is not a tar.gz: %w", err)
	}
	unpacked := &boundedReader{r: zr, left: maxArchive}
	tr := tar.NewReader(unpacked)
	var out []byte
	found := false
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, badArchive(err)
		}
		if h.Typeflag != tar.TypeReg || path.Clean(h.Name) != "kubeconfig" {
			continue
		}
		if h.Size > maxKubeconfig {
			return nil, fmt.Errorf("the kubeconfig is larger than %d bytes", maxKubeconfig)
		}
		if out, err = io.ReadAll(tr); err != nil {
			return nil, badArchive(err)
		}
		found = true
	}
	// The tar reader stops at the end blocks of a closed archive, short
	// of the gzip trailer (Talos leaves its archive unclosed, and the tar
	// reader reads it to the end): read the rest, so that the gzip
	// checksum is checked.
	if _, err := io.Copy(io.Discard, unpacked); err != nil {
		return nil, badArchive(err)
	}
	if !found {
		return nil, errors.New("the answer holds no kubeconfig file")
	}
	return out, nil
}

func badArchive(err error) error {
	if errors.Is(err, errArchiveTooLarge) {
		return fmt.Errorf("the answer unpacks to more than %d bytes", maxArchive)
	}
	return fmt.Errorf("the answer is not a valid tar.gz: %w", err)
}

// boundedReader reads at most left bytes from r, and fails with
// errArchiveTooLarge when r has more.
type boundedReader struct {
	r    io.Reader
	left int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// Whether r has more: a read of one byte tells.
		n, err := b.r.Read(make([]byte, 1))
		if n > 0 {
			return 0, errArchiveTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// Manifests implements API. It lists the node's k8s.Manifest resources as
// upstream's manifest sync does (go-kubernetes v0.2.36
// kubernetes/manifests/get.go:18-38, GetBootstrapManifests, called by
// talos v1.13.9 pkg/cluster/kubernetes/talos_managed.go:483-497 with the
// first node of the call): every object of every resource, in list order.
func (c *Client) Manifests(ctx context.Context, node string) ([]map[string]any, error) {
	var out []map[string]any
	err := c.call(ctx, node, c.readTimeout, func(ctx context.Context, tc *client.Client) error {
		items, err := safe.StateList[*k8s.Manifest](ctx, tc.COSI, resource.NewMetadata(k8s.ControlPlaneNamespaceName, k8s.ManifestType, "", resource.VersionUndefined))
		if err != nil {
			return err
		}
		out = out[:0]
		for m := range items.All() {
			for _, o := range m.TypedSpec().Items {
				out = append(out, o.Object)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("unable to read the bootstrap manifests of node %s: %w", node, err)
	}
	return out, nil
}
