package talosprovider_test

import (
	"crypto/md5"
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/blang/semver"
	p "github.com/pulumi/pulumi-go-provider"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/provider/talosprovider"
)

// VERSION is the one version source: a release's version is its text
// (what a build at the tag reports however it is made, the CLI's build of
// a git reference with -buildvcs=false included); a development version
// (DevSuffix) says which commit when Go stamped one. Each is semver, for
// the CLI and the SDKs.
func TestVersionComesFromVERSION(t *testing.T) {
	t.Parallel()
	settings := func(kv ...string) *debug.BuildInfo {
		info := &debug.BuildInfo{}
		for i := 0; i < len(kv); i += 2 {
			info.Settings = append(info.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return info
	}
	stamped := settings("vcs.revision", "938f0eefb1f6c9ea35adb564a2f9c4020fa15744", "vcs.modified", "false")
	for _, tc := range []struct {
		file string
		info *debug.BuildInfo
		want string
	}{
		{"0.2.0-dev\n", nil, "0.2.0-dev"},
		{"0.2.0-dev\n", settings(), "0.2.0-dev"},
		{"0.2.0-dev\n", stamped, "0.2.0-dev+938f0eefb1f6"},
		{"0.2.0-dev", settings("vcs.revision", "938f0eefb1f6c9ea35adb564a2f9c4020fa15744", "vcs.modified", "true"), "0.2.0-dev+938f0eefb1f6.dirty"},
		{"0.1.0\n", stamped, "0.1.0"},
		{"v1.2.3-rc.1\n", stamped, "1.2.3-rc.1"},
	} {
		got := talosprovider.VersionOf(tc.file, tc.info)
		assert.Equal(t, tc.want, got, "%q", tc.file)
		_, err := semver.Parse(got)
		assert.NoError(t, err, "%s is semver", got)
	}
	file := strings.TrimSpace(talosprovider.VersionFile)
	_, err := semver.Parse(file)
	require.NoError(t, err, "VERSION %q", file)
	assert.True(t, strings.HasPrefix(talosprovider.Version(), file), "the test binary's own version %q is VERSION's", talosprovider.Version())
}

// The package has one name however it is added: the schema's namespace,
// and the SDK names stated in its language sections are the ones the CLI
// derives from namespace and name (pkg/codegen/nodejs genNPMPackageMetadata,
// pkg/codegen/python PyPack), so that an SDK generated from a local path, a
// git reference or the binary is imported the same way. A git reference
// to a schema without a namespace took the owner of the URL; a local path
// gave @pulumi/<name>.
func TestSchemaNamesThePackageTheSameHoweverItIsAdded(t *testing.T) {
	t.Parallel()
	resp, err := server(t).GetSchema(p.GetSchemaRequest{})
	require.NoError(t, err)
	var spec struct {
		Name, Namespace, Publisher, Homepage, License, Repository, Version string
		Language                                                           map[string]map[string]any
	}
	require.NoError(t, json.Unmarshal([]byte(resp.Schema), &spec))
	assert.Equal(t, "talos-anywhere", spec.Name, "not talos-cluster: another package has that name")
	assert.Equal(t, "fluodata", spec.Namespace, "the owner of github.com/fluodata/talos-pulumi, which a git reference would give")
	for what, v := range map[string]string{"publisher": spec.Publisher, "homepage": spec.Homepage, "repository": spec.Repository} {
		assert.NotEmpty(t, v, what)
	}
	assert.Equal(t, "Apache-2.0", spec.License, "the licence of the repository's LICENSE")
	assert.Equal(t, talosprovider.TestServerVersion, spec.Version, "the test server's version")
	assert.Equal(t, "@"+spec.Namespace+"/"+spec.Name, spec.Language["nodejs"]["packageName"])
	assert.Equal(t, pyPack(spec.Namespace, spec.Name), spec.Language["python"]["packageName"])
	assert.Equal(t, strings.TrimPrefix(spec.Repository, "https://")+"/sdk/go/"+spec.Name, spec.Language["go"]["importBasePath"])
	assert.Equal(t, "@fluodata/talos-anywhere", talosprovider.NPMPackage)
}

// pyPack is the Python package name the CLI's Python generator derives
// (pkg/codegen/python PyPack, pulumi 3.259).
func pyPack(namespace, name string) string {
	return strings.ReplaceAll(namespace, "-", "_") + "_" + strings.ReplaceAll(name, "-", "_")
}

// The repository grants the licence the schema names: LICENSE is the
// Apache License 2.0 as apache.org publishes it (its text, unchanged).
func TestTheLicenceFileIsApache2(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile("../../LICENSE")
	require.NoError(t, err)
	assert.Equal(t, "3b83ef96387f14655fc854ddc3c6bd57", fmt.Sprintf("%x", md5.Sum(text)), //nolint:gosec // a checksum of a known text, not a secret
		"the unchanged text of https://www.apache.org/licenses/LICENSE-2.0.txt")
	assert.True(t, strings.HasPrefix(strings.TrimSpace(string(text)), "Apache License\n                           Version 2.0, January 2004"))
}
