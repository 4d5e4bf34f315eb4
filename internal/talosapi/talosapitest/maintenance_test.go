package talosapitest_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"regexp"
	"testing"
	"time"

	sx509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
)

// A node booted from the ISO answers without a client certificate, and
// only what a machine without a config can do; its first config installs
// it, after which it serves with the config's OS CA and refuses a client
// without a certificate, and its Kubeconfig is an admin kubeconfig of the
// config's Kubernetes CA for the config's endpoint.
func TestAMachineInMaintenanceTakesItsConfig(t *testing.T) {
	t.Parallel()
	c := talosapitest.StartFresh(t, talosapitest.NodeSpec{IP: "10.5.0.11", Hostname: "cp-1", Role: talosapitest.ControlPlane, Maintenance: true, RebootLatency: reboot})
	ctx := ctxT(t)
	insecure := maintenanceClient(ctx, t, c, "10.5.0.11")
	_, err := insecure.Disks(ctx)
	require.NoError(t, err, "Disks answers in maintenance mode")
	_, err = insecure.ServiceList(ctx)
	assert.Equal(t, codes.Unimplemented, status.Code(err), "nothing a configured node does")

	b := talosapitest.Bundle(t)
	data := talosapitest.ControlPlaneConfig(t, b)
	_, err = insecure.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: data, Mode: machine.ApplyConfigurationRequest_AUTO})
	require.NoError(t, err)

	n := c.Node("10.5.0.11")
	assert.False(t, n.InMaintenance())
	require.Eventually(t, func() bool { return n.Up() && n.Boots() == 1 }, 5*time.Second, 10*time.Millisecond, "installed and rebooted")
	_, err = insecure.Disks(ctx)
	require.Error(t, err, "no client certificate, no answer")

	api := connect(t, c) // the bundle's admin certificate: the config's OS CA
	_, err = api.ServiceList(ctx, "10.5.0.11")
	require.NoError(t, err)
	kc, err := api.Kubeconfig(ctx, "10.5.0.11")
	require.NoError(t, err)
	assert.Contains(t, string(kc), "server: https://10.5.0.10:6443")
	m := regexp.MustCompile(`client-certificate-data: (\S+)`).FindSubmatch(kc)
	require.NotNil(t, m)
	der, err := base64.StdEncoding.DecodeString(string(m[1]))
	require.NoError(t, err)
	block, _ := pem.Decode(der)
	require.NotNil(t, block)
	crt, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	assert.Equal(t, []string{"system:masters"}, crt.Subject.Organization)
	kubeCA, err := sx509.NewCertificateAuthorityFromCertificateAndKey(b.Certs.K8s)
	require.NoError(t, err)
	require.NoError(t, crt.CheckSignatureFrom(kubeCA.Crt), "issued by the config's Kubernetes CA")
}

// A new machine in place of an installed, bootstrapped one (its VM
// destroyed and made again) is in maintenance mode again: it answers
// without a client certificate, runs no etcd, and takes a config; the
// cluster, its only control plane gone, is as before its bootstrap.
func TestANewMachineWaitsForItsConfigAgain(t *testing.T) {
	t.Parallel()
	c := talosapitest.StartFresh(t, talosapitest.NodeSpec{IP: "10.5.0.11", Hostname: "cp-1", Role: talosapitest.ControlPlane, Maintenance: true, RebootLatency: reboot})
	ctx := ctxT(t)
	insecure := maintenanceClient(ctx, t, c, "10.5.0.11")
	data := talosapitest.ControlPlaneConfig(t, talosapitest.Bundle(t))
	apply := func() {
		t.Helper()
		_, err := insecure.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: data, Mode: machine.ApplyConfigurationRequest_AUTO})
		require.NoError(t, err)
	}
	apply()
	n := c.Node("10.5.0.11")
	require.Eventually(t, func() bool { return n.Up() && n.Boots() == 1 }, 5*time.Second, 10*time.Millisecond, "installed and rebooted")
	require.NoError(t, connect(t, c).Bootstrap(ctx, "10.5.0.11", false))
	require.True(t, c.Bootstrapped())

	c.NewMachine("10.5.0.11")
	assert.True(t, n.InMaintenance())
	assert.False(t, c.Bootstrapped(), "its etcd went with its disk")
	assert.Empty(t, c.Members())
	_, err := insecure.Disks(ctx)
	require.NoError(t, err, "answers without a client certificate again")
	booted := n.Boots()
	apply()
	require.Eventually(t, func() bool { return n.Up() && n.Boots() == booted+1 }, 5*time.Second, 10*time.Millisecond, "installed again")
	assert.False(t, n.InMaintenance())
}

// maintenanceClient is a Talos client of a node in maintenance mode, as
// the Talos provider connects to one: no client certificate, the node's
// self-signed one not verified.
func maintenanceClient(ctx context.Context, t *testing.T, c *talosapitest.Cluster, ip string) *client.Client {
	t.Helper()
	insecure, err := client.New(ctx, client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}), //nolint:gosec // maintenance mode, as the Talos provider connects
		client.WithEndpoints(c.Address(ip)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = insecure.Close() })
	return insecure
}
