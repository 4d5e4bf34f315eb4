package talos_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/gendata"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/components/vps"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

var update = flag.Bool("update", false, "rewrite golden files and the fixed secrets bundle")

const installer = "factory.talos.dev/metal-installer/SCHEMATIC:v1.13.9"

// runtimeMode implements validation.RuntimeMode (talosctl's implementation
// is internal to Talos). Metal images install to disk; nocloud runs in
// cloud mode.
type runtimeMode string

func (m runtimeMode) String() string        { return string(m) }
func (m runtimeMode) RequiresInstall() bool { return m == "metal" }
func (m runtimeMode) InContainer() bool     { return m == "container" }

const (
	metal     runtimeMode = "metal"
	cloud     runtimeMode = "cloud"
	container runtimeMode = "container"
)

// fixedBundle is the committed secrets bundle that makes generated configs
// reproducible (test-only key material).
func fixedBundle(t *testing.T) *secrets.Bundle {
	t.Helper()
	path := filepath.Join("testdata", "secrets.yaml")
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) && *update {
		vc, err := config.ParseContractFromVersion("v1.12.0")
		require.NoError(t, err)
		b, err := secrets.NewBundle(secrets.NewFixedClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), vc)
		require.NoError(t, err)
		out, err := yaml.Marshal(b)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, out, 0o600))
	}
	b, err := secrets.LoadBundle(path)
	require.NoError(t, err, "run `go test ./components/talos -update` once to create it")
	return b
}

// finalConfig reproduces what the provider does: its getConfiguration data
// source generates the role's base config with these generator options, and
// configurationApply applies the patches with configpatcher at plan time.
func finalConfig(t *testing.T, cluster, endpoint, talosVersion string, role talos.Role, patches []string) (config.Provider, error) {
	t.Helper()
	vc, err := config.ParseContractFromVersion(talosVersion)
	require.NoError(t, err)
	in, err := generate.NewInput(cluster, endpoint, constants.DefaultKubernetesVersion,
		generate.WithClusterDiscovery(true),
		generate.WithDNSDomain(constants.DefaultDNSDomain),
		generate.WithInstallDisk("/dev/sda"),
		generate.WithInstallImage("ghcr.io/siderolabs/installer:"+gendata.VersionTag),
		generate.WithSecretsBundle(fixedBundle(t)),
		generate.WithVersionContract(vc),
	)
	require.NoError(t, err)
	mt := machine.TypeWorker
	if role == talos.RoleControlPlane {
		mt = machine.TypeControlPlane
	}
	base, err := in.Config(mt)
	require.NoError(t, err)
	baseBytes, err := base.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	require.NoError(t, err)

	loaded, err := configpatcher.LoadPatches(patches)
	if err != nil {
		return nil, fmt.Errorf("load patches: %w", err)
	}
	out, err := configpatcher.Apply(configpatcher.WithBytes(baseBytes), loaded)
	if err != nil {
		return nil, fmt.Errorf("apply patches: %w", err)
	}
	final, err := out.Bytes()
	require.NoError(t, err)
	return configloader.NewFromBytes(final)
}

func validateFor(t *testing.T, cfg config.Provider, mode runtimeMode) error {
	t.Helper()
	warnings, err := cfg.Validate(mode, validation.WithLocal(), validation.WithStrict())
	if err != nil {
		return err
	}
	if len(warnings) > 0 {
		return fmt.Errorf("warnings: %v", warnings)
	}
	return nil
}

// docs splits the final config into its documents, keyed by kind.
func docs(t *testing.T, cfg config.Provider) map[string]map[string]any {
	t.Helper()
	raw, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	require.NoError(t, err)
	out := map[string]map[string]any{}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			break
		}
		kind, _ := doc["kind"].(string)
		if kind == "" {
			kind = "v1alpha1"
		}
		out[kind] = doc
	}
	return out
}

