package proxmox

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fluodata/talos-pulumi/internal/testkit/scripttest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/shell"
)

// A step of the install, rollback or removal that cannot be done fails the
// script with a message naming the path, never "installed" or "removed":
// the defect these tests catch is a script that printed success, exited 0
// and left no reservations (an `a && b` under set -e does not stop the
// script when a fails). The hosts are made unwritable in ways that hold for
// root too, whom chmod does not stop: a directory replaced by a file, a
// path under a file, a file replaced by a directory.

// assertFailed checks a failed run: exit status, message, no success line,
// no restart.
func assertFailed(t *testing.T, h dnsmasqHost, out string, err error, want ...string) {
	t.Helper()
	require.Error(t, err, "the script must fail; it said:\n%s", out)
	for _, w := range want {
		assert.Contains(t, out, w)
	}
	assert.NotContains(t, out, "dnsmasq restarted")
	assert.NoFileExists(t, h.restarted, "dnsmasq must not be restarted")
}

func TestDNSMasqInstallFailsWhereItCannotWrite(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		// setup breaks the host and returns the file's directory.
		setup func(t *testing.T, h dnsmasqHost) string
		want  func(f DNSMasqFile) []string
	}{
		"config directory replaced by a file": {
			setup: func(t *testing.T, h dnsmasqHost) string {
				require.NoError(t, os.Remove(h.confDir))
				require.NoError(t, os.WriteFile(h.confDir, []byte("not a directory\n"), 0o644))
				return h.confDir
			},
			want: func(f DNSMasqFile) []string {
				return []string{"unable to write " + f.Path() + " through " + f.Path() + ".tmp; " + f.Path() + " is unchanged", "Not a directory"}
			},
		},
		"config directory under a file": {
			setup: func(t *testing.T, h dnsmasqHost) string {
				file := filepath.Join(h.dir, "plain-file")
				require.NoError(t, os.WriteFile(file, nil, 0o644))
				return filepath.Join(file, "dnsmasq.d")
			},
			want: func(f DNSMasqFile) []string {
				return []string{"unable to write " + f.Path() + " through " + f.Path() + ".tmp"}
			},
		},
		"config directory missing": {
			setup: func(t *testing.T, h dnsmasqHost) string { return filepath.Join(h.dir, "no-such-dir") },
			want: func(f DNSMasqFile) []string {
				return []string{"unable to write " + f.Path() + " through " + f.Path() + ".tmp", "No such file or directory"}
			},
		},
		"target replaced by a directory": {
			setup: func(t *testing.T, h dnsmasqHost) string {
				target := filepath.Join(h.confDir, "talos-homelab.conf")
				require.NoError(t, os.MkdirAll(filepath.Join(target, "inside"), 0o755))
				return h.confDir
			},
			want: func(f DNSMasqFile) []string {
				return []string{"unable to back up " + f.Path() + " to ", f.Path() + " is unchanged"}
			},
		},
		// cp into a directory of the staging file's name, then mv of that
		// directory into place, both succeed: only a check of what is in
		// place afterwards notices that no reservation file is there.
		"staging file replaced by a directory": {
			setup: func(t *testing.T, h dnsmasqHost) string {
				require.NoError(t, os.MkdirAll(filepath.Join(h.confDir, "talos-homelab.conf.tmp", "inside"), 0o755))
				return h.confDir
			},
			want: func(f DNSMasqFile) []string {
				return []string{f.Path() + ".tmp"}
			},
		},
	}
	if os.Geteuid() != 0 {
		cases["config directory without write permission"] = struct {
			setup func(t *testing.T, h dnsmasqHost) string
			want  func(f DNSMasqFile) []string
		}{
			setup: func(t *testing.T, h dnsmasqHost) string {
				require.NoError(t, os.Chmod(h.confDir, 0o555))
				t.Cleanup(func() { _ = os.Chmod(h.confDir, 0o755) })
				return h.confDir
			},
			want: func(f DNSMasqFile) []string {
				return []string{"unable to write " + f.Path() + " through " + f.Path() + ".tmp", "Permission denied"}
			},
		}
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newDNSMasqHost(t)
			f := h.file()
			f.Dir = c.setup(t, h)
			out, err := h.run(t, f.InstallScript(), f.Render(homelab))
			assertFailed(t, h, out, err, c.want(f)...)
			assert.NotContains(t, out, " is installed")
			if info, statErr := os.Stat(f.Path()); statErr == nil {
				assert.False(t, info.Mode().IsRegular(), "a reservation file in place after a failed install")
			}
		})
	}
}

// fakeDNSMasq puts a dnsmasq first on PATH that runs the real one and, on
// the whole-configuration check (the one with --conf-dir), runs sabotage
// after it: what happens on the host between the install and the rollback.
func (h dnsmasqHost) fakeDNSMasq(t *testing.T, sabotage string) {
	t.Helper()
	script := "#!/bin/sh\n" + shell.Quote(h.dnsmasq) + ` "$@"
rc=$?
case "$*" in *--conf-dir=*) ` + sabotage + ` ;; esac
exit $rc
`
	scripttest.Write(t, filepath.Join(h.bin, "dnsmasq"), script)
}

