package doctor_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluodata/talos-pulumi/internal/testkit/scripttest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/doctor"
	"github.com/fluodata/talos-pulumi/internal/shell/shelltest"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// The only stack value in the doctor's remote command is
// proxmox.dnsmasq.configDir. For every breakout, either validation refuses
// it (naming the key, and no command is sent), or the command the doctor
// sends, run by a local sh as the host's would run it, treats it as data:
// it finds the directory of that exact name (or says it is missing, naming
// it) and runs nothing.
func TestDoctorRemoteCommandRunsConfigDirAsData(t *testing.T) {
	t.Parallel()
	fakeBin := t.TempDir()
	scripttest.Write(t, filepath.Join(fakeBin, "dnsmasq"), "#!/bin/sh\nexit 0\n")
	for _, payload := range shelltest.Breakouts {
		for _, exists := range []bool{true, false} {
			scratch := t.TempDir()
			dir := filepath.Join(scratch, "dnsmasq.d") + payload
			src := stackstest.EditSection(t, stackstest.Example(t, stackstest.ProxmoxExample), "proxmox", func(px map[string]any) {
				px["access"] = stacks.AccessDirect
				px["dnsmasq"] = map[string]any{"enabled": true, "configDir": dir}
			})
			var sent []string
			e := env(healthyAPI())
			e.SSH = func(_ context.Context, _ *stacks.Config, command string) (string, error) {
				sent = append(sent, command)
				cmd := exec.Command("sh", "-c", command)
				cmd.Dir = scratch
				cmd.Env = append(os.Environ(), "PATH="+fakeBin+":"+os.Getenv("PATH"))
				out, err := cmd.CombinedOutput()
				return string(out), err
			}
			if exists {
				require.NoError(t, os.MkdirAll(dir, 0o755))
			}
			rs := doctor.Run(context.Background(), e, src, "proxmox-homelab")
			var b strings.Builder
			doctor.Print(&b, rs)
			out := b.String()

			assert.NoFileExists(t, filepath.Join(scratch, "pwned"), "%q ran as code", payload)
			if _, err := program.Validate(src); err.HasErrors() {
				assert.Contains(t, out, "proxmox.dnsmasq.configDir: ", "%q: refused, naming the key", payload)
				assert.Empty(t, sent, "%q: nothing is sent for an invalid stack", payload)
				continue
			}
			require.Len(t, sent, 1, out)
			if exists {
				assert.Contains(t, out, "ok    ssh", "%q: the directory of that name is found", payload)
				assert.Contains(t, out, "and "+dir+" exists")
			} else {
				assert.Contains(t, out, "FAIL  ssh", "%q", payload)
				assert.Contains(t, out, "no directory "+strings.TrimSpace(dir), "%q: the missing directory is named", payload)
			}
		}
	}
}
