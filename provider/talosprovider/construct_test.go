package talosprovider_test

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/blang/semver"
	p "github.com/pulumi/pulumi-go-provider"
	"github.com/pulumi/pulumi-go-provider/integration"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/status"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/servers"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/program/programtest"
	"github.com/fluodata/talos-pulumi/provider/talosprovider"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// The stack the program and the provider both run as: MACs, VM tags and
// ISO names derive from it. The provider test server runs every
// construct as stack "stack" of project "project".
const stack = "stack"

// construct runs one component through the provider, from inputs as another
// language's SDK sends them, under a new mock engine.
func construct(t *testing.T, typ, name string, inputs resource.PropertyMap) (*componentstest.Engine, p.ConstructResponse, error) {
	t.Helper()
	return constructRun(t, typ, name, inputs, false)
}

// constructRun is construct in a preview (dryRun) or an up.
func constructRun(t *testing.T, typ, name string, inputs resource.PropertyMap, dryRun bool) (*componentstest.Engine, p.ConstructResponse, error) {
	t.Helper()
	e := &componentstest.Engine{}
	resp, err := constructWith(t, e, typ, name, inputs, func(req *p.ConstructRequest) { req.DryRun = dryRun })
	return e, resp, err
}

// constructWith runs one component through the provider under the mock
// engine e, with the request edited by edit (options, a preview).
func constructWith(t *testing.T, e *componentstest.Engine, typ, name string, inputs resource.PropertyMap, edit func(*p.ConstructRequest)) (p.ConstructResponse, error) {
	t.Helper()
	prov, err := talosprovider.NewWith(talosprovider.Options{
		// As in programtest.Run: recording hooks (the mock engine cannot
		// register real ones), and no node answers in maintenance mode.
		Proxmox: proxmox.Deps{Hooks: &componentstest.Hooks{}},
		VPS:     servers.Deps{Probe: programtest.NoTalosYet},
		Talos:   talos.Deps{Hooks: &componentstest.Hooks{}},
	})
	require.NoError(t, err)
	s, err := integration.NewServer(t.Context(), talosprovider.Name, semver.MustParse(talosprovider.TestServerVersion),
		integration.WithProvider(prov), integration.WithMocks(e))
	require.NoError(t, err)
	req := p.ConstructRequest{
		Urn:    resource.NewURN(tokens.QName(stack), "talos-cluster", "", tokens.Type(typ), name),
		Inputs: resource.FromResourcePropertyMap(inputs),
	}
	if edit != nil {
		edit(&req)
	}
	return s.Construct(req)
}

// The same graph, through the provider, as the Go program makes from the
// example stack files: every resource with its URN, parent, inputs,
// dependencies and options.
func TestConstructMakesTheProgramsGraph(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file, typ string
		args      func(cfg *stacks.Config) any
	}{
		{stackstest.ProxmoxExample, talosprovider.ProxmoxToken, func(cfg *stacks.Config) any {
			a := program.ProxmoxArgs(cfg)
			a.Proxmox.APITokenSecret = pulumi.String(cfg.Proxmox.APITokenSecret.Reveal())
			return a
		}},
		{stackstest.VPSExample, talosprovider.VpsToken, func(cfg *stacks.Config) any {
			a := program.VPSArgs(cfg)
			for i, ref := range cfg.Nodes.Refs() {
				a.Nodes[i].Rescue.Password = pulumi.String(ref.Rescue.Password.Reveal())
			}
			return a
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			src := stackstest.Example(t, tc.file)
			want, _, _, err := programtest.Run(t, src, stack, program.Options{})
			require.NoError(t, err)
			cfg, d := stacks.Load(src)
			require.NoError(t, d.Err())

			inputs := propertyMap(t, reflect.ValueOf(tc.args(cfg)))
			got, resp, err := construct(t, tc.typ, cfg.Cluster.Name, inputs)
			require.NoError(t, err)

			assert.Equal(t, children(want), withoutPlacements(children(got)), "the same resources")
			gotByURN := withoutPlacements(children(got))
			for urn, w := range children(want) {
				if g, ok := gotByURN[urn]; ok {
					assert.Equal(t, w, g, "%s", urn)
				}
			}
			kc := resp.State.Get("kubeconfig")
			assert.True(t, kc.Secret(), "the kubeconfig output is a secret")
			// The Kubernetes provider, as a reference to the cluster's
			// own (the caller's SDK rehydrates it as a Provider).
			kp := resp.State.Get("kubernetesProvider")
			require.True(t, kp.IsResourceReference(), "kubernetesProvider is a resource reference: %v", kp)
			assert.True(t, strings.HasSuffix(string(kp.AsResourceReference().URN), "pulumi:providers:kubernetes::"+cfg.Cluster.Name+talos.K8sProviderSuffix),
				"the cluster's provider: %s", kp.AsResourceReference().URN)
		})
	}
}

