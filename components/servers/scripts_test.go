package servers_test

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/fluodata/talos-pulumi/components/servers"
	"github.com/fluodata/talos-pulumi/internal/testkit/scripttest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// talosLikeImage is a small disk image laid out like a Talos metal image: a
// protective MBR, a GPT whose partitions carry Talos's names, and a payload:
// 256 KiB of random bytes, then every sector numbered. It compresses about
// as well as a real image does: xz needs a fraction of a second for it, and
// seconds of CPU for 3 MiB of random bytes.
func talosLikeImage(t *testing.T, names ...string) []byte {
	t.Helper()
	img := make([]byte, 3<<20)
	const payload, random = 34 * 512, 256 << 10
	_, err := rand.Read(img[payload : payload+random])
	require.NoError(t, err)
	for sector := (payload + random) / 512; sector < len(img)/512; sector++ {
		binary.LittleEndian.PutUint64(img[sector*512:], uint64(sector)) //nolint:gosec // a sector number, small
	}
	img[510], img[511] = 0x55, 0xaa
	hdr := img[512:1024]
	copy(hdr, "EFI PART")
	binary.LittleEndian.PutUint64(hdr[72:], 2)   // partition entries start at LBA 2
	binary.LittleEndian.PutUint32(hdr[80:], 128) // 128 entries
	binary.LittleEndian.PutUint32(hdr[84:], 128) // of 128 bytes
	for i, name := range names {
		e := img[1024+i*128 : 1024+(i+1)*128]
		e[0] = byte(i + 1) // a non-zero type GUID
		for j, u := range utf16.Encode([]rune(name)) {
			binary.LittleEndian.PutUint16(e[56+2*j:], u)
		}
	}
	return img
}

func compress(t *testing.T, data []byte, tool string) []byte {
	t.Helper()
	if tool == "" {
		return data
	}
	cmd := exec.Command(tool, "-c")
	cmd.Stdin = bytes.NewReader(data)
	out, err := cmd.Output()
	require.NoError(t, err, "%s must be installed (.ci/run installs it)", tool)
	return out
}

// imageServer serves files by path on 127.0.0.1 and records the requests.
type imageServer struct {
	*httptest.Server
	mu    sync.Mutex
	files map[string][]byte
	seen  []string
}

