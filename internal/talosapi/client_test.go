package talosapi_test

import (
	"context"
	"encoding/base64"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
	"github.com/fluodata/talos-pulumi/internal/testkit/pkitest"
)

// Timings of the fake: reboots of tens of milliseconds, polls of a few.
const (
	reboot = 40 * time.Millisecond
	poll   = 2 * time.Millisecond
)

const (
	oldVersion = "v1.12.0"
	newVersion = "v1.12.1"
	newImage   = "ghcr.io/siderolabs/installer:" + newVersion
)

func adminCreds(c *talosapitest.Cluster) talosapi.Credentials {
	crt, key := c.AdminCert()
	return talosapi.Credentials{CA: c.CA(), Cert: crt, Key: key}
}

// newClient is a client of the fake with the admin credentials and short
// call timeouts, long enough for a TLS handshake on a loaded 2-core
// machine under -race (1 s was not: TestEtcdQuorumSafe timed out there).
func newClient(t *testing.T, c *talosapitest.Cluster, creds talosapi.Credentials) *talosapi.Client {
	t.Helper()
	cl, err := talosapi.New(creds, talosapi.WithAddress(c.Address), talosapi.WithTimeouts(4*time.Second, 4*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, cl.Close()) })
	return cl
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestCredentialsFromTalosconfig(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(1, 0, oldVersion, reboot)...)
	cl, err := talosapi.NewFromTalosconfig(c.Talosconfig(), talosapi.WithAddress(c.Address))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	v, err := cl.Version(ctxT(t), "10.5.0.11")
	require.NoError(t, err)
	assert.Equal(t, oldVersion, v)

	for name, tc := range map[string]struct{ text, want string }{
		"empty":          {"", "unable to read talosconfig"},
		"other context":  {"context: b\ncontexts:\n  a:\n    ca: eA==\n", `current context "b" is not among its contexts`},
		"no certificate": {"context: a\ncontexts:\n  a:\n    ca: " + base64.StdEncoding.EncodeToString(c.CA()) + "\n", `context "a" has no crt`},
		"not base64":     {"context: a\ncontexts:\n  a:\n    ca: '%%%'\n    crt: x\n    key: y\n", "ca is not base64"},
	} {
		_, err := talosapi.CredentialsFromTalosconfig(tc.text)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), tc.want, name)
	}
}

func TestCredentialsFromClientConfiguration(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(1, 0, oldVersion, reboot)...)
	crt, key := c.AdminCert()
	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

	// The provider's ClientConfiguration: base64 of PEM.
	creds, err := talosapi.CredentialsFromClientConfiguration(b64(c.CA()), b64(crt), b64(key))
	require.NoError(t, err)
	v, err := newClient(t, c, creds).Version(ctxT(t), "10.5.0.11")
	require.NoError(t, err)
	assert.Equal(t, oldVersion, v)

	// Plain PEM too.
	plain, err := talosapi.CredentialsFromClientConfiguration(string(c.CA()), string(crt), string(key))
	require.NoError(t, err)
	assert.Equal(t, creds, plain)

	for name, tc := range map[string]struct{ ca, crt, key, want string }{
		"empty key":         {b64(c.CA()), b64(crt), "", "clientKey is empty"},
		"garbage":           {"not base64!", b64(crt), b64(key), "caCertificate is neither PEM nor base64"},
		"base64 of non-PEM": {b64([]byte("hello")), b64(crt), b64(key), "caCertificate is base64, but not of PEM"},
		"key of another":    {b64(c.CA()), b64(crt), b64(pkitest.New(t, "127.0.0.1").ClientKey), "unable to load the Talos client certificate"},
	} {
		_, err := talosapi.CredentialsFromClientConfiguration(tc.ca, tc.crt, tc.key)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), tc.want, name)
		assert.NotContains(t, err.Error(), "PRIVATE KEY", name)
	}
}

