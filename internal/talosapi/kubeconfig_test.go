package talosapi_test

import (
	"slices"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
)

func TestKubeconfigFromAControlPlane(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(1, 1, oldVersion, reboot)...)
	cl := newClient(t, c, adminCreds(c))
	ctx := ctxT(t)

	// Until the test sets one: the fake's default.
	got, err := cl.Kubeconfig(ctx, "10.5.0.11")
	require.NoError(t, err)
	assert.Equal(t, talosapitest.DefaultKubeconfig, string(got))

	want := []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n  cluster:\n    server: https://10.5.0.10:6443\n")
	c.SetKubeconfig(want)
	set := slices.Clone(want)
	want[0] = 'X' // the fake keeps its own copy
	got, err = cl.Kubeconfig(ctx, "10.5.0.11")
	require.NoError(t, err)
	assert.Equal(t, set, got, "the plain YAML, unpacked")

	// A worker has none: Talos refuses the call.
	_, err = cl.Kubeconfig(ctx, "10.5.0.21")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unable to get the kubeconfig from node 10.5.0.21: ")
	assert.Contains(t, err.Error(), "kubeconfig is only available on control plane nodes")
	assert.Equal(t, codes.Unimplemented, status.Code(err), "the gRPC status survives the wrapping")
	assert.NotErrorIs(t, err, talosapi.ErrUnreachable)

	// Every call is in the log, the refusal with its error.
	var log []string
	for _, e := range c.Events("Kubeconfig") {
		log = append(log, e.Node+" "+e.Err)
	}
	assert.Equal(t, []string{
		"10.5.0.11 ", "10.5.0.11 ",
		"10.5.0.21 rpc error: code = Unimplemented desc = kubeconfig is only available on control plane nodes",
	}, log)
}

func TestKubeconfigNeedsTheAdminRole(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(1, 0, oldVersion, reboot)...)
	ctx := ctxT(t)
	for _, r := range []role.Role{role.Reader, role.Operator} {
		crt, key := c.ClientCert(r)
		cl := newClient(t, c, talosapi.Credentials{CA: c.CA(), Cert: crt, Key: key})
		_, err := cl.Version(ctx, "10.5.0.11")
		require.NoError(t, err, "%s may read the version", r)
		_, err = cl.Kubeconfig(ctx, "10.5.0.11")
		require.Error(t, err, r)
		assert.Equal(t, codes.PermissionDenied, status.Code(err), r)
		assert.Contains(t, err.Error(), "unable to get the kubeconfig from node 10.5.0.11: ", r)
		assert.NotErrorIs(t, err, talosapi.ErrUnreachable, r)
	}
	for _, e := range c.Events("Kubeconfig") {
		assert.Contains(t, e.Err, "PermissionDenied")
	}
	assert.Len(t, c.Events("Kubeconfig"), 2)
}

func TestKubeconfigOfAnUnreachableNode(t *testing.T) {
	t.Parallel()
	specs := talosapitest.Topology(2, 0, oldVersion, reboot)
	specs[1].Blackhole = true
	c := talosapitest.Start(t, specs...)
	const timeout = 300 * time.Millisecond
	cl, err := talosapi.New(adminCreds(c), talosapi.WithAddress(c.Address), talosapi.WithTimeouts(timeout, time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	ctx := ctxT(t)

	// Refused: at once.
	c.Node("10.5.0.11").PowerOff()
	start := time.Now()
	_, err = cl.Kubeconfig(ctx, "10.5.0.11")
	require.Error(t, err)
	assert.ErrorIs(t, err, talosapi.ErrUnreachable)
	assert.Contains(t, err.Error(), "unable to get the kubeconfig from node 10.5.0.11: node does not answer")
	assert.Less(t, time.Since(start), timeout)

	// Silent: the read timeout.
	c.Node("10.5.0.12").PowerOff()
	start = time.Now()
	_, err = cl.Kubeconfig(ctx, "10.5.0.12")
	require.Error(t, err)
	assert.ErrorIs(t, err, talosapi.ErrUnreachable)
	assert.Contains(t, err.Error(), "node does not answer within 300ms")
	assert.GreaterOrEqual(t, time.Since(start), timeout)

	// A machine that is gone altogether.
	_, err = cl.Kubeconfig(ctx, "10.5.0.99")
	assert.ErrorIs(t, err, talosapi.ErrUnreachable)

	// Back: the next call gets it.
	c.Node("10.5.0.11").PowerOn()
	got, err := cl.Kubeconfig(ctx, "10.5.0.11")
	require.NoError(t, err)
	assert.Equal(t, talosapitest.DefaultKubeconfig, string(got))
}

func TestApplyConfigurationReachesTheNode(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(1, 0, oldVersion, reboot)...)
	got := make(chan string, 1)
	c.OnApply(func(node string, config []byte) { got <- node + " " + string(config) })
	cl := newClient(t, c, adminCreds(c))
	require.NoError(t, cl.ApplyConfiguration(ctxT(t), "10.5.0.11", []byte("version: v1alpha1\n")))
	assert.Equal(t, "10.5.0.11 version: v1alpha1\n", <-got)
	events := c.Events("ApplyConfiguration")
	require.Len(t, events, 1)
	assert.Equal(t, "mode=NO_REBOOT bytes=18", events[0].Args, "never a reboot")

	crt, key := c.ClientCert(role.Reader)
	reader := newClient(t, c, talosapi.Credentials{CA: c.CA(), Cert: crt, Key: key})
	err := reader.ApplyConfiguration(ctxT(t), "10.5.0.11", []byte("version: v1alpha1\n"))
	require.Error(t, err, "os:reader may not apply a config")
	assert.Contains(t, err.Error(), "unable to apply a config to node 10.5.0.11")
}
