package talosprovider

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"

	p "github.com/pulumi/pulumi-go-provider"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/property"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	comProvider "github.com/pulumi/pulumi/sdk/v3/go/pulumi/provider"

	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/talos"
)

// resolution is what resolveInputs found in a component's inputs.
type resolution struct {
	// dependencies are the resources the plain inputs came from (another
	// resource's outputs), repeated as often as they are used: the component
	// depends on them (resolving adds each once), so that they are made
	// before its children and deleted after them.
	dependencies []resource.URN
	// unknown are the paths of the package's inputs not known yet: a
	// preview of an up that makes or replaces the resource they come from.
	unknown []string
	// secretPatches tells that a machine-config patch came as a secret.
	secretPatches bool
}

// resolveInputs makes a component's inputs decodable into its Go
// arguments (of type args), whose fields are plain Go values but for the
// pulumi inputs (the tokens and passwords, left as they come):
//
//   - a value from another resource's output loses its dependencies, which
//     the component takes on instead (resolution.dependencies);
//   - an input of the package (inputs.PackageTag) unknown at preview is
//     listed (resolution.unknown) for the caller to say so; in an up, the
//     engine sends every input known, once the resources it comes from are
//     made;
//   - a secret where one may be (a patch) loses its secret flag, which the
//     component puts back on what it makes from it (SecretPatches);
//   - a secret anywhere else, and an unknown value in a plain field, is a
//     problem naming the input's path: the SDK's decoder would fail with a
//     message about Go types, and a secret would reach the state in clear.
func resolveInputs(in property.Map, args reflect.Type, dryRun bool) (property.Map, resolution, *inputs.Problems) {
	r := &resolver{dryRun: dryRun}
	out := r.object("", in, args)
	return out, r.res, &r.problems
}

// resolver walks the inputs and the Go arguments together.
type resolver struct {
	dryRun   bool
	res      resolution
	problems inputs.Problems
}

// fieldMode is what a field of the Go arguments may receive.
type fieldMode struct{ input, secret bool }

func (r *resolver) object(path string, m property.Map, t reflect.Type) property.Map {
	out := m.AsMap()
	for _, f := range reflect.VisibleFields(t) {
		name, ok := inputName(f)
		if !ok {
			continue
		}
		v, ok := m.GetOk(name)
		if !ok {
			continue
		}
		input, secret := inputs.PackageInput(f.Tag.Get(inputs.PackageTag))
		out[name] = r.value(joinPath(path, name), v, f.Type, fieldMode{input: input, secret: secret})
	}
	return property.NewMap(out)
}

func (r *resolver) value(path string, v property.Value, t reflect.Type, mode fieldMode) property.Value {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if isInput(t) {
		// A pulumi input: the SDK keeps its secret and dependencies.
		return v
	}
	r.res.dependencies = append(r.res.dependencies, v.Dependencies()...)
	v = v.WithDependencies(nil)
	if v.Secret() {
		switch {
		case mode.secret:
			r.res.secretPatches = true
		case mode.input:
			r.problems.Add(path, "is a secret: the component stores it in the stack's state and outputs in clear; "+
				"only the patches, tokens, passwords and keys may be secrets")
		default:
			r.problems.Add(path, "is a secret: it must be a plain value, as it decides which resources the component makes "+
				"or how they are named (the state holds it in clear)")
		}
		v = v.WithSecret(false)
	}
	if v.IsComputed() {
		switch {
		case !mode.input:
			r.problems.Add(path, "is unknown until the up (another resource's output): it must be known before, "+
				"as it decides which resources the component makes or how they are named: "+
				"give a plain value, a config value or a StackReference output")
		case !r.dryRun:
			r.problems.Add(path, "is unknown in an up: the component cannot check it")
		default:
			r.res.unknown = append(r.res.unknown, path)
		}
		return v
	}
	elem, container := containedType(t)
	switch {
	case !container:
	case v.IsArray():
		items := v.AsArray().AsSlice()
		for i, item := range items {
			items[i] = r.value(fmt.Sprintf("%s[%d]", path, i), item, elem, mode)
		}
		return property.New(property.NewArray(items))
	case v.IsMap() && t.Kind() == reflect.Struct:
		return property.New(r.object(path, v.AsMap(), t))
	case v.IsMap():
		entries := v.AsMap().AsMap()
		for k, e := range entries {
			entries[k] = r.value(joinPath(path, k), e, elem, mode)
		}
		return property.New(property.NewMap(entries))
	}
	return v
}