func newImageServer(t *testing.T, files map[string][]byte) *imageServer {
	s := &imageServer{files: files}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen = append(s.seen, r.URL.Path)
		s.mu.Unlock()
		body, ok := s.files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

// host is a scratch rescue system: /proc and /sys fixtures and a target file.
type host struct {
	proc, sys, target string
}

func newHost(t *testing.T, rootLine, hostname string) host {
	t.Helper()
	dir := t.TempDir()
	h := host{proc: filepath.Join(dir, "proc"), sys: filepath.Join(dir, "sys"), target: filepath.Join(dir, "disk.img")}
	require.NoError(t, os.MkdirAll(filepath.Join(h.proc, "sys", "kernel"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(h.sys, "block"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(h.proc, "mounts"), []byte(rootLine+"\nproc /proc proc rw 0 0\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(h.proc, "swaps"), []byte("Filename Type Size Used Priority\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(h.proc, "sys", "kernel", "hostname"), []byte(hostname+"\n"), 0o600))
	// The "disk" holds an old system: more bytes than the image.
	old := make([]byte, 5<<20)
	_, err := rand.Read(old)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(h.target, old, 0o600))
	return h
}

const rescueRoot = "tmpfs / tmpfs rw,relatime 0 0"

// fastInstall are the install script's settings for tests: a progress line
// every second, the end of the write noticed within 10 ms rather than a
// second, and no system-wide sync (dd still fsyncs the target), which would
// wait for every other writer of the machine.
var fastInstall = []string{"PROGRESS_INTERVAL=1", "POLL_INTERVAL=0.01", "SYNC_ALL=0"}

// installEnv is the environment of the install script on the scratch host h:
// its /proc and /sys fixtures, PATH, and settings such as fastInstall.
func installEnv(h host, path string, settings ...string) []string {
	return append([]string{"PROC_DIR=" + h.proc, "SYS_DIR=" + h.sys, "ALLOW_FILE_TARGET=1", "PATH=" + path}, settings...)
}

// runInstall runs the repo's install script with bash as `up` would, with
// the variables in a preamble, plus test-only overrides in the environment.
func runInstall(t *testing.T, h host, imageURL, path string) (stdout, stderr string, err error) {
	t.Helper()
	in := servers.Install{Disk: h.target, ImageURL: imageURL, RequireRescue: true}
	cmd := exec.Command("bash", "-s")
	cmd.Stdin = strings.NewReader(in.Stdin())
	cmd.Env = installEnv(h, path, fastInstall...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

func TestInstallWritesTheImageInEveryFormat(t *testing.T) {
	t.Parallel()
	img := talosLikeImage(t, "EFI", "BIOS", "BOOT", "META")
	files, paths := everyFormat(t, "", img)
	srv := newImageServer(t, files)
	for _, file := range paths {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			h := newHost(t, rescueRoot, "rescue-customer")
			stdout, stderr, err := runInstall(t, h, srv.URL+file, os.Getenv("PATH"))
			require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			got, err := os.ReadFile(h.target)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(img, got), "the disk ends identical to the image (%d vs %d bytes)", len(got), len(img))
			assert.Contains(t, stdout, "rescue system: / is tmpfs")
			assert.Contains(t, stdout, "MiB written")
			assert.Contains(t, stdout, "partition table looks like Talos: EFI BIOS BOOT META")
			assert.Contains(t, stdout, "switch the server's boot from rescue to its disk")
		})
	}
}

// A rescue system without zstd gets the factory's .xz image instead.
func TestInstallFallsBackToXzWithoutZstd(t *testing.T) {
	t.Parallel()
	img := talosLikeImage(t, "EFI", "META")
	srv := newImageServer(t, map[string][]byte{
		"/metal-amd64.raw.zst": compress(t, img, "zstd"),
		"/metal-amd64.raw.xz":  compress(t, img, "xz"),
	})
	bin := t.TempDir()
	for _, tool := range []string{"awk", "cat", "readlink", "basename", "dirname", "curl", "xz", "dd", "stat", "sync",
		"od", "tr", "grep", "sleep", "hostname", "date"} {
		p, err := exec.LookPath(tool)
		require.NoError(t, err, tool)
		require.NoError(t, os.Symlink(p, filepath.Join(bin, tool)))
	}
	h := newHost(t, rescueRoot, "rescue")
	stdout, stderr, err := runInstall(t, h, srv.URL+"/metal-amd64.raw.zst", bin)
	require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stdout, "no zstd here: fetching the .xz image instead")
	assert.Equal(t, []string{"/metal-amd64.raw.xz"}, srv.seen)
	got, err := os.ReadFile(h.target)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(img, got))
}

