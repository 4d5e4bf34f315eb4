//go:build integration

package talosprovider_test

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/fluodata/talos-pulumi/provider/talosprovider"
)

// releaseVersion is the version the test releases.
const releaseVersion = "9.8.7-test.1"

// A release as a maintainer makes one, in a copy of this repository's
// work tree (a git repository of its own, so that nothing here changes)
// whose VERSION is set to releaseVersion, committed and tagged: make
// release refuses another tag, then builds for this machine's platform the
// tarball the CLI downloads (the binary alone), schema.json of that
// version, the generated SDKs and checksums.txt, which sha256sum -c
// accepts; the binary says
// its version (GetPluginInfo). The CLI installs the tarball (`pulumi
// plugin install resource talos-anywhere <version> --file`), and the YAML
// example, without its source packages entry, previews through the
// installed plugin with no Go on PATH. The release's own build flags
// (-trimpath, CGO_ENABLED=0) are left out: with them every dependency
// compiles again.
func TestIntegrationTheReleaseInstallsAndRuns(t *testing.T) {
	requireTools(t, "needs git, make, sha256sum, the pulumi CLI and its YAML language host", "git", "make", "sha256sum", "pulumi", "pulumi-language-yaml")
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	repo := filepath.Join(t.TempDir(), "repo")
	require.NoError(t, os.MkdirAll(repo, 0o700))
	env := cliEnv(t)
	run := func(dir string, env []string, name string, args ...string) string {
		t.Helper()
		out, err := runIn(t, dir, env, 15*time.Minute, name, args...)
		require.NoError(t, err, "%s %s:\n%s", name, strings.Join(args, " "), out)
		return out
	}
	run(root, env, "sh", "-c", fmt.Sprintf("git ls-files -z | tar --null -T - -cf - | tar -C %q -xf -", repo))
	require.NoError(t, os.WriteFile(filepath.Join(repo, "provider", "talosprovider", "VERSION"), []byte(releaseVersion+"\n"), 0o600))
	git := append(slices.Clone(env), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	run(repo, git, "git", "init", "-q")
	run(repo, git, "git", "add", "-A")
	run(repo, git, "git", "commit", "-q", "-m", "release "+releaseVersion)

	dist := filepath.Join(t.TempDir(), "dist")
	makeRelease := func() (string, error) {
		return runIn(t, repo, env, 15*time.Minute, "make", "--no-print-directory", "release", "RELEASE_DIR="+dist,
			"RELEASE_PLATFORMS="+runtime.GOOS+"/"+runtime.GOARCH, "RELEASE_GOENV=", "RELEASE_BUILDFLAGS=")
	}
	run(repo, git, "git", "tag", "v9.8.8")
	msg, err := makeRelease()
	require.Error(t, err, "another tag:\n%s", msg)
	assert.Contains(t, msg, "make release: the commit's tag is 'v9.8.8', not v"+releaseVersion)
	run(repo, git, "git", "tag", "-d", "v9.8.8")
	run(repo, git, "git", "tag", "v"+releaseVersion)
	start := time.Now()
	msg, err = makeRelease()
	require.NoError(t, err, msg)
	t.Logf("make release for %s/%s: %s", runtime.GOOS, runtime.GOARCH, time.Since(start).Round(time.Second))

	tarball := "pulumi-resource-talos-anywhere-v" + releaseVersion + "-" + runtime.GOOS + "-" + runtime.GOARCH + ".tar.gz"
	entries, err := os.ReadDir(dist)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sdks := []string{}
	for _, language := range []string{"go", "nodejs", "python"} {
		sdks = append(sdks, "talos-anywhere-sdk-"+language+"-v"+releaseVersion+".tar.gz")
	}
	assert.ElementsMatch(t, append([]string{tarball, "schema.json", "checksums.txt"}, sdks...), names)
	run(dist, env, "sha256sum", "-c", "checksums.txt")
	schema, err := os.ReadFile(filepath.Join(dist, "schema.json"))
	require.NoError(t, err)
	assert.Contains(t, string(schema), `"version": "`+releaseVersion+`"`)
	assert.Contains(t, string(schema), `"pluginDownloadURL": "`+talosprovider.PluginDownloadURL+`"`)

	bin := filepath.Join(t.TempDir(), "pulumi-resource-talos-anywhere")
	assert.Equal(t, []string{"pulumi-resource-talos-anywhere"}, untar(t, filepath.Join(dist, tarball), bin), "the binary alone, at the top")
	assert.Equal(t, releaseVersion, pluginVersion(t, bin), "the version of the tag, without its v")

	// Installed from the tarball, as the CLI installs a download.
	run(root, env, "pulumi", "plugin", "install", "resource", "talos-anywhere", releaseVersion, "--file", filepath.Join(dist, tarball))
	t.Cleanup(func() {
		// t.Context() is done by now: the removal has its own.
		cmd := exec.Command("pulumi", "plugin", "rm", "resource", "talos-anywhere", releaseVersion, "--yes")
		cmd.Dir, cmd.Env = root, env
		out, err := cmd.CombinedOutput()
		assert.NoError(t, err, "%s", out)
	})
	dir := filepath.Join(t.TempDir(), "proxmox-yaml")
	require.NoError(t, os.CopyFS(dir, os.DirFS(filepath.Join(root, "examples", "proxmox-yaml"))))
	project, err := os.ReadFile(filepath.Join(dir, "Pulumi.yaml"))
	require.NoError(t, err)
	const source = "packages:\n  talos-anywhere: ../../provider\n"
	require.Contains(t, string(project), source)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), []byte(strings.Replace(string(project), source, "", 1)), 0o600))
	noGo := withoutGo(t, env)
	run(dir, noGo, "pulumi", "stack", "init", "it")
	run(dir, noGo, "pulumi", "config", "set", "--secret", "proxmoxApiTokenSecret", "not-a-real-token")
	// Twice: nothing builds the plugin (no Go on PATH), so each preview
	// takes as long as the other.
	name, args := offlinePulumi(t, "preview", "--non-interactive")
	for i := 1; i <= 2; i++ {
		start := time.Now()
		out := run(dir, noGo, name, args...)
		t.Logf("preview %d through the installed release: %s", i, time.Since(start).Round(100*time.Millisecond))
		assert.Contains(t, out, "talos-anywhere:index:ProxmoxCluster homelab create", "the installed release's component")
		assert.Contains(t, out, "+ 34 to create")
	}
	releasedTypeScript(t, root, noGo)
}