func get(v any, path string) any {
	for _, p := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			v = x[p]
		case []any:
			var i int
			_, _ = fmt.Sscan(p, &i)
			if i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

type exampleCase struct {
	file  string
	nodes func(*stacks.Config) []talos.NodeSpec
	mode  runtimeMode
}

// nodesOf are the nodes the stack's platform component hands to the
// TalosCluster.
func nodesOf(cfg *stacks.Config) []talos.NodeSpec { return program.TalosArgs(cfg).Nodes }

var examples = []exampleCase{
	{stackstest.ProxmoxExample, nodesOf, metal},
	{stackstest.VPSExample, nodesOf, metal},
}

func loadExample(t *testing.T, file string) *stacks.Config {
	t.Helper()
	cfg, d := stacks.Load(stackstest.Example(t, file))
	require.NoError(t, d.Err())
	return cfg
}

// The local example's configs are valid for Talos in a container, as
// Talos's own validation of container mode judges them (it asks for the
// host DNS features that pass the container's DNS on): the generated
// patches name no install disk, image or address, and Docker's network is
// the nodes'.
func TestLocalNodeConfigsValidateInContainerMode(t *testing.T) {
	t.Parallel()
	cfg := loadExample(t, stackstest.LocalExample)
	targs := program.TalosArgs(cfg)
	spec := targs.PatchSpec()
	for _, n := range targs.Nodes {
		final, err := finalConfig(t, cfg.Cluster.Name, cfg.KubernetesEndpoint(), cfg.Cluster.TalosVersion, n.Role, talos.NodePatches(spec, n, ""))
		require.NoError(t, err)
		require.NoError(t, validateFor(t, final, container), n.Name)
		v1 := docs(t, final)["v1alpha1"]
		assert.Equal(t, true, get(v1, "machine.features.hostDNS.enabled"), n.Name)
		assert.Equal(t, true, get(v1, "machine.features.hostDNS.forwardKubeDNSToHost"), n.Name)
		assert.Nil(t, get(v1, "machine.network.interfaces.0.addresses"), "Docker gives the address")
	}
	// A patch that turns the host DNS off is what Talos refuses in a
	// container: the validation above would catch it.
	n := targs.Nodes[0]
	off := append(talos.NodePatches(spec, n, ""), "machine:\n  features:\n    hostDNS:\n      forwardKubeDNSToHost: false\n")
	final, err := finalConfig(t, cfg.Cluster.Name, cfg.KubernetesEndpoint(), cfg.Cluster.TalosVersion, n.Role, off)
	require.NoError(t, err)
	require.ErrorContains(t, validateFor(t, final, container), "forwardKubeDNSToHost")
}

func TestExampleNodeConfigsValidate(t *testing.T) {
	t.Parallel()
	for _, ex := range examples {
		cfg := loadExample(t, ex.file)
		spec := program.TalosArgs(cfg).PatchSpec()
		for _, n := range ex.nodes(cfg) {
			t.Run(ex.file+"/"+n.Name, func(t *testing.T) {
				t.Parallel()
				final, err := finalConfig(t, cfg.Cluster.Name, cfg.KubernetesEndpoint(), cfg.Cluster.TalosVersion, n.Role, talos.NodePatches(spec, n, installer))
				require.NoError(t, err)
				require.NoError(t, validateFor(t, final, ex.mode))

				d := docs(t, final)
				v1 := d["v1alpha1"]
				assert.Equal(t, installer, get(v1, "machine.install.image"))
				assert.Equal(t, n.InstallDisk, get(v1, "machine.install.disk"))
				assert.Equal(t, "none", get(v1, "cluster.network.cni.name"))
				assert.Equal(t, true, get(v1, "cluster.proxy.disabled"))
				assert.Equal(t, "true", get(v1, "machine.kubelet.extraArgs.rotate-server-certificates"))
				assert.Equal(t, true, get(v1, "machine.network.interfaces.0.deviceSelector.physical"))
				assert.Equal(t, []any{"time.cloudflare.com"}, orNil(ex.file == stackstest.ProxmoxExample, get(v1, "machine.time.servers")),
					"the example's user patch for all nodes")
				// Pinned on every platform and in every addressing mode: a
				// DHCP server that sends no name would leave a generated one
				// that the approver's node-name pattern never matches.
				assert.Equal(t, n.Name, n.Hostname)
				assertHostname(t, d, n)
			})
		}
	}
}

func orNil(cond bool, v any) any {
	if cond {
		return v
	}
	return []any{"time.cloudflare.com"}
}

func assertHostname(t *testing.T, d map[string]map[string]any, n talos.NodeSpec) {
	t.Helper()
	h := d["HostnameConfig"]
	require.NotNil(t, h, "Talos 1.12 configs carry a HostnameConfig document")
	if n.Hostname == "" {
		assert.Equal(t, "stable", h["auto"], "DHCP names the node; Talos keeps its own stable fallback")
		assert.Nil(t, h["hostname"])
	} else {
		assert.Equal(t, "off", h["auto"])
		assert.Equal(t, n.Hostname, h["hostname"])
	}
	assert.Nil(t, get(d["v1alpha1"], "machine.network.hostname"))
}

func TestProxmoxExampleDetails(t *testing.T) {
	t.Parallel()
	cfg := loadExample(t, stackstest.ProxmoxExample)
	spec := program.TalosArgs(cfg).PatchSpec()
	for _, n := range program.TalosArgs(cfg).Nodes {
		final, err := finalConfig(t, cfg.Cluster.Name, cfg.KubernetesEndpoint(), cfg.Cluster.TalosVersion, n.Role, talos.NodePatches(spec, n, installer))
		require.NoError(t, err)
		v1 := docs(t, final)["v1alpha1"]
		assert.Equal(t, true, get(v1, "machine.network.interfaces.0.dhcp"), n.Name)
		if n.Role == talos.RoleControlPlane {
			assert.Equal(t, "10.10.0.5", get(v1, "machine.network.interfaces.0.vip.ip"), n.Name)
		} else {
			assert.Nil(t, get(v1, "machine.network.interfaces.0.vip"), n.Name)
		}
		assert.Equal(t, "https://10.10.0.5:6443", get(v1, "cluster.controlPlane.endpoint"))
		assert.Nil(t, get(v1, "cluster.allowSchedulingOnControlPlanes"), "the example has workers")
	}
}

func TestVPSExampleHasPointToPointRoutesAndASchedulableControlPlane(t *testing.T) {
	t.Parallel()
	cfg := loadExample(t, stackstest.VPSExample)
	n := program.TalosArgs(cfg).Nodes[0]
	final, err := finalConfig(t, cfg.Cluster.Name, cfg.KubernetesEndpoint(), cfg.Cluster.TalosVersion, n.Role,
		talos.NodePatches(program.TalosArgs(cfg).PatchSpec(), n, installer))
	require.NoError(t, err)
	require.NoError(t, validateFor(t, final, metal))
	v1 := docs(t, final)["v1alpha1"]
	assert.Equal(t, []any{"203.0.113.10/32"}, get(v1, "machine.network.interfaces.0.addresses"))
	assert.Equal(t, []any{
		map[string]any{"network": "203.0.113.254/32", "gateway": ""}, // Talos spells out the empty gateway of an on-link route
		map[string]any{"network": "0.0.0.0/0", "gateway": "203.0.113.254"},
	}, get(v1, "machine.network.interfaces.0.routes"), "on-link route to the gateway before the default route")
	assert.Equal(t, true, get(v1, "cluster.allowSchedulingOnControlPlanes"))
	assert.Nil(t, get(v1, "machine.network.interfaces.0.vip"))
}

// Edge cases beyond the examples, each validated by Talos in its runtime mode.
func TestEdgeCasesValidate(t *testing.T) {
	t.Parallel()
	cp := func(name, ip string) talos.NodeSpec {
		return talos.NodeSpec{Name: name, IP: ip, Role: talos.RoleControlPlane, InstallDisk: "/dev/sda", Network: talos.NodeNetwork{DHCP: true}}
	}
	cases := []struct {
		name  string
		spec  talos.PatchSpec
		node  talos.NodeSpec
		mode  runtimeMode
		check func(t *testing.T, d map[string]map[string]any)
	}{
		{"no workers: schedulable control plane", talos.PatchSpec{TalosVersion: "v1.12.4", SchedulableControlPlanes: true}, cp("cp-0", "10.0.0.10"), metal,
			func(t *testing.T, d map[string]map[string]any) {
				assert.Equal(t, true, get(d["v1alpha1"], "cluster.allowSchedulingOnControlPlanes"))
			}},
		{"VIP on a control plane", talos.PatchSpec{TalosVersion: "v1.12.4", VIP: "10.0.0.5"}, cp("cp-0", "10.0.0.10"), metal,
			func(t *testing.T, d map[string]map[string]any) {
				assert.Equal(t, "10.0.0.5", get(d["v1alpha1"], "machine.network.interfaces.0.vip.ip"))
			}},
		{"static address and routes in nocloud (cloud) mode", talos.PatchSpec{TalosVersion: "v1.12.4", Nameservers: []string{"10.0.0.1"}},
			talos.NodeSpec{Name: "w-0", IP: "10.0.0.20", Role: talos.RoleWorker, InstallDisk: "/dev/sda", Hostname: "w-0",
				Network: talos.NodeNetwork{Addresses: []string{"10.0.0.20/24"}, Routes: []talos.Route{{Network: "0.0.0.0/0", Gateway: "10.0.0.1"}}}}, cloud,
			func(t *testing.T, d map[string]map[string]any) {
				assert.Equal(t, []any{"10.0.0.1"}, get(d["v1alpha1"], "machine.network.nameservers"))
				assert.Equal(t, "10.0.0.1", get(d["v1alpha1"], "machine.network.interfaces.0.routes.0.gateway"))
			}},
		{"labels", talos.PatchSpec{TalosVersion: "v1.13.9"},
			talos.NodeSpec{Name: "w-0", IP: "10.0.0.20", Role: talos.RoleWorker, InstallDisk: "/dev/sda", Network: talos.NodeNetwork{DHCP: true},
				Labels: map[string]string{"example.com/tier": "batch", "node.kubernetes.io/pool": "a"}}, metal,
			func(t *testing.T, d map[string]map[string]any) {
				assert.Equal(t, map[string]any{"example.com/tier": "batch", "node.kubernetes.io/pool": "a"}, get(d["v1alpha1"], "machine.nodeLabels"))
			}},
		// A control plane's taints are Talos's to keep; a worker's Node
		// registers with them (its kubelet may not change them later).
		{"control-plane taints", talos.PatchSpec{TalosVersion: "v1.13.9"},
			talos.NodeSpec{Name: "cp-0", IP: "10.0.0.10", Role: talos.RoleControlPlane, InstallDisk: "/dev/sda", Network: talos.NodeNetwork{DHCP: true},
				Taints: map[string]string{"example.com/dedicated": "etcd:NoSchedule"}}, metal,
			func(t *testing.T, d map[string]map[string]any) {
				assert.Equal(t, map[string]any{"example.com/dedicated": "etcd:NoSchedule"}, get(d["v1alpha1"], "machine.nodeTaints"))
				assert.Nil(t, get(d["v1alpha1"], "machine.kubelet.extraConfig"))
			}},
		{"worker taints", talos.PatchSpec{TalosVersion: "v1.13.9"},
			talos.NodeSpec{Name: "w-0", IP: "10.0.0.20", Role: talos.RoleWorker, InstallDisk: "/dev/sda", Network: talos.NodeNetwork{DHCP: true},
				Taints: map[string]string{"example.com/gpu": "NoExecute", "example.com/pool": "gpu:NoSchedule"}}, metal,
			func(t *testing.T, d map[string]map[string]any) {
				assert.Nil(t, get(d["v1alpha1"], "machine.nodeTaints"))
				assert.Equal(t, []any{
					map[string]any{"key": "example.com/gpu", "effect": "NoExecute"},
					map[string]any{"key": "example.com/pool", "value": "gpu", "effect": "NoSchedule"},
				}, get(d["v1alpha1"], "machine.kubelet.extraConfig.registerWithTaints"))
			}},
		{"user patches in order: all, role, node", talos.PatchSpec{TalosVersion: "v1.12.4",
			AllPatches:          []string{"machine:\n  sysctls:\n    a.b: \"1\"\n"},
			ControlPlanePatches: []string{"machine:\n  sysctls:\n    a.b: \"2\"\n"},
			WorkerPatches:       []string{"machine:\n  sysctls:\n    a.b: \"9\"\n"}},
			func() talos.NodeSpec {
				n := cp("cp-0", "10.0.0.10")
				n.UserPatches = []string{"machine:\n  sysctls:\n    c.d: \"3\"\n"}
				return n
			}(), metal,
			func(t *testing.T, d map[string]map[string]any) {
				assert.Equal(t, map[string]any{"a.b": "2", "c.d": "3"}, get(d["v1alpha1"], "machine.sysctls"))
			}},
		{"etcd backup schedule: a control plane lets kube-system reach the Talos API as os:etcd:backup", talos.PatchSpec{TalosVersion: "v1.12.4", TalosAPIAccess: true},
			cp("cp-0", "10.0.0.10"), metal,
			func(t *testing.T, d map[string]map[string]any) {
				assert.Equal(t, true, get(d["v1alpha1"], "machine.features.kubernetesTalosAPIAccess.enabled"))
				assert.Equal(t, []any{"os:etcd:backup"}, get(d["v1alpha1"], "machine.features.kubernetesTalosAPIAccess.allowedRoles"))
				assert.Equal(t, []any{"kube-system"}, get(d["v1alpha1"], "machine.features.kubernetesTalosAPIAccess.allowedKubernetesNamespaces"))
			}},
		{"etcd backup schedule: a worker does not get the access (Talos refuses it there)", talos.PatchSpec{TalosVersion: "v1.12.4", TalosAPIAccess: true},
			talos.NodeSpec{Name: "w-0", IP: "10.0.0.20", Role: talos.RoleWorker, InstallDisk: "/dev/sda", Network: talos.NodeNetwork{DHCP: true}}, metal,
			func(t *testing.T, d map[string]map[string]any) {
				assert.Nil(t, get(d["v1alpha1"], "machine.features.kubernetesTalosAPIAccess"))
			}},
		{"Proxmox CSI: topology labels and the provider id on a worker", talos.PatchSpec{TalosVersion: "v1.12.4"},
			func() talos.NodeSpec {
				n := talos.NodeSpec{Name: "w-0", IP: "10.0.0.20", Role: talos.RoleWorker, InstallDisk: "/dev/sda", Network: talos.NodeNetwork{DHCP: true}}
				n.PlatformPatches = []string{proxmox.CSINodePatch("lab", proxmox.Node{Name: "w-0", ProxmoxNode: "pve2", VMID: 120})}
				return n
			}(), metal,
			func(t *testing.T, d map[string]map[string]any) {
				labels, _ := get(d["v1alpha1"], "machine.nodeLabels").(map[string]any)
				assert.Equal(t, "pve2", labels["topology.kubernetes.io/zone"])
				assert.Equal(t, "lab", labels["topology.kubernetes.io/region"])
				assert.Equal(t, "proxmox://lab/120", get(d["v1alpha1"], "machine.kubelet.extraArgs.provider-id"))
				assert.Equal(t, "true", get(d["v1alpha1"], "machine.kubelet.extraArgs.rotate-server-certificates"), "merged with ours")
			}},
		{"Talos 1.11 contract: hostname in v1alpha1", talos.PatchSpec{TalosVersion: "v1.11.5"},
			func() talos.NodeSpec { n := cp("cp-0", "10.0.0.10"); n.Hostname = "cp-0"; return n }(), metal,
			func(t *testing.T, d map[string]map[string]any) {
				assert.Equal(t, "cp-0", get(d["v1alpha1"], "machine.network.hostname"))
				assert.Nil(t, d["HostnameConfig"])
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			final, err := finalConfig(t, "edge", "https://10.0.0.5:6443", tc.spec.TalosVersion, tc.node.Role, talos.NodePatches(tc.spec, tc.node, installer))
			require.NoError(t, err)
			require.NoError(t, validateFor(t, final, tc.mode))
			tc.check(t, docs(t, final))
		})
	}
}

// Broken patches must fail, at load, apply or validation: the checks above
// would otherwise prove nothing.
func TestBrokenPatchesFail(t *testing.T) {
	t.Parallel()
	n := talos.NodeSpec{Name: "cp-0", IP: "10.0.0.10", Role: talos.RoleControlPlane, InstallDisk: "/dev/sda", Network: talos.NodeNetwork{DHCP: true}}
	spec := talos.PatchSpec{TalosVersion: "v1.12.4"}
	cases := map[string]struct {
		extra []string
		node  func(talos.NodeSpec) talos.NodeSpec
		mode  runtimeMode
		want  string
	}{
		"bad CIDR": {node: func(n talos.NodeSpec) talos.NodeSpec {
			n.Network = talos.NodeNetwork{Addresses: []string{"10.0.0.300/24"}}
			return n
		}, mode: metal, want: "invalid CIDR"},
		"misspelled key": {extra: []string{"machine:\n  instal:\n    disk: /dev/vda\n"}, mode: metal, want: "unknown keys"},
		"v1alpha1 hostname next to HostnameConfig": {extra: []string{"machine:\n  network:\n    hostname: cp-0\n"}, mode: metal, want: "static hostname is already set"},
		"install removed in metal mode":            {extra: []string{"machine:\n  install:\n    $patch: delete\n"}, mode: metal, want: "install instructions are required"},
		"VIP that is not an IP": {node: func(n talos.NodeSpec) talos.NodeSpec { return n }, extra: []string{
			"machine:\n  network:\n    interfaces:\n      - deviceSelector: {physical: true}\n        vip: {ip: not-an-ip}\n"}, mode: metal, want: "vip"},
		"Talos API access on a worker": {node: func(n talos.NodeSpec) talos.NodeSpec {
			n.Role = talos.RoleWorker
			return n
		}, extra: []string{talos.APIAccessPatch()}, mode: metal, want: "can only be enabled on control plane machines"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			node := n
			if tc.node != nil {
				node = tc.node(node)
			}
			node.UserPatches = tc.extra
			final, err := finalConfig(t, "edge", "https://10.0.0.5:6443", spec.TalosVersion, node.Role, talos.NodePatches(spec, node, installer))
			if err == nil {
				err = validateFor(t, final, tc.mode)
			}
			require.Error(t, err)
			assert.Contains(t, strings.ToLower(err.Error()), strings.ToLower(tc.want))
		})
	}
}

