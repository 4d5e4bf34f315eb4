package talosprovider_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	p "github.com/pulumi/pulumi-go-provider"
	"github.com/pulumi/pulumi/pkg/v3/codegen/schema"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/provider/internal/kubeschema"
	"github.com/fluodata/talos-pulumi/provider/talosprovider"
)

// boundSchema is the provider's schema as the SDK generators see it: bound
// by Pulumi's own schema package, which also validates it.
func boundSchema(t *testing.T) *schema.Package {
	t.Helper()
	resp, err := server(t).GetSchema(p.GetSchemaRequest{})
	require.NoError(t, err)
	var spec schema.PackageSpec
	require.NoError(t, json.Unmarshal([]byte(resp.Schema), &spec))
	loader, err := kubeschema.Loader()
	require.NoError(t, err)
	pkg, diags, err := schema.BindSpec(spec, loader, schema.ValidationOptions{})
	require.NoError(t, err)
	require.False(t, diags.HasErrors(), "the schema does not bind: %v", diags)
	return pkg
}

// Every type is in a module that has a resource: the SDK generators
// handle a module of types alone badly (the Node.js SDK of CLI 3.219, with
// talos-cluster:proxmox:Node and the like, did not compile: its
// types/index.ts imported ./utilities and ./types/input, which it had not
// written).
func TestSchemaTypesAreInModulesWithAResource(t *testing.T) {
	t.Parallel()
	pkg := boundSchema(t)
	modules := map[string]bool{}
	for _, r := range pkg.Resources {
		modules[pkg.TokenToModule(r.Token)] = true
	}
	require.NotEmpty(t, pkg.Types)
	for _, typ := range pkg.Types {
		var token string
		switch typ := typ.(type) {
		case *schema.ObjectType:
			token = typ.Token
		case *schema.EnumType:
			token = typ.Token
		default:
			continue
		}
		assert.True(t, modules[pkg.TokenToModule(token)],
			"type %s is in module %q, which has no resource (the resources are in the index module)", token, pkg.TokenToModule(token))
	}
}