// releasedTypeScript previews the TypeScript example outside the clone
// with the installed release and no Go: its `packages:` entry names the
// package by name and version instead of the source folder, so `pulumi
// install` takes the installed plugin's schema, generates the SDK and
// compiles it (its postinstall tsc, with the npm registry), then two
// previews run offline through the installed plugin.
func releasedTypeScript(t *testing.T, root string, noGo []string) {
	t.Helper()
	for _, tool := range []string{"node", "npm", "pulumi-language-nodejs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Logf("SKIPPED: %s is not on PATH, so the TypeScript example was not previewed through the release", tool)
			return
		}
	}
	dir := filepath.Join(t.TempDir(), "proxmox-typescript")
	require.NoError(t, os.CopyFS(dir, os.DirFS(filepath.Join(root, "examples", "proxmox-typescript"))))
	project, err := os.ReadFile(filepath.Join(dir, "Pulumi.yaml"))
	require.NoError(t, err)
	const source = "talos-anywhere: ../../provider"
	require.Contains(t, string(project), source)
	project = []byte(strings.Replace(string(project), source, "talos-anywhere: talos-anywhere@"+releaseVersion, 1))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), project, 0o600))
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := runIn(t, dir, noGo, 15*time.Minute, name, args...)
		require.NoError(t, err, "%s %s:\n%s", name, strings.Join(args, " "), out)
		return out
	}
	start := time.Now()
	run("pulumi", "install")
	t.Logf("pulumi install of the TypeScript example from the release: %s", time.Since(start).Round(time.Second))
	assert.FileExists(t, filepath.Join(dir, "sdks", "fluodata-talos-anywhere", "bin", "index.js"), "the SDK generated from the release and compiled")
	run("pulumi", "stack", "init", "it")
	run("pulumi", "config", "set", "--secret", "proxmoxApiTokenSecret", "not-a-real-token")
	name, args := offlinePulumi(t, "preview", "--non-interactive")
	for i := 1; i <= 2; i++ {
		start := time.Now()
		out := run(name, args...)
		t.Logf("TypeScript preview %d through the installed release: %s", i, time.Since(start).Round(100*time.Millisecond))
		assert.Contains(t, out, "talos-anywhere:index:ProxmoxCluster homelab create", "the installed release's component")
		assert.Contains(t, out, "+ 34 to create")
	}
}

// withoutGo is env with a PATH that has no go.
func withoutGo(t *testing.T, env []string) []string {
	t.Helper()
	var keep []string
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(dir, "go")); err == nil {
			continue
		}
		keep = append(keep, dir)
	}
	out := append(slices.Clone(env), "PATH="+strings.Join(keep, string(os.PathListSeparator)))
	cmd := exec.Command("sh", "-c", "command -v go")
	cmd.Env = out
	_, err := cmd.Output()
	require.Error(t, err, "no go on the PATH")
	return out
}

// pluginVersion starts the plugin binary and asks it its version, as the
// engine does (GetPluginInfo).
func pluginVersion(t *testing.T, bin string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	port, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "the provider prints its port")
	conn, err := grpc.NewClient("127.0.0.1:"+strings.TrimSpace(port), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	info, err := pulumirpc.NewResourceProviderClient(conn).GetPluginInfo(ctx, &emptypb.Empty{})
	require.NoError(t, err)
	return info.GetVersion()
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
