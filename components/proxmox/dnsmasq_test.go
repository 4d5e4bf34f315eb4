package proxmox

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dnsmasqHost is a scratch stand-in for the Proxmox host's dnsmasq set-up: a
// main config reading a conf-dir, and a restart command that leaves a mark.
type dnsmasqHost struct {
	dir, confDir, main, restarted string
	dnsmasq                       string // path of Debian's dnsmasq binary
}

func newDNSMasqHost(t *testing.T) dnsmasqHost {
	t.Helper()
	bin, err := exec.LookPath("dnsmasq")
	if err != nil {
		// /usr/sbin is not on a normal user's PATH on Debian.
		bin = "/usr/sbin/dnsmasq"
		if _, err := os.Stat(bin); err != nil {
			t.Fatal("dnsmasq is not installed; .ci/run installs Debian's dnsmasq-base")
		}
	}
	dir := t.TempDir()
	h := dnsmasqHost{dir: dir, confDir: filepath.Join(dir, "dnsmasq.d"), main: filepath.Join(dir, "dnsmasq.conf"),
		restarted: filepath.Join(dir, "restarted"), dnsmasq: bin}
	require.NoError(t, os.Mkdir(h.confDir, 0o755))
	require.NoError(t, os.WriteFile(h.main, []byte("interface=vmbr1\ndhcp-range=10.10.0.100,10.10.0.200,12h\nconf-dir="+h.confDir+",*.conf\n"), 0o600))
	return h
}

func (h dnsmasqHost) file() DNSMasqFile {
	return DNSMasqFile{Dir: h.confDir, Cluster: "homelab", Stack: "proxmox-homelab",
		TestArgs: "--conf-file=" + h.main, Restart: "touch " + h.restarted}
}

// run runs a script as the remote command does: sh with stdin.
func (h dnsmasqHost) run(t *testing.T, script, stdin string) (string, error) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), "TMPDIR="+h.dir, "PATH="+filepath.Dir(h.dnsmasq)+":"+os.Getenv("PATH"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

var homelab = []Reservation{
	{MAC: "a2:b2:3c:01:9a:10", IP: "10.10.0.10", Hostname: "cp-0"},
	{MAC: "a2:b2:77:e4:00:5b", IP: "10.10.0.20", Hostname: "worker-0"},
	{MAC: "a2:b2:c0:15:2f:88", IP: "10.10.0.21", Hostname: "worker-1"},
}

func TestDNSMasqFilePassesDnsmasqTest(t *testing.T) {
	t.Parallel()
	h := newDNSMasqHost(t)
	f := h.file()
	content := f.Render(homelab)
	assert.Contains(t, content, `Talos cluster "homelab"`)
	assert.Contains(t, content, "dhcp-host=a2:b2:3c:01:9a:10,10.10.0.10,cp-0\n")
	assert.Equal(t, filepath.Join(h.confDir, "talos-homelab.conf"), f.Path())

	// Debian's dnsmasq accepts the file on its own and within the host's config.
	standalone := filepath.Join(h.dir, "standalone.conf")
	require.NoError(t, os.WriteFile(standalone, []byte(content), 0o600))
	out, err := exec.Command(h.dnsmasq, "--test", "--conf-file="+standalone).CombinedOutput()
	require.NoError(t, err, string(out))

	out2, err := h.run(t, f.InstallScript(), content)
	require.NoError(t, err, out2)
	got, err := os.ReadFile(f.Path())
	require.NoError(t, err)
	assert.Equal(t, content, string(got))
	assert.FileExists(t, h.restarted, "dnsmasq restarted")
	entries, err := os.ReadDir(h.confDir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no staging file left in the conf-dir")
	info, err := os.Stat(f.Path())
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), info.Mode().Perm(), "dnsmasq may run as another user")

	// Running it again with changed reservations replaces the file (no
	// duplicate-address error against the previous version of itself).
	changed := append([]Reservation{}, homelab...)
	changed[2].IP = "10.10.0.22"
	out3, err := h.run(t, f.InstallScript(), f.Render(changed))
	require.NoError(t, err, out3)
	got, _ = os.ReadFile(f.Path())
	assert.Contains(t, string(got), "10.10.0.22")

	// Destroy removes it; a second removal is still success.
	require.NoError(t, os.Remove(h.restarted))
	out4, err := h.run(t, f.RemoveScript(), "")
	require.NoError(t, err, out4)
	assert.NoFileExists(t, f.Path())
	assert.FileExists(t, h.restarted)
	out5, err := h.run(t, f.RemoveScript(), "")
	require.NoError(t, err, out5)
	assert.Contains(t, out5, "already gone")
}

func TestBrokenDNSMasqFileLeavesPreviousInPlace(t *testing.T) {
	t.Parallel()
	h := newDNSMasqHost(t)
	f := h.file()
	good := f.Render(homelab)
	_, err := h.run(t, f.InstallScript(), good)
	require.NoError(t, err)
	require.NoError(t, os.Remove(h.restarted))

	// A line dnsmasq rejects on its own.
	out, err := h.run(t, f.InstallScript(), good+"dhcp-hots=a2:b2:00:00:00:01,10.10.0.30,x\n")
	require.Error(t, err)
	assert.Contains(t, out, "dnsmasq --test rejected the new reservations")
	assert.Contains(t, out, "bad option", "dnsmasq's own message is passed on")
	got, _ := os.ReadFile(f.Path())
	assert.Equal(t, good, string(got), "previous file still live")
	assert.NoFileExists(t, h.restarted, "dnsmasq not restarted")

	// A file fine alone but conflicting with the host's other config: the
	// host already reserves 10.10.0.10 for another MAC.
	require.NoError(t, os.WriteFile(filepath.Join(h.confDir, "other.conf"), []byte("dhcp-host=02:00:00:00:00:99,10.10.0.10,nas\n"), 0o600))
	out, err = h.run(t, f.InstallScript(), good)
	require.Error(t, err)
	assert.Contains(t, out, "rejected the configuration with the new reservations")
	assert.Contains(t, out, "10.10.0.10")
	got, _ = os.ReadFile(f.Path())
	assert.Equal(t, good, string(got), "previous file put back")
	assert.NoFileExists(t, h.restarted)

	// With no previous file, a rejected one is removed again.
	require.NoError(t, os.Remove(f.Path()))
	_, err = h.run(t, f.InstallScript(), good)
	require.Error(t, err)
	assert.NoFileExists(t, f.Path())
}

func TestDNSMasqRestartFailureIsReported(t *testing.T) {
	t.Parallel()
	h := newDNSMasqHost(t)
	f := h.file()
	f.Restart = "echo 'Job for dnsmasq.service failed' >&2; false"
	out, err := h.run(t, f.InstallScript(), f.Render(homelab))
	require.Error(t, err)
	assert.Contains(t, out, "restarting dnsmasq failed: Job for dnsmasq.service failed")
}