// Every input the components decode into a plain Go value (a string, a
// number, a struct, a list of them...) is plain in the schema, down to the
// fields of nested types and the items of lists and maps, so that no SDK
// offers Input<...> where the component needs the value at construct time
// (a program passing another resource's output there compiled and failed
// at run time). The inputs the Go arguments hold as pulumi inputs (the
// secrets, the installer image) stay inputs in every SDK.
func TestSchemaInputsArePlainWhereTheComponentsTakePlainValues(t *testing.T) {
	t.Parallel()
	pkg := boundSchema(t)
	args := talosprovider.ResourceArgs
	checked, stayInputs, packageInputs := 0, []string{}, []string{}
	var walk func(where string, props []*schema.Property, goType reflect.Type)
	var check func(where string, typ schema.Type, goType reflect.Type)
	walk = func(where string, props []*schema.Property, goType reflect.Type) {
		byName := map[string]*schema.Property{}
		for _, prop := range props {
			byName[prop.Name] = prop
		}
		for _, f := range reflect.VisibleFields(goType) {
			name, _, _ := strings.Cut(f.Tag.Get("pulumi"), ",")
			if name == "" || !f.IsExported() {
				continue
			}
			prop, ok := byName[name]
			if !assert.True(t, ok, "%s.%s (Go %s.%s) is not in the schema", where, name, goType, f.Name) {
				continue
			}
			if input, _ := inputs.PackageInput(f.Tag.Get(inputs.PackageTag)); input {
				_, isInput := unwrap(prop.Type)
				packageInputs = append(packageInputs, where+"."+name)
				assert.True(t, isInput, "%s.%s: tagged an input of the package, it must be an Input in the schema, is %s", where, name, prop.Type)
				continue
			}
			check(where+"."+name, prop.Type, f.Type)
		}
	}
	check = func(where string, typ schema.Type, goType reflect.Type) {
		for goType.Kind() == reflect.Pointer {
			goType = goType.Elem()
		}
		typ, input := unwrap(typ)
		checked++
		if isPulumiInput(goType) {
			stayInputs = append(stayInputs, where)
			assert.True(t, input, "%s: Go %s is a pulumi input, so an output or a secret may be passed: it must be an Input in the schema, is %s",
				where, goType, typ)
			return
		}
		if !assert.False(t, input, "%s: the component takes a plain %s: it must be plain in the schema, not Input<%s>", where, goType, typ) {
			return
		}
		switch typ := typ.(type) {
		case *schema.ArrayType:
			check(where+"[]", typ.ElementType, goType.Elem())
		case *schema.MapType:
			check(where+"{}", typ.ElementType, goType.Elem())
		case *schema.ObjectType:
			walk(where, typ.Properties, goType)
		}
	}
	for _, r := range pkg.Resources {
		goType, ok := args[r.Token]
		require.True(t, ok, "no Go arguments known for %s", r.Token)
		walk(r.Token, r.InputProperties, goType)
	}
	assert.Greater(t, checked, 80, "every input and nested field checked")
	stay := []string{
		talosprovider.TalosToken + ".installerImage",
		talosprovider.ProxmoxToken + ".proxmox.apiTokenSecret",
		talosprovider.ProxmoxToken + ".proxmox.dnsmasq.ssh.privateKey",
		talosprovider.ProxmoxToken + ".hosts[].proxmox.apiTokenSecret",
		talosprovider.ProxmoxToken + ".hosts[].proxmox.dnsmasq.ssh.privateKey",
		talosprovider.ProxmoxToken + ".nodes[].server.rescue.password",
		talosprovider.VpsToken + ".nodes[].rescue.password",
		talosprovider.TalosToken + ".cluster.etcdBackup.secretAccessKey",
		talosprovider.ProxmoxToken + ".cluster.etcdBackup.secretAccessKey",
		talosprovider.VpsToken + ".cluster.etcdBackup.secretAccessKey",
		talosprovider.DockerToken + ".cluster.etcdBackup.secretAccessKey",
		talosprovider.ProxmoxToken + ".csi.tokenSecret",
	}
	for token := range talosprovider.ResourceArgs {
		stay = append(stay, token+".cluster.gitops.sopsAgeKey", token+".cluster.gitops.repository.password", token+".cluster.gitops.repository.sshPrivateKey")
	}
	assert.ElementsMatch(t, stay, stayInputs, "the inputs that stay inputs")
	// The inputs of the package the component holds plain (resolveInputs
	// waits for them): issue 36's list, in each component that has it.
	var want []string
	for token := range talosprovider.ResourceArgs {
		want = append(want, token+".cluster.endpoint", token+".cluster.patches.all",
			token+".cluster.patches.controlPlane", token+".cluster.patches.worker")
	}
	want = append(want,
		talosprovider.TalosToken+".nodes[].ip", talosprovider.TalosToken+".nodes[].dataDiskSize", talosprovider.TalosToken+".nodes[].patches",
		talosprovider.ProxmoxToken+".proxmox.endpoint", talosprovider.ProxmoxToken+".proxmox.apiTokenId", talosprovider.ProxmoxToken+".proxmox.insecure",
		talosprovider.ProxmoxToken+".hosts[].proxmox.endpoint", talosprovider.ProxmoxToken+".hosts[].proxmox.apiTokenId", talosprovider.ProxmoxToken+".hosts[].proxmox.insecure",
		talosprovider.ProxmoxToken+".nodes[].server.rescue.host",
		talosprovider.ProxmoxToken+".nodes[].cores", talosprovider.ProxmoxToken+".nodes[].memory", talosprovider.ProxmoxToken+".nodes[].diskSize",
		talosprovider.ProxmoxToken+".nodes[].dataDiskSize", talosprovider.ProxmoxToken+".nodes[].patches",
		talosprovider.VpsToken+".nodes[].ip", talosprovider.VpsToken+".nodes[].patches", talosprovider.VpsToken+".nodes[].rescue.host",
		talosprovider.DockerToken+".nodes[].patches",
		talosprovider.ProxmoxToken+".pools[].patches", talosprovider.DockerToken+".pools[].patches")
	assert.ElementsMatch(t, want, packageInputs, "the inputs of the package held plain by the components")
}

// unwrap strips the optional and input wrappers of a bound type and tells
// whether one was an input.
func unwrap(typ schema.Type) (schema.Type, bool) {
	input := false
	for {
		switch tt := typ.(type) {
		case *schema.OptionalType:
			typ = tt.ElementType
		case *schema.InputType:
			input, typ = true, tt.ElementType
		default:
			return typ, input
		}
	}
}

func isPulumiInput(t reflect.Type) bool {
	return t.Implements(reflect.TypeFor[pulumi.Input]()) || t.Implements(reflect.TypeFor[pulumi.Output]())
}