func TestInstallRefuses(t *testing.T) {
	t.Parallel()
	img := talosLikeImage(t, "EFI", "BIOS", "BOOT", "META")
	zst := compress(t, img, "zstd")
	corrupt := bytes.Clone(zst)
	for i := len(corrupt) / 2; i < len(corrupt)/2+64; i++ {
		corrupt[i] ^= 0xff
	}
	srv := newImageServer(t, map[string][]byte{
		"/ok.raw.zst":        zst,
		"/corrupt.raw.zst":   corrupt,
		"/truncated.raw.zst": zst[:len(zst)/2],
		"/notalos.raw":       talosLikeImage(t, "ESP", "root"),
		"/nogpt.raw":         make([]byte, 1<<20),
	})
	cases := []struct {
		name     string
		root     string
		hostname string
		setup    func(t *testing.T, h host)
		file     string
		want     string
		// untouched: the target must keep its old content.
		untouched bool
	}{
		{"installed system, not rescue", "/dev/sda1 / ext4 rw 0 0", "web-1", nil, "/ok.raw.zst",
			"this does not look like a rescue system: / is ext4 on /dev/sda1 and the host name is 'web-1'", true},
		{"target partition mounted", rescueRoot, "rescue", func(t *testing.T, h host) {
			appendFile(t, filepath.Join(h.proc, "mounts"), h.target+"2 /mnt ext4 rw 0 0\n")
		}, "/ok.raw.zst", "is in use: " + "%TARGET%2 is mounted on /mnt", true},
		{"target is swap", rescueRoot, "rescue", func(t *testing.T, h host) {
			appendFile(t, filepath.Join(h.proc, "swaps"), h.target+"3 partition 1024 0 -2\n")
		}, "/ok.raw.zst", "is active swap", true},
		{"target held by LVM", rescueRoot, "rescue", func(t *testing.T, h host) {
			require.NoError(t, os.MkdirAll(filepath.Join(h.sys, "block", "disk.img", "disk.img1", "holders", "dm-0"), 0o755))
		}, "/ok.raw.zst", "disk.img1 is held by dm-0", true},
		{"target missing", rescueRoot, "rescue", func(t *testing.T, h host) {
			require.NoError(t, os.Remove(h.target))
		}, "/ok.raw.zst", "does not exist; check the node's installDisk", false},
		{"corrupt download", rescueRoot, "rescue", nil, "/corrupt.raw.zst", "download or decompression of", false},
		{"truncated download", rescueRoot, "rescue", nil, "/truncated.raw.zst", "download or decompression of", false},
		{"missing image (404)", rescueRoot, "rescue", nil, "/gone.raw.zst", "download or decompression of", false},
		{"image without Talos partitions", rescueRoot, "rescue", nil, "/notalos.raw", "has no EFI partition (found: ESP root )", false},
		{"image without partition table", rescueRoot, "rescue", nil, "/nogpt.raw", "has no GPT partition table", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHost(t, c.root, c.hostname)
			if c.setup != nil {
				c.setup(t, h)
			}
			before, _ := os.ReadFile(h.target)
			stdout, stderr, err := runInstall(t, h, srv.URL+c.file, os.Getenv("PATH"))
			require.Error(t, err, "stdout:\n%s", stdout)
			assert.Contains(t, stderr, strings.ReplaceAll(c.want, "%TARGET%", h.target))
			if c.untouched {
				after, _ := os.ReadFile(h.target)
				assert.True(t, bytes.Equal(before, after), "a refused install writes nothing")
				assert.NotContains(t, stdout, "writing")
			}
		})
	}
}