// Golden files hold the rendered patches of every example node; a change to
// a generated patch shows up here as a reviewable diff (`-update` rewrites).
func TestGoldenPatches(t *testing.T) {
	t.Parallel()
	for _, ex := range examples {
		cfg := loadExample(t, ex.file)
		spec := program.TalosArgs(cfg).PatchSpec()
		for _, n := range ex.nodes(cfg) {
			var b strings.Builder
			for i, p := range talos.NodePatches(spec, n, installer) {
				fmt.Fprintf(&b, "# patch %d\n%s", i, p)
				if !strings.HasSuffix(p, "\n") {
					b.WriteString("\n")
				}
			}
			stack := strings.TrimSuffix(strings.TrimPrefix(ex.file, "Pulumi."), ".yaml.example")
			path := filepath.Join("testdata", "golden", stack, n.Name+".yaml")
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
				continue
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run `go test ./components/talos -update`")
			assert.Equal(t, string(want), b.String(), "%s changed: review and rerun with -update", path)
		}
	}
}

// Proxmox with static addressing: the nocloud image runs Talos in cloud mode,
// the address and default route are in the machine config, and the node
// names itself (no DHCP server does).
func TestProxmoxStaticAddressingValidatesInCloudMode(t *testing.T) {
	t.Parallel()
	cfg := loadExample(t, stackstest.ProxmoxExample)
	cfg.Proxmox.Addressing = stacks.AddressingStatic
	spec := program.TalosArgs(cfg).PatchSpec()
	for _, n := range program.TalosArgs(cfg).Nodes {
		final, err := finalConfig(t, cfg.Cluster.Name, cfg.KubernetesEndpoint(), cfg.Cluster.TalosVersion, n.Role, talos.NodePatches(spec, n, installer))
		require.NoError(t, err)
		require.NoError(t, validateFor(t, final, cloud), n.Name)
		d := docs(t, final)
		v1 := d["v1alpha1"]
		assert.Equal(t, false, get(v1, "machine.network.interfaces.0.dhcp"), n.Name)
		assert.Equal(t, []any{n.IP + "/24"}, get(v1, "machine.network.interfaces.0.addresses"), n.Name)
		assert.Equal(t, "10.10.0.1", get(v1, "machine.network.interfaces.0.routes.0.gateway"), n.Name)
		assertHostname(t, d, n)
		assert.Equal(t, n.Name, n.Hostname)
	}
}

