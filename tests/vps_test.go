package tests

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/image"
	"github.com/fluodata/talos-pulumi/components/servers"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/testkit/factorytest"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

const rescuePassword = "rescue-pw-Xq81" // the VPS example's secret in stackstest

// plainOccurrences lists where needle appears in v outside a secret.
func plainOccurrences(v resource.PropertyValue, path, needle string) []string {
	switch {
	case v.IsSecret():
		return nil
	case v.IsString():
		if strings.Contains(v.StringValue(), needle) {
			return []string{path}
		}
	case v.IsObject():
		var out []string
		for k, e := range v.ObjectValue() {
			out = append(out, plainOccurrences(e, path+"."+string(k), needle)...)
		}
		return out
	case v.IsArray():
		var out []string
		for i, e := range v.ArrayValue() {
			out = append(out, plainOccurrences(e, fmt.Sprintf("%s[%d]", path, i), needle)...)
		}
		return out
	}
	return nil
}

func TestVPSExampleGraph(t *testing.T) {
	t.Parallel()
	e, outs := deploy(t, stackstest.Example(t, stackstest.VPSExample))

	install := e.Named(t, componentstest.RemoteCommand, "prod-install-node-0")
	conn := install.Inputs["connection"]
	connection := conn
	if conn.IsSecret() {
		connection = conn.SecretValue().Element
	}
	assert.True(t, conn.IsSecret() || obj(connection, "password").IsSecret(), "the rescue password is secret in the connection")
	assert.Equal(t, "203.0.113.10", obj(connection, "host").StringValue(), "rescue host defaults to the node's IP")
	assert.Equal(t, "root", obj(connection, "user").StringValue())
	assert.Equal(t, 22.0, obj(connection, "port").NumberValue())

	assert.Equal(t, "bash -s", install.Inputs["create"].StringValue())
	stdin := install.Inputs["stdin"].StringValue()
	assert.True(t, strings.HasPrefix(stdin, "IMAGE_URL='https://factory.talos.dev/image/"+componentstest.SchematicID+"/v1.13.9/metal-amd64.raw.zst'\n"+
		"REQUIRE_RESCUE='1'\nTARGET='/dev/sda'\n"), "variables first:\n%s", stdin[:200])
	assert.True(t, strings.HasSuffix(stdin, servers.InstallScript), "then the repo's install script as it is")
	assert.Nil(t, install.Inputs["delete"].V, "destroy never touches the server's disk")
	assert.Subset(t, install.IgnoreChanges, []string{"create", "stdin", "connection"},
		"a new Talos version, image or password never re-images a running node")

	for _, c := range e.ByType(componentstest.LocalCommand) {
		assert.NotContains(t, c.Name, "reboot", "no reboot command configured")
	}
	wait := e.Named(t, componentstest.LocalCommand, "prod-wait-node-0")
	assert.True(t, e.After(wait, install), "install before the wait")
	assert.False(t, wait.Inputs.HasValue("create"), "the wait runs in the program (its hook), no script")
	env := wait.Inputs["environment"].ObjectValue()
	assert.Equal(t, "203.0.113.10", env["NODE_IP"].StringValue())
	assert.Equal(t, "1800", env["WAIT_TIMEOUT"].StringValue())
	assert.Contains(t, env["HINT"].StringValue(), "switch its boot from the rescue system to its disk", "manual step spelled out")
	assert.Len(t, wait.Inputs["triggers"].ArrayValue(), 1, "replaced with the install")

	apply := e.Named(t, componentstest.Apply, "prod-apply-node-0")
	assert.True(t, e.After(apply, wait), "wait before the apply")
	assert.True(t, strings.HasSuffix(apply.DeletedWith, "::prod-install-node-0"), "forget by default: no call to the node at destroy")
	assert.Nil(t, apply.Inputs["onDestroy"].V, "no reset by default")
	patches := strings.Join(strs(apply.Inputs["configPatches"]), "\n---\n")
	for _, want := range []string{"203.0.113.10/32", "network: 203.0.113.254/32", "kind: NetworkDefaultActionConfig",
		"ingress: block", "name: apid", "subnet: 198.51.100.0/24", "allowSchedulingOnControlPlanes: true"} {
		assert.Contains(t, patches, want)
	}
	for _, rel := range e.ByType(componentstest.Release) {
		assert.True(t, strings.HasSuffix(rel.DeletedWith, "::prod-install-node-0"), "%s: destroy never uninstalls from a live server", rel.Name)
	}
	assert.Empty(t, e.ByType(componentstest.VM))
	for _, r := range e.Created() {
		if r.Type != componentstest.VpsCluster {
			assert.Contains(t, r.Parent, "VpsCluster", "%s %s is inside the component", r.Type, r.Name)
		}
		for k, v := range r.Inputs {
			assert.Empty(t, plainOccurrences(v, r.Name+"."+string(k), rescuePassword), "the rescue password only ever travels as a secret")
		}
	}

	assert.True(t, outs["kubeconfig"].Secret)
	assert.True(t, outs["talosconfig"].Secret)
	assert.Equal(t, "https://203.0.113.10:6443", outs["endpoint"].Value)
	assert.Equal(t, "https://factory.talos.dev/image/"+componentstest.SchematicID+"/v1.13.9/metal-amd64.raw.zst", outs["imageUrl"].Value)
	for k, o := range outs {
		assert.NotContains(t, fmt.Sprint(o.Value), rescuePassword, "output %s", k)
	}
}

