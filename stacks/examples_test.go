package stacks_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// The example files are loaded the way the Pulumi CLI loads a stack (its own
// loaders, Pulumi.yaml's declared types and defaults, secrets set by path), so
// neither they nor Pulumi.yaml can rot without this failing.
func TestExamplesLoadAndValidate(t *testing.T) {
	t.Parallel()
	for _, file := range []string{stackstest.ProxmoxExample, stackstest.VPSExample} {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			cfg, diags := stacks.Load(stackstest.Example(t, file))
			require.NoError(t, diags.Err())
			assert.Empty(t, diags.Warnings, "an example should be clean")
			assert.NotEmpty(t, cfg.Cluster.Name)
		})
	}
}

func TestProxmoxExampleMatchesTheSeedNodeTable(t *testing.T) {
	t.Parallel()
	cfg, diags := stacks.Load(stackstest.Example(t, stackstest.ProxmoxExample))
	require.NoError(t, diags.Err())

	type row struct {
		name                          string
		vmID                          int
		ip                            string
		cores, memory, disk, dataDisk int
	}
	var got []row
	for _, n := range cfg.Nodes.All() {
		got = append(got, row{n.Name, n.VMID, n.IP, n.Cores, n.Memory, n.DiskSize, n.DataDiskSize})
	}
	assert.Equal(t, []row{
		{"cp-0", 110, "10.10.0.10", 2, 4096, 20, 0},
		{"worker-0", 120, "10.10.0.20", 4, 8192, 20, 20},
		{"worker-1", 121, "10.10.0.21", 4, 8192, 20, 20},
	}, got)
	assert.Equal(t, stacks.PlatformProxmox, cfg.Platform)
	assert.Equal(t, "10.10.0.1", cfg.Cluster.Network.Gateway)
	assert.Equal(t, "https://10.10.0.5:6443", cfg.KubernetesEndpoint())
	assert.Equal(t, "pve", cfg.Nodes.Workers[1].ProxmoxNode, "resolved from proxmox.node")
	assert.True(t, cfg.Proxmox.DNSMasqEnabled())
	assert.Equal(t, "0b9e4a52-3c1f-4b7e-9a2d-6f8e1c0d5a47", cfg.Proxmox.APITokenSecret.Reveal())
}

func TestVPSExampleIsOneCombinedNode(t *testing.T) {
	t.Parallel()
	cfg, diags := stacks.Load(stackstest.Example(t, stackstest.VPSExample))
	require.NoError(t, diags.Err())
	require.Len(t, cfg.Nodes.ControlPlanes, 1)
	assert.Empty(t, cfg.Nodes.Workers)
	n := cfg.Nodes.ControlPlanes[0]
	args := program.VPSArgs(cfg).WithDefaults()
	assert.Equal(t, 32, args.VPS.PrefixLength)
	assert.Equal(t, "203.0.113.254", args.VPS.Gateway, "the nodes' default gateway")
	assert.Equal(t, n.IP, n.Rescue.Host)
	assert.Equal(t, "/dev/sda", n.InstallDisk, "the example's own cluster.installDisk")
	assert.Equal(t, "/dev/sda", program.VPSArgs(cfg).TalosArgs(nil).Nodes[0].InstallDisk)
	assert.Equal(t, "https://203.0.113.10:6443", cfg.KubernetesEndpoint())
	assert.Equal(t, "rescue-pw-Xq81", n.Rescue.Password.Reveal())
	assert.True(t, strings.HasPrefix(cfg.Cluster.TalosVersion, "v"))
}

// Every value in the examples carries a comment: they are the user's manual.
func TestExampleValuesAreCommented(t *testing.T) {
	t.Parallel()
	valueLine := regexp.MustCompile(`^\s+(- |[A-Za-z-:]+: \S)`)
	for _, file := range []string{stackstest.ProxmoxExample, stackstest.VPSExample} {
		raw, err := os.ReadFile(filepath.Join(stackstest.RepoRoot(t), file))
		require.NoError(t, err)
		for i, line := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "#") || !valueLine.MatchString(line) {
				continue
			}
			assert.Contains(t, line, "#", "%s:%d has a value without a comment", file, i+1)
		}
	}
}
