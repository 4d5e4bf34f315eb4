package talosprovider_test

import (
	"reflect"
	"testing"

	p "github.com/pulumi/pulumi-go-provider"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/status"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/provider/talosprovider"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// callersProvider is a proxmoxve provider of the caller's program.
const callersProvider = "urn:pulumi:stack::project::pulumi:providers:proxmoxve::mine"

// proxmoxExample is the Proxmox example stack file's cluster name, its
// arguments as another language sends them, and its API endpoint.
func proxmoxExample(t *testing.T) (string, resource.PropertyMap, string) {
	t.Helper()
	cfg, d := stacks.Load(stackstest.Example(t, stackstest.ProxmoxExample))
	require.NoError(t, d.Err())
	a := program.ProxmoxArgs(cfg)
	a.Proxmox.APITokenSecret = pulumi.String(cfg.Proxmox.APITokenSecret.Reveal())
	return cfg.Cluster.Name, propertyMap(t, reflect.ValueOf(a)), a.Proxmox.Endpoint
}

// withCallersProvider passes the caller's proxmoxve provider to the
// component (the `providers` option), as the engine sends it.
func withCallersProvider(req *p.ConstructRequest) {
	req.Providers = map[tokens.Package]p.ProviderReference{"proxmoxve": {Urn: callersProvider, ID: "04da6b54-80e4-46f7-96ec-b56ff0331ba9"}}
}

// A proxmoxve provider passed to a ProxmoxCluster is the one of every
// Proxmox resource (the ISOs, the VMs), and the component
// makes none of its own; without one it makes <name>-pve.
func TestConstructUsesTheCallersProxmoxProvider(t *testing.T) {
	t.Parallel()
	name, in, endpoint := proxmoxExample(t)
	own := &componentstest.Engine{}
	_, err := constructWith(t, own, talosprovider.ProxmoxToken, name, in, nil)
	require.NoError(t, err)
	require.Len(t, own.ByType("pulumi:providers:proxmoxve"), 1, "its own provider without the caller's")

	e := &componentstest.Engine{Existing: map[string]componentstest.Existing{callersProvider: {
		ID: "04da6b54-80e4-46f7-96ec-b56ff0331ba9", Outputs: resource.PropertyMap{"endpoint": resource.NewProperty(endpoint + "/")},
	}}}
	_, err = constructWith(t, e, talosprovider.ProxmoxToken, name, in, withCallersProvider)
	require.NoError(t, err)
	assert.Empty(t, e.ByType("pulumi:providers:proxmoxve"), "no provider of its own")
	proxmoxResources := 0
	for _, r := range e.All() {
		if tokens.Type(r.Type).Package() != "proxmoxve" {
			continue
		}
		proxmoxResources++
		assert.Equal(t, callersProvider, r.Provider, "%s uses the caller's provider", r.URN)
	}
	assert.Equal(t, len(own.All())-1, len(e.All()), "the same resources but the provider")
	ownProxmox := 0
	for _, r := range own.All() {
		if tokens.Type(r.Type).Package() == "proxmoxve" && r.Type != "pulumi:providers:proxmoxve" {
			ownProxmox++
		}
	}
	assert.Equal(t, ownProxmox, proxmoxResources, "every Proxmox resource")
	assert.GreaterOrEqual(t, proxmoxResources, 4, "the ISO and the VMs")
}

// A caller's provider for another Proxmox VE API than proxmox.endpoint,
// which the component's own calls use, is refused before any Proxmox
// resource is registered.
func TestConstructRefusesACallersProviderForAnotherAPI(t *testing.T) {
	t.Parallel()
	name, in, _ := proxmoxExample(t)
	e := &componentstest.Engine{Existing: map[string]componentstest.Existing{callersProvider: {
		ID: "04da6b54-80e4-46f7-96ec-b56ff0331ba9", Outputs: resource.PropertyMap{"endpoint": resource.NewProperty("https://192.0.2.9:8006/")},
	}}}
	_, err := constructWith(t, e, talosprovider.ProxmoxToken, name, in, withCallersProvider)
	require.Error(t, err)
	assert.Contains(t, status.Convert(err).Message(), "its endpoint https://192.0.2.9:8006/ is not proxmox.endpoint")
	for _, r := range e.All() {
		assert.NotEqual(t, "proxmoxve", string(tokens.Type(r.Type).Package()), "no Proxmox resource: %s", r.URN)
	}
}

// A talos or command provider passed to a component is the one of its
// talos and command resources (the SDK hands a parent's providers to its
// children); its Kubernetes resources keep the cluster's own provider.
func TestConstructHandsTheCallersOtherProvidersToTheChildren(t *testing.T) {
	t.Parallel()
	const (
		talosProvider   = "urn:pulumi:stack::project::pulumi:providers:talos::mine"
		commandProvider = "urn:pulumi:stack::project::pulumi:providers:command::mine"
		k8sProvider     = "urn:pulumi:stack::project::pulumi:providers:kubernetes::other-cluster"
	)
	name, in := vpsExampleInputs(t)
	e := &componentstest.Engine{Existing: map[string]componentstest.Existing{
		talosProvider: {ID: "1"}, commandProvider: {ID: "2"}, k8sProvider: {ID: "3"},
	}}
	_, err := constructWith(t, e, talosprovider.VpsToken, name, in, func(req *p.ConstructRequest) {
		req.Providers = map[tokens.Package]p.ProviderReference{
			"talos": {Urn: talosProvider, ID: "1"}, "command": {Urn: commandProvider, ID: "2"}, "kubernetes": {Urn: k8sProvider, ID: "3"},
		}
	})
	require.NoError(t, err)
	want := map[tokens.Package]string{"talos": talosProvider, "command": commandProvider}
	seen := map[tokens.Package]int{}
	for _, r := range e.All() {
		pkg := tokens.Type(r.Type).Package()
		if !r.Custom || pkg == "pulumi" {
			continue
		}
		seen[pkg]++
		if w, ok := want[pkg]; ok {
			assert.Equal(t, w, r.Provider, "%s uses the caller's %s provider", r.URN, pkg)
			continue
		}
		if pkg == "kubernetes" {
			assert.Contains(t, r.Provider, "pulumi:providers:kubernetes::"+name+talos.K8sProviderSuffix, "%s keeps the cluster's provider", r.URN)
		}
	}
	assert.Positive(t, seen["talos"])
	assert.Positive(t, seen["command"])
	assert.Positive(t, seen["kubernetes"])
}
