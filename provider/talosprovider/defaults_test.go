package talosprovider_test

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	p "github.com/pulumi/pulumi-go-provider"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/status"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/docker"
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/vps"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/provider/talosprovider"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// schemaInput is one input property of a component in the schema, found
// by walking its inputs and the types they refer to: its path (property
// names, "[]" for a list's items), its default and its enum type.
type schemaInput struct {
	resource string
	path     []string
	def      any
	enum     string
	values   []string
}

func (s schemaInput) String() string { return s.resource + " " + strings.Join(s.path, ".") }

// schemaInputs are the inputs of every component that have a default or
// an enum type.
func schemaInputs(t *testing.T) []schemaInput {
	t.Helper()
	resp, err := server(t).GetSchema(p.GetSchemaRequest{})
	require.NoError(t, err)
	var spec struct {
		Resources map[string]struct {
			InputProperties map[string]map[string]any `json:"inputProperties"`
		} `json:"resources"`
		Types map[string]map[string]any `json:"types"`
	}
	require.NoError(t, json.Unmarshal([]byte(resp.Schema), &spec))
	var out []schemaInput
	var walk func(res string, path []string, prop map[string]any, depth int)
	walk = func(res string, path []string, prop map[string]any, depth int) {
		require.Less(t, depth, 10, "the types nest too deep at %s %v", res, path)
		if items, _ := prop["items"].(map[string]any); items != nil {
			walk(res, append(slices.Clone(path), "[]"), items, depth+1)
			return
		}
		in := schemaInput{resource: res, path: path, def: prop["default"]}
		if ref, _ := prop["$ref"].(string); strings.HasPrefix(ref, "#/types/") {
			typ := spec.Types[strings.TrimPrefix(ref, "#/types/")]
			require.NotNil(t, typ, "%s refers to %s", in, ref)
			if enum, _ := typ["enum"].([]any); enum != nil {
				in.enum = strings.TrimPrefix(ref, "#/types/")
				for _, v := range enum {
					in.values = append(in.values, v.(map[string]any)["value"].(string))
				}
			} else {
				props, _ := typ["properties"].(map[string]any)
				for name, sub := range props {
					walk(res, append(slices.Clone(path), name), sub.(map[string]any), depth+1)
				}
			}
		}
		if in.def != nil || in.enum != "" {
			out = append(out, in)
		}
	}
	for res, r := range spec.Resources {
		for name, prop := range r.InputProperties {
			walk(res, []string{name}, prop, 0)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// baseInputs are inputs each component accepts: the example stack files'
// clusters as the Go program passes them, and a small TalosCluster with
// two workers.
func baseInputs(t *testing.T) map[string]resource.PropertyMap {
	t.Helper()
	load := func(file string) *stacks.Config {
		cfg, d := stacks.Load(stackstest.Example(t, file))
		require.NoError(t, d.Err())
		return cfg
	}
	px := load(stackstest.ProxmoxExample)
	pa := program.ProxmoxArgs(px)
	pa.Proxmox.APITokenSecret = pulumi.String(px.Proxmox.APITokenSecret.Reveal())
	vc := load(stackstest.VPSExample)
	va := program.VPSArgs(vc)
	for i, ref := range vc.Nodes.Refs() {
		va.Nodes[i].Rescue.Password = pulumi.String(ref.Rescue.Password.Reveal())
	}
	da := program.LocalArgs(load(stackstest.LocalExample))
	// The optional sections whose inputs have defaults are there, with
	// what they require, so that a default can be given or left out.
	pa.CSI = &proxmox.CSISettings{Datastore: "local-lvm"}
	// A hosts entry, for its settings' defaults: without nodes, so that
	// the CSI plugin (the proxmox host's alone) is still taken.
	pa.Hosts = []proxmox.Host{{Name: "office", Proxmox: &proxmox.HostSettings{
		Endpoint: "https://198.51.100.7:8006/", APITokenID: "root@pam!pulumi", APITokenSecret: pulumi.String("7c2d9e41-5a3b-4f60-8e1d-2b9c0a7f6e35"),
		Gateway: px.Cluster.Network.Gateway, DNSMasq: &proxmox.DNSMasqSettings{SSH: proxmox.SSHSettings{Host: "198.51.100.7"}},
	}}}
	return map[string]resource.PropertyMap{
		talosprovider.ProxmoxToken: propertyMap(t, reflect.ValueOf(pa)),
		talosprovider.VpsToken:     propertyMap(t, reflect.ValueOf(va)),
		talosprovider.DockerToken:  propertyMap(t, reflect.ValueOf(da)),
		talosprovider.TalosToken: {
			"cluster":        resource.NewProperty(resource.PropertyMap{"name": resource.NewProperty("edge"), "talosVersion": resource.NewProperty("v1.12.0")}),
			"installerImage": resource.NewProperty("factory.talos.dev/metal-installer/abc:v1.12.0"),
			"nodes": resource.NewProperty([]resource.PropertyValue{
				node("cp-0", "192.168.1.10", "controlplane"), node("w-0", "192.168.1.20", "worker"), node("w-1", "192.168.1.21", "worker"),
			}),
		},
	}
}

// serversInput says an input of a ProxmoxCluster is one of its rented
// servers' (a hosts entry's vps, a node's server): the VpsCluster's own
// types, whose defaults this test holds on the VpsCluster. The
// ProxmoxCluster applies the same (vps.ClusterArgs.WithDefaults, in its
// WithDefaults and serverNode), to a servers entry and its nodes only,
// which setAt, setting every item of a list, cannot give apart from its
// Proxmox VE hosts and VMs; components/proxmox/servers_test.go holds them.
func serversInput(token string, path []string) bool {
	p := strings.Join(path, ".")
	return token == talosprovider.ProxmoxToken && (strings.HasPrefix(p, "hosts.[].vps.") || strings.HasPrefix(p, "nodes.[].server."))
}

// Every default in the schema is the one the component applies: each
// component built through the provider with the input left out and with
// the schema's default makes the same resources with the same inputs and
// options and the same outputs. (The values come from the components'
// defaulting functions, defaults.go; this holds them to what
// the components do, whatever code applies the default.)
func TestSchemaDefaultsAreWhatTheComponentsApply(t *testing.T) {
	t.Parallel()
	inputs, base := schemaInputs(t), baseInputs(t)
	checked := 0
	for _, in := range inputs {
		if in.def == nil || serversInput(in.resource, in.path) {
			continue
		}
		checked++
		t.Run(in.String(), func(t *testing.T) {
			t.Parallel()
			build := func(v *resource.PropertyValue) (map[string]componentstest.Registered, resource.PropertyMap) {
				args := copyMap(base[in.resource])
				setAt(t, args, in.path, v)
				e, resp, err := construct(t, in.resource, "c", args)
				require.NoError(t, err, "with %s %v", in, v)
				return children(e), resource.ToResourcePropertyMap(resp.State)
			}
			def := resource.NewPropertyValue(in.def)
			leftOut, leftOutOutputs := build(nil)
			given, givenOutputs := build(&def)
			assert.NotEmpty(t, given)
			assert.Equal(t, leftOut, given, "the component applies another default to %s than the schema's %v", in, in.def)
			assert.Equal(t, leftOutOutputs, givenOutputs, "the outputs")
		})
	}
	assert.GreaterOrEqual(t, checked, 8, "the defaults of every component: %v", inputs)
}

// Every enum of the schema holds exactly the values the component's
// validation accepts: each string literal of the components' source (and
// of internal/rollout, where the roles are spelled) is given to the input,
// and the component refuses it, naming the input, unless it is one of the
// enum's values. (A new value accepted by the validation and missing from
// the enum, or an enum value refused, fails here.)
func TestSchemaEnumsAreWhatTheComponentsAccept(t *testing.T) {
	t.Parallel()
	inputs, base := schemaInputs(t), baseInputs(t)
	candidates := stringLiterals(t, filepath.Join("..", "..", "components"), filepath.Join("..", "..", "internal", "rollout"))
	require.Greater(t, len(candidates), 50)
	byEnum := map[string][]schemaInput{}
	for _, in := range inputs {
		if in.enum != "" {
			byEnum[in.enum] = append(byEnum[in.enum], in)
		}
	}
	require.Len(t, byEnum, 6, "role, bios, addressing, onDestroy, the CSI fsType, the data volume's layout")
	for enum, uses := range byEnum {
		t.Run(enum, func(t *testing.T) {
			t.Parallel()
			// The enum is one type: checked where it is first used (a
			// ProxmoxCluster's rented servers aside: serversInput).
			in := uses[0]
			for _, u := range uses {
				if !serversInput(u.resource, u.path) {
					in = u
					break
				}
			}
			for _, u := range uses {
				assert.Equal(t, in.values, u.values, "%s", u)
			}
			var accepted []string
			for _, c := range append(slices.Clone(in.values), candidates...) {
				if slices.Contains(accepted, c) {
					continue
				}
				args := copyMap(base[in.resource])
				v := resource.NewProperty(c)
				path := setAt(t, args, in.path, &v)
				_, _, err := construct(t, in.resource, "c", args)
				if err == nil || !strings.Contains(status.Convert(err).Message(), "  - "+path+": ") {
					accepted = append(accepted, c)
				}
			}
			assert.ElementsMatch(t, in.values, accepted, "%s: the enum's values are what %s accepts", in, in.resource)
		})
	}
}

// stringLiterals are the distinct string literals of the Go sources (tests
// aside) under dirs that could be an enum value: one word, no spaces.
func stringLiterals(t *testing.T, dirs ...string) []string {
	t.Helper()
	seen := map[string]bool{}
	var out []string
	for _, dir := range dirs {
		require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err == nil && s != "" && len(s) <= 40 && !strings.ContainsAny(s, " \t\r\n%") && !seen[s] {
					seen[s] = true
					out = append(out, s)
				}
				return true
			})
			return nil
		}))
	}
	return out
}