// allowed evaluates a node's final config the way Talos's ingress firewall
// does: the default action unless a rule's port, protocol and subnet match.
func allowed(cfg config.Provider, proto string, port uint16, from string) bool {
	src := netip.MustParseAddr(from)
	rules := cfg.NetworkRules()
	for _, r := range rules.Rules() {
		if r.Protocol().String() != proto {
			continue
		}
		inPorts := slices.ContainsFunc(r.PortRanges(), func(pr [2]uint16) bool { return port >= pr[0] && port <= pr[1] })
		inSubnets := slices.ContainsFunc(r.Subnets(), func(p netip.Prefix) bool { return p.Contains(src) })
		if inPorts && inSubnets {
			return true
		}
	}
	return rules.DefaultAction() == nethelpers.DefaultActionAccept
}

func vpsFinal(t *testing.T, cfg *stacks.Config, n talos.NodeSpec) config.Provider {
	t.Helper()
	final, err := finalConfig(t, cfg.Cluster.Name, cfg.KubernetesEndpoint(), cfg.Cluster.TalosVersion, n.Role,
		talos.NodePatches(program.TalosArgs(cfg).PatchSpec(), n, installer))
	require.NoError(t, err)
	require.NoError(t, validateFor(t, final, metal))
	return final
}

// The VPS example's single node, read through Talos's own firewall model.
func TestVPSFirewallOfTheExample(t *testing.T) {
	t.Parallel()
	cfg := loadExample(t, stackstest.VPSExample)
	final := vpsFinal(t, cfg, program.TalosArgs(cfg).Nodes[0])
	assert.Equal(t, nethelpers.DefaultActionBlock, final.NetworkRules().DefaultAction())

	const operator, stranger, self, pod = "198.51.100.23", "192.0.2.77", "203.0.113.10", "10.244.0.15"
	for _, c := range []struct {
		proto string
		port  uint16
		from  string
		want  bool
	}{
		{"tcp", 50000, operator, true}, {"tcp", 6443, operator, true},
		{"tcp", 50000, stranger, false}, {"tcp", 6443, stranger, false},
		{"tcp", 10250, stranger, false}, {"tcp", 2379, stranger, false}, {"tcp", 22, stranger, false},
		{"tcp", 6443, pod, true}, {"tcp", 10250, pod, true}, {"tcp", 50000, pod, false},
		{"tcp", 2380, self, true}, {"udp", 8472, self, true}, {"udp", 8472, stranger, false},
		{"tcp", 10250, operator, false},
	} {
		assert.Equal(t, c.want, allowed(final, c.proto, c.port, c.from), "%s/%d from %s", c.proto, c.port, c.from)
	}
}

