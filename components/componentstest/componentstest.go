// Package componentstest is a Pulumi mock engine for tests: it answers resource
// registrations and invokes the way this project's providers would (ids,
// computed outputs) and records every registration with its dependencies and
// options, so tests can assert on the resource graph.
package componentstest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"

	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/testkit/factorytest"
)

// Type tokens of the resources this project registers.
const (
	TalosCluster   = "talos-cluster:index:TalosCluster"
	ProxmoxCluster = "talos-cluster:index:ProxmoxCluster"
	VpsCluster     = "talos-cluster:index:VpsCluster"
	Secrets        = "talos:machine/secrets:Secrets" //nolint:gosec // a type token, not a credential
	Apply          = "talos:machine/configurationApply:ConfigurationApply"
	Bootstrap      = "talos:machine/bootstrap:Bootstrap"
	Kubeconfig     = "talos:cluster/kubeconfig:Kubeconfig"
	Schematic      = "talos:imageFactory/schematic:Schematic"
	Release        = "kubernetes:helm.sh/v3:Release"
	K8sProvider    = "pulumi:providers:kubernetes"
	PVEProvider    = "pulumi:providers:proxmoxve"
	VM             = "proxmoxve:VM/virtualMachine:VirtualMachine"
	Download       = "proxmoxve:Download/file:File"
	RandomID       = "random:index/randomId:RandomId"
	RemoteCommand  = "command:remote:Command"
	LocalCommand   = "command:local:Command"
	StackReference = "pulumi:pulumi:StackReference"
)

// SchematicID is the id the mock Image Factory gives every cluster's
// schematic (registered as <name>-schematic); a node's own
// (<name>-schematic-<suffix>) gets the id the Image Factory gives its
// document (factorytest.SchematicID), so that two differ.
const SchematicID = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515"

// Registered is one resource as the mock engine saw it.
type Registered struct {
	Type, Name, URN string
	Inputs          resource.PropertyMap
	Deps            []string // explicit, property and provider dependencies
	DeletedWith     string
	Parent          string
	Provider        string // URN of the explicit provider, if any
	IgnoreChanges   []string
	// ReplaceOnChanges are the inputs whose change replaces it.
	ReplaceOnChanges []string
	RetainOnDelete   bool
	// ReplaceWith: URNs whose replacement replaces this resource too.
	ReplaceWith         []string
	DeleteBeforeReplace bool
	// Custom is false for a component; Dependencies and
	// PropertyDependencies are the registration's own (Deps merges them
	// with the provider); Hooks are the names of the bound resource hooks
	// by hook type (before-create, ...): what the engine writes to the
	// state for the resource.
	Custom               bool
	Dependencies         []string
	PropertyDependencies map[string][]string
	Hooks                map[resource.HookType][]string
}

// Engine answers registrations and invokes and records them.
type Engine struct {
	// TalosKubeconfigs makes the Kubeconfig resource's kubeconfig one in
	// the shape Talos gives (TalosKubeconfig) rather than a stub, for a
	// program that reads it.
	TalosKubeconfigs bool
	// ClientConfiguration, when set, is what the machine secrets hold as
	// their client configuration (PEM): tests that run the day-2 hooks
	// against talosapitest give the fake's CA and admin certificate, so
	// the hooks' credentials come from the secrets as in a real run.
	ClientConfiguration *ClientConfiguration
	// StackOutputsErr, when set, is the error of every read of a stack's
	// outputs (a backend that cannot be read).
	StackOutputsErr error
	// StackResources are the resources of the stack's last state that
	// readStackResourceOutputs returns: by URN, {type, outputs}.
	StackResources resource.PropertyMap
	// StackOutputs are the outputs a stack reference reads (the stack's
	// last outputs, for a program that reads its own); none when nil.
	StackOutputs resource.PropertyMap
	// Existing are resources of the caller's program the construct did
	// not register (a provider passed to a component), by URN: what the
	// engine's getResource answers for them.
	Existing map[string]Existing
	// MachineConfiguration, when set, makes the base machine configs the
	// provider's getConfiguration generates from its arguments (real ones,
	// for tests that merge and apply them); a stub text otherwise.
	MachineConfiguration func(args resource.PropertyMap) (string, error)

	mu     sync.Mutex
	res    []Registered
	failed []string
	// stackReads are the names of the stacks whose outputs were read
	// through the engine's readStackOutputs function.
	stackReads []string
	invokes    []Invoked
}

