//go:build e2e

package rollout_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/kubeapi"
	"github.com/fluodata/talos-pulumi/internal/rollout"
	"github.com/fluodata/talos-pulumi/internal/testkit/e2etest"
)

// GoKubernetesVersion is the go-kubernetes release whose upgrade checks
// RemovedAPIs copies: Talos v1.13.9 requires v0.2.38, which the module
// proxy does not serve; v0.2.36's removedAPIResources are the same (its
// git tags compared). `make e2e-kube` downloads it.
const GoKubernetesVersion = "v0.2.36"

// RemovedAPIs are upstream's removedAPIResources, by upgrade, read from
// its source: talosctl upgrade-k8s refuses what the rollout refuses.
func TestRemovedAPIsAreUpstreams(t *testing.T) {
	t.Parallel()
	file := filepath.Join(e2etest.GoModCache(t), "github.com/siderolabs/go-kubernetes@"+GoKubernetesVersion, "kubernetes/upgrade/checks.go")
	f, err := os.Open(file)
	require.NoError(t, err, "go mod download github.com/siderolabs/go-kubernetes@%s", GoKubernetesVersion)
	defer func() { _ = f.Close() }()
	step := regexp.MustCompile(`^\s*"(\d+\.\d+->\d+\.\d+)": \{`)
	quoted := regexp.MustCompile(`^\s*"([^"]+)",`)
	upstream := map[string][]kubeapi.APIResource{}
	var at string
	inList := false
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		line := lines.Text()
		switch m := step.FindStringSubmatch(line); {
		case m != nil:
			at, inList = m[1], false
		case regexp.MustCompile(`removedAPIResources: \[\]string\{`).MatchString(line):
			inList = true
		case inList && regexp.MustCompile(`^\s*\},?$`).MatchString(line):
			inList = false
		case inList:
			if q := quoted.FindStringSubmatch(line); q != nil {
				upstream[at] = append(upstream[at], kubeapi.APIResource(q[1]))
			}
		}
	}
	require.NoError(t, lines.Err())
	require.NotEmpty(t, upstream, "no removedAPIResources found in %s: has its layout changed?", file)
	assert.Equal(t, upstream, rollout.RemovedAPIs)
}
