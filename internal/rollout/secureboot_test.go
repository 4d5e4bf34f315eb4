package rollout_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/rollout"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
)

// The check after a Secure Boot node's upgrade or apply passes on a node
// under Secure Boot whose STATE and EPHEMERAL are encrypted, and fails at
// once, saying why, on a node whose firmware has Secure Boot off, on a
// volume formatted before without encryption and on a config that asks
// for none: no wait for the timeout on what never changes.
func TestCheckSecureBoot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	specs := talosapitest.Topology(3, 1, "v1.13.9", 10*time.Millisecond)
	specs[0].SecureBoot, specs[1].SecureBoot = true, true
	c := talosapitest.Start(t, specs...)
	o := ops(t, c)
	o.Timing.Healthy = time.Minute // long: a fatal answer must not wait for it
	plain := talosapitest.ControlPlaneConfig(t, talosapitest.Bundle(t))
	encrypted := append(append([]byte{}, plain...), talosapitest.TPMVolumeConfigs...)

	require.NoError(t, o.API.ApplyConfiguration(ctx, "10.5.0.11", encrypted))
	require.NoError(t, o.CheckSecureBoot(ctx, cp("10.5.0.11", "cp-1"), rollout.SecureBootVolumes))

	start := time.Now()
	require.NoError(t, o.API.ApplyConfiguration(ctx, "10.5.0.12", plain))
	err := o.CheckSecureBoot(ctx, cp("10.5.0.12", "cp-2"), rollout.SecureBootVolumes)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "volume STATE (filesystem type mismatch: luks != xfs)")

	// Installed before Secure Boot was turned on: unencrypted, for good.
	worker := rollout.Node{Name: "worker-1", IP: "10.5.0.21", Role: rollout.Worker}
	c.Node("10.5.0.21").SetSecureBoot(true)
	require.NoError(t, o.API.ApplyConfiguration(ctx, "10.5.0.21", plain))
	err = o.CheckSecureBoot(ctx, worker, rollout.SecureBootVolumes)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "volume STATE is ready unencrypted")
	require.NoError(t, o.API.ApplyConfiguration(ctx, "10.5.0.21", encrypted))
	err = o.CheckSecureBoot(ctx, worker, rollout.SecureBootVolumes)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Talos never re-encrypts a volume")

	require.NoError(t, o.API.ApplyConfiguration(ctx, "10.5.0.13", encrypted))
	err = o.CheckSecureBoot(ctx, cp("10.5.0.13", "cp-3"), rollout.SecureBootVolumes)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "node cp-3 (10.5.0.13)")
	assert.Contains(t, err.Error(), "booted without Secure Boot")
	assert.Less(t, time.Since(start), 10*time.Second, "each failure at once")
}