// Three control planes and two workers, no operator CIDRs, public web ports:
// the APIs open to all (the config warns), etcd only between control
// planes, workers without API server or etcd rules.
func TestVPSFirewallOfALargerCluster(t *testing.T) {
	t.Parallel()
	cfg := loadExample(t, stackstest.VPSExample)
	cfg.VPS.AllowedCIDRs = nil
	cfg.VPS.PublicTCPPorts = []int{80, 443}
	base := cfg.Nodes.ControlPlanes[0]
	cfg.Nodes.ControlPlanes = nil
	for i, ip := range []string{"203.0.113.10", "203.0.113.11", "203.0.113.12", "198.51.100.40", "198.51.100.41"} {
		n := base
		n.Name, n.IP = fmt.Sprintf("node-%d", i), ip
		if i < 3 {
			cfg.Nodes.ControlPlanes = append(cfg.Nodes.ControlPlanes, n)
		} else {
			cfg.Nodes.Workers = append(cfg.Nodes.Workers, n)
		}
	}
	nodes := program.TalosArgs(cfg).Nodes
	require.Len(t, nodes, 5)
	cp, worker := vpsFinal(t, cfg, nodes[0]), vpsFinal(t, cfg, nodes[3])

	const stranger = "192.0.2.77"
	assert.True(t, allowed(cp, "tcp", 50000, stranger), "no allowedCidrs: the Talos API is open")
	assert.True(t, allowed(cp, "tcp", 6443, stranger), "no allowedCidrs: the Kubernetes API is open")
	assert.True(t, allowed(cp, "tcp", 443, stranger))
	assert.True(t, allowed(worker, "tcp", 80, stranger))
	assert.False(t, allowed(cp, "tcp", 10250, stranger))
	assert.True(t, allowed(cp, "tcp", 2379, "203.0.113.12"), "etcd peer")
	assert.False(t, allowed(cp, "tcp", 2379, "198.51.100.40"), "a worker is no etcd peer")
	assert.True(t, allowed(cp, "tcp", 50001, "198.51.100.41"), "workers reach trustd")
	assert.True(t, allowed(worker, "tcp", 10250, "203.0.113.11"), "the API server reaches kubelets")
	assert.True(t, allowed(worker, "udp", 8472, "203.0.113.10"), "VXLAN between nodes")
	assert.False(t, allowed(worker, "tcp", 6443, "203.0.113.10"), "no API server on a worker")
	assert.False(t, allowed(worker, "tcp", 2379, "203.0.113.10"))
	// Worker routes: the other nodes are in other networks; /32 keeps the
	// on-link gateway route.
	assert.Equal(t, "198.51.100.40/32", get(docs(t, worker)["v1alpha1"], "machine.network.interfaces.0.addresses.0"))
}

// A rule Talos cannot accept fails, whether ours or the user's.
func TestBrokenFirewallRulesFail(t *testing.T) {
	t.Parallel()
	cfg := loadExample(t, stackstest.VPSExample)
	n := program.TalosArgs(cfg).Nodes[0]
	spec := program.TalosArgs(cfg).PatchSpec()
	brokenOurs := vps.FirewallOf(program.VPSArgs(cfg))
	brokenOurs.PublicTCPPorts = []int{70000}
	for name, patch := range map[string]string{
		"generated rule with a port out of range": brokenOurs.Patch(n.Role),
		"user rule with a reversed port range": "apiVersion: v1alpha1\nkind: NetworkRuleConfig\nname: web\n" +
			"portSelector:\n  ports: [\"9000-8000\"]\n  protocol: tcp\ningress:\n  - subnet: 0.0.0.0/0\n",
		"user rule without ports": "apiVersion: v1alpha1\nkind: NetworkRuleConfig\nname: web\n" +
			"portSelector:\n  protocol: tcp\ningress:\n  - subnet: 0.0.0.0/0\n",
		"user rule with a bad subnet": "apiVersion: v1alpha1\nkind: NetworkRuleConfig\nname: web\n" +
			"portSelector:\n  ports: [443]\n  protocol: tcp\ningress:\n  - subnet: 0.0.0.0/33\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			node := n
			node.UserPatches = []string{patch}
			final, err := finalConfig(t, cfg.Cluster.Name, cfg.KubernetesEndpoint(), cfg.Cluster.TalosVersion, node.Role,
				talos.NodePatches(spec, node, installer))
			if err == nil {
				err = validateFor(t, final, metal)
			}
			assert.Error(t, err)
		})
	}
}

