package talosapitest_test

import (
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
)

// A node reports its firmware's Secure Boot and the encryption of its
// volumes through the COSI API as Talos does: under Secure Boot, a config
// that seals STATE's and EPHEMERAL's keys to the TPM gets them encrypted;
// without it the key cannot be enrolled and the volume fails with Talos's
// message; a volume formatted before keeps its format, so a later config
// asking for encryption fails it; a new machine's disks take it.
func TestANodeReportsSecureBootAndItsEncryptedVolumes(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	c := talosapitest.StartFresh(t,
		talosapitest.NodeSpec{IP: "10.5.0.11", Hostname: "cp-1", Role: talosapitest.ControlPlane, Maintenance: true, RebootLatency: reboot, SecureBoot: true},
		talosapitest.NodeSpec{IP: "10.5.0.12", Hostname: "cp-2", Role: talosapitest.ControlPlane, Maintenance: true, RebootLatency: reboot},
	)
	b := talosapitest.Bundle(t)
	plain := talosapitest.ControlPlaneConfig(t, b)
	encrypted := append(append([]byte{}, plain...), talosapitest.TPMVolumeConfigs...)
	install := func(ip string, data []byte) {
		t.Helper()
		n := c.Node(ip)
		booted := n.Boots()
		_, err := maintenanceClient(ctx, t, c, ip).ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: data, Mode: machine.ApplyConfigurationRequest_AUTO})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return n.Up() && n.Boots() == booted+1 }, 5*time.Second, 10*time.Millisecond, "%s installed", ip)
	}
	install("10.5.0.11", encrypted)
	install("10.5.0.12", encrypted)
	api := connect(t, c)

	on, err := api.SecureBoot(ctx, "10.5.0.11")
	require.NoError(t, err)
	assert.True(t, on)
	vols, err := api.Volumes(ctx, "10.5.0.11")
	require.NoError(t, err)
	assert.Equal(t, []talosapi.Volume{
		{ID: "EPHEMERAL", Ready: true, Encryption: "luks2"},
		{ID: "STATE", Ready: true, Encryption: "luks2"},
	}, vols)

	on, err = api.SecureBoot(ctx, "10.5.0.12")
	require.NoError(t, err)
	assert.False(t, on)
	vols, err = api.Volumes(ctx, "10.5.0.12")
	require.NoError(t, err)
	require.Len(t, vols, 2)
	assert.False(t, vols[1].Ready)
	assert.Contains(t, vols[1].Error, "failed to enroll the TPM2 key, as SecureBoot is disabled")

	// Installed unencrypted, then asked for encryption: Talos never
	// re-encrypts.
	c.NewMachine("10.5.0.12")
	c.Node("10.5.0.12").SetSecureBoot(true)
	install("10.5.0.12", plain)
	vols, err = api.Volumes(ctx, "10.5.0.12")
	require.NoError(t, err)
	assert.Equal(t, talosapi.Volume{ID: "STATE", Ready: true, Encryption: "none"}, vols[1])
	require.NoError(t, api.ApplyConfiguration(ctx, "10.5.0.12", encrypted))
	vols, err = api.Volumes(ctx, "10.5.0.12")
	require.NoError(t, err)
	assert.Contains(t, vols[1].Error, "block dev type mismatch")

	// New disks take it.
	c.NewMachine("10.5.0.12")
	install("10.5.0.12", encrypted)
	vols, err = api.Volumes(ctx, "10.5.0.12")
	require.NoError(t, err)
	assert.Equal(t, talosapi.Volume{ID: "STATE", Ready: true, Encryption: "luks2"}, vols[1])
	assert.Equal(t, map[string]string{"EPHEMERAL": "luks2", "STATE": "luks2"}, c.Node("10.5.0.12").VolumeEncryption())
}
