package talosapitest_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
)

const reboot = 30 * time.Millisecond

func connect(t *testing.T, c *talosapitest.Cluster) *talosapi.Client {
	t.Helper()
	crt, key := c.AdminCert()
	cl, err := talosapi.New(talosapi.Credentials{CA: c.CA(), Cert: crt, Key: key}, talosapi.WithAddress(c.Address))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestInstallerVersion(t *testing.T) {
	t.Parallel()
	for image, want := range map[string]string{
		"ghcr.io/siderolabs/installer:v1.12.1":                                   "v1.12.1",
		"factory.talos.dev/metal-installer/0123abcd:v1.12.4":                     "v1.12.4",
		"localhost:5000/installer:v1.13.0-alpha.1":                               "v1.13.0-alpha.1",
		"ghcr.io/siderolabs/installer:v1.12.1@sha256:0123456789abcdef0123456789": "v1.12.1",
		"ghcr.io/siderolabs/installer":                                           "",
		"localhost:5000/installer":                                               "",
		"ghcr.io/siderolabs/installer:":                                          "",
	} {
		got, err := talosapitest.InstallerVersion(image)
		if want == "" {
			assert.Error(t, err, image)
			continue
		}
		require.NoError(t, err, image)
		assert.Equal(t, want, got, image)
	}
}

func TestTheMachineryClientTalksToIt(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(1, 0, "", reboot)...)
	ctx := ctxT(t)
	cl := machineryClient(t, ctx, c, "10.5.0.11")

	v, err := cl.Version(ctx)
	require.NoError(t, err)
	assert.Equal(t, talosapitest.DefaultVersion, v.GetMessages()[0].GetVersion().GetTag())
	assert.Equal(t, "cp-1", v.GetMessages()[0].GetMetadata().GetHostname())

	svcs, err := cl.ServiceList(ctx)
	require.NoError(t, err)
	var ids []string
	for _, s := range svcs.GetMessages()[0].GetServices() {
		ids = append(ids, s.GetId())
	}
	assert.Equal(t, []string{"apid", "containerd", "cri", "etcd", "kubelet", "machined", "syslogd", "trustd", "udevd"}, ids)

	// What the fake does not serve answers Unimplemented.
	_, err = cl.MachineClient.Hostname(ctx, &emptypb.Empty{})
	assert.Equal(t, codes.Unimplemented, status.Code(err))
	_, err = cl.EtcdForfeitLeadership(ctx, &machine.EtcdForfeitLeadershipRequest{})
	assert.Equal(t, codes.Unimplemented, status.Code(err))
}

// A node that is down keeps its port: every fake cluster has the same IPs
// and secrets, so a parallel test's node on the freed port would answer in
// its place (a restore test once saw a powered-off control plane answer).
// Its port refuses each connection until the node comes back.
func TestANodeThatIsDownKeepsItsPort(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(1, 0, "", reboot)...)
	ctx := ctxT(t)
	addr := c.Address("10.5.0.11")
	cl := machineryClient(t, ctx, c, "10.5.0.11")

	c.Node("10.5.0.11").PowerOff()
	_, err := net.Listen("tcp", addr)
	require.ErrorIs(t, err, syscall.EADDRINUSE, "the port is still the node's")
	_, err = cl.Version(ctx)
	assert.Equal(t, codes.Unavailable, status.Code(err))

	c.Node("10.5.0.11").PowerOn()
	require.Eventually(t, func() bool {
		_, err := cl.Version(ctx)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "the node answers on its port again")
}

// The machinery client's own Kubeconfig (what talosctl kubeconfig runs)
// unpacks the fake's answer: it is laid out as Talos sends it.
func TestTheMachineryClientGetsTheKubeconfig(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(1, 1, "", reboot)...)
	crt, key := c.AdminCert()
	tc, err := (talosapi.Credentials{CA: c.CA(), Cert: crt, Key: key}).TLSConfig()
	require.NoError(t, err)
	ctx := ctxT(t)
	dial := func(node string) *client.Client {
		cl, err := client.New(ctx, client.WithTLSConfig(tc.Clone()), client.WithEndpoints(c.Address(node)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = cl.Close() })
		return cl
	}

	kc, err := dial("10.5.0.11").Kubeconfig(ctx)
	require.NoError(t, err)
	assert.Equal(t, talosapitest.DefaultKubeconfig, string(kc))
	c.SetKubeconfig([]byte("kind: Config\n"))
	kc, err = dial("10.5.0.11").Kubeconfig(ctx)
	require.NoError(t, err)
	assert.Equal(t, "kind: Config\n", string(kc))

	_, err = dial("10.5.0.21").Kubeconfig(ctx)
	assert.Equal(t, codes.Unimplemented, status.Code(err))
	assert.ErrorContains(t, err, "kubeconfig is only available on control plane nodes")
}

