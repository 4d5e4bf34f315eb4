package talosapi_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
)

// rollout is the shape of the rolling upgrade the helpers are for: one node
// at a time, control planes first, each behind the etcd gate, skipping the
// nodes already on the new version (a resumed rollout).
func rollout(ctx context.Context, api talosapi.API, cps, workers []string, wait time.Duration) error {
	const image, want = newImage, newVersion
	for _, node := range append(append([]string{}, cps...), workers...) {
		if v, err := api.Version(ctx, node); err == nil && v == want {
			continue
		}
		cp := slices.Contains(cps, node)
		services := []string{"apid", "kubelet"}
		if cp {
			services = append(services, "etcd")
			if err := talosapi.EtcdQuorumSafe(ctx, api, cps, node); err != nil {
				return err
			}
		}
		if err := api.Upgrade(ctx, node, image, talosapi.UpgradeOptions{}); err != nil {
			return err
		}
		if err := talosapi.WaitVersion(ctx, api, node, want, poll, wait); err != nil {
			return err
		}
		if err := talosapi.WaitHealthy(ctx, api, node, services, poll, wait); err != nil {
			return err
		}
		if cp {
			if err := talosapi.EtcdQuorumSafe(ctx, api, cps, ""); err != nil {
				return err
			}
		}
	}
	return nil
}

func upgradedNodes(c *talosapitest.Cluster) []string {
	var out []string
	for _, e := range c.Events("Upgrade") {
		if e.Err == "" {
			out = append(out, e.Node)
		}
	}
	return out
}

func TestRollingUpgradeOnTheFake(t *testing.T) {
	t.Parallel()
	const r = 50 * time.Millisecond
	c := talosapitest.Start(t, talosapitest.Topology(3, 2, oldVersion, r)...)
	cl := newClient(t, c, adminCreds(c))
	ctx := ctxT(t)
	cps, workers := c.IPs(talosapitest.ControlPlane), c.IPs(talosapitest.Worker)

	start := time.Now()
	require.NoError(t, rollout(ctx, cl, cps, workers, 20*r))
	took := time.Since(start)
	t.Logf("3+2 rollout with R=%s: %s, %.2f x the floor of 5R", r, took.Round(time.Millisecond), float64(took)/float64(5*r))

	assert.Equal(t, append(append([]string{}, cps...), workers...), upgradedNodes(c), "one at a time, control planes first")
	assert.Equal(t, 1, c.MaxDown(talosapitest.ControlPlane), "never two control planes out at once")
	assert.Equal(t, 1, c.MaxDown(""), "one node at a time")
	for _, n := range c.Nodes() {
		assert.Equal(t, newVersion, n.Version(), n.IP())
	}
	assert.GreaterOrEqual(t, took, 5*r)
}

func TestRollingUpgradeStopsAtAStuckNodeAndResumes(t *testing.T) {
	t.Parallel()
	specs := talosapitest.Topology(3, 1, oldVersion, reboot)
	specs[1].NeverReturns = true
	c := talosapitest.Start(t, specs...)
	cl := newClient(t, c, adminCreds(c))
	ctx := ctxT(t)
	cps, workers := c.IPs(talosapitest.ControlPlane), c.IPs(talosapitest.Worker)

	// The stuck node's wait times out; it must have seen the node down by
	// then, not only its answers before the reboot: 25 reboots, not 10, so
	// that it does on two loaded cores too (seen once: "last: node
	// 10.5.0.12 runs Talos v1.12.0" after 400 ms).
	err := rollout(ctx, cl, cps, workers, 25*reboot)
	require.ErrorIs(t, err, talosapi.ErrUnreachable)
	assert.Contains(t, err.Error(), "unable to wait for node 10.5.0.12 to run Talos v1.12.1: timed out after 1s")
	assert.Equal(t, []string{"10.5.0.11", "10.5.0.12"}, upgradedNodes(c), "nothing after the stuck node")

	// A second run refuses at the gate, naming the member that is down.
	err = rollout(ctx, cl, cps, workers, 10*reboot)
	require.ErrorIs(t, err, talosapi.ErrEtcdUnhealthy)
	assert.Contains(t, err.Error(), "member cp-2 (node 10.5.0.12, id ")

	// The operator brings the node back: the next run resumes where it
	// stopped.
	c.Node("10.5.0.12").SetNeverReturns(false)
	c.Node("10.5.0.12").PowerOn()
	require.NoError(t, rollout(ctx, cl, cps, workers, 10*reboot))
	assert.Equal(t, []string{"10.5.0.11", "10.5.0.12", "10.5.0.13", "10.5.0.21"}, upgradedNodes(c), "each node upgraded once")
	assert.Equal(t, 1, c.MaxDown(talosapitest.ControlPlane))
}

// BenchmarkRollingUpgrade measures a 3+2 rollout on the fake against its
// floor of five reboot latencies.
func BenchmarkRollingUpgrade(b *testing.B) {
	const r = 50 * time.Millisecond
	for b.Loop() {
		c := talosapitest.Start(b, talosapitest.Topology(3, 2, oldVersion, r)...)
		crt, key := c.AdminCert()
		cl, err := talosapi.New(talosapi.Credentials{CA: c.CA(), Cert: crt, Key: key}, talosapi.WithAddress(c.Address))
		require.NoError(b, err)
		start := time.Now()
		require.NoError(b, rollout(b.Context(), cl, c.IPs(talosapitest.ControlPlane), c.IPs(talosapitest.Worker), 20*r))
		b.ReportMetric(float64(time.Since(start))/float64(5*r), "x_floor")
		_ = cl.Close()
	}
}