// A disk-installed rescue system may be allowed explicitly; the host name
// alone also identifies a rescue system.
func TestInstallRescueCheckOverrides(t *testing.T) {
	t.Parallel()
	img := talosLikeImage(t, "EFI", "META")
	srv := newImageServer(t, map[string][]byte{"/i.raw": img})
	h := newHost(t, "/dev/sda1 / ext4 rw 0 0", "rescue12-pro")
	stdout, stderr, err := runInstall(t, h, srv.URL+"/i.raw", os.Getenv("PATH"))
	require.NoError(t, err, stderr)
	assert.Contains(t, stdout, "rescue system: host name rescue12-pro")

	h = newHost(t, "/dev/sda1 / ext4 rw 0 0", "web-1")
	in := servers.Install{Disk: h.target, ImageURL: srv.URL + "/i.raw", RequireRescue: false}
	cmd := exec.Command("bash", "-s")
	cmd.Stdin = strings.NewReader(in.Stdin())
	cmd.Env = installEnv(h, os.Getenv("PATH"), fastInstall...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
}

// What the tests speed up stays as it was for a real install: with nothing
// set, the script polls the write once a second and syncs every file system
// once at the end; SYNC_ALL=0 leaves the sync out. A recording `sync` first
// on PATH counts the calls.
func TestInstallDefaultsSyncEveryFileSystem(t *testing.T) {
	t.Parallel()
	img := talosLikeImage(t, "EFI", "META")
	srv := newImageServer(t, map[string][]byte{"/i.raw": img})
	bin := t.TempDir()
	calls := filepath.Join(bin, "sync.calls")
	scripttest.Write(t, filepath.Join(bin, "sync"), "#!/bin/sh\necho \"$*\" >> '"+calls+"'\n")
	path := bin + string(os.PathListSeparator) + os.Getenv("PATH")
	install := func(settings ...string) string {
		t.Helper()
		h := newHost(t, rescueRoot, "rescue")
		in := servers.Install{Disk: h.target, ImageURL: srv.URL + "/i.raw", RequireRescue: true}
		cmd := exec.Command("bash", "-s")
		cmd.Stdin = strings.NewReader(in.Stdin())
		cmd.Env = installEnv(h, path, settings...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
		got, err := os.ReadFile(h.target)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(img, got))
		return string(out)
	}

	start := time.Now()
	out := install()
	assert.GreaterOrEqual(t, time.Since(start), time.Second, "the write is polled once a second")
	assert.Contains(t, out, "MiB written in")
	recorded, err := os.ReadFile(calls) //nolint:gosec // the test's scratch file
	require.NoError(t, err, "the default install runs sync")
	assert.Equal(t, "\n", string(recorded), "one system-wide sync, without arguments")

	require.NoError(t, os.Remove(calls))
	install("SYNC_ALL=0", "POLL_INTERVAL=0.01")
	assert.NoFileExists(t, calls, "SYNC_ALL=0: no system-wide sync")
}

// Settings the script cannot use stop it before it touches the disk.
func TestInstallRefusesBadSettings(t *testing.T) {
	t.Parallel()
	for setting, want := range map[string]string{
		"POLL_INTERVAL=soon":   "POLL_INTERVAL soon is not a number of seconds",
		"POLL_INTERVAL=1.2.3":  "POLL_INTERVAL 1.2.3 is not a number of seconds",
		"PROGRESS_INTERVAL=0":  "PROGRESS_INTERVAL 0 is not a whole number of seconds above 0",
		"PROGRESS_INTERVAL=08": "PROGRESS_INTERVAL 08 is not a whole number of seconds above 0",
		"SYNC_ALL=yes":         "SYNC_ALL yes is neither 0 nor 1",
	} {
		h := newHost(t, rescueRoot, "rescue")
		before, err := os.ReadFile(h.target)
		require.NoError(t, err)
		in := servers.Install{Disk: h.target, ImageURL: "http://127.0.0.1:1/i.raw", RequireRescue: true}
		cmd := exec.Command("bash", "-s")
		cmd.Stdin = strings.NewReader(in.Stdin())
		cmd.Env = installEnv(h, os.Getenv("PATH"), setting)
		out, err := cmd.CombinedOutput()
		require.Error(t, err, setting)
		assert.Contains(t, string(out), want)
		after, err := os.ReadFile(h.target)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(before, after), "%s: nothing written", setting)
	}
}

// Without the test-only switch, a regular file is no install disk: a typo
// under /dev would otherwise fill the rescue system's RAM.
func TestInstallWantsABlockDevice(t *testing.T) {
	t.Parallel()
	h := newHost(t, rescueRoot, "rescue")
	in := servers.Install{Disk: h.target, ImageURL: "http://127.0.0.1:1/i.raw", RequireRescue: true}
	cmd := exec.Command("bash", "-s")
	cmd.Stdin = strings.NewReader(in.Stdin())
	cmd.Env = append([]string{"PROC_DIR=" + h.proc, "SYS_DIR=" + h.sys, "PATH=" + os.Getenv("PATH")}, fastInstall...)
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "is not a block device")
}

func appendFile(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(text)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// everyFormat is img served under dir in every format the install reads
// (zstd, xz, gzip, raw), by path, and the paths in that order.
func everyFormat(t *testing.T, dir string, img []byte) (map[string][]byte, []string) {
	t.Helper()
	files := map[string][]byte{}
	var paths []string
	for _, f := range []struct{ ext, tool string }{{".zst", "zstd"}, {".xz", "xz"}, {".gz", "gzip"}, {"", ""}} {
		p := dir + "/metal-amd64.raw" + f.ext
		files[p] = img
		if f.tool != "" {
			files[p] = compress(t, img, f.tool)
		}
		paths = append(paths, p)
	}
	return files, paths
}