func TestEventLogAndMaxDown(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(3, 1, "", 300*time.Millisecond)...)
	cl := connect(t, c)
	ctx := ctxT(t)

	// Two control planes rebooted at once: what MaxDown exists to catch.
	require.NoError(t, cl.Reboot(ctx, "10.5.0.11"))
	require.NoError(t, cl.Reboot(ctx, "10.5.0.12"))
	for _, n := range []string{"10.5.0.11", "10.5.0.12"} {
		// 10 s: 2 s was not always enough on a loaded machine; it returns
		// as soon as the node booted.
		require.Eventually(t, func() bool { return c.Node(n).Boots() == 1 }, 10*time.Second, time.Millisecond)
	}
	assert.Equal(t, 2, c.MaxDown(talosapitest.ControlPlane))
	assert.Equal(t, 0, c.MaxDown(talosapitest.Worker))

	c.Record("10.5.0.21", "vm.delete", "")
	perNode := map[string][]string{}
	var last talosapitest.Event
	for _, e := range c.Events("Reboot", "stopping", "down", "up", "vm.delete") {
		perNode[e.Node] = append(perNode[e.Node], e.Call+" "+e.Args)
		assert.False(t, e.Time.Before(last.Time), "in time order")
		last = e
	}
	for _, n := range []string{"10.5.0.11", "10.5.0.12"} {
		assert.Equal(t, []string{"Reboot mode=DEFAULT", "stopping reboot", "down reboot", "up v1.12.0"}, perNode[n], n)
	}
	assert.Equal(t, "vm.delete", last.Call)
	for i, e := range c.Events() {
		assert.Equal(t, i+1, e.Seq)
	}
}

func TestALeftControlPlaneJoinsAgainAfterAReboot(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(3, 0, "", reboot)...)
	cl := connect(t, c)
	ctx := ctxT(t)

	before, _ := c.Node("10.5.0.13").MemberID()
	require.NoError(t, cl.EtcdLeaveCluster(ctx, "10.5.0.13"))
	assert.Equal(t, []string{"cp-1", "cp-2"}, c.Members())
	_, err := cl.EtcdStatus(ctx, "10.5.0.13")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "etcd is not running on this node")

	require.NoError(t, cl.Reboot(ctx, "10.5.0.13"))
	require.Eventually(t, func() bool { return c.Node("10.5.0.13").Boots() == 1 }, 2*time.Second, time.Millisecond)
	assert.Equal(t, []string{"cp-1", "cp-2", "cp-3"}, c.Members())
	after, ok := c.Node("10.5.0.13").MemberID()
	require.True(t, ok)
	assert.NotEqual(t, before, after, "a new member")
	require.NoError(t, talosapi.EtcdQuorumSafe(ctx, cl, c.IPs(talosapitest.ControlPlane), "10.5.0.13"))
}

func TestServiceStatesThroughAReboot(t *testing.T) {
	t.Parallel()
	specs := talosapitest.Topology(1, 0, "", reboot)
	specs[0].ShutdownDelay = time.Second
	specs[0].ServiceDelay = time.Second
	c := talosapitest.Start(t, specs...)
	cl := connect(t, c)
	ctx := ctxT(t)
	state := func() map[string]string {
		svcs, err := cl.ServiceList(ctx, "10.5.0.11")
		if err != nil {
			return nil
		}
		out := map[string]string{}
		for _, s := range svcs {
			out[s.ID] = s.State
		}
		return out
	}

	require.NoError(t, cl.Reboot(ctx, "10.5.0.11"))
	st := state()
	assert.Equal(t, "Stopping", st["etcd"])
	assert.Equal(t, "Stopping", st["kubelet"])
	assert.Equal(t, "Running", st["apid"])
	require.Eventually(t, func() bool { return c.Node("10.5.0.11").Boots() == 1 }, 2*time.Second, time.Millisecond)
	st = state()
	assert.Equal(t, "Starting", st["etcd"])
	assert.Equal(t, "Running", st["apid"])
	require.Eventually(t, func() bool { return state()["etcd"] == "Running" }, 2*time.Second, 5*time.Millisecond)
}