// The rollback after a rejected configuration: when the previous file
// cannot be put back (or the rejected one removed), the message says so and
// names the file, instead of "is back as it was".
func TestDNSMasqFailingRollbackIsReported(t *testing.T) {
	t.Parallel()
	// Another file of the host reserves cp-0's address for another MAC, so
	// the whole configuration with the new file is rejected.
	conflict := func(t *testing.T, h dnsmasqHost) {
		t.Helper()
		require.NoError(t, os.WriteFile(filepath.Join(h.confDir, "other.conf"), []byte("dhcp-host=02:00:00:00:00:99,10.10.0.10,nas\n"), 0o644))
	}

	t.Run("previous file cannot be put back", func(t *testing.T) {
		t.Parallel()
		h := newDNSMasqHost(t)
		f := h.file()
		previous := f.Render(homelab[1:])
		out, err := h.run(t, f.InstallScript(), previous)
		require.NoError(t, err, out)
		require.NoError(t, os.Remove(h.restarted))
		conflict(t, h)
		// The directory turns into a file after the check.
		h.fakeDNSMasq(t, "mv "+shell.Quote(h.confDir)+" "+shell.Quote(h.confDir+".gone")+" && : > "+shell.Quote(h.confDir))

		out, err = h.run(t, f.InstallScript(), f.Render(homelab))
		assertFailed(t, h, out, err,
			"dnsmasq --test rejected the configuration with the new reservations, and unable to put the previous "+f.Path()+" back (it holds the rejected reservations)",
			"10.10.0.10")
		assert.NotContains(t, out, "is back as it was")
	})

	t.Run("rejected file cannot be removed", func(t *testing.T) {
		t.Parallel()
		h := newDNSMasqHost(t)
		f := h.file()
		conflict(t, h)
		// The new file turns into a directory after the check.
		h.fakeDNSMasq(t, "rm -f "+shell.Quote(f.Path())+" && mkdir -p "+shell.Quote(f.Path()+"/inside"))

		out, err := h.run(t, f.InstallScript(), f.Render(homelab))
		assertFailed(t, h, out, err, "unable to put the previous "+f.Path()+" back")
		assert.NotContains(t, out, "is back as it was")
	})

	t.Run("rollback that works", func(t *testing.T) {
		t.Parallel()
		h := newDNSMasqHost(t)
		f := h.file()
		previous := f.Render(homelab[1:])
		out, err := h.run(t, f.InstallScript(), previous)
		require.NoError(t, err, out)
		require.NoError(t, os.Remove(h.restarted))
		conflict(t, h)
		out, err = h.run(t, f.InstallScript(), f.Render(homelab))
		assertFailed(t, h, out, err, f.Path()+" is back as it was")
		got, readErr := os.ReadFile(f.Path())
		require.NoError(t, readErr)
		assert.Equal(t, previous, string(got))
	})
}

// The removal: a file that cannot be removed fails the destroy, naming it.
func TestDNSMasqRemoveFailsWhenTheFileStays(t *testing.T) {
	t.Parallel()
	h := newDNSMasqHost(t)
	f := h.file()
	out, err := h.run(t, f.InstallScript(), f.Render(homelab))
	require.NoError(t, err, out)
	require.NoError(t, os.Remove(h.restarted))
	// dhcp_release runs after the backup and before the removal: it turns
	// the file into a directory, which rm -f cannot remove.
	h.writeLeases(t, cp0Lease)
	h.fakeDHCPRelease(t, "rm -f "+shell.Quote(f.Path())+" && mkdir -p "+shell.Quote(f.Path()+"/inside"))

	out, err = h.run(t, f.RemoveScript(), "")
	assertFailed(t, h, out, err, "unable to remove "+f.Path())
	assert.NotContains(t, out, " removed")
}

// The restart command runs in a shell of its own: quotes, parentheses and
// braces in it are its own business and cannot end the script's command
// substitution or group early, and its failure is the script's.
func TestDNSMasqRestartCommandRunsInItsOwnShell(t *testing.T) {
	t.Parallel()
	h := newDNSMasqHost(t)
	f := h.file()
	f.Restart = `echo "it's } ) done" && touch ` + shell.Quote(h.restarted)
	out, err := h.run(t, f.InstallScript(), f.Render(homelab))
	require.NoError(t, err, out)
	assert.Contains(t, out, f.Path()+" installed; dnsmasq restarted")
	assert.FileExists(t, h.restarted)

	f.Restart = "exit 0; } 2>&1); then :; fi; echo escaped; ( {"
	out, err = h.run(t, f.InstallScript(), f.Render(homelab))
	require.Error(t, err, out)
	assert.Contains(t, out, "restarting dnsmasq failed", "a syntax error of the command is its failure")
	assert.NotContains(t, out, "\nescaped")
}
