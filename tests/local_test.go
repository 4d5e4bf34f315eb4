package tests

import (
	"slices"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/docker"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/program/programtest"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// Docker types of the DockerCluster's children.
const (
	dockerNetwork   = "docker:index/network:Network"
	dockerVolume    = "docker:index/volume:Volume"
	dockerContainer = "docker:index/container:Container"
)

// The local example becomes a Docker network on the node network, per node
// six state volumes and a container set up as Talos's Docker provisioner
// sets one up (pkg/provision/providers/docker/node.go), and the
// TalosCluster on top, which applies each node's config over the Talos
// API: no container carries its config.
func TestLocalExampleGraph(t *testing.T) {
	t.Parallel()
	e, outs, hooks, err := programtest.Run(t, stackstest.Example(t, stackstest.LocalExample), "local", program.Options{})
	require.NoError(t, err)

	network := e.Named(t, dockerNetwork, "local-network")
	assert.Equal(t, "local", network.Inputs["name"].StringValue())
	ipam := network.Inputs["ipamConfigs"].ArrayValue()
	require.Len(t, ipam, 1)
	assert.Equal(t, "10.5.0.0/24", ipam[0].ObjectValue()["subnet"].StringValue())
	assert.Equal(t, "10.5.0.1", ipam[0].ObjectValue()["gateway"].StringValue())

	require.Len(t, e.ByType(dockerVolume), 12)
	require.Len(t, e.ByType(dockerContainer), 2)
	for _, node := range []string{"cp1", "w1"} {
		ctr := e.Named(t, dockerContainer, "local-node-"+node)
		in := ctr.Inputs
		assert.Equal(t, "local-"+node, in["name"].StringValue())
		assert.Equal(t, node, in["hostname"].StringValue())
		assert.Equal(t, "ghcr.io/siderolabs/talos:v1.13.9", in["image"].StringValue())
		assert.True(t, in["privileged"].BoolValue())
		assert.True(t, in["readOnly"].BoolValue())
		assert.Equal(t, []resource.PropertyValue{resource.NewProperty("seccomp=unconfined")}, in["securityOpts"].ArrayValue())
		assert.Equal(t, []resource.PropertyValue{resource.NewProperty("PLATFORM=container")}, in["envs"].ArrayValue(),
			"no USERDATA: the config is applied over the Talos API and kept in the STATE volume")
		assert.True(t, ctr.DeleteBeforeReplace, "its name and address are the new container's")
		var tmpfs, volumes []string
		for _, m := range in["mounts"].ArrayValue() {
			mo := m.ObjectValue()
			target := mo["target"].StringValue()
			switch mo["type"].StringValue() {
			case "tmpfs":
				tmpfs = append(tmpfs, target)
			case "volume":
				volumes = append(volumes, target)
				vol := e.Named(t, dockerVolume, "local-volume-"+node+"-"+slugOf(target))
				assert.Contains(t, ctr.Deps, vol.URN, "the container is deleted before its volumes")
			}
		}
		assert.Equal(t, docker.TmpfsMounts, tmpfs)
		assert.Equal(t, docker.StateMounts, volumes)
		nw := in["networksAdvanced"].ArrayValue()
		require.Len(t, nw, 1)
		assert.Equal(t, map[string]string{"cp1": "10.5.0.2", "w1": "10.5.0.3"}[node], nw[0].ObjectValue()["ipv4Address"].StringValue())

		apply := e.Named(t, componentstest.Apply, "local-apply-"+node)
		assert.Contains(t, apply.Deps, ctr.URN, "the config is applied once the container runs")
		var bound []string
		for _, b := range hooks.On("local-node-" + node) {
			bound = append(bound, b.Hook)
		}
		assert.ElementsMatch(t, []string{"local" + docker.RestartHookSuffix, "local" + docker.RestartedHookSuffix}, bound)
	}
	cp, w := e.Named(t, dockerContainer, "local-node-cp1"), e.Named(t, dockerContainer, "local-node-w1")
	assert.Contains(t, w.Deps, cp.URN, "a new image reaches the worker after the control plane")
	ports := cp.Inputs["ports"].ArrayValue()
	require.Len(t, ports, 2)
	for _, p := range ports {
		assert.Equal(t, "127.0.0.1", p.ObjectValue()["ip"].StringValue())
	}
	assert.True(t, w.Inputs["ports"].IsNull() || len(w.Inputs["ports"].ArrayValue()) == 0, "only the first control plane is published")

	assert.Empty(t, e.ByType(componentstest.Schematic), "no Image Factory: the containers run the published image")
	for _, rel := range e.ByType(componentstest.Release) {
		assert.Equal(t, network.URN, rel.DeletedWith, "a destroy makes no call to the cluster it removes")
	}
	patches := e.Named(t, componentstest.Apply, "local-apply-cp1").Inputs["configPatches"]
	assert.NotContains(t, patches.String(), "factory.talos.dev", "no installer image: a container installs nothing")
	assert.Equal(t, "https://127.0.0.1:6443", outs["localEndpoint"].Value)
	assert.Equal(t, "https://10.5.0.2:6443", outs["endpoint"].Value)
	assert.Empty(t, e.ByType(componentstest.VM))
	assert.True(t, slices.ContainsFunc(e.All(), func(r componentstest.Registered) bool { return r.Type == docker.ClusterType }))
}

// A container's CPU and memory limits: talosctl's defaults for a new
// container, kept as created (ignoreChanges) while the stack leaves them
// out, so that stacks from before the defaults replace no container; given,
// they are the container's inputs (cpus replaces it, memory updates it).
func TestLocalContainerLimits(t *testing.T) {
	t.Parallel()
	example := stackstest.Example(t, stackstest.LocalExample)
	e, _, _, err := programtest.Run(t, example, "local", program.Options{})
	require.NoError(t, err)
	for _, node := range []string{"cp1", "w1"} {
		ctr := e.Named(t, dockerContainer, "local-node-"+node)
		assert.Equal(t, "2", ctr.Inputs["cpus"].StringValue())
		assert.Equal(t, 2048.0, ctr.Inputs["memory"].NumberValue())
		assert.ElementsMatch(t, []string{"cpus", "memory", "memorySwap"}, ctr.IgnoreChanges)
	}
	sized := edit(t, example, "nodes", func(m map[string]any) {
		w := m["workers"].([]any)[0].(map[string]any)
		w["cores"], w["memory"] = 3, 4096
	})
	e, _, _, err = programtest.Run(t, sized, "local", program.Options{})
	require.NoError(t, err)
	w := e.Named(t, dockerContainer, "local-node-w1")
	assert.Equal(t, "3", w.Inputs["cpus"].StringValue())
	assert.Equal(t, 4096.0, w.Inputs["memory"].NumberValue())
	assert.Equal(t, []string{"memorySwap"}, w.IgnoreChanges, "given limits are applied; the swap limit is dockerd's")
	assert.ElementsMatch(t, []string{"cpus", "memory", "memorySwap"}, e.Named(t, dockerContainer, "local-node-cp1").IgnoreChanges)
}

// local.ports are published from the first control plane only, on
// 127.0.0.1 unless said otherwise (talosctl's --exposed-ports publish on
// the init node); local.mounts go into every node's container.
func TestLocalPortsAndMounts(t *testing.T) {
	t.Parallel()
	src := edit(t, stackstest.Example(t, stackstest.LocalExample), "local", func(m map[string]any) {
		m["ports"] = []any{
			map[string]any{"hostPort": 8080, "containerPort": 80},
			map[string]any{"hostPort": 8443, "containerPort": 443, "hostIp": "0.0.0.0"},
			map[string]any{"hostPort": 5353, "containerPort": 53, "protocol": "udp"},
		}
		m["mounts"] = []any{map[string]any{"source": "/srv/models", "target": "/mnt/models", "readOnly": true}}
	})
	e, _, _, err := programtest.Run(t, src, "local", program.Options{})
	require.NoError(t, err)
	type port struct {
		host, inside float64
		ip, proto    string
	}
	var published []port
	for _, p := range e.Named(t, dockerContainer, "local-node-cp1").Inputs["ports"].ArrayValue() {
		o := p.ObjectValue()
		published = append(published, port{o["external"].NumberValue(), o["internal"].NumberValue(), o["ip"].StringValue(), o["protocol"].StringValue()})
	}
	assert.Equal(t, []port{
		{50000, 50000, "127.0.0.1", "tcp"}, {6443, 6443, "127.0.0.1", "tcp"},
		{8080, 80, "127.0.0.1", "tcp"}, {8443, 443, "0.0.0.0", "tcp"}, {5353, 53, "127.0.0.1", "udp"},
	}, published)
	w := e.Named(t, dockerContainer, "local-node-w1").Inputs
	assert.True(t, w["ports"].IsNull() || len(w["ports"].ArrayValue()) == 0, "the first control plane only")
	for _, node := range []string{"cp1", "w1"} {
		mounts := e.Named(t, dockerContainer, "local-node-"+node).Inputs["mounts"].ArrayValue()
		last := mounts[len(mounts)-1].ObjectValue()
		assert.Equal(t, "bind", last["type"].StringValue())
		assert.Equal(t, "/srv/models", last["source"].StringValue())
		assert.Equal(t, "/mnt/models", last["target"].StringValue())
		assert.True(t, last["readOnly"].BoolValue())
	}
}

// cluster.registryMirrors reach every node's config as Talos 1.13's
// RegistryMirrorConfig documents (validated in components/talos).
func TestLocalRegistryMirrors(t *testing.T) {
	t.Parallel()
	src := edit(t, stackstest.Example(t, stackstest.LocalExample), "cluster", func(m map[string]any) {
		m["registryMirrors"] = []any{map[string]any{"registry": "docker.io", "endpoints": []any{"http://10.5.0.1:5000"}}}
	})
	e, _, _, err := programtest.Run(t, src, "local", program.Options{})
	require.NoError(t, err)
	for _, node := range []string{"cp1", "w1"} {
		patches := e.Named(t, componentstest.Apply, "local-apply-"+node).Inputs["configPatches"].String()
		assert.Contains(t, patches, "kind: RegistryMirrorConfig\nname: docker.io\nendpoints:\n    - url: http://10.5.0.1:5000\n", node)
	}
}

// slugOf is a mount path as a volume's name ends: /system/state is
// system-state.
func slugOf(path string) string { return strings.ReplaceAll(strings.TrimPrefix(path, "/"), "/", "-") }

// What a container cannot do is refused by its stack key, with the reason,
// before anything is registered.
func TestLocalStackRefusesWhatAContainerCannotDo(t *testing.T) {
	t.Parallel()
	example := stackstest.Example(t, stackstest.LocalExample)
	for _, tc := range []struct {
		name, section, key, want string
		edit                     func(m map[string]any)
	}{
		{"data disk", "nodes", "nodes.workers[0].dataDiskSize", "a container has no disk for a Talos user volume",
			func(m map[string]any) { m["workers"].([]any)[0].(map[string]any)["dataDiskSize"] = 20 }},
		{"vm disk", "nodes", "nodes.controlPlanes[0].diskSize", "a container's disks are Docker volumes",
			func(m map[string]any) { m["controlPlanes"].([]any)[0].(map[string]any)["diskSize"] = 40 }},
		{"too little memory", "nodes", "nodes.controlPlanes[0].memory", "512 MiB is below the 1024 MiB a Talos node needs",
			func(m map[string]any) { m["controlPlanes"].([]any)[0].(map[string]any)["memory"] = 512 }},
		{"vip", "cluster", "cluster.vip", "publishes the first control plane's Kubernetes API on 127.0.0.1:6443",
			func(m map[string]any) { m["vip"] = "10.5.0.9" }},
		{"extensions", "cluster", "cluster.schematic", "a container loads no system extension",
			func(m map[string]any) { m["schematic"] = map[string]any{"extensions": []any{"siderolabs/iscsi-tools"}} }},
		{"ip outside", "nodes", "nodes.workers[0].ip", "10.6.0.3 is outside the nodes' network 10.5.0.0/24",
			func(m map[string]any) { m["workers"].([]any)[0].(map[string]any)["ip"] = "10.6.0.3" }},
		{"gateway as node", "nodes", "nodes.workers[0].ip", "10.5.0.1 is the gateway's address",
			func(m map[string]any) { m["workers"].([]any)[0].(map[string]any)["ip"] = "10.5.0.1" }},
		{"image past the version check", "local", "local.image", "is Talos v1.12.4, not cluster.talosVersion v1.13.9",
			func(m map[string]any) { m["image"] = "ghcr.io/siderolabs/talos:v1.12.4" }},
		{"published port twice", "local", "local.ports[1].hostPort", "8080/tcp is published by an entry before already",
			func(m map[string]any) {
				m["ports"] = []any{map[string]any{"hostPort": 8080, "containerPort": 80}, map[string]any{"hostPort": 8080, "containerPort": 443}}
			}},
		{"published API port", "local", "local.ports[0].hostPort", "6443/tcp is published by the Kubernetes API already",
			func(m map[string]any) {
				m["ports"] = []any{map[string]any{"hostPort": 6443, "containerPort": 443}}
			}},
		{"mount over Talos's state", "local", "local.mounts[0].target", "/var/lib/data is on a path Talos keeps for itself",
			func(m map[string]any) {
				m["mounts"] = []any{map[string]any{"source": "/srv/data", "target": "/var/lib/data"}}
			}},
		{"relative mount", "local", "local.mounts[0].source", `"data" is not an absolute path of this machine`,
			func(m map[string]any) { m["mounts"] = []any{map[string]any{"source": "data", "target": "/mnt/data"}} }},
		{"mirror not a URL", "cluster", "cluster.registryMirrors[0].endpoints[0]", `"10.5.0.1:5000" is not an http:// or https:// URL`,
			func(m map[string]any) {
				m["registryMirrors"] = []any{map[string]any{"registry": "docker.io", "endpoints": []any{"10.5.0.1:5000"}}}
			}},
		{"one port twice", "local", "local.talosPort", "6443 is the Kubernetes API's port too",
			func(m map[string]any) { m["talosPort"] = 6443 }},
		{"proxmox csi", "storage", "storage.proxmoxCsi", "only valid for platform proxmox",
			func(m map[string]any) { m["proxmoxCsi"] = map[string]any{"datastore": "local-zfs"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, d := program.Validate(edit(t, example, tc.section, tc.edit))
			var at []string
			for _, e := range d.Errors {
				if e.Path == tc.key {
					at = append(at, e.Message)
				}
			}
			require.Len(t, at, 1, "errors: %v", d.Errors)
			assert.Contains(t, at[0], tc.want)
		})
	}
}

// The patches Talos's container mode refuses (the host DNS off) or
// ignores (an encrypted STATE or EPHEMERAL) are refused on a local stack,
// by the patch's key; the same patches pass elsewhere.
func TestLocalStackRefusesPatchesAContainerCannotTake(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ patch, want string }{
		{"machine:\n  features:\n    hostDNS:\n      forwardKubeDNSToHost: false\n", "Talos refuses a config without them in a container"},
		{"apiVersion: v1alpha1\nkind: VolumeConfig\nname: EPHEMERAL\nencryption:\n  provider: luks2\n  keys:\n    - slot: 0\n      nodeID: {}\n", "which Talos does not encrypt"},
	} {
		src := edit(t, stackstest.Example(t, stackstest.LocalExample), "cluster", func(m map[string]any) {
			m["patches"] = map[string]any{"all": []any{tc.patch}}
		})
		_, d := program.Validate(src)
		var at []string
		for _, e := range d.Errors {
			if e.Path == "cluster.patches.all[0]" {
				at = append(at, e.Message)
			}
		}
		require.Len(t, at, 1, "errors: %v", d.Errors)
		assert.Contains(t, at[0], tc.want)

		vps := edit(t, stackstest.Example(t, stackstest.VPSExample), "cluster", func(m map[string]any) {
			m["patches"] = map[string]any{"all": []any{tc.patch}}
		})
		_, d = program.Validate(vps)
		for _, e := range d.Errors {
			assert.NotEqual(t, "cluster.patches.all[0]", e.Path, "not refused on a VPS: %s", e.Message)
		}
	}
}

// local.disableIPv6 leaves the IPv6 sysctl out, as talosctl's
// --disable-ipv6, for a machine whose kernel has no IPv6.
func TestLocalDisableIPv6(t *testing.T) {
	t.Parallel()
	example := stackstest.Example(t, stackstest.LocalExample)
	e, _, _, err := programtest.Run(t, example, "local", program.Options{})
	require.NoError(t, err)
	assert.Equal(t, "0", e.Named(t, dockerContainer, "local-node-cp1").Inputs["sysctls"].ObjectValue()["net.ipv6.conf.all.disable_ipv6"].StringValue())
	off := edit(t, example, "local", func(m map[string]any) { m["disableIPv6"] = true })
	e, _, _, err = programtest.Run(t, off, "local", program.Options{})
	require.NoError(t, err)
	for _, node := range []string{"cp1", "w1"} {
		in := e.Named(t, dockerContainer, "local-node-"+node).Inputs
		assert.True(t, in["sysctls"].IsNull() || len(in["sysctls"].ObjectValue()) == 0, "no IPv6 sysctl on %s", node)
	}
}

// The published ports through a local stack's life: a first up takes the
// defaults where free, else free ports; every later run keeps the ports
// the last one published (read from the container's state) without
// looking again, so the container is not replaced; ports the stack gives
// win.
func TestLocalPortsAreChosenOnceAndKept(t *testing.T) {
	t.Parallel()
	example := stackstest.Example(t, stackstest.LocalExample)
	unset := edit(t, example, "local", func(m map[string]any) { delete(m, "kubernetesPort"); delete(m, "talosPort") })
	published := func(e *componentstest.Engine) map[float64]float64 {
		out := map[float64]float64{}
		for _, p := range e.Named(t, dockerContainer, "local-node-cp1").Inputs["ports"].ArrayValue() {
			o := p.ObjectValue()
			out[o["internal"].NumberValue()] = o["external"].NumberValue()
		}
		return out
	}

	// A first up on a machine where 6443 and 50000 are taken.
	var asked [][]int
	first, outs, _, err := programtest.Run(t, unset, "local", program.Options{FreePorts: func(p []int) ([]int, error) {
		asked = append(asked, p)
		return []int{16443, 50001}, nil
	}})
	require.NoError(t, err)
	assert.Equal(t, [][]int{{6443, 50000}}, asked, "the defaults are preferred")
	assert.Equal(t, map[float64]float64{6443: 16443, 50000: 50001}, published(first))
	assert.Equal(t, "https://127.0.0.1:16443", outs["localEndpoint"].Value)

	// The next run: the last outputs and the container's state.
	cp := first.Named(t, dockerContainer, "local-node-cp1")
	last := &componentstest.Engine{
		StackOutputs: resource.PropertyMap{
			"kubernetesVersion": resource.NewProperty("1.36.3"),
			"nodes":             nodesOutput([]string{"cp1"}, []string{"w1"}),
		},
		StackResources: resource.PropertyMap{
			resource.PropertyKey(cp.URN): resource.NewProperty(resource.PropertyMap{
				"type":    resource.NewProperty(dockerContainer),
				"outputs": resource.NewProperty(resource.PropertyMap{"ports": cp.Inputs["ports"]}),
			}),
		},
	}
	noLook := program.Options{FreePorts: func([]int) ([]int, error) {
		t.Error("a later run looks for free ports")
		return nil, nil
	}}
	next, _, _, err := programtest.RunOn(t, last, unset, "local", noLook)
	require.NoError(t, err)
	assert.Equal(t, map[float64]float64{6443: 16443, 50000: 50001}, published(next), "the running cluster keeps its ports")

	given := edit(t, unset, "local", func(m map[string]any) { m["kubernetesPort"] = 7443 })
	again := &componentstest.Engine{StackOutputs: last.StackOutputs, StackResources: last.StackResources}
	moved, _, _, err := programtest.RunOn(t, again, given, "local", noLook)
	require.NoError(t, err)
	assert.Equal(t, map[float64]float64{6443: 7443, 50000: 50001}, published(moved), "a port the stack gives wins")
}

// With local.apiAccess published (Docker Desktop, rootless Docker) every
// node publishes its Talos API on 127.0.0.1 and every control plane its
// Kubernetes API too, each at its own port, chosen free at the first up
// and kept by node from the containers' state; every Talos call goes to
// those ports (the node still named by its IP) and the kubeconfig this
// machine uses and hands out names the first control plane's port.
func TestLocalPublishedAPIAccess(t *testing.T) {
	t.Parallel()
	example := stackstest.Example(t, stackstest.LocalExample)
	published := edit(t, example, "local", func(m map[string]any) {
		delete(m, "kubernetesPort")
		delete(m, "talosPort")
		m["apiAccess"] = "published"
	})
	portsOf := func(e *componentstest.Engine, node string) map[float64]float64 {
		out := map[float64]float64{}
		for _, p := range e.Named(t, dockerContainer, "local-node-"+node).Inputs["ports"].ArrayValue() {
			o := p.ObjectValue()
			assert.Equal(t, "127.0.0.1", o["ip"].StringValue(), "this machine only")
			out[o["internal"].NumberValue()] = o["external"].NumberValue()
		}
		return out
	}
	var asked [][]int
	first, outs, _, err := programtest.RunOn(t, &componentstest.Engine{TalosKubeconfigs: true}, published, "local", program.Options{FreePorts: func(p []int) ([]int, error) {
		asked = append(asked, p)
		return []int{16443, 50010, 50011}, nil
	}})
	require.NoError(t, err)
	assert.Equal(t, [][]int{{6443, 50000, 50001}}, asked, "the defaults, then the next port per node")
	assert.Equal(t, map[float64]float64{6443: 16443, 50000: 50010}, portsOf(first, "cp1"))
	assert.Equal(t, map[float64]float64{50000: 50011}, portsOf(first, "w1"), "a worker serves no Kubernetes API")

	for node, want := range map[string]string{"cp1": "127.0.0.1:50010", "w1": "127.0.0.1:50011"} {
		apply := first.Named(t, componentstest.Apply, "local-apply-"+node)
		assert.Equal(t, want, apply.Inputs["endpoint"].StringValue(), node)
		assert.Equal(t, map[string]string{"cp1": "10.5.0.2", "w1": "10.5.0.3"}[node], apply.Inputs["node"].StringValue(), "apid serves the node by its IP")
	}
	for _, typ := range []string{componentstest.Bootstrap, componentstest.Kubeconfig} {
		r := first.ByType(typ)
		require.Len(t, r, 1, typ)
		assert.Equal(t, "127.0.0.1:50010", r[0].Inputs["endpoint"].StringValue(), typ)
	}
	kc, ok := outs["kubeconfig"].Value.(string)
	require.True(t, ok, "the kubeconfig output: %#v", outs["kubeconfig"])
	assert.Contains(t, kc, "server: https://127.0.0.1:16443", "the kubeconfig names the published port")
	assert.NotContains(t, kc, "10.5.0.2:6443")
	assert.Equal(t, "https://127.0.0.1:16443", outs["localEndpoint"].Value)

	// The next run keeps every node's ports, read by node (the
	// container's hostname) from the state, without looking again.
	state := resource.PropertyMap{}
	for _, node := range []string{"cp1", "w1"} {
		ctr := first.Named(t, dockerContainer, "local-node-"+node)
		state[resource.PropertyKey(ctr.URN)] = resource.NewProperty(resource.PropertyMap{
			"type": resource.NewProperty(dockerContainer),
			"outputs": resource.NewProperty(resource.PropertyMap{
				"hostname": resource.NewProperty(node), "ports": ctr.Inputs["ports"],
			}),
		})
	}
	last := &componentstest.Engine{
		StackOutputs: resource.PropertyMap{
			"kubernetesVersion": resource.NewProperty("1.36.3"),
			"nodes":             nodesOutput([]string{"cp1"}, []string{"w1"}),
		},
		StackResources:   state,
		TalosKubeconfigs: true,
	}
	next, _, _, err := programtest.RunOn(t, last, published, "local", program.Options{FreePorts: func([]int) ([]int, error) {
		t.Error("a later run looks for free ports")
		return nil, nil
	}})
	require.NoError(t, err)
	assert.Equal(t, portsOf(first, "cp1"), portsOf(next, "cp1"))
	assert.Equal(t, portsOf(first, "w1"), portsOf(next, "w1"))
}