// The Proxmox example's workers with a data disk, applied to nodes of the
// project's Talos fake whose disks are a VM's (the install disk, the data
// disk, the ISO's CD-ROM), mount the data disk where Longhorn expects it,
// whichever disk comes first and whatever their sizes; the control plane,
// without a data disk, mounts nothing. The fake provisions user volumes as
// Talos does as far as this goes: each selector evaluated by Talos's CEL
// environment against the node's disks.
func TestTheDataDiskIsMountedOnTheNode(t *testing.T) {
	t.Parallel()
	cfg := loadExample(t, stackstest.ProxmoxExample)
	spec := program.TalosArgs(cfg).PatchSpec()
	for name, disks := range map[string]func(data int) []talosapitest.Disk{
		"install disk first": func(data int) []talosapitest.Disk {
			return []talosapitest.Disk{{DevPath: "/dev/sda", SizeGiB: 20, System: true}, {DevPath: "/dev/sdb", SizeGiB: data}, {DevPath: "/dev/sr0", SizeGiB: 1, CDROM: true}}
		},
		"data disk first, the install disk larger": func(data int) []talosapitest.Disk {
			return []talosapitest.Disk{{DevPath: "/dev/sr0", SizeGiB: 1, CDROM: true}, {DevPath: "/dev/sdb", SizeGiB: data}, {DevPath: "/dev/sda", SizeGiB: 500, System: true}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var specs []talosapitest.NodeSpec
			for _, n := range nodesOf(cfg) {
				role := talosapitest.Worker
				if n.Role == talos.RoleControlPlane {
					role = talosapitest.ControlPlane
				}
				specs = append(specs, talosapitest.NodeSpec{IP: n.IP, Hostname: n.Name, Role: role, Disks: disks(max(n.DataDiskSize, 1))})
			}
			c := talosapitest.Start(t, specs...)
			client, err := talosapi.NewFromTalosconfig(c.Talosconfig(), talosapi.WithAddress(c.Address))
			require.NoError(t, err)
			defer func() { _ = client.Close() }()
			withDisk := 0
			for _, n := range nodesOf(cfg) {
				final, err := finalConfig(t, cfg.Cluster.Name, cfg.KubernetesEndpoint(), cfg.Cluster.TalosVersion, n.Role, talos.NodePatches(spec, n, installer))
				require.NoError(t, err)
				raw, err := final.Bytes()
				require.NoError(t, err)
				require.NoError(t, client.ApplyConfiguration(t.Context(), n.IP, raw))
				mounts := c.Node(n.IP).Mounts()
				if n.DataDiskSize > 0 {
					withDisk++
					assert.Equal(t, map[string]string{"/var/mnt/longhorn": "/dev/sdb"}, mounts, n.Name)
				} else {
					assert.Empty(t, mounts, n.Name)
				}
			}
			assert.Equal(t, 2, withDisk, "the example's two workers")
		})
	}
}

// TestKubeSpanValidates: KubeSpan turned on in machine.network.kubespan,
// with cluster discovery, passes Talos's own validation for each release
// (strict: no warning for the v1alpha1 field on 1.13 either) and reads back
// on; on a VPS, the firewall opens KubeSpan's port to the nodes only.
func TestKubeSpanValidates(t *testing.T) {
	t.Parallel()
	n := talos.NodeSpec{Name: "cp-0", IP: "10.0.0.10", Role: talos.RoleControlPlane, InstallDisk: "/dev/sda", Network: talos.NodeNetwork{DHCP: true}}
	for _, version := range []string{"v1.11.6", "v1.12.4", "v1.13.9"} {
		final, err := finalConfig(t, "lab", "https://10.0.0.10:6443", version, n.Role,
			talos.NodePatches(talos.PatchSpec{TalosVersion: version, KubeSpan: true}, n, installer))
		require.NoError(t, err, version)
		require.NoError(t, validateFor(t, final, metal), version)
		require.NotNil(t, final.NetworkKubeSpanConfig(), version)
		assert.True(t, final.NetworkKubeSpanConfig().Enabled(), version)
		assert.True(t, final.Cluster().Discovery().Enabled(), version)
		_, doc := docs(t, final)["KubeSpanConfig"]
		assert.False(t, doc, "%s: machine.network.kubespan, which the provider's machinery (v1.12.0) knows", version)

		// Issue 48, item 15: the kubelet and etcd keep to the node's IP,
		// which the etcd gate and the peers at other sites use, read back
		// through Talos's own config interfaces.
		assert.Equal(t, []string{"10.0.0.10/32"}, final.Machine().Kubelet().NodeIP().ValidSubnets(), version)
		assert.Equal(t, []string{"10.0.0.10/32"}, final.Cluster().Etcd().AdvertisedSubnets(), version)

		off, err := finalConfig(t, "lab", "https://10.0.0.10:6443", version, n.Role,
			talos.NodePatches(talos.PatchSpec{TalosVersion: version}, n, installer))
		require.NoError(t, err)
		assert.False(t, off.NetworkKubeSpanConfig() != nil && off.NetworkKubeSpanConfig().Enabled(), "%s: off without the setting", version)
		assert.Empty(t, off.Machine().Kubelet().NodeIP().ValidSubnets(), "%s: one network: Talos's choice", version)
		assert.Empty(t, off.Cluster().Etcd().AdvertisedSubnets(), version)

		w := n
		w.Role, w.PinAddress = talos.RoleWorker, true
		worker, err := finalConfig(t, "lab", "https://10.0.0.10:6443", version, w.Role, talos.NodePatches(talos.PatchSpec{TalosVersion: version}, w, installer))
		require.NoError(t, err)
		require.NoError(t, validateFor(t, worker, metal), version)
		assert.Equal(t, []string{"10.0.0.10/32"}, worker.Machine().Kubelet().NodeIP().ValidSubnets(), "%s: a pinned worker", version)
		assert.Empty(t, worker.Cluster().Etcd().AdvertisedSubnets(), "%s: no etcd on a worker", version)
	}

	cfg := loadExample(t, stackstest.VPSExample)
	args := program.VPSArgs(cfg)
	args.Cluster.KubeSpan = &talos.KubeSpanSettings{Enabled: true}
	fw := vps.FirewallOf(args)
	node := args.Nodes[0]
	final, err := finalConfig(t, cfg.Cluster.Name, cfg.KubernetesEndpoint(), cfg.Cluster.TalosVersion, talos.RoleControlPlane,
		talos.NodePatches(talos.PatchSpec{TalosVersion: cfg.Cluster.TalosVersion, KubeSpan: true}, talos.NodeSpec{
			Name: node.Name, IP: node.IP, Role: talos.RoleControlPlane, InstallDisk: "/dev/sda",
			PlatformPatches: []string{fw.Patch(talos.RoleControlPlane)},
		}, installer))
	require.NoError(t, err)
	require.NoError(t, validateFor(t, final, metal))
	assert.True(t, allowed(final, "udp", talos.KubeSpanPort, node.IP), "KubeSpan from a node")
	assert.False(t, allowed(final, "udp", talos.KubeSpanPort, "192.0.2.77"), "not from anyone else")
}

