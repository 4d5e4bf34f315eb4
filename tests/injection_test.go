package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluodata/talos-pulumi/internal/testkit/scripttest"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/servers"
	"github.com/fluodata/talos-pulumi/internal/shell/shelltest"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// shellField is a stack field whose value reaches a shell: a generated
// script or command of the program (the dnsmasq reservation scripts on the
// Proxmox host and the VPS install), or its environment or stdin. (The ISO
// eject and the waits run in the program, in Go: no shell sees the
// endpoint or a node's address.) (proxmox.dnsmasq.restartCommand and vps.rebootCommand are shell
// code by design: each runs as a command of its own, see
// TestDNSMasqRestartCommandRunsInItsOwnShell; the doctor's command is tested
// in cmd/stackctl/internal/doctor, the Makefile's in makefile_quote_test.go.)
type shellField struct {
	key      string
	platform stacks.Platform
	// set puts value (holding the breakout) into the field; scratch is
	// where the generated scripts may write.
	set func(t *testing.T, src stacks.Source, scratch, payload string) stacks.Source
}

func setIn(section string, f func(m map[string]any, scratch, payload string)) func(*testing.T, stacks.Source, string, string) stacks.Source {
	return func(t *testing.T, src stacks.Source, scratch, payload string) stacks.Source {
		return edit(t, src, section, func(m map[string]any) { f(m, scratch, payload) })
	}
}

func firstNode(m map[string]any) map[string]any {
	return m["controlPlanes"].([]any)[0].(map[string]any)
}

var shellFields = []shellField{
	// Proxmox: the reservation scripts' variables and their stdin.
	{"proxmox.dnsmasq.configDir", stacks.PlatformProxmox, setIn("proxmox", func(m map[string]any, scratch, p string) {
		m["dnsmasq"].(map[string]any)["configDir"] = filepath.Join(scratch, "conf") + p
	})},
	{"proxmox.dnsmasq.leaseFile", stacks.PlatformProxmox, setIn("proxmox", func(m map[string]any, scratch, p string) {
		m["dnsmasq"].(map[string]any)["leaseFile"] = filepath.Join(scratch, "leases") + p
	})},
	{"proxmox.bridge", stacks.PlatformProxmox, setIn("proxmox", func(m map[string]any, _, p string) { m["bridge"] = "vmbr1" + p })},
	{"proxmox.apiTokenId", stacks.PlatformProxmox, setIn("proxmox", func(m map[string]any, _, p string) { m["apiTokenId"] = "root" + p + "@pam!pulumi" })},
	{"proxmox.noProxy[0]", stacks.PlatformProxmox, setIn("proxmox", func(m map[string]any, _, p string) { m["noProxy"] = []any{"charts" + p + ".lan"} })},
	{"cluster.name", stacks.PlatformProxmox, setIn("cluster", func(m map[string]any, _, p string) { m["name"] = "homelab" + p })},
	{"nodes.controlPlanes[0].name", stacks.PlatformProxmox, setIn("nodes", func(m map[string]any, _, p string) { firstNode(m)["name"] = "cp-0" + p })},
	{"nodes.controlPlanes[0].ip", stacks.PlatformProxmox, setIn("nodes", func(m map[string]any, _, p string) { firstNode(m)["ip"] = "10.10.0.10" + p })},
	{"nodes.controlPlanes[0].mac", stacks.PlatformProxmox, setIn("nodes", func(m map[string]any, _, p string) { firstNode(m)["mac"] = "52:54:00:10:10:10" + p })},
	{"nodes.controlPlanes[0].proxmoxNode", stacks.PlatformProxmox, setIn("nodes", func(m map[string]any, _, p string) { firstNode(m)["proxmoxNode"] = "pve" + p })},
	// VPS: the install's variables (preamble), the wait's environment.
	{"vps.imageUrl", stacks.PlatformVPS, setIn("vps", func(m map[string]any, _, p string) {
		m["imageUrl"] = "https://mirror.example.com/talos" + p + "/metal-amd64.raw.zst"
	})},
	{"cluster.installDisk", stacks.PlatformVPS, setIn("cluster", func(m map[string]any, _, p string) { m["installDisk"] = "/dev/sda" + p })},
	{"nodes.controlPlanes[0].installDisk", stacks.PlatformVPS, setIn("nodes", func(m map[string]any, _, p string) { firstNode(m)["installDisk"] = "/dev/sdb" + p })},
	{"nodes.controlPlanes[0].rescue.host", stacks.PlatformVPS, setIn("nodes", func(m map[string]any, _, p string) {
		firstNode(m)["rescue"].(map[string]any)["host"] = "rescue" + p + ".example.net"
	})},
	{"nodes.controlPlanes[0].name", stacks.PlatformVPS, setIn("nodes", func(m map[string]any, _, p string) { firstNode(m)["name"] = "node-0" + p })},
	{"vps.talosWaitTimeout", stacks.PlatformVPS, setIn("vps", func(m map[string]any, _, p string) { m["talosWaitTimeout"] = "30m" + p })},
}

// injectionBase is an example stack whose scripts may run here: the dnsmasq
// directory and lease file in scratch, a restart that leaves a mark there.
func injectionBase(t *testing.T, platform stacks.Platform, scratch string) stacks.Source {
	t.Helper()
	if platform == stacks.PlatformVPS {
		return stackstest.Example(t, stackstest.VPSExample)
	}
	return edit(t, stackstest.Example(t, stackstest.ProxmoxExample), "proxmox", func(m map[string]any) {
		d := m["dnsmasq"].(map[string]any)
		d["configDir"] = filepath.Join(scratch, "conf")
		d["leaseFile"] = filepath.Join(scratch, "leases")
		d["restartCommand"] = "touch restarted"
	})
}