// A TalosCluster on machines of the caller's own, from the smallest inputs.
func TestConstructTalosCluster(t *testing.T) {
	t.Parallel()
	e, resp, err := construct(t, talosprovider.TalosToken, "edge", resource.PropertyMap{
		"cluster":        resource.NewProperty(resource.PropertyMap{"name": resource.NewProperty("edge"), "talosVersion": resource.NewProperty("v1.12.0")}),
		"installerImage": resource.NewProperty("factory.talos.dev/metal-installer/abc:v1.12.0"),
		"nodes": resource.NewProperty([]resource.PropertyValue{
			node("cp-0", "192.168.1.10", "controlplane"), node("w-0", "192.168.1.20", "worker"),
		}),
	})
	require.NoError(t, err)
	assert.Len(t, e.ByType(componentstest.Apply), 2)
	assert.Equal(t, "192.168.1.10", e.One(t, componentstest.Bootstrap).Inputs["node"].StringValue())
	releases := e.ByType(componentstest.Release)
	require.Len(t, releases, 2)
	assert.Equal(t, "https://192.168.1.10:6443", resp.State.Get("endpoint").AsString(), "the endpoint defaults to the first control plane")
	assert.True(t, resp.State.Get("talosconfig").Secret())
}

// Invalid inputs fail with every problem named by its input path, and
// nothing is registered.
func TestConstructRefusesInvalidInputs(t *testing.T) {
	t.Parallel()
	e, _, err := construct(t, talosprovider.TalosToken, "edge", resource.PropertyMap{
		"cluster": resource.NewProperty(resource.PropertyMap{"name": resource.NewProperty("Edge_1"), "talosVersion": resource.NewProperty("1.12")}),
		"nodes": resource.NewProperty([]resource.PropertyValue{
			node("w-0", "192.168.1.300", "worker"),
		}),
	})
	require.Error(t, err)
	msg := status.Convert(err).Message()
	for _, path := range []string{"cluster.name", "cluster.talosVersion", "installerImage", "nodes[0].role", "nodes[0].ip"} {
		assert.Contains(t, msg, "  - "+path+": ", "the error names %s:\n%s", path, msg)
	}
	assert.Contains(t, msg, `invalid arguments of TalosCluster "edge" (nothing was created)`)
	for _, r := range e.All() {
		assert.Equal(t, talosprovider.TalosToken, r.Type, "only the component itself may be registered, not %s", r.URN)
	}
}

func node(name, ip, role string) resource.PropertyValue {
	return resource.NewProperty(resource.PropertyMap{
		"name": resource.NewProperty(name), "ip": resource.NewProperty(ip), "role": resource.NewProperty(role),
		"network": resource.NewProperty(resource.PropertyMap{"dhcp": resource.NewProperty(true)}),
	})
}

// children are the component's children by URN, with what differs only by
// the way the component is reached left out: the project in the URNs (the
// provider's test server names its own), the component's own registration
// (the construct request's, not the component's), and the order of
// dependencies.
func children(e *componentstest.Engine) map[string]componentstest.Registered {
	out := map[string]componentstest.Registered{}
	for _, r := range e.All() {
		if r.Parent == "" || strings.Contains(r.Parent, "pulumi:pulumi:Stack") {
			continue
		}
		r.URN, r.Parent, r.DeletedWith, r.Provider = local(r.URN), local(r.Parent), local(r.DeletedWith), local(r.Provider)
		r.Type = packaged(r.Type)
		// Deps holds the dependencies and property dependencies merged,
		// compared without their stack and project; the split lists carry
		// those, and an SDK's empty list where another sends none.
		r.Dependencies, r.PropertyDependencies = nil, nil
		for _, list := range [][]string{r.Deps, r.ReplaceWith} {
			for i := range list {
				list[i] = local(list[i])
			}
			slices.Sort(list)
		}
		out[r.URN] = r
	}
	return out
}

// withoutPlacements are the children but the VMs' placement records and
// the VMs' dependencies on them: the one difference of a ProxmoxCluster
// without a fast stop (the package's), whose records' hook takes a node
// out of the cluster before its VM's replacement, as the stack file's fast
// stop does.
func withoutPlacements(children map[string]componentstest.Registered) map[string]componentstest.Registered {
	out := map[string]componentstest.Registered{}
	for urn, r := range children {
		if strings.Contains(r.Name, proxmox.PlacementInfix) {
			continue
		}
		r.Deps = slices.DeleteFunc(slices.Clone(r.Deps), func(d string) bool { return strings.Contains(d, proxmox.PlacementInfix) })
		out[urn] = r
	}
	return out
}

// local is a URN without its stack and project, the program's component
// types (talos-cluster:index:...) named as the package names them.
func local(urn string) string {
	if _, rest, ok := strings.Cut(urn, "::"); ok {
		if _, rest, ok := strings.Cut(rest, "::"); ok {
			urn = rest
		}
	}
	return packaged(urn)
}

// packaged names the program's component types (talos-cluster:index:...)
// as the package names them.
func packaged(s string) string {
	return strings.ReplaceAll(s, talos.ProgramPackage+":index:", talosprovider.Name+":index:")
}

