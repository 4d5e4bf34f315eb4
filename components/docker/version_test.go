package docker_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/docker"
)

// The plugin the resources ask for is the SDK's (go.mod's requirement):
// `pulumi install` of a program or of the package's provider installs the
// SDK's plugin version, and offline (the harness) no other one.
func TestThePluginIsTheSDKs(t *testing.T) {
	t.Parallel()
	for _, goMod := range []string{"../../go.mod", "../../provider/go.mod"} {
		b, err := os.ReadFile(goMod)
		require.NoError(t, err)
		m := regexp.MustCompile(`github\.com/pulumi/pulumi-docker/sdk/v4 v(\S+)`).FindSubmatch(b)
		require.NotNil(t, m, "%s requires the Docker SDK", goMod)
		assert.Equal(t, docker.PluginVersion, string(m[1]), goMod)
	}
}
