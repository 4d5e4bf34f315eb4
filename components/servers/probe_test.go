package servers_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/fluodata/talos-pulumi/components/servers"
	"github.com/fluodata/talos-pulumi/internal/testkit/pkitest"
)

// versionServer answers Version, like the Talos API.
type versionServer struct {
	machine.UnimplementedMachineServiceServer
}

func (versionServer) Version(context.Context, *emptypb.Empty) (*machine.VersionResponse, error) {
	return &machine.VersionResponse{Messages: []*machine.Version{{Version: &machine.VersionInfo{Tag: "v1.12.4"}}}}, nil
}

// serveTalosAPI serves a MachineService on loopback with p's server
// certificate; mTLS demands p's client certificate as a configured node's
// apid does, otherwise it takes anyone, as maintenance mode does. It
// returns the port.
func serveTalosAPI(t *testing.T, p pkitest.PKI, svc machine.MachineServiceServer, mTLS bool) int {
	t.Helper()
	cert, err := tls.X509KeyPair(p.ServerCert, p.ServerKey)
	require.NoError(t, err)
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
	if mTLS {
		pool := x509.NewCertPool()
		require.True(t, pool.AppendCertsFromPEM(p.CA))
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)))
	machine.RegisterMachineServiceServer(srv, svc)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return l.Addr().(*net.TCPAddr).Port
}

func TestTalosMaintenanceProbe(t *testing.T) {
	t.Parallel()
	p := pkitest.New(t, "127.0.0.1")
	ctx := t.Context()

	maintenance := serveTalosAPI(t, p, versionServer{}, false)
	assert.True(t, servers.TalosMaintenanceProbe(maintenance)(ctx, "127.0.0.1"), "answers without a client certificate: maintenance mode")

	noVersion := serveTalosAPI(t, p, machine.UnimplementedMachineServiceServer{}, false)
	assert.True(t, servers.TalosMaintenanceProbe(noVersion)(ctx, "127.0.0.1"), "an unauthenticated request reached the service")

	configured := serveTalosAPI(t, p, versionServer{}, true)
	assert.False(t, servers.TalosMaintenanceProbe(configured)(ctx, "127.0.0.1"), "a configured node demands the client certificate")

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	assert.False(t, servers.TalosMaintenanceProbe(closed)(ctx, "127.0.0.1"), "a rescue system: nothing on the port")

}
