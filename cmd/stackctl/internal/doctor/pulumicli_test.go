package doctor_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
	"golang.org/x/mod/modfile"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/doctor"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// One minimum Pulumi CLI everywhere (issue 24): the Go SDK's version in
// go.mod, Pulumi.yaml's and the package's PulumiPlugin.yaml's
// requiredPulumiVersion (the CLI refuses older),
// what `make doctor` checks and what the README says.
func TestOneMinimumPulumiCLI(t *testing.T) {
	t.Parallel()
	root := stackstest.RepoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	mod, err := modfile.Parse("go.mod", raw, nil)
	require.NoError(t, err)
	sdk := ""
	for _, r := range mod.Require {
		if r.Mod.Path == "github.com/pulumi/pulumi/sdk/v3" {
			sdk = strings.TrimPrefix(r.Mod.Version, "v")
		}
	}
	require.NotEmpty(t, sdk)
	assert.Equal(t, sdk, doctor.MinPulumiCLI, "make doctor")

	raw, err = os.ReadFile(filepath.Join(root, "Pulumi.yaml"))
	require.NoError(t, err)
	var project struct {
		Required string `yaml:"requiredPulumiVersion"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &project))
	assert.Equal(t, ">="+sdk, project.Required, "Pulumi.yaml")
	raw, err = os.ReadFile(filepath.Join(root, "provider", "PulumiPlugin.yaml"))
	require.NoError(t, err)
	project.Required = ""
	require.NoError(t, yaml.Unmarshal(raw, &project))
	assert.Equal(t, ">="+sdk, project.Required, "the component package's PulumiPlugin.yaml")

	raw, err = os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	minor := regexp.MustCompile(`^\d+\.\d+`).FindString(sdk)
	assert.Contains(t, string(raw), "Pulumi CLI](https://www.pulumi.com/docs/install/) "+minor+" or newer", "README")

	// Every page that names a minimum CLI names this one.
	minimum := regexp.MustCompile(`\b3\.(\d{3})(\.\d+)? or newer`)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	examples, err := filepath.Glob(filepath.Join(root, "examples", "*", "README.md"))
	require.NoError(t, err)
	for _, page := range append(append(pages, examples...), filepath.Join(root, "README.md"), filepath.Join(root, "CONTRIBUTING.md")) {
		raw, err := os.ReadFile(page) //nolint:gosec // the repository's own pages
		require.NoError(t, err)
		for _, m := range minimum.FindAllStringSubmatch(string(raw), -1) {
			assert.Equal(t, minor, "3."+m[1], "%s says %q", page, m[0])
		}
	}
}
