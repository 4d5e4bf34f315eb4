package pveapi_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/pveapi"
	"github.com/fluodata/talos-pulumi/internal/pveapi/pveapitest"
)

func fakeClient(t *testing.T, s *pveapitest.Server) *pveapi.Client {
	t.Helper()
	c, err := pveapi.New(s.URL, pveapitest.TokenID, pveapitest.TokenSecret,
		pveapi.Options{HTTPClient: s.Client(), Backoff: time.Millisecond, CallTimeout: time.Second})
	require.NoError(t, err)
	return c
}

// A privilege granted on a path holds on the paths below it, as Proxmox's
// ACLs propagate; none holds elsewhere.
func TestPermissionsInheritFromParentPaths(t *testing.T) {
	t.Parallel()
	s := pveapitest.New(t, nil)
	s.ACLs = map[string][]string{"/vms": {"VM.Audit", "VM.PowerMgmt"}, "/storage/local": {"Datastore.AllocateTemplate"}}
	c := fakeClient(t, s)
	got, err := c.Permissions(t.Context(), "/vms/110")
	require.NoError(t, err)
	assert.Equal(t, map[string]bool{"VM.Audit": true, "VM.PowerMgmt": true}, got)
	got, err = c.Permissions(t.Context(), "/storage/local-lvm")
	require.NoError(t, err)
	assert.Empty(t, got, "/storage/local is not a parent of /storage/local-lvm")
}

func TestQueryURLMetadataSaysWhenTheNodeCannotConnect(t *testing.T) {
	t.Parallel()
	s := pveapitest.New(t, nil)
	s.Serve("https://factory.talos.dev/versions", 512)
	c := fakeClient(t, s)
	md, err := c.QueryURLMetadata(t.Context(), "pve", "https://factory.talos.dev/versions")
	require.NoError(t, err)
	assert.EqualValues(t, 512, md.Size)

	s.Unreachable = []string{"factory.talos.dev"}
	_, err = c.QueryURLMetadata(t.Context(), "pve", "https://factory.talos.dev/versions")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unable to have pve fetch https://factory.talos.dev/versions")
	assert.Contains(t, err.Error(), "Can't connect to factory.talos.dev:443")
}