func TestMTLSRefusesCertificatesOfAnotherCA(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(1, 0, oldVersion, reboot)...)
	other := pkitest.New(t, "127.0.0.1")
	ctx := ctxT(t)

	// A client certificate of another CA: the node refuses the handshake.
	_, err := newClient(t, c, talosapi.Credentials{CA: c.CA(), Cert: other.ClientCert, Key: other.ClientKey}).Version(ctx, "10.5.0.11")
	require.Error(t, err)
	assert.ErrorIs(t, err, talosapi.ErrTLS)
	assert.NotErrorIs(t, err, talosapi.ErrUnreachable)
	assert.Contains(t, err.Error(), "unable to get the Talos version of node 10.5.0.11")
	assert.Contains(t, err.Error(), "certificate")

	// Trusting another CA: the node's certificate does not verify.
	_, err = newClient(t, c, talosapi.Credentials{CA: other.CA, Cert: other.ClientCert, Key: other.ClientKey}).Version(ctx, "10.5.0.11")
	require.Error(t, err)
	assert.ErrorIs(t, err, talosapi.ErrTLS)
	assert.Contains(t, err.Error(), "x509")

	// The node never saw a call.
	assert.Empty(t, c.Events("Version"))
}

func TestRolesAreEnforced(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(1, 0, oldVersion, reboot)...)
	crt, key := c.ClientCert(role.Reader)
	cl := newClient(t, c, talosapi.Credentials{CA: c.CA(), Cert: crt, Key: key})
	ctx := ctxT(t)
	_, err := cl.Version(ctx, "10.5.0.11")
	require.NoError(t, err)
	err = cl.Upgrade(ctx, "10.5.0.11", newImage, talosapi.UpgradeOptions{})
	require.Error(t, err)
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "the gRPC status survives the wrapping")
	assert.NotErrorIs(t, err, talosapi.ErrUnreachable)
	assert.True(t, c.Node("10.5.0.11").Up(), "nothing happened")
}

func TestUnreachableNodes(t *testing.T) {
	t.Parallel()
	specs := talosapitest.Topology(2, 0, oldVersion, reboot)
	specs[1].Blackhole = true
	c := talosapitest.Start(t, specs...)
	cl, err := talosapi.New(adminCreds(c), talosapi.WithAddress(c.Address), talosapi.WithTimeouts(500*time.Millisecond, time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	ctx := ctxT(t)

	// Refused: at once.
	c.Node("10.5.0.11").PowerOff()
	start := time.Now()
	_, err = cl.Version(ctx, "10.5.0.11")
	require.Error(t, err)
	assert.ErrorIs(t, err, talosapi.ErrUnreachable)
	assert.Contains(t, err.Error(), "unable to get the Talos version of node 10.5.0.11: node does not answer")
	assert.Less(t, time.Since(start), 500*time.Millisecond)

	// Silent: the call's timeout.
	c.Node("10.5.0.12").PowerOff()
	start = time.Now()
	_, err = cl.ServiceList(ctx, "10.5.0.12")
	require.Error(t, err)
	assert.ErrorIs(t, err, talosapi.ErrUnreachable)
	assert.Contains(t, err.Error(), "node does not answer within 500ms")
	assert.GreaterOrEqual(t, time.Since(start), 500*time.Millisecond)

	// A machine that is gone altogether.
	_, err = cl.Version(ctx, "10.5.0.99")
	assert.ErrorIs(t, err, talosapi.ErrUnreachable)

	// Back: the next call reconnects at once (no gRPC backoff).
	c.Node("10.5.0.11").PowerOn()
	v, err := cl.Version(ctx, "10.5.0.11")
	require.NoError(t, err)
	assert.Equal(t, oldVersion, v)

	// The caller's own cancellation is not the node's fault.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = cl.Version(cctx, "10.5.0.12")
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, talosapi.ErrUnreachable)
}

func TestUpgradeThroughReboot(t *testing.T) {
	t.Parallel()
	specs := talosapitest.Topology(0, 1, oldVersion, reboot)
	specs[0].ShutdownDelay = 20 * time.Millisecond
	c := talosapitest.Start(t, specs...)
	cl := newClient(t, c, adminCreds(c))
	ctx := ctxT(t)
	const node = "10.5.0.21"

	v, err := cl.Version(ctx, node)
	require.NoError(t, err)
	require.Equal(t, oldVersion, v)
	booted, err := cl.BootTime(ctx, node)
	require.NoError(t, err)

	start := time.Now()
	require.NoError(t, cl.Upgrade(ctx, node, newImage, talosapi.UpgradeOptions{}))
	// Upgrade returns on acceptance: the node still runs the old version.
	v, err = cl.Version(ctx, node)
	require.NoError(t, err)
	assert.Equal(t, oldVersion, v)

	require.NoError(t, talosapi.WaitVersion(ctx, cl, node, newVersion, poll, 2*time.Second))
	assert.GreaterOrEqual(t, time.Since(start), reboot, "waited through the reboot")
	rebooted, err := talosapi.WaitRebooted(ctx, cl, node, booted, poll, time.Second)
	require.NoError(t, err)
	assert.True(t, rebooted.After(booted))
	assert.Equal(t, newVersion, c.Node(node).Version())

	var calls []string
	for _, e := range c.Events() {
		if e.Call != "Version" {
			calls = append(calls, e.Call)
		}
		if e.Call == "Upgrade" {
			assert.Equal(t, "image="+newImage+" stage=false force=false preserve=true mode=DEFAULT", e.Args)
		}
	}
	assert.Equal(t, []string{"SystemStat", "Upgrade", "stopping", "down", "up", "SystemStat"}, calls)
}

func TestUpgradeRefusals(t *testing.T) {
	t.Parallel()
	specs := talosapitest.Topology(3, 0, oldVersion, reboot)
	specs[1].EtcdUnhealthy = true
	c := talosapitest.Start(t, specs...)
	cl := newClient(t, c, adminCreds(c))
	ctx := ctxT(t)

	// Talos's own check on a control plane: every etcd member healthy.
	err := cl.Upgrade(ctx, "10.5.0.11", newImage, talosapi.UpgradeOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unable to upgrade node 10.5.0.11 to "+newImage+": ")
	assert.Contains(t, err.Error(), "all members must be healthy to perform an upgrade")
	assert.NotErrorIs(t, err, talosapi.ErrUnreachable)

	err = cl.Upgrade(ctx, "10.5.0.11", "ghcr.io/siderolabs/installer", talosapi.UpgradeOptions{Force: true})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))

	// Forced and staged: accepted, and two reboots' worth of downtime.
	start := time.Now()
	require.NoError(t, cl.Upgrade(ctx, "10.5.0.11", newImage, talosapi.UpgradeOptions{Force: true, Stage: true}))
	err = cl.Reboot(ctx, "10.5.0.11")
	assert.Error(t, err, "one reboot at a time")
	require.NoError(t, talosapi.WaitVersion(ctx, cl, "10.5.0.11", newVersion, poll, 2*time.Second))
	assert.GreaterOrEqual(t, time.Since(start), 2*reboot)
}

