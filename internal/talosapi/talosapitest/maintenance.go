package talosapitest

import (
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	sx509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/api/storage"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	mtype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// NodeSpec.Maintenance starts a node as Talos's maintenance mode serves it
// (talos v1.13.9): self-signed TLS, no client certificate, and only
// ApplyConfiguration, Version and Disks. The first config applied installs and
// reboots it into a configured node. The cluster adopts the OS CA of the first
// control plane config (a worker's has no key), so a worker comes back only
// after one; a config of another CA is refused.

// maintenanceCalls are what the fake answers in maintenance mode.
var maintenanceCalls = map[string]bool{"ApplyConfiguration": true, "Version": true, "Disks": true}

// maintenanceTLS is the self-signed, no-client-certificate TLS of a node
// in maintenance mode.
func maintenanceTLS(ip string) (*tls.Config, error) {
	ca, err := sx509.NewSelfSignedCertificateAuthority(sx509.ECDSA(true))
	if err != nil {
		return nil, err
	}
	kp, err := sx509.NewKeyPair(ca,
		sx509.IPAddresses([]net.IP{net.ParseIP(ip), net.ParseIP("127.0.0.1")}),
		sx509.NotAfter(time.Now().Add(24*time.Hour)),
		sx509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}),
	)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{*kp.Certificate}, ClientAuth: tls.NoClientCert, MinVersion: tls.VersionTLS13}, nil
}

// serverTLS is the TLS of a configured node: a certificate of the
// cluster's OS CA, clients verified against it (c.mu held).
func (c *Cluster) serverTLS(s NodeSpec) (*tls.Config, error) {
	kp, err := sx509.NewKeyPair(c.ca,
		sx509.CommonName(s.Hostname),
		sx509.IPAddresses([]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(s.IP)}),
		sx509.DNSNames([]string{s.Hostname}),
		sx509.NotBefore(time.Now().Add(-time.Hour)),
		sx509.NotAfter(time.Now().Add(24*time.Hour)),
		sx509.KeyUsage(stdx509.KeyUsageDigitalSignature),
		sx509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}),
	)
	if err != nil {
		return nil, err
	}
	pool := stdx509.NewCertPool()
	pool.AddCert(c.ca.Crt)
	return &tls.Config{
		Certificates: []tls.Certificate{*kp.Certificate},
		ClientCAs:    pool, ClientAuth: tls.RequireAndVerifyClientCert,
		MinVersion: tls.VersionTLS13,
	}, nil
}

// InMaintenance reports whether the node still waits for its config.
func (n *Node) InMaintenance() bool {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return n.maintenance
}

// applyInMaintenance takes a node's first config: the OS CA is checked
// (or adopted, from a control plane's), and the node installs and reboots
// into it.
func (s *server) applyInMaintenance(data []byte) (*emptypb.Empty, error) {
	cfg, err := configloader.NewFromBytes(data)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "failed to parse config: %v", err)
	}
	osCA := cfg.Machine().Security().IssuingCA()
	if osCA == nil || len(osCA.Crt) == 0 {
		return nil, status.Error(codes.InvalidArgument, "config has no machine.ca")
	}
	n := s.n
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	if n.c.adopted == nil && len(osCA.Key) > 0 {
		ca, err := sx509.NewCertificateAuthorityFromCertificateAndKey(osCA)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "machine.ca: %v", err)
		}
		n.c.adopted, n.c.ca = osCA.Crt, ca
		if cfg.Cluster().IssuingCA() != nil {
			n.c.kubeCluster = cfg.Cluster()
		}
	}
	if n.c.adopted != nil && string(n.c.adopted) != string(osCA.Crt) {
		return nil, status.Error(codes.InvalidArgument, "machine.ca is not the cluster's")
	}
	n.maintenance = false
	n.installed = true
	n.provisionEncryption(cfg)
	// Talos installs to disk, then reboots into the config.
	n.scheduleReboot("install", n.version, n.spec.RebootLatency)
	return &emptypb.Empty{}, nil
}

