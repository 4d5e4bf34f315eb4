package proxmox

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluodata/talos-pulumi/internal/testkit/scripttest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dnsmasqHost is a scratch stand-in for the Proxmox host's dnsmasq set-up: a
// main config reading a conf-dir, a lease file, a restart command that leaves
// a mark, and first on PATH a dhcp_release that records its arguments (the
// real one needs root and a dnsmasq listening on the bridge).
type dnsmasqHost struct {
	dir, confDir, main, restarted string
	leases, bin, released         string
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
		restarted: filepath.Join(dir, "restarted"), leases: filepath.Join(dir, "dnsmasq.leases"),
		bin: filepath.Join(dir, "bin"), released: filepath.Join(dir, "released"), dnsmasq: bin}
	require.NoError(t, os.Mkdir(h.confDir, 0o755))
	require.NoError(t, os.Mkdir(h.bin, 0o755))
	h.fakeDHCPRelease(t, "")
	require.NoError(t, os.WriteFile(h.main, []byte("interface=vmbr1\ndhcp-range=10.10.0.100,10.10.0.200,12h\nconf-dir="+h.confDir+",*.conf\n"), 0o600))
	return h
}

func (h dnsmasqHost) file() DNSMasqFile {
	return DNSMasqFile{Dir: h.confDir, Cluster: "homelab", Stack: "proxmox-homelab",
		TestArgs: "--conf-file=" + h.main, Restart: "touch " + h.restarted,
		LeaseFile: h.leases, Interface: "vmbr1"}
}

// fakeDHCPRelease installs the recording dhcp_release; then, if given, runs
// the shell command fail (e.g. to print an error and exit non-zero).
func (h dnsmasqHost) fakeDHCPRelease(t *testing.T, fail string) {
	t.Helper()
	script := "#!/bin/sh\necho \"$*\" >> " + h.released + "\n" + fail + "\n"
	scripttest.Write(t, filepath.Join(h.bin, "dhcp_release"), script)
}

// releases returns the recorded dhcp_release calls, one argument list each.
func (h dnsmasqHost) releases(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(h.released)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	return strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
}

// writeLeases writes the lease file as dnsmasq does: one
// "<expiry> <mac> <ip> <hostname> <client id>" line per lease.
func (h dnsmasqHost) writeLeases(t *testing.T, lines ...string) {
	t.Helper()
	require.NoError(t, os.WriteFile(h.leases, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
}

func (h dnsmasqHost) leaseLines(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(h.leases)
	require.NoError(t, err)
	return strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
}

// run runs a script as the remote command does: sh with stdin.
func (h dnsmasqHost) run(t *testing.T, script, stdin string) (string, error) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), "TMPDIR="+h.dir, "PATH="+h.bin+":"+filepath.Dir(h.dnsmasq)+":"+os.Getenv("PATH"))
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

// Leases as dnsmasq writes them; the expiry is far in the future, so every
// lease still counts.
const (
	cp0Lease       = "1900000000 a2:b2:3c:01:9a:10 10.10.0.10 cp-0 *"
	worker0Lease   = "1900000000 a2:b2:77:e4:00:5b 10.10.0.20 worker-0 01:a2:b2:77:e4:00:5b"
	worker1Lease   = "1900000000 a2:b2:c0:15:2f:88 10.10.0.21 worker-1 *"
	foreignLease   = "1900000000 02:00:00:00:00:99 10.10.0.150 laptop 01:02:00:00:00:00:99"
	duidLine       = "duid 00:01:00:01:2c:4f:6a:0e:52:54:00:12:34:56"
	ipv6Lease      = "1900000000 1234 fd00::10 cp-0 00:01:00:01:2c:4f:6a:0e:a2:b2:3c:01:9a:10"
	oldVMLease     = "1900000000 a2:b2:3c:ff:ff:ff 10.10.0.10 talos-abc-def 01:a2:b2:3c:ff:ff:ff"
	oldVMRelease   = "vmbr1 10.10.0.10 a2:b2:3c:ff:ff:ff 01:a2:b2:3c:ff:ff:ff"
	worker1Release = "vmbr1 10.10.0.21 a2:b2:c0:15:2f:88"
)

