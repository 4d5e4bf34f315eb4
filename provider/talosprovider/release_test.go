package talosprovider_test

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/pkg/v3/resource/plugin"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/emptypb"
)

// `make release-provider` for this machine's platform only (the others
// cross-build the same way): the tarball has Pulumi's plugin-download name
// and holds the binary alone, which reports the tag's version to the engine
// (GetPluginInfo), so the -ldflags -X reached it. Without a tag the target
// refuses, naming what to do. The release's own build flags (-trimpath,
// CGO_ENABLED=0) are left out here: with them the first run compiles every
// dependency again (5 minutes and several GB of build cache on 2 cores);
// without, the build reuses the tests' cache and only links (-short skips
// it all).
func TestReleaseProviderTarball(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the provider: skipped with -short")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("SKIPPED: make is not on PATH")
	}
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	out := t.TempDir()
	platform := runtime.GOOS + "/" + runtime.GOARCH
	make := func(vars ...string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "make", append([]string{"--no-print-directory", "-C", root, "release-provider",
			"RELEASE_PLATFORMS=" + platform, "RELEASE_DIR=" + out, "RELEASE_GOENV=", "RELEASE_BUILDFLAGS="}, vars...)...)
		b, err := cmd.CombinedOutput()
		return string(b), err
	}

	msg, err := make("PROVIDER_VERSION=")
	require.Error(t, err, "no version, no release:\n%s", msg)
	assert.Contains(t, msg, "the commit has no tag vX.Y.Z; tag it or set PROVIDER_VERSION=vX.Y.Z")
	msg, err = make("PROVIDER_VERSION=1.2.3")
	require.Error(t, err, "a version without its v:\n%s", msg)
	assert.Contains(t, msg, "is not vX.Y.Z")

	msg, err = make("PROVIDER_VERSION=v9.8.7-test.1")
	require.NoError(t, err, msg)
	want := "pulumi-resource-talos-anywhere-v9.8.7-test.1-" + runtime.GOOS + "-" + runtime.GOARCH + ".tar.gz"
	entries, err := os.ReadDir(out)
	require.NoError(t, err)
	require.Len(t, entries, 1, "one tarball for one platform")
	require.Equal(t, want, entries[0].Name())

	bin := filepath.Join(t.TempDir(), "pulumi-resource-talos-anywhere")
	names := untar(t, filepath.Join(out, want), bin)
	assert.Equal(t, []string{"pulumi-resource-talos-anywhere"}, names, "the binary alone, at the top")

	// The binary serves the provider and says its version.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	port, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "the provider prints its port")
	conn, err := grpc.NewClient("127.0.0.1:"+strings.TrimSpace(port), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	info, err := pulumirpc.NewResourceProviderClient(conn).GetPluginInfo(ctx, &emptypb.Empty{})
	require.NoError(t, err)
	assert.Equal(t, "9.8.7-test.1", info.GetVersion(), "the version of the tag, without its v")
}

// untar writes the tarball's one file to dst and returns the names in it.
func untar(t *testing.T, tarball, dst string) []string {
	t.Helper()
	f, err := os.Open(tarball)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	gz, err := gzip.NewReader(f)
	require.NoError(t, err)
	tr := tar.NewReader(gz)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names
		}
		require.NoError(t, err)
		names = append(names, h.Name)
		require.Zero(t, h.Mode&0o111^0o111, "%s is executable", h.Name)
		w, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o700)
		require.NoError(t, err)
		_, err = io.Copy(w, tr) //nolint:gosec // our own tarball, one file
		require.NoError(t, err)
		require.NoError(t, w.Close())
	}
}

// The CLI refuses to run the plugin from source (pulumi package add of
// this folder or a git reference) with a CLI older than the components
// need, as its plugin loader reads PulumiPlugin.yaml (pkg/v3
// resource/plugin: LoadPluginProject, then ValidatePulumiVersionRange).
func TestPulumiPluginYAMLRequiresTheCLITheComponentsNeed(t *testing.T) {
	t.Parallel()
	proj, err := workspace.LoadPluginProject("../PulumiPlugin.yaml")
	require.NoError(t, err)
	assert.Equal(t, "go", proj.Runtime.Name())
	require.NoError(t, plugin.ValidatePulumiVersionRange(proj.RequiredPulumiVersion, "3.259.0"))
	require.NoError(t, plugin.ValidatePulumiVersionRange(proj.RequiredPulumiVersion, "3.260.1"))
	assert.Error(t, plugin.ValidatePulumiVersionRange(proj.RequiredPulumiVersion, "3.258.0"), "an older CLI is refused")
}