// propertyMap encodes component arguments as another language's SDK sends
// them: the `pulumi` tag names, left-out optional values absent, and the
// inputs tagged provider:"secret" as secrets.
func propertyMap(t *testing.T, v reflect.Value) resource.PropertyMap {
	t.Helper()
	pv, ok := property(t, v, false)
	require.True(t, ok)
	return pv.ObjectValue()
}

func property(t *testing.T, v reflect.Value, secret bool) (resource.PropertyValue, bool) {
	t.Helper()
	wrap := func(pv resource.PropertyValue) (resource.PropertyValue, bool) {
		if secret {
			return resource.MakeSecret(pv), true
		}
		return pv, true
	}
	if !v.IsValid() {
		return resource.PropertyValue{}, false
	}
	if in, ok := v.Interface().(pulumi.StringInput); ok && v.Kind() != reflect.String {
		if v.IsNil() {
			return resource.PropertyValue{}, false
		}
		s, ok := in.(pulumi.String)
		require.True(t, ok, "test arguments must hold plain pulumi.String inputs, not %T", in)
		return wrap(resource.NewProperty(string(s)))
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return resource.PropertyValue{}, false
		}
		return property(t, v.Elem(), secret)
	case reflect.String:
		return wrap(resource.NewProperty(v.String()))
	case reflect.Bool:
		return wrap(resource.NewProperty(v.Bool()))
	case reflect.Int, reflect.Int64:
		return wrap(resource.NewProperty(float64(v.Int())))
	case reflect.Slice:
		if v.IsNil() {
			return resource.PropertyValue{}, false
		}
		var arr []resource.PropertyValue
		for i := range v.Len() {
			pv, ok := property(t, v.Index(i), false)
			require.True(t, ok)
			arr = append(arr, pv)
		}
		return wrap(resource.NewProperty(arr))
	case reflect.Map:
		if v.IsNil() {
			return resource.PropertyValue{}, false
		}
		return wrap(resource.NewPropertyValue(v.Interface()))
	case reflect.Struct:
		m := resource.PropertyMap{}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("pulumi"), ",")
			if name == "" {
				continue
			}
			if pv, ok := property(t, v.Field(i), strings.Contains(f.Tag.Get("provider"), "secret")); ok {
				m[resource.PropertyKey(name)] = pv
			}
		}
		return wrap(resource.NewProperty(m))
	default:
		t.Fatalf("no property for %s", v.Type())
		return resource.PropertyValue{}, false
	}
}

// The YAML example builds, through the provider, the same cluster as the
// Proxmox example stack file through the Go program.
func TestYAMLExampleMakesTheStackExamplesGraph(t *testing.T) {
	t.Parallel()
	src := stackstest.Example(t, stackstest.ProxmoxExample)
	want, _, _, err := programtest.Run(t, src, stack, program.Options{})
	require.NoError(t, err)
	cfg, d := stacks.Load(src)
	require.NoError(t, d.Err())

	inputs := yamlExampleInputs(t, "proxmox-yaml", cfg.Cluster.Name, talosprovider.ProxmoxToken)
	px := inputs["proxmox"].ObjectValue()
	require.Equal(t, "${proxmoxApiTokenSecret}", px["apiTokenSecret"].StringValue())
	px["apiTokenSecret"] = resource.MakeSecret(resource.NewProperty(cfg.Proxmox.APITokenSecret.Reveal()))

	got, _, err := construct(t, talosprovider.ProxmoxToken, cfg.Cluster.Name, inputs)
	require.NoError(t, err)
	assert.Len(t, got.ByType(componentstest.LocalCommand), len(want.ByType(componentstest.LocalCommand))+len(cfg.Nodes.All()), "a placement record per VM")
	assert.Equal(t, children(want), withoutPlacements(children(got)))
}

// The local YAML example builds, through the provider, the same cluster as
// the local example stack file through the Go program (the Kubernetes
// objects it adds aside).
func TestLocalYAMLExampleMakesTheStackExamplesGraph(t *testing.T) {
	t.Parallel()
	src := stackstest.Example(t, stackstest.LocalExample)
	want, _, _, err := programtest.Run(t, src, stack, program.Options{})
	require.NoError(t, err)
	cfg, d := stacks.Load(src)
	require.NoError(t, d.Err())

	inputs := yamlExampleInputs(t, "local-yaml", cfg.Cluster.Name, talosprovider.DockerToken)
	got, _, err := construct(t, talosprovider.DockerToken, cfg.Cluster.Name, inputs)
	require.NoError(t, err)
	assert.Equal(t, children(want), children(got))
}

// yamlExampleInputs are the properties of the resource name, of type
// token, in the YAML example program in examples/<dir>.
func yamlExampleInputs(t *testing.T, dir, name, token string) resource.PropertyMap {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(stackstest.RepoRoot(t), "examples", dir, "Pulumi.yaml"))
	require.NoError(t, err)
	var project struct {
		Resources map[string]struct {
			Type       string         `yaml:"type"`
			Properties map[string]any `yaml:"properties"`
		} `yaml:"resources"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &project))
	res := project.Resources[name]
	require.Equal(t, token, res.Type)
	return resource.NewPropertyMapFromMap(res.Properties)
}
