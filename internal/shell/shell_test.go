package shell_test

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/shell"
)

// sh must read every quoted value back byte for byte.
func TestQuoteRoundTripsThroughSh(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"", "plain", "it's", `a "b" $HOME $(id) ` + "`id`", "new\nline", "back\\slash", "'''"} {
		out, err := exec.Command("sh", "-c", "printf %s "+shell.Quote(v)).Output()
		require.NoError(t, err, v)
		assert.Equal(t, v, string(out))
	}
}
