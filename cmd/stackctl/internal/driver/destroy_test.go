package driver_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/driver"
)

func TestDestroyRunsProgramWhileAProvidersResourceIsHeld(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, state string
		want        bool
	}{
		{"export with a VM", `{"version":3,"deployment":{"resources":[{"urn":"a","custom":false},{"urn":"b","custom":true}]}}`, true},
		{"deployment with a VM", `{"resources":[{"urn":"b","custom":true}]}`, true},
		{"components only", `{"version":3,"deployment":{"resources":[{"urn":"a","custom":false}]}}`, false},
		{"nothing", `{"version":3,"deployment":{"manifest":{}}}`, false},
	} {
		got, err := driver.DestroyRunsProgram([]byte(c.state))
		require.NoError(t, err, c.name)
		assert.Equal(t, c.want, got, c.name)
	}
	_, err := driver.DestroyRunsProgram([]byte("error: no stack"))
	require.ErrorContains(t, err, "unable to read the stack's state")
}