// A VM re-created with a new MAC finds its reserved address leased to the
// MAC of the VM it replaces; install releases that lease and no other.
func TestDNSMasqInstallReleasesLeasesOfReservedAddressesToOtherMACs(t *testing.T) {
	t.Parallel()
	h := newDNSMasqHost(t)
	f := h.file()
	h.writeLeases(t, oldVMLease, worker0Lease, foreignLease, duidLine, ipv6Lease)
	require.NoError(t, os.Chmod(h.leases, 0o640))
	before, err := os.Stat(h.leases)
	require.NoError(t, err)

	out, err := h.run(t, f.InstallScript(), f.Render(homelab))
	require.NoError(t, err, out)
	assert.Equal(t, []string{worker0Lease, foreignLease, duidLine, ipv6Lease}, h.leaseLines(t),
		"only the lease of cp-0's address to another MAC goes; the right MAC's, others' and IPv6 leases stay")
	assert.Equal(t, []string{oldVMRelease}, h.releases(t), "released on the bridge with the lease's client id")
	assert.Contains(t, out, "dropped the DHCP lease of 10.10.0.10 to a2:b2:3c:ff:ff:ff")
	assert.FileExists(t, h.restarted)

	// dnsmasq keeps the lease file open: it is edited in place, owner and mode
	// kept.
	after, err := os.Stat(h.leases)
	require.NoError(t, err)
	assert.True(t, os.SameFile(before, after), "the lease file is rewritten in place, not replaced")
	assert.Equal(t, os.FileMode(0o640), after.Mode().Perm())

	// Nothing stale: nothing released, the file untouched.
	require.NoError(t, os.Remove(h.released))
	out, err = h.run(t, f.InstallScript(), f.Render(homelab))
	require.NoError(t, err, out)
	assert.Empty(t, h.releases(t))
	assert.Equal(t, []string{worker0Lease, foreignLease, duidLine, ipv6Lease}, h.leaseLines(t))
}

// A second install with a node's MAC, IP or existence changed releases the
// lease its old reservation left.
func TestDNSMasqUpdateReleasesTheLeasesOfDroppedReservations(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		change func([]Reservation) []Reservation
		kept   []string
		// released is what dhcp_release gets.
		released []string
	}{
		"MAC changed": {
			change: func(rs []Reservation) []Reservation { rs[2].MAC = "a2:b2:c0:15:2f:99"; return rs },
			kept:   []string{cp0Lease, worker0Lease, foreignLease}, released: []string{worker1Release},
		},
		"IP changed": {
			change: func(rs []Reservation) []Reservation { rs[2].IP = "10.10.0.22"; return rs },
			kept:   []string{cp0Lease, worker0Lease, foreignLease}, released: []string{worker1Release},
		},
		"node removed": {
			change: func(rs []Reservation) []Reservation { return rs[:2] },
			kept:   []string{cp0Lease, worker0Lease, foreignLease}, released: []string{worker1Release},
		},
		"nothing changed": {
			change: func(rs []Reservation) []Reservation { return rs },
			kept:   []string{cp0Lease, worker0Lease, worker1Lease, foreignLease},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newDNSMasqHost(t)
			f := h.file()
			out, err := h.run(t, f.InstallScript(), f.Render(homelab))
			require.NoError(t, err, out)
			h.writeLeases(t, cp0Lease, worker0Lease, worker1Lease, foreignLease)

			out, err = h.run(t, f.InstallScript(), f.Render(tc.change(append([]Reservation{}, homelab...))))
			require.NoError(t, err, out)
			assert.Equal(t, tc.kept, h.leaseLines(t))
			assert.Equal(t, tc.released, h.releases(t))
		})
	}
}

// Destroy releases the leases of the removed file's reservations, so the
// next `up` (or another cluster) gets those addresses at once.
func TestDNSMasqRemoveReleasesTheLeasesOfItsReservations(t *testing.T) {
	t.Parallel()
	h := newDNSMasqHost(t)
	f := h.file()
	out, err := h.run(t, f.InstallScript(), f.Render(homelab))
	require.NoError(t, err, out)
	// worker-0's address held by a MAC it was never reserved for is not ours
	// to release.
	intruder := "1900000000 02:00:00:00:00:77 10.10.0.20 other *"
	h.writeLeases(t, cp0Lease, intruder, worker1Lease, foreignLease, duidLine)

	out, err = h.run(t, f.RemoveScript(), "")
	require.NoError(t, err, out)
	assert.NoFileExists(t, f.Path())
	assert.Equal(t, []string{intruder, foreignLease, duidLine}, h.leaseLines(t))
	assert.Equal(t, []string{"vmbr1 10.10.0.10 a2:b2:3c:01:9a:10", worker1Release}, h.releases(t))
	assert.FileExists(t, h.restarted)

	// Already gone: success, and no lease is touched.
	require.NoError(t, os.Remove(h.released))
	h.writeLeases(t, cp0Lease)
	out, err = h.run(t, f.RemoveScript(), "")
	require.NoError(t, err, out)
	assert.Contains(t, out, "already gone")
	assert.Empty(t, h.releases(t))
	assert.Equal(t, []string{cp0Lease}, h.leaseLines(t))
}