// TestEtcdWANTuningValidates: the control-plane patch docs/multi-host.md
// gives for control planes far apart is taken by Talos's machinery and
// reaches etcd's arguments.
func TestEtcdWANTuningValidates(t *testing.T) {
	t.Parallel()
	const tuning = "cluster:\n    etcd:\n        extraArgs:\n            heartbeat-interval: \"250\"\n            election-timeout: \"2500\"\n"
	doc, err := os.ReadFile("../../docs/multi-host.md")
	require.NoError(t, err)
	for _, arg := range []string{`heartbeat-interval: "250"`, `election-timeout: "2500"`} {
		assert.Contains(t, string(doc), arg, "the docs give the patch")
	}
	n := talos.NodeSpec{Name: "cp-0", IP: "10.0.0.10", Role: talos.RoleControlPlane, InstallDisk: "/dev/sda", Network: talos.NodeNetwork{DHCP: true}}
	final, err := finalConfig(t, "lab", "https://10.0.0.10:6443", "v1.13.9", n.Role,
		talos.NodePatches(talos.PatchSpec{TalosVersion: "v1.13.9", KubeSpan: true, ControlPlanePatches: []string{tuning}}, n, installer))
	require.NoError(t, err)
	require.NoError(t, validateFor(t, final, metal))
	args := final.Cluster().Etcd().ExtraArgs()
	assert.Equal(t, []string{"250"}, args["heartbeat-interval"])
	assert.Equal(t, []string{"2500"}, args["election-timeout"])
}

// TestNodesOnSeveralProxmoxNodesCarryTheirZone: VMs on more than one
// Proxmox node label their node with its failure domain (region the
// Proxmox cluster, zone its Proxmox node), read back through Talos's own
// config; VMs on one Proxmox node are not labelled (the example keeps its
// config).
func TestNodesOnSeveralProxmoxNodesCarryTheirZone(t *testing.T) {
	t.Parallel()
	cfg := loadExample(t, stackstest.ProxmoxExample)
	cfg.Nodes.Workers[1].ProxmoxNode = "pve2"
	cfg.Proxmox.DNSMasq.BridgeSpansHosts = true
	args := program.TalosArgs(cfg)
	spec := args.PatchSpec()
	for _, n := range args.Nodes {
		final, err := finalConfig(t, cfg.Cluster.Name, cfg.KubernetesEndpoint(), cfg.Cluster.TalosVersion, n.Role, talos.NodePatches(spec, n, installer))
		require.NoError(t, err)
		require.NoError(t, validateFor(t, final, metal), n.Name)
		want := "pve"
		if n.Name == "worker-1" {
			want = "pve2"
		}
		labels := final.Machine().NodeLabels()
		assert.Equal(t, want, labels["topology.kubernetes.io/zone"], n.Name)
		assert.Equal(t, "proxmox", labels["topology.kubernetes.io/region"], n.Name)
	}
	single := program.TalosArgs(loadExample(t, stackstest.ProxmoxExample))
	for _, n := range single.Nodes {
		assert.Empty(t, n.PlatformPatches, "%s: one Proxmox node, no labels", n.Name)
	}
}

// TestKubeSpanEndpointsValidate: a node's extra KubeSpan endpoints (a
// NAT's forwarded port) become a KubeSpanEndpointsConfig document that
// Talos's own validation takes and reads back, for each release.
func TestKubeSpanEndpointsValidate(t *testing.T) {
	t.Parallel()
	n := talos.NodeSpec{Name: "cp-0", IP: "10.0.0.10", Role: talos.RoleControlPlane, InstallDisk: "/dev/sda", Network: talos.NodeNetwork{DHCP: true},
		KubeSpanEndpoints: []string{"198.51.100.7:51821", "[2001:db8::7]:51820"}}
	for _, version := range []string{"v1.11.6", "v1.12.4", "v1.13.9"} {
		final, err := finalConfig(t, "lab", "https://10.0.0.10:6443", version, n.Role,
			talos.NodePatches(talos.PatchSpec{TalosVersion: version, KubeSpan: true}, n, installer))
		require.NoError(t, err, version)
		require.NoError(t, validateFor(t, final, metal), version)
		assert.Equal(t, []netip.AddrPort{netip.MustParseAddrPort("198.51.100.7:51821"), netip.MustParseAddrPort("[2001:db8::7]:51820")},
			final.KubespanConfig().ExtraAnnouncedEndpoints(), version)
	}
}

// encryptedWorker is a worker with a data disk, whose volumes the
// encryption tests read back; encryptingReleases are the Talos releases
// whose volume config encrypts STATE.
var (
	encryptedWorker    = talos.NodeSpec{Name: "w-0", IP: "10.0.0.20", Role: talos.RoleWorker, InstallDisk: "/dev/sda", Network: talos.NodeNetwork{DHCP: true}, DataDiskSize: 20}
	encryptingReleases = []string{"v1.11.6", "v1.12.4", "v1.13.9"}
)

