package servers_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// presignedQuery is an object store's presigned-URL query: brackets (curl
// would read them as a range without --globoff), escapes and a signature
// that must reach the server unchanged and never show in the output.
const (
	presignedSig   = "c2lnbmF0dXJlLXRoYXQtbXVzdC1ub3QtbGVhaw"
	presignedQuery = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F20260101%2Fus-east-1%2Fs3%2Faws4_request&list[0]=a&X-Amz-Signature=" + presignedSig
)

// presignedServer serves files only to requests that carry presignedQuery
// exactly, as an object store checks its signature, and records the paths.
type presignedServer struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

func newPresignedServer(t *testing.T, files map[string][]byte) *presignedServer {
	s := &presignedServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen = append(s.seen, r.URL.Path)
		s.mu.Unlock()
		if r.URL.RawQuery != presignedQuery {
			http.Error(w, "SignatureDoesNotMatch", http.StatusForbidden)
			return
		}
		body, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

// A presigned image URL works end to end: the format is read from the path,
// the query reaches the server as given, and logs leave it out.
func TestInstallTakesAPresignedURL(t *testing.T) {
	t.Parallel()
	img := talosLikeImage(t, "EFI", "BIOS", "BOOT", "META")
	files, paths := everyFormat(t, "/talos", img)
	srv := newPresignedServer(t, files)
	for _, file := range paths {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			h := newHost(t, rescueRoot, "rescue")
			stdout, stderr, err := runInstall(t, h, srv.URL+file+"?"+presignedQuery, os.Getenv("PATH"))
			require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			got, err := os.ReadFile(h.target)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(img, got), "the disk ends identical to the image")
			assert.Contains(t, stdout, "writing "+srv.URL+file+"?... to ")
			assert.Contains(t, stdout, "partition table looks like Talos")
			assert.NotContains(t, stdout+stderr, presignedSig, "the signature stays out of the output")
		})
	}

	// A signature the server refuses fails the install without showing it.
	h := newHost(t, rescueRoot, "rescue")
	stdout, stderr, err := runInstall(t, h, srv.URL+"/talos/metal-amd64.raw?X-Amz-Signature=wrong-"+presignedSig, os.Getenv("PATH"))
	require.Error(t, err)
	assert.Contains(t, stderr, "download or decompression of "+srv.URL+"/talos/metal-amd64.raw?... broke off")
	assert.NotContains(t, stdout+stderr, presignedSig)

	// A fragment is not part of the file name either.
	h = newHost(t, rescueRoot, "rescue")
	stdout, stderr, err = runInstall(t, h, srv.URL+"/talos/metal-amd64.raw.gz?"+presignedQuery+"#part", os.Getenv("PATH"))
	require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
}

// Without zstd, a factory .zst URL becomes its .xz twin; a presigned one
// cannot (its signature covers the .zst path), so the install refuses before
// it fetches or writes anything, and says what to do.
func TestInstallWithoutZstdRefusesToRewriteAPresignedURL(t *testing.T) {
	t.Parallel()
	img := talosLikeImage(t, "EFI", "META")
	srv := newPresignedServer(t, map[string][]byte{"/metal-amd64.raw.zst": compress(t, img, "zstd")})
	bin := t.TempDir()
	for _, tool := range []string{"awk", "cat", "readlink", "basename", "dirname", "curl", "xz", "dd", "stat", "sync",
		"od", "tr", "grep", "sleep", "hostname", "date"} {
		p, err := exec.LookPath(tool)
		require.NoError(t, err, tool)
		require.NoError(t, os.Symlink(p, filepath.Join(bin, tool)))
	}
	h := newHost(t, rescueRoot, "rescue")
	before, err := os.ReadFile(h.target)
	require.NoError(t, err)
	stdout, stderr, err := runInstall(t, h, srv.URL+"/metal-amd64.raw.zst?"+presignedQuery, bin)
	require.Error(t, err, stdout)
	assert.Contains(t, stderr, "zstd is not installed, and the .xz twin of "+srv.URL+"/metal-amd64.raw.zst?... cannot be derived")
	assert.NotContains(t, stdout+stderr, presignedSig)
	assert.Empty(t, srv.seen, "nothing fetched")
	after, err := os.ReadFile(h.target)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(before, after), "nothing written")
	assert.False(t, strings.Contains(stdout, "writing"))
}
