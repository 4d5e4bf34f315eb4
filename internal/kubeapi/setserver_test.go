package kubeapi_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/kubeapi"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest"
)

// A kubeconfig naming an address this machine cannot reach works once its
// server is set to one it can: the API answers through it, with the
// kubeconfig's own CA and credentials.
func TestSetServerPointsTheKubeconfigElsewhere(t *testing.T) {
	t.Parallel()
	s := kubeapitest.Start(t)
	s.SetVersion("v1.35.4")
	cert, key := s.AdminCert()
	unreachable := kubeapitest.Kubeconfig("https://127.0.0.2:1/", s.CA(), cert, key)

	kc, err := kubeapi.SetServer(unreachable, s.URL())
	require.NoError(t, err)
	assert.Contains(t, string(kc), "server: "+s.URL())
	assert.NotContains(t, string(kc), "127.0.0.2")
	c, err := kubeapi.New(kc)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	v, err := c.ServerVersion(ctxT(t))
	require.NoError(t, err)
	assert.Equal(t, "v1.35.4", v)

	_, err = kubeapi.SetServer([]byte("current-context: x\n"), s.URL())
	assert.ErrorContains(t, err, "unable to read the kubeconfig")
}