// NewMachine replaces the machine at ip by a new one booted from the ISO,
// as when its VM is destroyed and made again: what its disks held (its
// config, its etcd member and data, an uploaded snapshot) is gone, and it
// waits in maintenance mode for its config, on the Talos version it ran.
// Once no control plane holds etcd data, the cluster is as before its
// bootstrap; once every machine is new, the next control plane config
// brings the OS CA.
func (c *Cluster) NewMachine(ip string) {
	n := c.Node(ip)
	if n == nil {
		c.t.Errorf("talosapitest: no node %s", ip)
		return
	}
	n.goDown("new machine", 0, false)
	tlsConfig, err := maintenanceTLS(ip)
	if err != nil {
		c.t.Errorf("talosapitest: maintenance certificate of %s: %v", ip, err)
		return
	}
	c.mu.Lock()
	if n.timer != nil {
		n.timer.Stop()
	}
	if m := c.memberOf(n); m != nil {
		c.remove(m)
	}
	n.etcdRunning, n.etcdUnhealthy = false, false
	n.recovery, n.etcdFailure, n.etcdDataLeft = nil, "", false
	n.maintenance, n.installed, n.tlsConfig = true, false, tlsConfig
	n.wipeVolumes()
	n.pending = n.version
	if len(c.members) == 0 && c.bootstrapped {
		c.bootstrapped = false
		c.etcd.keys, c.etcd.revision = map[string]string{}, 0
		if c.realEtcd != nil {
			c.realEtcd.Stop()
		}
	}
	if !slices.ContainsFunc(c.nodes, func(o *Node) bool { return o.installed }) {
		c.adopted = nil
	}
	gen := n.gen
	c.mu.Unlock()
	n.comeUp(gen)
}

// storageServer answers the storage service's Disks: one virtio disk.
type storageServer struct {
	storage.UnimplementedStorageServiceServer
	n *Node
}

func (s *storageServer) Disks(context.Context, *emptypb.Empty) (*storage.DisksResponse, error) {
	return &storage.DisksResponse{Messages: []*storage.Disks{{Disks: []*storage.Disk{
		{DeviceName: "/dev/sda", Model: "QEMU HARDDISK", Size: 20 << 30, Type: storage.Disk_HDD, BusPath: "/pci0000:00/0000:00:05.0/virtio2/host2/target2:0:0/2:0:0:0/"},
	}}}}, nil
}

// adminKubeconfig is the admin kubeconfig Talos's Kubeconfig call gives
// (talos v1.13.9, pkg/kubeconfig GenerateAdmin): a fresh client
// certificate of the cluster's Kubernetes CA with the admin kubeconfig's
// name, organization and lifetime, for the cluster endpoint, trusting the
// accepted CAs and the issuing one; laid out as client-go's clientcmd
// writes it.
func adminKubeconfig(cl config.ClusterConfig) ([]byte, error) {
	ca, err := sx509.NewCertificateAuthorityFromCertificateAndKey(cl.IssuingCA())
	if err != nil {
		return nil, fmt.Errorf("unable to load the Kubernetes CA: %w", err)
	}
	admin := cl.AdminKubeconfig()
	kp, err := sx509.NewKeyPair(ca,
		sx509.CommonName(admin.CommonName()),
		sx509.Organization(admin.CertOrganization()),
		sx509.NotBefore(time.Now().Add(-10*time.Second)),
		sx509.NotAfter(time.Now().Add(admin.CertLifetime())),
		sx509.KeyUsage(stdx509.KeyUsageDigitalSignature|stdx509.KeyUsageKeyEncipherment),
		sx509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}),
	)
	if err != nil {
		return nil, fmt.Errorf("unable to issue the admin certificate: %w", err)
	}
	pem := sx509.NewCertificateAndKeyFromKeyPair(kp)
	var cas []byte
	for _, a := range cl.AcceptedCAs() {
		cas = append(cas, a.Crt...)
	}
	cas = append(cas, cl.IssuingCA().Crt...)
	b64 := base64.StdEncoding.EncodeToString
	name := cl.Name()
	return fmt.Appendf(nil, `apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: %s
    server: %s
  name: %s
contexts:
- context:
    cluster: %s
    namespace: default
    user: admin@%s
  name: admin@%s
current-context: admin@%s
kind: Config
preferences: {}
users:
- name: admin@%s
  user:
    client-certificate-data: %s
    client-key-data: %s
`, b64(cas), cl.Endpoint().String(), name, name, name, name, name, name, b64(pem.Crt), b64(pem.Key)), nil
}

// ControlPlaneConfig is a control plane's machine config of the bundle's
// secrets, as the Talos provider sends it.
func ControlPlaneConfig(t testing.TB, b *secrets.Bundle) []byte {
	t.Helper()
	in, err := generate.NewInput("lab", "https://10.5.0.10:6443", "1.34.1", generate.WithSecretsBundle(b))
	if err != nil {
		t.Fatalf("talosapitest: config input: %v", err)
	}
	cfg, err := in.Config(mtype.TypeControlPlane)
	if err != nil {
		t.Fatalf("talosapitest: control plane config: %v", err)
	}
	data, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		t.Fatalf("talosapitest: encode the config: %v", err)
	}
	return data
}
