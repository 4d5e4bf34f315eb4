package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/exitcode"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// pulumi fails on a config too large to start the program with by a bare
// "argument list too long": exec says first which key makes it large.
func TestExecNamesTheKeyOfAConfigTooLargeToStartTheProgram(t *testing.T) {
	t.Parallel()
	src := stackstest.EditSection(t, stackstest.Example(t, stackstest.ProxmoxExample), "cluster", func(c map[string]any) {
		c["patches"] = map[string]any{"all": []any{"machine:\n  sysctls: {}\n# " + strings.Repeat("x", 130*1024)}}
	})
	e, out, errOut := accessEnvFor(stackstest.ConfigJSON(t, src), nil)
	code := execCmd(context.Background(), []string{"--stack", "proxmox-homelab", "--", "sh", "-c", "echo ran"}, e)
	assert.Equal(t, exitcode.OK, code, "the command still runs: pulumi refresh needs no program")
	assert.Equal(t, "ran\n", out.String())
	assert.Contains(t, errOut.String(), "stackctl exec: cluster.patches.all[0]: holds ")
	assert.Contains(t, errOut.String(), `"argument list too long"`)

	// Other problems are left to pulumi, which runs the program and lists them.
	e, _, errOut = accessEnvFor(proxmoxStack(t, func(px map[string]any) { px["bios"] = "uefi" }), nil)
	assert.Equal(t, exitcode.OK, execCmd(context.Background(), []string{"--stack", "proxmox-homelab", "--", "true"}, e))
	assert.NotContains(t, errOut.String(), "proxmox.bios")
}