// setAt sets (v) or removes (nil) the input at path in args, creating the
// objects on the way; a list's items ("[]") are all set, or with an enum
// value the last item only (the first node must stay a control plane). It
// returns the path as the components' errors name it.
func setAt(t *testing.T, args resource.PropertyMap, path []string, v *resource.PropertyValue) string {
	t.Helper()
	key := resource.PropertyKey(path[0])
	if len(path) == 1 {
		if v == nil {
			delete(args, key)
		} else {
			args[key] = *v
		}
		return path[0]
	}
	if path[1] == "[]" {
		items := args[key]
		require.True(t, items.IsArray(), "%s is a list in the inputs", path[0])
		arr := items.ArrayValue()
		first := 0
		if v != nil && path[len(path)-1] == "role" {
			first = len(arr) - 1
		}
		var named string
		for i := first; i < len(arr); i++ {
			require.True(t, arr[i].IsObject())
			named = fmt.Sprintf("%s[%d].%s", path[0], i, setAt(t, arr[i].ObjectValue(), path[2:], v))
		}
		return named
	}
	sub, ok := args[key]
	if !ok || !sub.IsObject() {
		if v == nil {
			return strings.Join(path, ".")
		}
		sub = resource.NewProperty(resource.PropertyMap{})
		args[key] = sub
	}
	return path[0] + "." + setAt(t, sub.ObjectValue(), path[1:], v)
}