// For every field that reaches a shell and every breakout, either
// validation refuses the value naming the field, or the program's generated
// scripts and commands, run by sh here against scratch files, take it as
// data: they write where the value says, pass it on unchanged, and run
// nothing of it. Values the validation lets through are all set at once, so
// one deployment per platform and breakout runs them all.
func TestEveryValueThatReachesAShellIsRefusedOrData(t *testing.T) {
	t.Parallel()
	fakeBin := t.TempDir()
	for name, script := range map[string]string{
		"dnsmasq":      "#!/bin/sh\nexit 0\n",
		"dhcp_release": "#!/bin/sh\nexit 0\n",
	} {
		scripttest.Write(t, filepath.Join(fakeBin, name), script)
	}
	for _, payload := range shelltest.Breakouts {
		for _, platform := range []stacks.Platform{stacks.PlatformProxmox, stacks.PlatformVPS} {
			scratch := t.TempDir()
			src := injectionBase(t, platform, scratch)
			var accepted []string
			for _, f := range shellFields {
				if f.platform != platform {
					continue
				}
				one := f.set(t, src, scratch, payload)
				if _, d := program.Validate(one); d.HasErrors() {
					var named bool
					for _, p := range d.Errors {
						named = named || p.Path == f.key
					}
					assert.True(t, named, "%s = ...%q: refused without naming the key:\n%v", f.key, payload, d.Err())
					continue
				}
				accepted = append(accepted, f.key)
				src = f.set(t, src, scratch, payload)
			}
			if len(accepted) == 0 {
				continue
			}
			cfg, d := program.Validate(src)
			require.NoError(t, d.Err(), "%q in %v", payload, accepted)
			t.Logf("%s: %q reaches the scripts as data through %v", platform, payload, accepted)
			e, _ := deploy(t, src)
			if platform == stacks.PlatformProxmox {
				runReservationScripts(t, e, cfg, scratch, fakeBin, payload)
			} else {
				runInstallPreamble(t, e, cfg, scratch, payload)
			}
		}
	}
}

// runIn runs script with sh in dir, the fakes first on PATH.
func runIn(t *testing.T, dir, fakeBin, script, stdin string, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(append(os.Environ(), "PATH="+fakeBin+":"+os.Getenv("PATH"), "TMPDIR="+dir), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func plainString(v resource.PropertyValue) string {
	if v.IsSecret() {
		return v.SecretValue().Element.StringValue()
	}
	return v.StringValue()
}

// The reservation scripts write the file in the directory the stack names,
// exactly, and remove it again.
func runReservationScripts(t *testing.T, e *componentstest.Engine, cfg *stacks.Config, scratch, fakeBin, payload string) {
	t.Helper()
	dhcp := e.One(t, componentstest.RemoteCommand)
	dir := cfg.Proxmox.DNSMasq.ConfigDir
	require.NoError(t, os.MkdirAll(dir, 0o755))
	file := filepath.Join(dir, "talos-"+cfg.Cluster.Name+".conf")
	stdin := plainString(dhcp.Inputs["stdin"])

	out, err := runIn(t, scratch, fakeBin, dhcp.Inputs["create"].StringValue(), stdin)
	require.NoError(t, err, "%q: %s", payload, out)
	assert.Contains(t, out, file+" installed; dnsmasq restarted")
	got, err := os.ReadFile(file) //nolint:gosec // the test's scratch file
	require.NoError(t, err, "%q: the file is where the stack says", payload)
	assert.Equal(t, stdin, string(got))
	assert.Contains(t, out, cfg.Proxmox.DNSMasq.LeaseFile+" does not exist", "%q: the lease file the stack names", payload)
	assert.FileExists(t, filepath.Join(scratch, "restarted"))

	out, err = runIn(t, scratch, fakeBin, dhcp.Inputs["delete"].StringValue(), "")
	require.NoError(t, err, "%q: %s", payload, out)
	assert.NoFileExists(t, file)
	assert.NoFileExists(t, filepath.Join(scratch, "pwned"), "%q ran as code in the reservation scripts", payload)
}

// The install's stdin is the variables, then install.sh as it is; bash
// reads the variables back unchanged.
func runInstallPreamble(t *testing.T, e *componentstest.Engine, cfg *stacks.Config, scratch, payload string) {
	t.Helper()
	ref := cfg.Nodes.Refs()[0]
	install := e.Named(t, componentstest.RemoteCommand, cfg.Cluster.Name+"-install-"+ref.Name)
	stdin := plainString(install.Inputs["stdin"])
	require.True(t, strings.HasSuffix(stdin, servers.InstallScript))
	preamble := strings.TrimSuffix(stdin, servers.InstallScript)
	cmd := exec.Command("bash", "-c", preamble+`printf '%s\0' "$IMAGE_URL" "$TARGET" "$REQUIRE_RESCUE"`)
	cmd.Dir = scratch
	out, err := cmd.Output()
	require.NoError(t, err, "%q", payload)
	assert.Equal(t, []string{cfg.VPS.ImageURL, ref.InstallDisk, "1", ""}, strings.Split(string(out), "\x00"), "%q", payload)
	assert.NoFileExists(t, filepath.Join(scratch, "pwned"), "%q ran as code in the install's variables", payload)
}
