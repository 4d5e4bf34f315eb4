package access_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/fluodata/talos-pulumi/internal/testkit/pkitest"
)

// The Talos provider talks to apid with Talos's machinery client (grpc-go,
// mTLS, target dns:///<ip>:50000). These tests run that client, in a
// process of its own like a provider plugin, with the session's
// environment, against a gRPC server that only the "Proxmox host" (the SSH
// test server) can reach at 10.10.0.10:50000.

const childEnv = "ACCESS_TALOS_CHILD"

// apid is a stand-in for a node's Talos API: it answers Version.
type apid struct {
	machine.UnimplementedMachineServiceServer
}

func (apid) Version(context.Context, *emptypb.Empty) (*machine.VersionResponse, error) {
	return &machine.VersionResponse{Messages: []*machine.Version{{
		Metadata: &common.Metadata{Hostname: "cp-0"},
		Version:  &machine.VersionInfo{Tag: "v1.12.4"},
	}}}, nil
}

// startAPID serves the Talos API with mTLS on loopback.
func startAPID(t *testing.T, p pkitest.PKI) string {
	t.Helper()
	cert, err := tls.X509KeyPair(p.ServerCert, p.ServerKey)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(p.CA))
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13,
	})))
	machine.RegisterMachineServiceServer(srv, apid{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return l.Addr().String()
}

// TestTalosClientChild is the provider-like process; it only runs when
// started by TestTalosClientReachesApidThroughTheProxy.
func TestTalosClientChild(t *testing.T) {
	mode := os.Getenv(childEnv)
	if mode == "" {
		t.Skip("started by TestTalosClientReachesApidThroughTheProxy")
	}
	cfg, err := clientconfig.Open(os.Getenv("TALOSCONFIG"))
	require.NoError(t, err)
	opts := []client.OptionFunc{client.WithConfig(cfg)}
	if mode == "dynamic-dialer" {
		// talosctl's own dialer, which reads the proxy variables per dial.
		opts = append(opts, client.WithDefaultGRPCDialOptions())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.New(ctx, opts...)
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	resp, err := c.Version(ctx)
	require.NoError(t, err)
	_, _ = os.Stdout.WriteString("TALOS_VERSION=" + resp.Messages[0].Version.Tag + "\n")
}

func TestTalosClientReachesApidThroughTheProxy(t *testing.T) {
	t.Parallel()
	const node = "10.10.0.10"
	p := pkitest.New(t, node)
	f := newFixture(t, map[string]string{node + ":50000": startAPID(t, p)})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := f.start(t, ctx)

	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
	talosconfig := &clientconfig.Config{Context: "homelab", Contexts: map[string]*clientconfig.Context{"homelab": {
		Endpoints: []string{node}, Nodes: []string{node},
		CA: b64(p.CA), Crt: b64(p.ClientCert), Key: b64(p.ClientKey),
	}}}
	path := filepath.Join(t.TempDir(), "talosconfig")
	require.NoError(t, talosconfig.Save(path))

	run := func(mode string, environ []string) (string, error) {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^TestTalosClientChild$", "-test.v") //nolint:gosec // the test binary itself
		cmd.Env = append(environ, childEnv+"="+mode, "TALOSCONFIG="+path)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, mode := range []string{"grpc-default", "dynamic-dialer"} {
		before := f.host.Forwarded()
		out, err := run(mode, s.Environ(os.Environ()))
		require.NoError(t, err, "%s:\n%s", mode, out)
		assert.Contains(t, out, "TALOS_VERSION=v1.12.4", mode)
		assert.Greater(t, f.host.Forwarded(), before, "%s: the connection went through SSH", mode)
	}

	// Without the proxy variables the node is unreachable from here: the
	// proxy is what carries the connection.
	var bare []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !strings.EqualFold(k, "https_proxy") {
			bare = append(bare, kv)
		}
	}
	ctxShort, cancelShort := context.WithTimeout(ctx, 40*time.Second)
	defer cancelShort()
	cmd := exec.CommandContext(ctxShort, os.Args[0], "-test.run", "^TestTalosClientChild$") //nolint:gosec // the test binary itself
	cmd.Env = append(bare, childEnv+"=grpc-default", "TALOSCONFIG="+path)
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "reached 10.10.0.10 without the proxy?\n%s", out)
	assert.NotContains(t, string(out), "TALOS_VERSION=")
}
