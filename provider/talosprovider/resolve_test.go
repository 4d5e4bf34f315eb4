package talosprovider_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/status"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/provider/talosprovider"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// serverURN is a resource of the caller's program the inputs come from
// (a server whose address the cluster takes).
const serverURN = "urn:pulumi:stack::project::hcloud:index/server:Server::cp-0"

// fromServer is v as an output of the server: known, with the server as
// its dependency, as the engine sends another resource's output.
func fromServer(v resource.PropertyValue) resource.PropertyValue {
	return resource.NewOutputProperty(resource.Output{Element: v, Known: true, Dependencies: []resource.URN{serverURN}})
}

// unknownFromServer is an output of the server not known yet (a preview of
// the up that makes it).
func unknownFromServer() resource.PropertyValue {
	return resource.NewOutputProperty(resource.Output{Dependencies: []resource.URN{serverURN}})
}

// vpsExampleInputs are the VPS example stack file's arguments as another
// language's SDK sends them.
func vpsExampleInputs(t *testing.T) (string, resource.PropertyMap) {
	t.Helper()
	cfg, d := stacks.Load(stackstest.Example(t, stackstest.VPSExample))
	require.NoError(t, d.Err())
	a := program.VPSArgs(cfg)
	for i, ref := range cfg.Nodes.Refs() {
		a.Nodes[i].Rescue.Password = pulumi.String(ref.Rescue.Password.Reveal())
	}
	return cfg.Cluster.Name, propertyMap(t, reflect.ValueOf(a))
}

// nodeInput is the address of input key of node i.
func nodeInput(in resource.PropertyMap, i int, key resource.PropertyKey) *resource.PropertyValue {
	n := in["nodes"].ArrayValue()[i].ObjectValue()
	v := n[key]
	return &v
}

// setNode sets input key of node i.
func setNode(in resource.PropertyMap, i int, key resource.PropertyKey, v resource.PropertyValue) {
	in["nodes"].ArrayValue()[i].ObjectValue()[key] = v
}

// A VpsCluster takes its servers' addresses and the cluster's endpoint as
// outputs of another resource: the same resources as from plain values,
// and the component depends on the resource they came from.
func TestConstructTakesTheAddressesOfAnotherResource(t *testing.T) {
	t.Parallel()
	name, plain := vpsExampleInputs(t)
	want, _, err := construct(t, talosprovider.VpsToken, name, plain)
	require.NoError(t, err)

	_, in := vpsExampleInputs(t)
	for i := range in["nodes"].ArrayValue() {
		setNode(in, i, "ip", fromServer(*nodeInput(in, i, "ip")))
	}
	cluster := in["cluster"].ObjectValue()
	cluster["endpoint"] = fromServer(cluster["endpoint"])
	got, resp, err := construct(t, talosprovider.VpsToken, name, in)
	require.NoError(t, err)
	assert.Equal(t, children(want), children(got), "the same resources as from plain values")
	component := got.One(t, talosprovider.VpsToken)
	assert.Contains(t, component.Dependencies, serverURN, "the component depends on the server its addresses come from")
	assert.NotContains(t, want.One(t, talosprovider.VpsToken).Dependencies, serverURN)
	assert.True(t, resp.State.Get("kubeconfig").Secret())
}

// The sizes and the API settings of a ProxmoxCluster may be outputs too.
func TestConstructTakesProxmoxSettingsFromOutputs(t *testing.T) {
	t.Parallel()
	cfg, d := stacks.Load(stackstest.Example(t, stackstest.ProxmoxExample))
	require.NoError(t, d.Err())
	a := program.ProxmoxArgs(cfg)
	a.Proxmox.APITokenSecret = pulumi.String(cfg.Proxmox.APITokenSecret.Reveal())
	plain := propertyMap(t, reflect.ValueOf(a))
	want, _, err := construct(t, talosprovider.ProxmoxToken, cfg.Cluster.Name, plain)
	require.NoError(t, err)

	in := propertyMap(t, reflect.ValueOf(a))
	px := in["proxmox"].ObjectValue()
	for _, key := range []resource.PropertyKey{"endpoint", "apiTokenId"} {
		px[key] = fromServer(px[key])
	}
	px["insecure"] = fromServer(resource.NewProperty(a.Proxmox.Insecure))
	for i, n := range a.Nodes {
		for key, size := range map[resource.PropertyKey]int{"cores": n.Cores, "memory": n.Memory, "diskSize": n.DiskSize, "dataDiskSize": n.DataDiskSize} {
			if size != 0 {
				setNode(in, i, key, fromServer(resource.NewProperty(float64(size))))
			}
		}
	}
	got, _, err := construct(t, talosprovider.ProxmoxToken, cfg.Cluster.Name, in)
	require.NoError(t, err)
	assert.Equal(t, children(want), children(got))
	assert.Contains(t, got.One(t, talosprovider.ProxmoxToken).Dependencies, serverURN)
}