// copyMap is a deep copy of m.
func copyMap(m resource.PropertyMap) resource.PropertyMap {
	out := resource.PropertyMap{}
	for k, v := range m {
		out[k] = copyValue(v)
	}
	return out
}

func copyValue(v resource.PropertyValue) resource.PropertyValue {
	switch {
	case v.IsObject():
		return resource.NewProperty(copyMap(v.ObjectValue()))
	case v.IsArray():
		arr := make([]resource.PropertyValue, 0, len(v.ArrayValue()))
		for _, e := range v.ArrayValue() {
			arr = append(arr, copyValue(e))
		}
		return resource.NewProperty(arr)
	case v.IsSecret():
		return resource.MakeSecret(copyValue(v.SecretValue().Element))
	}
	return v
}

// Every constant default a component applies is in the schema (issue 49):
// each component's WithDefaults, on the example's arguments and on a copy
// under another cluster name and Talos version, fills an input the
// arguments leave empty with the same value in both (a constant, not one
// derived from other inputs); the schema must give that input a default.
// The schema's table missed DockerCluster's ports and privileged before.
func TestEveryConstantDefaultIsInTheSchema(t *testing.T) {
	t.Parallel()
	load := func(file string) *stacks.Config {
		cfg, d := stacks.Load(stackstest.Example(t, file))
		require.NoError(t, d.Err())
		return cfg
	}
	renamed := func(cfg *stacks.Config) *stacks.Config {
		cfg.Cluster.Name, cfg.Cluster.TalosVersion = "other", "v1.12.4"
		if cfg.Platform == stacks.PlatformLocal {
			cfg.Cluster.Network.Gateway = "10.6.0.1"
			for _, n := range cfg.Nodes.All() {
				n.IP = strings.Replace(n.IP, "10.5.", "10.6.", 1)
			}
		}
		return cfg
	}
	type component struct {
		token        string
		args, other  any
		withDefaults func(any) any
	}
	components := []component{
		{talosprovider.ProxmoxToken, *program.ProxmoxArgs(load(stackstest.ProxmoxExample)), *program.ProxmoxArgs(renamed(load(stackstest.ProxmoxExample))),
			func(a any) any { return a.(proxmox.ClusterArgs).WithDefaults() }},
		{talosprovider.VpsToken, *program.VPSArgs(load(stackstest.VPSExample)), *program.VPSArgs(renamed(load(stackstest.VPSExample))),
			func(a any) any { return a.(vps.ClusterArgs).WithDefaults() }},
		{talosprovider.DockerToken, *program.LocalArgs(load(stackstest.LocalExample)), *program.LocalArgs(renamed(load(stackstest.LocalExample))),
			func(a any) any { return a.(docker.ClusterArgs).WithDefaults() }},
	}
	for i := range components {
		components[i].args, components[i].other = clearedOptional(components[i].args), clearedOptional(components[i].other)
	}
	inSchema := map[string]bool{}
	for _, in := range schemaInputs(t) {
		if in.def != nil {
			inSchema[in.String()] = true
		}
	}
	found := 0
	for _, c := range components {
		// Per input path, the values WithDefaults gave where the input was
		// empty, over every item of a list and both variants; and whether
		// it was empty everywhere.
		values, given := map[string]map[any]bool{}, map[string]bool{}
		var walk func(path []string, before, after reflect.Value)
		walk = func(path []string, before, after reflect.Value) {
			key := strings.Join(path, ".")
			switch before.Kind() {
			case reflect.Struct:
				for i := range before.NumField() {
					name, _, _ := strings.Cut(before.Type().Field(i).Tag.Get("pulumi"), ",")
					if name == "" || !before.Type().Field(i).IsExported() {
						continue
					}
					walk(append(slices.Clone(path), name), before.Field(i), after.Field(i))
				}
			case reflect.Slice:
				if before.Type().Elem().Kind() == reflect.Struct {
					for i := range min(before.Len(), after.Len()) {
						walk(append(slices.Clone(path), "[]"), before.Index(i), after.Index(i))
					}
				}
			case reflect.Pointer:
				switch {
				case before.IsNil() && !after.IsNil() && after.Elem().Kind() != reflect.Struct:
					walk(path, reflect.Zero(after.Elem().Type()), after.Elem())
				case !before.IsNil() && !after.IsNil():
					walk(path, before.Elem(), after.Elem())
				}
			case reflect.String, reflect.Int, reflect.Bool:
				if !before.IsZero() || after.IsZero() {
					given[key] = true
					return
				}
				if values[key] == nil {
					values[key] = map[any]bool{}
				}
				values[key][after.Interface()] = true
			}
		}
		walk(nil, reflect.ValueOf(c.args), reflect.ValueOf(c.withDefaults(c.args)))
		walk(nil, reflect.ValueOf(c.other), reflect.ValueOf(c.withDefaults(c.other)))
		for path, vs := range values {
			if given[path] || len(vs) != 1 {
				continue // derived from other inputs, or not always filled
			}
			found++
			assert.True(t, inSchema[c.token+" "+path], "%s %s: the component defaults it to %v; the schema gives no default: its WithDefaults does not fill it (defaults.go)",
				c.token, path, slices.Collect(maps.Keys(vs))[0])
		}
	}
	assert.Greater(t, found, 5, "constant defaults found")
}

