package talos_test

import (
	"net/netip"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/talos"
)

// guardedArgs is a 1+2 cluster whose second worker carries patches.
func guardedArgs(clusterPatches *talos.ClusterPatches, nodePatches ...string) *talos.ClusterArgs {
	ns := nodes(1, 2)
	ns[2].UserPatches = nodePatches
	return &talos.ClusterArgs{
		Cluster: talos.ClusterSettings{
			Name: "lab", TalosVersion: "v1.13.9", VIP: "10.0.0.5", Patches: clusterPatches,
		},
		InstallerImage: pulumi.String("factory.talos.dev/metal-installer/abc:v1.13.9"),
		Nodes:          ns,
	}
}

// withKubeSpan turns KubeSpan on.
func withKubeSpan(a *talos.ClusterArgs) *talos.ClusterArgs {
	a.Cluster.KubeSpan = &talos.KubeSpanSettings{Enabled: true}
	return a
}

// withDataDisk gives the second worker a 20 GiB data disk.
func withDataDisk(a *talos.ClusterArgs) *talos.ClusterArgs {
	a.Nodes[2].DataDiskSize = 20
	return a
}

// The guard is the TalosCluster's own check: a program in any language
// that gives it a patch undoing what the cluster needs gets an error naming
// the input, and nothing is registered.
func TestTheTalosClusterRefusesPatchesThatBreakIt(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		args *talos.ClusterArgs
		path string
		msg  string
	}{
		"kube-proxy on for all nodes": {
			guardedArgs(&talos.ClusterPatches{All: []string{"cluster:\n  proxy:\n    disabled: false\n"}}),
			"cluster.patches.all[0]", "enables kube-proxy on all nodes",
		},
		"KubePrism off on one worker": {
			guardedArgs(nil, "machine:\n  features:\n    kubePrism:\n      enabled: false\n"),
			"nodes[2].patches[0]", "disables KubePrism on this worker",
		},
		"KubeSpan's document turned off on one worker": {
			withKubeSpan(guardedArgs(nil, "apiVersion: v1alpha1\nkind: KubeSpanConfig\nenabled: false\n")),
			"nodes[2].patches[0]", "turns off KubeSpan or the cluster discovery it needs on this worker while cluster.kubeSpan.enabled is on",
		},
		"the discovery turned off for all nodes": {
			withKubeSpan(guardedArgs(&talos.ClusterPatches{All: []string{"cluster:\n  discovery:\n    enabled: false\n"}})),
			"cluster.patches.all[0]", "turns off KubeSpan or the cluster discovery it needs on all nodes",
		},
		"the data volume deleted on one worker": {
			withDataDisk(guardedArgs(nil, "apiVersion: v1alpha1\nkind: UserVolumeConfig\nname: longhorn\n$patch: delete\n")),
			"nodes[2].patches[0]", `removes the user volume "longhorn" of the data disk on this worker`,
		},
		"the kubelet section deleted for the workers": {
			withDataDisk(guardedArgs(&talos.ClusterPatches{Worker: []string{"machine:\n  kubelet:\n    $patch: delete\n"}})),
			"cluster.patches.worker[0]", "removes the kubelet's rshared mount of /var/mnt/longhorn on workers",
		},
		"a patch Talos cannot load": {
			guardedArgs(nil, "machine: [unclosed\n"),
			"nodes[2].patches[0]", "is not a machine-config patch Talos can load",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := &componentstest.Engine{}
			err := pulumi.RunErr(func(ctx *pulumi.Context) error {
				_, err := talos.NewClusterWithDeps(ctx, "lab", c.args, talos.Deps{Hooks: &componentstest.Hooks{}})
				return err
			}, pulumi.WithMocks("talos-cluster", "test", e))
			require.Error(t, err)
			var invalid *inputs.Error
			require.ErrorAs(t, err, &invalid)
			assert.Contains(t, invalid.Paths(), c.path)
			assert.Contains(t, err.Error(), c.msg)
			assert.Empty(t, e.All(), "nothing is registered")
		})
	}
}

// The caller names the inputs in its own terms (the program: the stack
// file's keys); the guard's findings carry them.
func TestTheGuardSpeaksTheCallersNames(t *testing.T) {
	t.Parallel()
	args := guardedArgs(nil, "cluster:\n  network:\n    cni:\n      name: flannel\n")
	args.InputName = func(path string) string {
		if path == "nodes[2].patches[0]" {
			return "nodes.workers[1].patches[0]"
		}
		return path
	}
	err := args.Validate("lab")
	var invalid *inputs.Error
	require.ErrorAs(t, err, &invalid)
	assert.Equal(t, []string{"nodes.workers[1].patches[0]"}, invalid.Paths())
	assert.Contains(t, err.Error(), `makes Talos deploy the "flannel" CNI on this worker`)
}