// In a preview of the up that makes the server, its address is unknown:
// the component is shown alone (no child made from a guess) and the
// construct succeeds; in an up, an unknown address is refused by path.
func TestConstructWithAnAddressUnknownAtPreview(t *testing.T) {
	t.Parallel()
	name, in := vpsExampleInputs(t)
	setNode(in, 0, "ip", unknownFromServer())
	e, resp, err := constructRun(t, talosprovider.VpsToken, name, in, true)
	require.NoError(t, err)
	all := e.All()
	require.Len(t, all, 1, "the component alone: %v", all)
	assert.Equal(t, talosprovider.VpsToken, all[0].Type)
	assert.Contains(t, all[0].Dependencies, serverURN)
	_, has := resp.State.GetOk("kubeconfig")
	assert.False(t, has, "no output yet: the caller's SDK reads them as unknown")

	e, _, err = constructRun(t, talosprovider.VpsToken, name, in, false)
	require.Error(t, err)
	assert.Contains(t, status.Convert(err).Message(), "  - nodes[0].ip: is unknown in an up")
	assert.Empty(t, e.ByType(componentstest.Apply))
}

// A patch may be a secret: every node's patches are then stored as
// secrets; without one they are not (the diff of a plain patch stays
// readable).
func TestConstructKeepsSecretPatchesSecret(t *testing.T) {
	t.Parallel()
	for _, secret := range []bool{false, true} {
		t.Run(fmt.Sprint("secret=", secret), func(t *testing.T) {
			t.Parallel()
			name, in := vpsExampleInputs(t)
			patch := resource.NewProperty("machine:\n  registries:\n    config:\n      ghcr.io:\n        auth: {password: hunter2}\n")
			if secret {
				patch = resource.MakeSecret(patch)
			}
			setNode(in, 0, "patches", resource.NewProperty([]resource.PropertyValue{patch}))
			e, _, err := construct(t, talosprovider.VpsToken, name, in)
			require.NoError(t, err)
			applies := e.ByType(componentstest.Apply)
			require.NotEmpty(t, applies)
			for _, a := range applies {
				assert.Equal(t, secret, a.Inputs["configPatches"].ContainsSecrets(), "%s: configPatches secret", a.Name)
			}
		})
	}
}

// A secret or an unknown value where the component needs a plain one
// fails the construct with every path named, before anything is made.
func TestConstructRefusesSecretsAndUnknownsByPath(t *testing.T) {
	t.Parallel()
	name, in := vpsExampleInputs(t)
	setNode(in, 0, "name", resource.MakeSecret(*nodeInput(in, 0, "name")))
	setNode(in, 0, "role", unknownFromServer())
	setNode(in, 0, "ip", resource.MakeSecret(*nodeInput(in, 0, "ip")))
	cluster := in["cluster"].ObjectValue()
	cluster["cilium"] = resource.NewProperty(resource.PropertyMap{
		"values": resource.NewProperty(resource.PropertyMap{"hubble": resource.NewProperty(resource.PropertyMap{"token": resource.MakeSecret(resource.NewProperty("x"))})}),
	})
	e, _, err := constructRun(t, talosprovider.VpsToken, name, in, true)
	require.Error(t, err)
	msg := status.Convert(err).Message()
	for _, want := range []string{
		"  - nodes[0].name: is a secret: it must be a plain value",
		"  - nodes[0].role: is unknown until the up",
		"  - nodes[0].ip: is a secret: the component stores it in the stack's state and outputs in clear",
		"  - cluster.cilium.values.hubble.token: is a secret: it must be a plain value",
		`invalid arguments of VpsCluster "` + name + `" (nothing was created)`,
	} {
		assert.Contains(t, msg, want)
	}
	assert.Empty(t, e.All(), "nothing registered")
}