// clearedOptional is args with every optional input of a plain kind (a
// string, number or bool, its `pulumi` tag ",optional") left out, in
// nested objects and lists too: what WithDefaults then fills is its
// defaults.
func clearedOptional(args any) any {
	v := reflect.New(reflect.TypeOf(args)).Elem()
	v.Set(reflect.ValueOf(args))
	var clear func(v reflect.Value)
	clear = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Struct:
			for i := range v.NumField() {
				f, sf := v.Field(i), v.Type().Field(i)
				if !sf.IsExported() {
					continue
				}
				optional := strings.Contains(sf.Tag.Get("pulumi"), ",optional")
				switch f.Kind() {
				case reflect.String, reflect.Int, reflect.Bool:
					if optional {
						f.SetZero()
					}
				case reflect.Pointer:
					if f.IsNil() {
						continue
					}
					if f.Elem().Kind() != reflect.Struct {
						if optional {
							f.SetZero()
						}
						continue
					}
					copied := reflect.New(f.Elem().Type())
					copied.Elem().Set(f.Elem())
					f.Set(copied)
					clear(f.Elem())
				case reflect.Struct:
					clear(f)
				case reflect.Slice:
					if f.Type().Elem().Kind() != reflect.Struct {
						continue
					}
					copied := reflect.MakeSlice(f.Type(), f.Len(), f.Len())
					reflect.Copy(copied, f)
					f.Set(copied)
					for j := range f.Len() {
						clear(f.Index(j))
					}
				}
			}
		}
	}
	clear(v)
	return v.Interface()
}