// containedType is the type of the values a value of Go type t holds (its
// items, its entries, its fields: t itself for a struct or an interface),
// and whether it holds any.
func containedType(t reflect.Type) (reflect.Type, bool) {
	switch t.Kind() {
	case reflect.Slice, reflect.Array, reflect.Map:
		return t.Elem(), true
	case reflect.Struct, reflect.Interface:
		return t, true
	}
	return t, false
}

// joinPath is path.name, or name at the top.
func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// resolutionKey carries a construct's resolution to the component's
// Construct, through the context the SDK makes the pulumi.Context from.
type resolutionKey struct{}

// resolvedIn is the resolution of the construct running in ctx.
func resolvedIn(ctx *pulumi.Context) resolution {
	r, _ := ctx.Context().Value(resolutionKey{}).(resolution)
	return r
}

// constructFunc is the provider's Construct.
type constructFunc = func(context.Context, p.ConstructRequest) (p.ConstructResponse, error)

// resolving wraps the provider's Construct: each component's inputs are
// resolved (resolveInputs) before infer decodes them; a problem fails the
// construct with every path named, before anything is registered.
func resolving(construct constructFunc) constructFunc {
	return func(ctx context.Context, req p.ConstructRequest) (p.ConstructResponse, error) {
		token := string(req.Urn.Type())
		args, ok := resourceArgs[token]
		if !ok {
			return construct(ctx, req)
		}
		kind := token[strings.LastIndex(token, ":")+1:]
		in, res, problems := resolveInputs(req.Inputs, args, req.DryRun)
		if err := problems.Err(kind, req.Urn.Name()); err != nil {
			return p.ConstructResponse{}, err
		}
		req.Inputs = in
		for _, dep := range res.dependencies {
			if !slices.Contains(req.Dependencies, dep) {
				req.Dependencies = append(req.Dependencies, dep)
			}
		}
		if len(res.unknown) > 0 {
			return pending(ctx, req, kind, res.unknown)
		}
		return construct(context.WithValue(ctx, resolutionKey{}, res), req)
	}
}

// pending is the construct of a preview in which some of the package's
// inputs are unknown: the component alone, with a warning naming them. Its
// children cannot be shown (what they are depends on those values, which
// the component's rules check first); the up makes them once the values
// are known.
func pending(ctx context.Context, req p.ConstructRequest, kind string, unknown []string) (p.ConstructResponse, error) {
	return p.ProgramConstruct(ctx, req, func(pctx *pulumi.Context, typ, name string, _ comProvider.ConstructInputs, opts pulumi.ResourceOption) (*comProvider.ConstructResult, error) {
		_, aliases := talos.ComponentType(Name, kind)
		c := &pendingComponent{}
		if err := pctx.RegisterComponentResource(typ, name, c, append([]pulumi.ResourceOption{opts}, aliases...)...); err != nil {
			return nil, fmt.Errorf("unable to register %s %q: %w", kind, name, err)
		}
		if err := pctx.Log.Warn(pendingMessage(unknown), &pulumi.LogArgs{Resource: c}); err != nil {
			return nil, fmt.Errorf("unable to log a warning: %w", err)
		}
		if err := pctx.RegisterResourceOutputs(c, pulumi.Map{}); err != nil {
			return nil, fmt.Errorf("unable to register the outputs of %s %q: %w", kind, name, err)
		}
		return comProvider.NewConstructResult(c)
	})
}

// pendingMessage is the warning of a preview with unknown inputs.
func pendingMessage(unknown []string) string {
	return fmt.Sprintf("inputs unknown until the up (outputs of resources it makes or replaces): %s. "+
		"This preview cannot show the cluster's resources, and those the stack has show as deleted here; "+
		"the up checks these inputs with the component's rules once they are known, then makes or updates the resources "+
		"(a preview after it shows them all)", strings.Join(unknown, ", "))
}

// pendingComponent is a component whose children the preview cannot show.
type pendingComponent struct{ pulumi.ResourceState }