// The snapshot a control plane sends is in etcd's form, as the machinery
// client (what talosctl etcd snapshot runs) reads it: a body of whole
// 512-byte blocks (here JSON of the keys, padded), then its sha256.
func TestTheFakesSnapshotIsInEtcdsForm(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(1, 1, "", reboot)...)
	c.SetEtcdKeys(map[string]string{"/registry/a": "1", "/registry/b": "2"})
	crt, key := c.AdminCert()
	tc, err := (talosapi.Credentials{CA: c.CA(), Cert: crt, Key: key}).TLSConfig()
	require.NoError(t, err)
	ctx := ctxT(t)
	dial := func(node string) *client.Client {
		cl, err := client.New(ctx, client.WithTLSConfig(tc.Clone()), client.WithEndpoints(c.Address(node)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = cl.Close() })
		return cl
	}
	read := func(node string) ([]byte, error) {
		r, err := dial(node).EtcdSnapshot(ctx, &machine.EtcdSnapshotRequest{})
		if err != nil {
			return nil, err
		}
		defer func() { _ = r.Close() }()
		return io.ReadAll(r)
	}

	data, err := read("10.5.0.11")
	require.NoError(t, err)
	require.Equal(t, sha256.Size, len(data)%512)
	body, trailer := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	sum := sha256.Sum256(body)
	assert.Equal(t, sum[:], trailer)
	var contents struct {
		Cluster  string
		Revision int64
		Members  []string
		Keys     map[string]string
	}
	require.NoError(t, json.Unmarshal(body, &contents))
	assert.Equal(t, c.Identity(), contents.Cluster)
	assert.Equal(t, int64(2), contents.Revision)
	assert.Equal(t, []string{"cp-1"}, contents.Members)
	assert.Equal(t, c.EtcdKeys(), contents.Keys)
	again, err := read("10.5.0.11")
	require.NoError(t, err)
	assert.Equal(t, data, again, "deterministic")

	c.SetSnapshotStream(talosapitest.SnapshotStream{Corrupt: true, ChunkSize: 100})
	bad, err := read("10.5.0.11")
	require.NoError(t, err)
	require.Len(t, bad, len(data))
	assert.NotEqual(t, data, bad)
	assert.Equal(t, trailer, bad[len(bad)-sha256.Size:], "the trailer of the data before the flip")

	_, err = read("10.5.0.21")
	assert.Equal(t, codes.Unimplemented, status.Code(err))
	assert.Len(t, c.Events("EtcdSnapshot"), 4)
}

// EtcdRecover takes a snapshot that passes etcd's check and refuses
// others; Bootstrap restores it once.
func TestTheFakeRecoversEtcdOnce(t *testing.T) {
	t.Parallel()
	a := talosapitest.Start(t, talosapitest.Topology(1, 0, "", reboot)...)
	a.SetEtcdKeys(map[string]string{"/registry/a": "1"})
	b := talosapitest.StartFresh(t, talosapitest.Topology(2, 0, "", reboot)...)
	crt, key := a.AdminCert()
	tc, err := (talosapi.Credentials{CA: a.CA(), Cert: crt, Key: key}).TLSConfig()
	require.NoError(t, err)
	ctx := ctxT(t)
	dial := func(c *talosapitest.Cluster, node string) *client.Client {
		cl, err := client.New(ctx, client.WithTLSConfig(tc.Clone()), client.WithEndpoints(c.Address(node)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = cl.Close() })
		return cl
	}
	r, err := dial(a, "10.5.0.11").EtcdSnapshot(ctx, &machine.EtcdSnapshotRequest{})
	require.NoError(t, err)
	data, err := io.ReadAll(r)
	require.NoError(t, err)
	require.NoError(t, r.Close())

	cp1 := dial(b, "10.5.0.11")
	corrupt := bytes.Clone(data)
	corrupt[10] ^= 1
	_, err = cp1.EtcdRecover(ctx, bytes.NewReader(corrupt))
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.ErrorContains(t, err, "error verifying snapshot: expected sha256 ")
	_, err = cp1.EtcdRecover(ctx, bytes.NewReader(data[:len(data)-1]))
	assert.ErrorContains(t, err, "snapshot missing hash but --skip-hash-check=false")
	assert.False(t, b.Node("10.5.0.11").HasRecoverySnapshot())

	// A control plane down at the bootstrap joins when it comes up; before
	// the bootstrap, a reboot makes no member.
	b.Node("10.5.0.12").PowerOff()
	b.Node("10.5.0.12").PowerOn()
	assert.Empty(t, b.Members())
	b.Node("10.5.0.12").PowerOff()

	_, err = cp1.EtcdRecover(ctx, bytes.NewReader(data))
	require.NoError(t, err)
	require.NoError(t, cp1.Bootstrap(ctx, &machine.BootstrapRequest{RecoverEtcd: true}))
	assert.Equal(t, map[string]string{"/registry/a": "1"}, b.EtcdKeys())
	assert.Equal(t, []string{"cp-1"}, b.Members())
	b.Node("10.5.0.12").PowerOn()
	assert.Equal(t, []string{"cp-1", "cp-2"}, b.Members())

	err = cp1.Bootstrap(ctx, &machine.BootstrapRequest{})
	assert.Equal(t, codes.AlreadyExists, status.Code(err))
	assert.ErrorContains(t, err, "etcd data directory is not empty")
	// A cluster of Start was bootstrapped.
	err = dial(a, "10.5.0.11").Bootstrap(ctx, &machine.BootstrapRequest{})
	assert.Equal(t, codes.AlreadyExists, status.Code(err))
	assert.Equal(t, map[string]string{"/registry/a": "1"}, a.EtcdKeys())
}
