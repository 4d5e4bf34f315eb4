package driver_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/driver"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/exitcode"
)

// The CLI marks the whole nodes key secret (the example's rescue password
// is); the stack file tells that the password is in fact in plain text.
func TestDriverChecksEveryCredentialInTheStackFile(t *testing.T) {
	t.Parallel()
	h := newHarness(t, driver.OpUp)
	stackFile := "encryptionsalt: v1:abc\nconfig:\n  talos-cluster:nodes:\n    controlPlanes:\n      - rescue: {password: rescue-pw-Xq81}\n"
	require.NoError(t, os.WriteFile(filepath.Join(h.opts.WorkDir, "Pulumi.prod.yaml"), []byte(stackFile), 0o600))
	assert.Equal(t, exitcode.BadConfig, h.run(context.Background()), h.stderr.String())
	assert.Contains(t, h.summary(t).Error, "nodes.controlPlanes[0].rescue.password: is stored in plain text")
	assert.NotContains(t, h.stderr.String(), "rescue-pw-Xq81")

	// Stored encrypted, as `pulumi config set --secret --path` leaves it.
	h = newHarness(t, driver.OpUp)
	stackFile = "encryptionsalt: v1:abc\nconfig:\n  talos-cluster:nodes:\n    controlPlanes:\n      - rescue: {password: {secure: v1:xyz}}\n"
	require.NoError(t, os.WriteFile(filepath.Join(h.opts.WorkDir, "Pulumi.prod.yaml"), []byte(stackFile), 0o600))
	assert.Equal(t, exitcode.OK, h.run(context.Background()), h.stderr.String())
}