func TestVPSRebootCommandResetAndImageURL(t *testing.T) {
	t.Parallel()
	src := edit(t, stackstest.Example(t, stackstest.VPSExample), "vps", func(m map[string]any) {
		m["rebootCommand"] = "ovh-cli boot-disk $NODE_NAME && ovh-cli reboot $NODE_NAME"
		m["onDestroy"] = "reset"
		m["imageUrl"] = "https://mirror.example.com/talos/metal-amd64.raw.xz"
		m["talosWaitTimeout"] = "45m"
	})
	e, _ := deploy(t, src)

	install := e.Named(t, componentstest.RemoteCommand, "prod-install-node-0")
	assert.Contains(t, install.Inputs["stdin"].StringValue(), "IMAGE_URL='https://mirror.example.com/talos/metal-amd64.raw.xz'\n")
	reboot := e.Named(t, componentstest.LocalCommand, "prod-reboot-node-0")
	wait := e.Named(t, componentstest.LocalCommand, "prod-wait-node-0")
	assert.True(t, e.After(reboot, install))
	assert.True(t, e.After(wait, reboot), "the wait starts after the reboot command")
	assert.Equal(t, "ovh-cli boot-disk $NODE_NAME && ovh-cli reboot $NODE_NAME", reboot.Inputs["create"].StringValue())
	assert.Equal(t, "node-0", reboot.Inputs["environment"].ObjectValue()["NODE_NAME"].StringValue())
	assert.Subset(t, reboot.IgnoreChanges, []string{"create"}, "editing the command never reboots a running node")
	env := wait.Inputs["environment"].ObjectValue()
	assert.Equal(t, "2700", env["WAIT_TIMEOUT"].StringValue())
	assert.Contains(t, env["HINT"].StringValue(), "vps.rebootCommand ran for node-0")

	// The reset is the membership's removal, not the apply's delete,
	// which a re-image runs too (item 3 of issue 23).
	apply := e.Named(t, componentstest.Apply, "prod-apply-node-0")
	assert.NotContains(t, apply.Inputs, resource.PropertyKey("onDestroy"))
	member := e.Named(t, componentstest.LocalCommand, "prod"+talos.MemberSuffix+"node-0")
	assert.Equal(t, "1", member.Inputs["environment"].ObjectValue()["NODE_RESET"].StringValue())
	assert.True(t, strings.HasSuffix(member.DeletedWith, "::prod-secrets"), "a destroy skips the membership's delete; its hook resets the node")
	for _, rel := range e.ByType(componentstest.Release) {
		assert.True(t, strings.HasSuffix(rel.DeletedWith, "::prod-install-node-0"), rel.Name)
	}
}

// Three control planes and two workers: the same flow per node, each apply
// waiting for its own node only, bootstrap on the first control plane.
func TestVPSLargerCluster(t *testing.T) {
	t.Parallel()
	src := stackstest.Example(t, stackstest.VPSExample)
	src = edit(t, src, "nodes", func(m map[string]any) {
		base := m["controlPlanes"].([]any)[0].(map[string]any)
		node := func(i int, ip string) map[string]any {
			n := map[string]any{}
			for k, v := range base {
				n[k] = v
			}
			n["name"], n["ip"] = fmt.Sprintf("node-%d", i), ip
			return n
		}
		m["controlPlanes"] = []any{node(0, "203.0.113.10"), node(1, "203.0.113.11"), node(2, "203.0.113.12")}
		m["workers"] = []any{node(3, "203.0.113.20"), node(4, "203.0.113.21")}
	})
	e, outs := deploy(t, src)
	require.Len(t, e.ByType(componentstest.RemoteCommand), 5)
	for i := range 5 {
		name := fmt.Sprintf("node-%d", i)
		apply := e.Named(t, componentstest.Apply, "prod-apply-"+name)
		assert.True(t, e.After(apply, e.Named(t, componentstest.LocalCommand, "prod-wait-"+name)))
		// A change reaches one node at a time (control planes first, in
		// order): each apply waits for the nodes before it, and for no
		// install after it.
		for j := range 5 {
			assert.Equal(t, j <= i, e.After(apply, e.Named(t, componentstest.LocalCommand, fmt.Sprintf("prod-wait-node-%d", j))),
				"%s waits for node-%d: %v", name, j, j <= i)
		}
	}
	bootstrap := e.One(t, componentstest.Bootstrap)
	assert.Equal(t, "203.0.113.10", bootstrap.Inputs["node"].StringValue())
	assert.Len(t, outs["nodeIps"].Value, 5)
}