// Existing is a resource of the caller's program: its id and outputs.
type Existing struct {
	ID      string
	Outputs resource.PropertyMap
}

// GetResource is the engine's built-in function that an SDK rehydrates a
// resource registered elsewhere with (a provider passed to a component):
// pkg/v3 resource/deploy/builtins.go getResource answers {urn, id,
// provider, state} from the resource's state, and fails for an unknown URN.
const GetResource = "pulumi:pulumi:getResource"

// ReadStackOutputs is the engine's built-in function that reads a stack's
// outputs.
const ReadStackOutputs = "pulumi:pulumi:readStackOutputs"

// ReadStackResourceOutputs is the engine's built-in function that reads the
// outputs of a stack's resources.
const ReadStackResourceOutputs = "pulumi:pulumi:readStackResourceOutputs"

// Invoked is one function call (invoke) of the program.
type Invoked struct {
	Token string
	Args  resource.PropertyMap
}

// Invokes are the program's function calls, in the order they came.
func (e *Engine) Invokes() []Invoked {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.invokes)
}

// StackReads are the names of the stacks whose outputs the program read
// through ReadStackOutputs, in order.
func (e *Engine) StackReads() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.stackReads)
}

// FailedSteps are the registrations whose step failed: the real engine
// cancels the whole deployment after one, whatever the program does with
// the error it gets.
func (e *Engine) FailedSteps() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.failed)
}

// ClientConfiguration is a Talos client configuration: the OS CA and a
// client certificate and key, PEM.
type ClientConfiguration struct {
	CA, Cert, Key string
}

// NewResource implements pulumi.MockResourceMonitor.
func (e *Engine) NewResource(args pulumi.MockResourceArgs) (string, resource.PropertyMap, error) {
	r := Registered{Type: args.TypeToken, Name: args.Name, Inputs: args.Inputs, Custom: args.Custom}
	if rpc := args.RegisterRPC; rpc != nil {
		r.Deps = append(r.Deps, rpc.GetDependencies()...)
		r.Dependencies = slices.Clone(rpc.GetDependencies())
		for key, pd := range rpc.GetPropertyDependencies() {
			r.Deps = append(r.Deps, pd.GetUrns()...)
			if r.PropertyDependencies == nil {
				r.PropertyDependencies = map[string][]string{}
			}
			r.PropertyDependencies[key] = slices.Clone(pd.GetUrns())
		}
		r.Hooks = hookNames(rpc.GetHooks())
		if p := rpc.GetProvider(); p != "" {
			r.Provider = p[:strings.LastIndex(p, "::")] // a provider reference is URN::ID
			r.Deps = append(r.Deps, r.Provider)
		}
		r.DeletedWith = rpc.GetDeletedWith()
		r.Parent = rpc.GetParent()
		r.URN = childURN(r.Parent, args.TypeToken, args.Name)
		r.IgnoreChanges = rpc.GetIgnoreChanges()
		r.ReplaceOnChanges = rpc.GetReplaceOnChanges()
		r.RetainOnDelete = rpc.GetRetainOnDelete()
		r.ReplaceWith = rpc.GetReplaceWith()
		r.DeleteBeforeReplace = rpc.GetDeleteBeforeReplace()
	}
	e.mu.Lock()
	e.res = append(e.res, r)
	e.mu.Unlock()

	id := args.Name + "-id"
	out := args.Inputs.Copy()
	switch args.TypeToken {
	case Secrets:
		cc := ClientConfiguration{CA: "ca", Cert: "crt", Key: "key"}
		if e.ClientConfiguration != nil {
			cc = *e.ClientConfiguration
		}
		out["clientConfiguration"] = resource.NewObjectProperty(resource.PropertyMap{
			"caCertificate": resource.NewStringProperty(cc.CA), "clientCertificate": resource.NewStringProperty(cc.Cert),
			"clientKey": resource.NewStringProperty(cc.Key),
		})
		out["machineSecrets"] = resource.NewObjectProperty(resource.PropertyMap{})
	case Kubeconfig:
		out["kubeconfigRaw"] = resource.NewStringProperty("apiVersion: v1\nkind: Config\n")
		if e.TalosKubeconfigs {
			// The API at the cluster's endpoint: the first control
			// plane's IP by default.
			out["kubeconfigRaw"] = resource.NewStringProperty(TalosKubeconfig("https://" + args.Inputs["node"].StringValue() + ":6443"))
		}
	case Apply:
		out["machineConfiguration"] = resource.NewStringProperty(appliedConfig(args.Inputs))
	case Release:
		out["status"] = resource.NewObjectProperty(resource.PropertyMap{"status": resource.NewStringProperty("deployed")})
	case Schematic:
		id = SchematicID
		if strings.Contains(args.Name, "-schematic-") {
			own, err := factorytest.SchematicID([]byte(args.Inputs["schematic"].StringValue()))
			if err != nil {
				return "", nil, err
			}
			id = own
		}
	case RandomID:
		// Like the random provider: new bytes for every resource created,
		// so a destroy followed by an `up` (a new engine) gets other ones.
		n := 8
		if v, ok := args.Inputs["byteLength"]; ok && v.IsNumber() {
			n = int(v.NumberValue())
		}
		b := make([]byte, n)
		_, _ = rand.Read(b)
		out["hex"] = resource.NewStringProperty(hex.EncodeToString(b))
	case Download:
		// The provider's id is the volume id <datastore>:<content>/<file>.
		id = fmt.Sprintf("%s:%s/%s", str(args.Inputs, "datastoreId"), str(args.Inputs, "contentType"), str(args.Inputs, "fileName"))
	case VM:
		id = fmt.Sprint(args.Inputs["vmId"].NumberValue())
	case StackReference:
		if e.StackOutputsErr != nil {
			e.mu.Lock()
			e.failed = append(e.failed, fmt.Sprintf("read of %s: %v", args.Name, e.StackOutputsErr))
			e.mu.Unlock()
			return "", nil, e.StackOutputsErr
		}
		outs := e.StackOutputs
		if outs == nil {
			outs = resource.PropertyMap{}
		}
		out["outputs"] = resource.NewObjectProperty(outs)
	case RemoteCommand, LocalCommand:
		out["stdout"] = resource.NewStringProperty("")
		out["stderr"] = resource.NewStringProperty("")
	}
	return id, out, nil
}