// Talos pulls the installer image inside the Upgrade call, before it
// answers: on a slow uplink the call takes minutes, longer than the cap of
// the other changes (60 s by default; 100 ms here, against a pull of
// 300 ms). The call waits for the pull (issue 23, item 7).
func TestUpgradeWaitsForTheImagePull(t *testing.T) {
	t.Parallel()
	const pull = 300 * time.Millisecond
	specs := talosapitest.Topology(0, 2, oldVersion, reboot)
	specs[0].UpgradeDelay, specs[1].UpgradeDelay = pull, pull
	c := talosapitest.Start(t, specs...)
	cl, err := talosapi.New(adminCreds(c), talosapi.WithAddress(c.Address), talosapi.WithTimeouts(time.Second, 100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	ctx := ctxT(t)

	start := time.Now()
	require.NoError(t, cl.Upgrade(ctx, "10.5.0.21", newImage, talosapi.UpgradeOptions{}))
	assert.GreaterOrEqual(t, time.Since(start), pull)
	require.NoError(t, talosapi.WaitVersion(ctx, cl, "10.5.0.21", newVersion, poll, 2*time.Second))

	// The upgrade's own cap still bounds the pull: the client's, or the
	// call's. A call given up stops the pull: the node does not upgrade.
	for name, tc := range map[string]struct {
		opts   []talosapi.Option
		call   talosapi.UpgradeOptions
		within string
	}{
		"the client's": {opts: []talosapi.Option{talosapi.WithUpgradeTimeout(150 * time.Millisecond)}, within: "within 150ms"},
		"the call's":   {call: talosapi.UpgradeOptions{Timeout: 120 * time.Millisecond}, within: "within 120ms"},
	} {
		capped, err := talosapi.New(adminCreds(c), append([]talosapi.Option{talosapi.WithAddress(c.Address)}, tc.opts...)...)
		require.NoError(t, err)
		err = capped.Upgrade(ctx, "10.5.0.22", newImage, tc.call)
		require.ErrorIs(t, err, talosapi.ErrTimeout, name)
		assert.Contains(t, err.Error(), "(the node took the call and did not answer "+tc.within+")", name)
		_ = capped.Close()
	}
	assert.True(t, c.Node("10.5.0.22").Up(), "no upgrade")
	assert.Equal(t, oldVersion, c.Node("10.5.0.22").Version())
}