// validFinalConfig is encryptedWorker's final config under spec, which
// Talos's validation for metal takes.
func validFinalConfig(t *testing.T, version string, spec talos.PatchSpec) config.Provider {
	t.Helper()
	final, err := finalConfig(t, "lab", "https://10.0.0.10:6443", version, encryptedWorker.Role, talos.NodePatches(spec, encryptedWorker, installer))
	require.NoError(t, err, version)
	require.NoError(t, validateFor(t, final, metal), version)
	return final
}

// TestSecureBootEncryptionValidates: a Secure Boot node's STATE, EPHEMERAL
// and data volume read back through Talos's own config interfaces as LUKS2
// with one TPM key that is enrolled only under Secure Boot, and the
// config passes Talos's validation for each release that takes it.
func TestSecureBootEncryptionValidates(t *testing.T) {
	t.Parallel()
	n := encryptedWorker
	for _, version := range encryptingReleases {
		spec := talos.PatchSpec{TalosVersion: version, Encryption: talos.EncryptionTPM, DataVolume: talos.DataVolumeSettings{Name: "longhorn", Layout: talos.LayoutLonghorn}}
		final := validFinalConfig(t, version, spec)
		for _, name := range []string{"STATE", "EPHEMERAL"} {
			v, ok := final.Volumes().ByName(name)
			require.True(t, ok, "%s %s", version, name)
			enc := v.Encryption()
			require.NotNil(t, enc, "%s %s: encrypted", version, name)
			require.Len(t, enc.Keys(), 1, "%s %s", version, name)
			key := enc.Keys()[0]
			require.NotNil(t, key.TPM(), "%s %s: a TPM key", version, name)
			assert.True(t, key.TPM().CheckSecurebootOnEnroll(), "%s %s: enrolled only under Secure Boot", version, name)
			assert.Equal(t, "luks2", enc.Provider().String(), "%s %s", version, name)
		}
		users := final.UserVolumeConfigs()
		require.Len(t, users, 1, version)
		require.NotNil(t, users[0].Encryption(), "%s: the data volume is encrypted too", version)
		assert.NotNil(t, users[0].Encryption().Keys()[0].TPM(), version)

		off, err := finalConfig(t, "lab", "https://10.0.0.10:6443", version, n.Role, talos.NodePatches(talos.PatchSpec{TalosVersion: version, DataVolume: spec.DataVolume}, n, installer))
		require.NoError(t, err)
		for _, name := range []string{"STATE", "EPHEMERAL"} {
			v, _ := off.Volumes().ByName(name)
			assert.Nil(t, v.Encryption(), "%s %s: no encryption without Secure Boot", version, name)
		}
	}
}

// Below Talos v1.11 the volume config cannot encrypt STATE: Secure Boot is
// refused by its key; from v1.11 it is taken.
func TestSecureBootNeedsTalos111(t *testing.T) {
	t.Parallel()
	for version, want := range map[string]string{
		"v1.10.7": "cluster.secureBoot: needs Talos v1.11 or newer, whose volume config encrypts STATE (cluster.talosVersion is v1.10.7)",
		"v1.11.0": "",
		"v1.13.9": "",
	} {
		c := talos.ClusterSettings{Name: "lab", TalosVersion: version, SecureBoot: true}
		var p inputs.Problems
		c.Check(&p, "cluster.")
		err := p.Err(talos.ComponentName, "lab")
		if want == "" {
			assert.NoError(t, err, version)
		} else {
			assert.ErrorContains(t, err, want, version)
		}
	}
}

// A node-ID key, where no TPM is: STATE keyed by the node's UUID alone,
// EPHEMERAL and the data volume also locked to STATE's salt; Talos's
// validation takes it on each release that encrypts STATE.
func TestNodeIDEncryptionValidates(t *testing.T) {
	t.Parallel()
	for _, version := range encryptingReleases {
		spec := talos.PatchSpec{TalosVersion: version, Encryption: talos.EncryptionNodeID, DataVolume: talos.DataVolumeSettings{Name: "data", Layout: talos.LayoutPlain}}
		final := validFinalConfig(t, version, spec)
		for name, locked := range map[string]bool{"STATE": false, "EPHEMERAL": true} {
			v, ok := final.Volumes().ByName(name)
			require.True(t, ok, "%s %s", version, name)
			require.NotNil(t, v.Encryption(), "%s %s", version, name)
			key := v.Encryption().Keys()[0]
			assert.NotNil(t, key.NodeID(), "%s %s: a node-ID key", version, name)
			assert.Nil(t, key.TPM(), "%s %s", version, name)
			assert.Equal(t, locked, key.LockToSTATE(), "%s %s", version, name)
		}
		users := final.UserVolumeConfigs()
		require.Len(t, users, 1, version)
		assert.NotNil(t, users[0].Encryption().Keys()[0].NodeID(), version)
		assert.True(t, users[0].Encryption().Keys()[0].LockToSTATE(), version)
	}
}

// diskEncryption is refused by its key: an unknown value, beside
// secureBoot, and below Talos v1.11.
func TestDiskEncryptionRefusals(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		settings talos.ClusterSettings
		want     string
	}{
		"unknown":    {talos.ClusterSettings{Name: "lab", TalosVersion: "v1.13.9", DiskEncryption: "static"}, `cluster.diskEncryption: "static" is not an encryption: nodeID`},
		"both":       {talos.ClusterSettings{Name: "lab", TalosVersion: "v1.13.9", DiskEncryption: "nodeID", SecureBoot: true}, "cluster.diskEncryption: cannot go with secureBoot"},
		"talos 1.10": {talos.ClusterSettings{Name: "lab", TalosVersion: "v1.10.7", DiskEncryption: "nodeID"}, "cluster.diskEncryption: needs Talos v1.11 or newer"},
		"talos 1.13": {talos.ClusterSettings{Name: "lab", TalosVersion: "v1.13.9", DiskEncryption: "nodeID"}, ""},
	} {
		var p inputs.Problems
		c.settings.Check(&p, "cluster.")
		err := p.Err(talos.ComponentName, "lab")
		if c.want == "" {
			assert.NoError(t, err, name)
		} else {
			assert.ErrorContains(t, err, c.want, name)
		}
	}
}