// hookNames are the hooks a registration binds, by the hook types the
// engine writes to the state (resource.HookType).
func hookNames(b *pulumirpc.RegisterResourceRequest_ResourceHooksBinding) map[resource.HookType][]string {
	if b == nil {
		return nil
	}
	out := map[resource.HookType][]string{}
	for typ, names := range map[resource.HookType][]string{
		resource.BeforeCreate: b.GetBeforeCreate(), resource.AfterCreate: b.GetAfterCreate(),
		resource.BeforeUpdate: b.GetBeforeUpdate(), resource.AfterUpdate: b.GetAfterUpdate(),
		resource.BeforeDelete: b.GetBeforeDelete(), resource.AfterDelete: b.GetAfterDelete(),
		resource.OnError: b.GetOnError(),
	} {
		if len(names) > 0 {
			out[typ] = slices.Clone(names)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func str(m resource.PropertyMap, key resource.PropertyKey) string {
	v, ok := m[key]
	if !ok || !v.IsString() {
		return ""
	}
	return v.StringValue()
}

// Call implements pulumi.MockResourceMonitor.
func (e *Engine) Call(args pulumi.MockCallArgs) (resource.PropertyMap, error) {
	e.mu.Lock()
	e.invokes = append(e.invokes, Invoked{Token: args.Token, Args: args.Args})
	e.mu.Unlock()
	switch args.Token {
	case GetResource:
		urn := str(args.Args, "urn")
		r, ok := e.Existing[urn]
		if !ok {
			return nil, fmt.Errorf("unknown resource %v", urn)
		}
		return resource.PropertyMap{
			"urn": resource.NewProperty(urn), "id": resource.NewProperty(r.ID),
			"provider": resource.NewProperty(""), "state": resource.NewProperty(r.Outputs),
		}, nil
	case ReadStackOutputs:
		e.mu.Lock()
		e.stackReads = append(e.stackReads, str(args.Args, "name"))
		e.mu.Unlock()
		if e.StackOutputsErr != nil {
			return nil, e.StackOutputsErr
		}
		outs := e.StackOutputs
		if outs == nil {
			outs = resource.PropertyMap{}
		}
		return resource.PropertyMap{"name": args.Args["name"], "outputs": resource.NewObjectProperty(outs)}, nil
	case ReadStackResourceOutputs:
		if e.StackOutputsErr != nil {
			return nil, e.StackOutputsErr
		}
		res := e.StackResources
		if res == nil {
			res = resource.PropertyMap{}
		}
		return resource.PropertyMap{"name": args.Args["stackName"], "outputs": resource.NewObjectProperty(res)}, nil
	case "talos:machine/getConfiguration:getConfiguration":
		if e.MachineConfiguration != nil {
			cfg, err := e.MachineConfiguration(args.Args)
			if err != nil {
				return nil, err
			}
			return resource.PropertyMap{"machineConfiguration": resource.NewStringProperty(cfg)}, nil
		}
		return resource.PropertyMap{"machineConfiguration": resource.NewStringProperty("version: v1alpha1 # " + args.Args["machineType"].StringValue())}, nil
	case "talos:client/getConfiguration:getConfiguration":
		return resource.PropertyMap{"talosConfig": resource.NewStringProperty("context: test\n")}, nil
	case "talos:imageFactory/getUrls:getUrls":
		ver, id, platform := str(args.Args, "talosVersion"), str(args.Args, "schematicId"), str(args.Args, "platform")
		return resource.PropertyMap{"urls": resource.NewObjectProperty(resource.PropertyMap{
			"iso":       resource.NewStringProperty(fmt.Sprintf("https://factory.talos.dev/image/%s/%s/%s-amd64.iso", id, ver, platform)),
			"installer": resource.NewStringProperty(fmt.Sprintf("factory.talos.dev/%s-installer/%s:%s", platform, id, ver)),
			"diskImage": resource.NewStringProperty(fmt.Sprintf("https://factory.talos.dev/image/%s/%s/%s-amd64.raw.zst", id, ver, platform)),
			// terraform-provider-talos v0.10.1 (pulumi-talos v0.7.1's)
			// pkg/talos/talos_image_factory_urls_data_source.go:286-304.
			"isoSecureboot":       resource.NewStringProperty(fmt.Sprintf("https://factory.talos.dev/image/%s/%s/%s-amd64-secureboot.iso", id, ver, platform)),
			"installerSecureboot": resource.NewStringProperty(fmt.Sprintf("factory.talos.dev/%s-installer-secureboot/%s:%s", platform, id, ver)),
			"diskImageSecureboot": resource.NewStringProperty(fmt.Sprintf("https://factory.talos.dev/image/%s/%s/%s-amd64-secureboot.raw.zst", id, ver, platform)),
		})}, nil
	}
	return resource.PropertyMap{}, nil
}

// Created returns every registration but the reads of stack references
// (the program reads its own stack's last outputs first): what a run
// creates or updates.
func (e *Engine) Created() []Registered {
	var out []Registered
	for _, r := range e.All() {
		if r.Type != StackReference {
			out = append(out, r)
		}
	}
	return out
}

// All returns every registration so far.
func (e *Engine) All() []Registered {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Registered(nil), e.res...)
}

// ByType returns the registrations of one type, in registration order.
func (e *Engine) ByType(typ string) []Registered {
	var out []Registered
	for _, r := range e.All() {
		if r.Type == typ {
			out = append(out, r)
		}
	}
	return out
}

// One returns the single registration of a type.
func (e *Engine) One(t testing.TB, typ string) Registered {
	t.Helper()
	rs := e.ByType(typ)
	if len(rs) != 1 {
		t.Fatalf("%d registrations of %s, want 1", len(rs), typ)
	}
	return rs[0]
}

// Named returns the registration of a type with the given name.
func (e *Engine) Named(t testing.TB, typ, name string) Registered {
	t.Helper()
	for _, r := range e.ByType(typ) {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no %s named %q", typ, name)
	return Registered{}
}

// After reports whether a depends, directly or transitively, on b. A
// dependency on a component counts as one on each of its children, as it
// does for the engine.
func (e *Engine) After(a, b Registered) bool {
	all := e.All()
	seen := map[string]bool{}
	var reaches func(r Registered) bool // r is b, or r waits for b
	var depsReach func(deps []string) bool
	reaches = func(r Registered) bool {
		key := r.urnSuffix()
		if key == b.urnSuffix() {
			return true
		}
		if seen[key] {
			return false
		}
		seen[key] = true
		if depsReach(r.Deps) {
			return true
		}
		for _, c := range all {
			if c.Parent != "" && r.is(c.Parent) && reaches(c) {
				return true
			}
		}
		return false
	}
	depsReach = func(deps []string) bool {
		for _, d := range deps {
			for _, r := range all {
				if r.is(d) && reaches(r) {
					return true
				}
			}
		}
		return false
	}
	return depsReach(a.Deps)
}

// ReplacedWith returns what the engine replaces, besides r itself, when r
// is replaced: every resource whose ReplaceWith names r, or names one of
// those in turn.
func (e *Engine) ReplacedWith(r Registered) []Registered {
	all := e.All()
	var out []Registered
	seen := map[string]bool{r.urnSuffix(): true}
	queue := []Registered{r}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, c := range all {
			if seen[c.urnSuffix()] || !slices.ContainsFunc(c.ReplaceWith, cur.Is) {
				continue
			}
			seen[c.urnSuffix()] = true
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// childURN is the URN the engine gives a resource of type typ and name
// under parent (whose URN carries the stack and project): the parent's
// qualified type, except the root stack's, prefixes the type.
func childURN(parent, typ, name string) string {
	p, err := resource.ParseURN(parent)
	if err != nil {
		return ""
	}
	parentType := p.QualifiedType()
	if p.Type() == resource.RootStackType {
		parentType = ""
	}
	return string(resource.NewURN(p.Stack(), p.Project(), parentType, tokens.Type(typ), name))
}

// urnSuffix is how a URN of r ends: <type>::<name>.
func (r Registered) urnSuffix() string { return r.Type + "::" + r.Name }

// Is reports whether urn names r.
func (r Registered) Is(urn string) bool { return urn != "" && r.is(urn) }

// is reports whether urn names r (a URN ends in $<type>::<name> or ::<type>::<name>).
func (r Registered) is(urn string) bool {
	return urn == r.urnSuffix() || strings.HasSuffix(urn, "$"+r.urnSuffix()) || strings.HasSuffix(urn, "::"+r.urnSuffix())
}

// Hooks is a proxmox.Hooks and a talos.Hooks, checked at compile time.
var (
	_ proxmox.Hooks = (*Hooks)(nil)
	_ talos.Hooks   = (*Hooks)(nil)
)

// Hooks stands in for the engine's hook registration, which the SDK's mock
// engine cannot do: it records every binding with its function, so tests
// can call it.
type Hooks struct {
	mu       sync.Mutex
	Bindings []Binding
}

// Binding is one hook bound to one resource.
type Binding struct {
	Hook     string // the hook's name
	Point    talos.HookPoint
	Resource string // the resource's name
	Fn       pulumi.ResourceHookFunction
}

// Bind records the binding; the returned option changes nothing.
func (h *Hooks) Bind(name string, point talos.HookPoint, resource string, fn pulumi.ResourceHookFunction) (pulumi.ResourceOption, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Bindings = append(h.Bindings, Binding{Hook: name, Point: point, Resource: resource, Fn: fn})
	return pulumi.Composite(), nil
}

// Hook returns the function of the hook named name, as the engine finds a
// hook by the name kept in state (for a resource the program no longer
// registers: a delete), or nil.
func (h *Hooks) Hook(name string) pulumi.ResourceHookFunction {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, b := range h.Bindings {
		if b.Hook == name {
			return b.Fn
		}
	}
	return nil
}

// On returns the bindings of the resource named resource.
func (h *Hooks) On(resource string) []Binding {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Binding
	for _, b := range h.Bindings {
		if b.Resource == resource {
			out = append(out, b)
		}
	}
	return out
}

// TalosKubeconfig is an admin kubeconfig in the shape Talos generates one
// (talos v1.13.9 pkg/kubeconfig/generate.go), for the API at
// server; its certificates are placeholders.
func TalosKubeconfig(server string) string {
	return "apiVersion: v1\nkind: Config\nclusters:\n- name: lab\n  cluster:\n    server: " + server +
		"\n    certificate-authority-data: Y2E=\nusers:\n- name: admin@lab\n  user:\n    client-certificate-data: Y3J0\n    client-key-data: a2V5\n" +
		"contexts:\n- context:\n    cluster: lab\n    namespace: default\n    user: admin@lab\n  name: admin@lab\ncurrent-context: admin@lab\n"
}

// appliedConfig is an apply's machineConfiguration output, as the
// provider's ModifyPlan computes it (talos.MergedConfig). The stub base
// configs of graph tests are no config: theirs is the base as it is.
func appliedConfig(inputs resource.PropertyMap) string {
	b, err := talos.MergedConfig(inputs)
	if err != nil {
		if v := talos.PlainValue(inputs["machineConfigurationInput"]); v.IsString() {
			return v.StringValue()
		}
		return ""
	}
	return string(b)
}
