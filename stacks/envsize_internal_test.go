package stacks

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// execWithEnv starts a real program with env as its whole environment, as
// the language host starts the Pulumi program.
func execWithEnv(t *testing.T, env string) error {
	t.Helper()
	bin, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1) to exec")
	}
	cmd := exec.Command(bin)
	cmd.Env = []string{env}
	return cmd.Run()
}

func requireLinux4KPages(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("MAX_ARG_STRLEN is Linux's limit")
	}
	if os.Getpagesize() != 4096 {
		t.Skipf("pages of %d bytes: MAX_ARG_STRLEN is 32 of them, more than the 128 KiB checked", os.Getpagesize())
	}
}

// The limit is real: an environment string of maxEnvString bytes (NUL
// included) execs, one byte more fails with E2BIG, the "argument list too
// long" the Pulumi CLI shows.
func TestMaxEnvStringIsWhatExecTakes(t *testing.T) {
	t.Parallel()
	requireLinux4KPages(t)
	entry := func(size int) string {
		prefix := configEnvName + "="
		return prefix + strings.Repeat("x", size-len(prefix)-1) // -1: the NUL
	}
	require.NoError(t, execWithEnv(t, entry(maxEnvString)))
	err := execWithEnv(t, entry(maxEnvString+1))
	require.ErrorIs(t, err, syscall.E2BIG)
	assert.Contains(t, err.Error(), "argument list too long")
}

// Load's measure is the language host's: a config right at the limit loads
// without a size error and starts a program with PULUMI_CONFIG built as the
// host builds it; one byte more is reported, naming the patch that makes it
// large, and the program could not have been started.
func TestConfigSizeCheckMatchesExec(t *testing.T) {
	t.Parallel()
	requireLinux4KPages(t)
	values := func(pad int) map[string]string {
		patch := "machine:\n  sysctls:\n    vm.nr_hugepages: \"0\"\n# " + strings.Repeat("x", pad) + "\n"
		cluster, err := json.Marshal(map[string]any{
			"name": "lab", "talosVersion": "v1.12.4", "network": map[string]any{"gateway": "10.10.0.1"},
			"patches": map[string]any{"all": []any{patch}},
		})
		require.NoError(t, err)
		return map[string]string{
			"talos-cluster:platform": "proxmox", "talos-cluster:cluster": string(cluster),
			"talos-cluster:nodes": `{"controlPlanes":[{"name":"cp-0","ip":"10.10.0.10","vmId":110}]}`,
			"proxmoxve:endpoint":  "https://192.168.122.70:8006/", // other namespaces count too
		}
	}
	pad := maxEnvString - configEnvLen(values(0))
	require.Positive(t, pad)
	pulumiConfig := func(v map[string]string) string {
		b, err := json.Marshal(v) // what the Go language host does
		require.NoError(t, err)
		return configEnvName + "=" + string(b)
	}

	atLimit := values(pad)
	require.Equal(t, maxEnvString, configEnvLen(atLimit))
	d := &Diagnostics{}
	checkConfigSize(d, Source{Project: "talos-cluster", Values: atLimit})
	assert.Empty(t, d.Errors)
	require.NoError(t, execWithEnv(t, pulumiConfig(atLimit)))

	over := values(pad + 1)
	d = &Diagnostics{}
	checkConfigSize(d, Source{Project: "talos-cluster", Values: over})
	require.Len(t, d.Errors, 1)
	assert.Equal(t, "cluster.patches.all[0]", d.Errors[0].Path)
	assert.Contains(t, d.Errors[0].Message, "of the stack config's 128.0 KiB (131073 bytes)")
	assert.Contains(t, d.Errors[0].Message, "which Linux limits to 128 KiB")
	assert.Contains(t, d.Errors[0].Message, "make the config at least 1 byte smaller")
	require.ErrorIs(t, execWithEnv(t, pulumiConfig(over)), syscall.E2BIG)
	assert.Len(t, TooLargeProblems((&Diagnostics{Errors: d.Errors}).Err()), 1)
}

// The key named is the deepest holding at least half of the biggest
// top-level key: one Helm value, one node's patch, or the top-level key
// when no part of it dominates; other namespaces by their full key.
func TestLargestPartNamesTheKey(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("y", 2000)
	for _, tc := range []struct {
		name   string
		values map[string]string
		want   string
	}{
		{"a Helm value", map[string]string{
			"p:cluster": `{"name":"x","cilium":{"values":{"small":1,"big":"` + big + `"}}}`, "p:platform": "vps",
		}, "cluster.cilium.values.big"},
		{"a node's patch", map[string]string{
			"p:nodes": `{"workers":[{"name":"a"},{"name":"b","patches":["` + big + `"]}]}`,
		}, "nodes.workers[1].patches[0]"},
		{"no part dominates", map[string]string{
			"p:nodes": `{"a":"` + big[:900] + `","b":"` + big[:900] + `","c":"` + big[:900] + `"}`,
		}, "nodes"},
		{"another namespace", map[string]string{"p:platform": "vps", "other:key": big}, "other:key"},
		{"not JSON", map[string]string{"p:cluster": big}, "cluster"},
	} {
		part, _ := largestPart(Source{Project: "p", Values: tc.values})
		assert.Equal(t, tc.want, part.path, tc.name)
	}
}

func TestFormatSize(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "1 byte", formatSize(1))
	assert.Equal(t, "1023 bytes", formatSize(1023))
	assert.Equal(t, "128 KiB", formatSize(maxEnvString))
	assert.Equal(t, "128.5 KiB (131584 bytes)", formatSize(maxEnvString+512))
	assert.Nil(t, TooLargeProblems(errors.New("other")))
}