// Warnings stay warnings: a cluster whose approver accepts every address
// is valid, and CheckOverrides says what it weakens, judged against the
// nodes' network when the platform knows it.
func TestTheGuardWarnsWithoutRefusing(t *testing.T) {
	t.Parallel()
	args := guardedArgs(nil)
	args.Cluster.CertApprover = &talos.ChartSettings{Values: map[string]any{"providerIpPrefixes": []any{"10.0.0.0/24"}}}
	require.NoError(t, args.Validate("lab"))
	o := args.CheckOverrides(netip.Prefix{})
	require.Len(t, o.Warnings, 1)
	assert.Equal(t, "cluster.certApprover.values.providerIpPrefixes[0]", o.Warnings[0].Path)
	assert.Contains(t, o.Warnings[0].Message, "outside the nodes' network")
	assert.Empty(t, args.CheckOverrides(netip.MustParsePrefix("10.0.0.0/24")).Warnings, "inside the nodes' network")
}

// The guard runs in every construction of a cluster (and the Go program
// names its findings by stack key first): what one run of it costs for a
// 3+2 cluster with patches.
func BenchmarkCheckOverrides(b *testing.B) {
	args := guardedArgs(&talos.ClusterPatches{Worker: []string{"machine:\n  sysctls:\n    vm.nr_hugepages: \"64\"\n"}},
		"machine:\n  kubelet:\n    extraArgs:\n      max-pods: \"150\"\n")
	args.Nodes = append(args.Nodes, nodes(3, 2)[1:3]...)
	b.ReportAllocs()
	for b.Loop() {
		if o := args.CheckOverrides(netip.Prefix{}); len(o.Errors) > 0 {
			b.Fatal(o.Errors)
		}
	}
}

// A node's KubeSpan endpoints are refused by path when they are no
// address and port, or without KubeSpan.
func TestKubeSpanEndpointsAreChecked(t *testing.T) {
	t.Parallel()
	a := guardedArgs(nil)
	a.Nodes[1].KubeSpanEndpoints = []string{"198.51.100.7:51820"}
	var ie *inputs.Error
	require.ErrorAs(t, a.Validate("lab"), &ie)
	assert.Equal(t, "nodes[1].kubeSpanEndpoints", ie.Problems[0].Path)
	assert.Contains(t, ie.Problems[0].Message, "needs KubeSpan: set cluster.kubeSpan.enabled")

	withKubeSpan(a)
	require.NoError(t, a.Validate("lab"))
	a.Nodes[1].KubeSpanEndpoints = []string{"198.51.100.7", "198.51.100.7:0", "nat.example.com:51820", "[fe80::1%eth0]:51820"}
	require.ErrorAs(t, a.Validate("lab"), &ie)
	var paths []string
	for _, p := range ie.Problems {
		paths = append(paths, p.Path)
	}
	assert.Equal(t, []string{"nodes[1].kubeSpanEndpoints[0]", "nodes[1].kubeSpanEndpoints[1]", "nodes[1].kubeSpanEndpoints[2]", "nodes[1].kubeSpanEndpoints[3]"}, paths)
}

// Cilium settings known to break Talos's networking (issue 48, item 14):
// eBPF masquerading without bpf.hostLegacyRouting bypasses the host's
// stack (Cilium's Talos install guide, cilium/cilium#36852: Talos's kube-dns
// forwarding stops answering; siderolabs/talos#11235: KubeSpan never sees
// pod traffic), native routing is not carried by KubeSpan
// (siderolabs/talos#9043). Refused with KubeSpan, the first warned without.
func TestCiliumSettingsThatBreakKubeSpanAreRefused(t *testing.T) {
	t.Parallel()
	masq := map[string]any{"bpf": map[string]any{"masquerade": true}}
	with := func(values map[string]any, kubeSpan bool) talos.Overrides {
		a := guardedArgs(nil)
		if kubeSpan {
			a = withKubeSpan(a)
		}
		a.Cluster.Cilium = &talos.ChartSettings{Values: values}
		return a.CheckOverrides(netip.Prefix{})
	}
	o := with(masq, true)
	require.Len(t, o.Errors, 1, "%v", o.Errors)
	assert.Equal(t, "cluster.cilium.values.bpf.masquerade", o.Errors[0].Path)
	assert.Contains(t, o.Errors[0].Message, "true without bpf.hostLegacyRouting: true turns on Cilium's eBPF host routing")
	assert.Contains(t, o.Errors[0].Message, "never reaches KubeSpan's WireGuard interface")

	o = with(masq, false)
	assert.Empty(t, o.Errors)
	require.Len(t, o.Warnings, 1, "%v", o.Warnings)
	assert.Contains(t, o.Warnings[0].Message, "machine.features.hostDNS.forwardKubeDNSToHost")

	o = with(map[string]any{"bpf": map[string]any{"masquerade": true, "hostLegacyRouting": true}}, true)
	assert.Empty(t, o.Errors, "with the host's routing kept")
	assert.Empty(t, o.Warnings)

	o = with(map[string]any{"routingMode": "native"}, true)
	require.Len(t, o.Errors, 1, "%v", o.Errors)
	assert.Equal(t, "cluster.cilium.values.routingMode", o.Errors[0].Path)
	assert.Contains(t, o.Errors[0].Message, "siderolabs/talos#9043")
	assert.Empty(t, with(map[string]any{"routingMode": "native"}, false).Errors, "without KubeSpan the nodes' own network carries it")
}