// After `vps.onDestroy: reset` the servers boot Talos from their disks into
// maintenance mode; the next `up` must not try the rescue install (Talos has
// no SSH), nor the reboot command, and must go on to the config apply.
func TestVPSNodeInMaintenanceModeSkipsRescueInstallAndReboot(t *testing.T) {
	t.Parallel()
	src := edit(t, stackstest.Example(t, stackstest.VPSExample), "vps", func(m map[string]any) {
		m["rebootCommand"] = "ovh-cli boot-disk $NODE_NAME && ovh-cli reboot $NODE_NAME"
		m["onDestroy"] = "reset"
	})
	var probed []string
	var mu sync.Mutex
	e, _, _ := deployWith(t, src, program.Options{TalosProbe: func(_ context.Context, ip string) bool {
		mu.Lock()
		defer mu.Unlock()
		probed = append(probed, ip)
		return true
	}})
	assert.Equal(t, []string{"203.0.113.10"}, probed, "the node's own address is probed")

	install := e.Named(t, componentstest.RemoteCommand, "prod-install-node-0")
	for _, k := range []resource.PropertyKey{"create", "stdin"} {
		_, has := install.Inputs[k]
		assert.False(t, has, "no %s: the command provider runs nothing and dials nobody", k)
	}
	assert.Subset(t, install.IgnoreChanges, []string{"create", "stdin"}, "a later up, in rescue or not, shows no diff")
	reboot := e.Named(t, componentstest.LocalCommand, "prod-reboot-node-0")
	_, has := reboot.Inputs["create"]
	assert.False(t, has, "the reboot command does not run")
	wait := e.Named(t, componentstest.LocalCommand, "prod-wait-node-0")
	apply := e.Named(t, componentstest.Apply, "prod-apply-node-0")
	assert.True(t, e.After(apply, wait), "the apply still waits for Talos to answer")
	assert.False(t, wait.Inputs.HasValue("create"), "the wait runs in the program (its hook)")

	// The same stack with the node in its rescue system installs as before.
	e, _ = deploy(t, src)
	assert.Equal(t, "bash -s", e.Named(t, componentstest.RemoteCommand, "prod-install-node-0").Inputs["create"].StringValue())
}

// A rented server with a schematic of its own writes its own disk image and
// installs its own installer; its kernel arguments come with the cluster's
// extensions (the example's Longhorn ones).
func TestVPSNodeSchematic(t *testing.T) {
	t.Parallel()
	src := stackstest.Example(t, stackstest.VPSExample)
	src = edit(t, src, "nodes", func(m map[string]any) {
		cp := m["controlPlanes"].([]any)[0].(map[string]any)
		cp["schematic"] = map[string]any{"kernelArgs": []any{"net.ifnames=0"}}
	})
	e, outs := deploy(t, src)

	exts := []string{"siderolabs/iscsi-tools", "siderolabs/util-linux-tools"}
	doc, err := image.SchematicYAML(exts, []string{"net.ifnames=0"})
	require.NoError(t, err)
	id, err := factorytest.SchematicID([]byte(doc))
	require.NoError(t, err)
	own := image.Schematic{Extensions: exts, KernelArgs: []string{"net.ifnames=0"}}
	assert.Equal(t, doc, e.Named(t, componentstest.Schematic, "prod-schematic-"+own.Suffix()).Inputs["schematic"].StringValue())

	stdin := e.Named(t, componentstest.RemoteCommand, "prod-install-node-0").Inputs["stdin"].StringValue()
	assert.True(t, strings.HasPrefix(stdin, "IMAGE_URL='https://factory.talos.dev/image/"+id+"/v1.13.9/metal-amd64.raw.zst'\n"), "its own image:\n%s", stdin[:200])
	patches := fmt.Sprint(e.Named(t, componentstest.Apply, "prod-apply-node-0").Inputs["configPatches"])
	assert.Contains(t, patches, "factory.talos.dev/metal-installer/"+id+":v1.13.9")
	assert.Equal(t, "https://factory.talos.dev/image/"+componentstest.SchematicID+"/v1.13.9/metal-amd64.raw.zst", outs["imageUrl"].Value, "the cluster's image stays the output")
}