// dhcp_release is best effort (it needs root and the bridge's address); when
// it fails or is missing, the edit of the lease file still drops the lease
// before the restart.
func TestDNSMasqLeaseReleaseWithoutAWorkingDHCPRelease(t *testing.T) {
	t.Parallel()
	t.Run("dhcp_release fails", func(t *testing.T) {
		t.Parallel()
		h := newDNSMasqHost(t)
		h.fakeDHCPRelease(t, "echo 'cannot setup interface: No such device' >&2; exit 1")
		f := h.file()
		h.writeLeases(t, oldVMLease, worker0Lease)
		out, err := h.run(t, f.InstallScript(), f.Render(homelab))
		require.NoError(t, err, out)
		assert.Contains(t, out, "dhcp_release on vmbr1 of 10.10.0.10 (a2:b2:3c:ff:ff:ff) failed")
		assert.Contains(t, out, "cannot setup interface: No such device")
		assert.Equal(t, []string{worker0Lease}, h.leaseLines(t))
		assert.FileExists(t, h.restarted)
	})
	t.Run("dhcp_release missing", func(t *testing.T) {
		t.Parallel()
		h := newDNSMasqHost(t)
		f := h.file()
		// A PATH with only the tools the script uses, so no dhcp_release.
		tools := filepath.Join(h.dir, "tools")
		require.NoError(t, os.Mkdir(tools, 0o755))
		for _, tool := range []string{"awk", "cat", "chmod", "cmp", "cp", "mktemp", "mv", "rm", "sh", "touch"} {
			p, err := exec.LookPath(tool)
			require.NoError(t, err)
			require.NoError(t, os.Symlink(p, filepath.Join(tools, tool)))
		}
		require.NoError(t, os.Symlink(h.dnsmasq, filepath.Join(tools, "dnsmasq")))
		sh, err := exec.LookPath("sh")
		require.NoError(t, err)
		h.writeLeases(t, oldVMLease, worker0Lease)
		cmd := exec.Command(sh, "-c", f.InstallScript())
		cmd.Stdin = strings.NewReader(f.Render(homelab))
		cmd.Env = []string{"TMPDIR=" + h.dir, "PATH=" + tools}
		raw, err := cmd.CombinedOutput()
		out := string(raw)
		require.NoError(t, err, out)
		assert.Contains(t, out, "dhcp_release (Debian package dnsmasq-utils) is not installed")
		assert.Equal(t, []string{worker0Lease}, h.leaseLines(t))
		assert.Empty(t, h.releases(t))
		assert.FileExists(t, h.restarted)
	})
}

// A lease file that cannot be read stops the install before the restart,
// naming the file; a missing one holds no leases.
func TestDNSMasqLeaseFileProblems(t *testing.T) {
	t.Parallel()
	h := newDNSMasqHost(t)
	f := h.file()
	out, err := h.run(t, f.InstallScript(), f.Render(homelab))
	require.NoError(t, err, out)
	assert.Contains(t, out, h.leases+" does not exist: no DHCP leases to release")

	require.NoError(t, os.Remove(h.restarted))
	require.NoError(t, os.Mkdir(h.leases, 0o755))
	out, err = h.run(t, f.InstallScript(), f.Render(homelab))
	require.Error(t, err)
	assert.Contains(t, out, "unable to read the DHCP leases in "+h.leases+"; "+f.Path()+" is installed, dnsmasq was not restarted")
	assert.NoFileExists(t, h.restarted)

	out, err = h.run(t, f.RemoveScript(), "")
	require.Error(t, err)
	assert.Contains(t, out, "unable to read the DHCP leases in "+h.leases+"; "+f.Path()+" is still in place")
	assert.FileExists(t, f.Path(), "a retried destroy still knows the reservations")
	assert.NoFileExists(t, h.restarted)
}
