// Package talosprovider is the talos-anywhere component provider: the
// project's three components behind pulumi-go-provider's infer layer, with
// the descriptions of their doc comments added to the schema.
package talosprovider

import (
	"context"
	_ "embed" // descriptions.json
	"encoding/json"
	"fmt"
	"reflect"
	"runtime/debug"
	"strings"

	p "github.com/pulumi/pulumi-go-provider"
	"github.com/pulumi/pulumi-go-provider/infer"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/internals"

	"github.com/fluodata/talos-pulumi/components/docker"
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/servers"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/components/vps"
	"github.com/fluodata/talos-pulumi/internal/helmrelease"
	"github.com/fluodata/talos-pulumi/provider/internal/docs"
)

// The package's identity, the same however a program adds it (`pulumi
// package add` of this folder, of a git reference to it, or of the built
// binary): the CLI names the SDKs after the schema's namespace and name
// (npm @fluodata/talos-anywhere, Python fluodata_talos_anywhere, the SDK
// folder sdks/fluodata-talos-anywhere). Without a namespace, a local path
// gave @pulumi/<name> (Pulumi's own npm scope) and a git reference
// @fluodata/<name> (the CLI takes the namespace from the git URL's owner
// when the schema has none).
//
// The package was named talos-cluster until another package of that name
// (github.com/spigell/pulumi-talos-cluster, with releases) was found: the
// plugin cache and `pulumi package add <name>@<version>` resolve by name,
// so the two would clash. Its types alias the old tokens
// (talos.ComponentType).
const (
	Name       = "talos-anywhere"
	Namespace  = "fluodata"
	Publisher  = "fluodata"
	Repository = "https://github.com/fluodata/talos-pulumi"
	Homepage   = Repository + "/blob/main/docs/component-package.md"
	// PluginDownloadURL is where the CLI downloads the plugin of a
	// version it does not have: the repository's GitHub releases, whose
	// assets `make release` names as the CLI asks for them
	// (pulumi-resource-<name>-v<version>-<os>-<arch>.tar.gz).
	PluginDownloadURL = "github://api.github.com/fluodata/talos-pulumi"
	// License is the SPDX identifier of the repository's LICENSE file
	// (the licence of Pulumi and pulumi-go-provider too); the SDKs'
	// package files carry it.
	License = "Apache-2.0"
	// NPMPackage, PythonPackage and GoImportBase are the SDKs' names, as
	// the CLI derives them from Namespace and Name, stated in the schema
	// so that no generator guesses.
	NPMPackage    = "@" + Namespace + "/" + Name
	PythonPackage = Namespace + "_talos_anywhere"
	GoImportBase  = "github.com/fluodata/talos-pulumi/sdk/go/" + Name
	// CSharpNamespace is the C# SDK's root namespace (Pulumi's own
	// packages use "Pulumi").
	CSharpNamespace = "Fluodata"
	// DevSuffix ends VERSION between releases: the version of the next
	// release, not yet made (0.2.0-dev after 0.1.0).
	DevSuffix = "-dev"
)

// versionFile is VERSION: the package's one version source. `make release`
// builds only a commit tagged v<VERSION> whose VERSION has no DevSuffix,
// and the release bumps it to the next version's DevSuffix afterwards, so
// every build says what it is however it is made: from a tag (the release
// archives, `pulumi package add` of a git reference at the tag, which
// builds with -buildvcs=false and no -ldflags) it is the release's
// version; between releases, the next one's with DevSuffix.
//
//go:embed VERSION
var versionFile string

// Version is the package's version (semver, no "v"): VERSION, and for a
// development version the commit Go stamped into the binary, if any.
func Version() string {
	info, _ := debug.ReadBuildInfo()
	return versionOf(versionFile, info)
}

// versionOf is the version of a VERSION file's text: as it is for a
// release; for a development version, with the commit of the build info
// as build metadata (12 hex digits, ".dirty" with uncommitted changes)
// when Go stamped one (a go build in the git checkout, as `make provider`
// does; not the CLI's build of a source folder, with -buildvcs=false).
func versionOf(file string, info *debug.BuildInfo) string {
	v := strings.TrimPrefix(strings.TrimSpace(file), "v")
	if !strings.HasSuffix(v, DevSuffix) || info == nil {
		return v
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return v
	}
	rev = rev[:min(12, len(rev))]
	if modified == "true" {
		rev += ".dirty"
	}
	return v + "+" + rev
}

// KubernetesVersion is the version of the kubernetes package whose
// provider the components' kubernetesProvider output is: the kubernetes Go
// SDK the components are built with. The SDKs depend on that package
// (@pulumi/kubernetes, pulumi-kubernetes) in its patch releases only: with
// "^4.32.0", npm took 4.34.2, whose plugin `pulumi install` then
// downloaded, though the provider is made by 4.32.0's (offline, the
// install failed). TestOneKubernetesVersion holds it to go.mod, to the
// outputs' type tag and to kubeschema; helmrelease's tests to the SDK.
const KubernetesVersion = helmrelease.PluginVersion

//go:generate go run ./gen

//go:embed descriptions.json
var descriptionsJSON []byte

// Component tokens, as the components register themselves in the package
// (talos.ComponentType).
const (
	talosToken   = Name + ":index:TalosCluster"
	proxmoxToken = Name + ":index:ProxmoxCluster"
	vpsToken     = Name + ":index:VpsCluster"
	dockerToken  = Name + ":index:DockerCluster"
)

// component is one component of the package: its token, the Go types of
// its arguments and of the resource (whose doc comments describe its
// inputs and outputs), and its infer component with the seams.
type component struct {
	token         string
	args, outputs reflect.Type
	infer         infer.InferredComponent
}

// components are the package's components, with the seams of o: the one
// list that the provider serves, the schema is shaped and described by,
// and the resolver decodes with. A new platform's component is one entry.
func components(o Options) []component {
	return []component{
		{talosToken, reflect.TypeFor[talos.ClusterArgs](), reflect.TypeFor[talos.Cluster](), infer.Component(&TalosCluster{deps: o.Talos})},
		{proxmoxToken, reflect.TypeFor[proxmox.ClusterArgs](), reflect.TypeFor[proxmox.Cluster](), infer.Component(&ProxmoxCluster{deps: o.Proxmox})},
		{vpsToken, reflect.TypeFor[vps.ClusterArgs](), reflect.TypeFor[vps.Cluster](), infer.Component(&VpsCluster{deps: o.VPS})},
		{dockerToken, reflect.TypeFor[docker.ClusterArgs](), reflect.TypeFor[docker.Cluster](), infer.Component(&DockerCluster{deps: o.Docker})},
	}
}

// described are the components as the schema is shaped and described by
// (their seams do not matter there).
var described = components(Options{})

// resourceArgs are the Go arguments each component's Construct decodes its
// inputs into, by token.
var resourceArgs = func() map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for _, c := range described {
		out[c.token] = c.args
	}
	return out
}()

// resourceDocs names, per component token, the Go types whose doc comments
// describe its inputs and outputs (keys of descriptions.json: package.Type).
var resourceDocs = func() map[string]struct{ inputs, outputs string } {
	out := map[string]struct{ inputs, outputs string }{}
	for _, c := range described {
		out[c.token] = struct{ inputs, outputs string }{c.args.String(), c.outputs.String()}
	}
	return out
}()

// Options are the components' seams (their zero values are the real
// engine, a Proxmox client and a probe of each VPS node).
type Options struct {
	Proxmox proxmox.Deps
	VPS     servers.Deps
	Docker  docker.Deps
	// Talos are the TalosCluster's seams, for a TalosCluster and inside
	// the platform components when their own Talos seams are zero.
	Talos talos.Deps
}

// TalosCluster serves talos.NewCluster.
type TalosCluster struct{ deps talos.Deps }

// Construct builds the component from the caller's inputs.
func (c *TalosCluster) Construct(ctx *pulumi.Context, name, _ string, args talos.ClusterArgs, opts pulumi.ResourceOption) (*talos.Cluster, error) {
	args.Cluster.SecretPatches = resolvedIn(ctx).secretPatches
	cluster, err := talos.NewClusterWithDeps(ctx, name, &args, c.deps, opts)
	return knownSecretsOnly(ctx, cluster, err)
}

// Annotate sets the token and the description.
func (c *TalosCluster) Annotate(a infer.Annotator) {
	a.SetToken("index", "TalosCluster")
	a.Describe(c, "A Talos Linux Kubernetes cluster on machines that already boot Talos (maintenance mode) "+
		"or run it: machine secrets, per-node machine config, bootstrap, kubeconfig and talosconfig, "+
		"Cilium (kube-proxy replacement) and the kubelet serving-certificate approver. "+
		"The first node must be a control plane: it is bootstrapped.")
}

// ProxmoxCluster serves proxmox.NewClusterWithDeps.
type ProxmoxCluster struct{ deps proxmox.Deps }

// Construct builds the component from the caller's inputs.
func (c *ProxmoxCluster) Construct(ctx *pulumi.Context, name, _ string, args proxmox.ClusterArgs, opts pulumi.ResourceOption) (*proxmox.Cluster, error) {
	args.Cluster.SecretPatches = resolvedIn(ctx).secretPatches
	cluster, err := proxmox.NewClusterWithDeps(ctx, name, &args, c.deps, opts)
	return knownSecretsOnly(ctx, cluster, err)
}

// Annotate sets the token and the description.
func (c *ProxmoxCluster) Annotate(a infer.Annotator) {
	a.SetToken("index", "ProxmoxCluster")
	a.Describe(c, "A Talos Linux Kubernetes cluster in VMs on one or more Proxmox VE hosts, and optionally on rented servers "+
		"installed from rescue mode: per host the Talos ISO from the Image Factory, DHCP reservations in dnsmasq (optional) "+
		"and one VM per node, and a TalosCluster on top. "+
		"VMs are hard-stopped on delete, so a destroy takes seconds.")
}

// VpsCluster serves vps.NewClusterWithDeps.
type VpsCluster struct{ deps servers.Deps }

// Construct builds the component from the caller's inputs.
func (c *VpsCluster) Construct(ctx *pulumi.Context, name, _ string, args vps.ClusterArgs, opts pulumi.ResourceOption) (*vps.Cluster, error) {
	args.Cluster.SecretPatches = resolvedIn(ctx).secretPatches
	cluster, err := vps.NewClusterWithDeps(ctx, name, &args, c.deps, opts)
	return knownSecretsOnly(ctx, cluster, err)
}

// Annotate sets the token and the description.
func (c *VpsCluster) Annotate(a infer.Annotator) {
	a.SetToken("index", "VpsCluster")
	a.Describe(c, "A Talos Linux Kubernetes cluster on rented servers: each is installed from its provider's "+
		"rescue system over SSH (the raw disk image written to its disk), rebooted into Talos, "+
		"configured with a host firewall, and joined into a TalosCluster. Servers are never deleted.")
}

// DockerCluster serves docker.NewClusterWithDeps.
type DockerCluster struct{ deps docker.Deps }

// Construct builds the component from the caller's inputs.
func (c *DockerCluster) Construct(ctx *pulumi.Context, name, _ string, args docker.ClusterArgs, opts pulumi.ResourceOption) (*docker.Cluster, error) {
	args.Cluster.SecretPatches = resolvedIn(ctx).secretPatches
	cluster, err := docker.NewClusterWithDeps(ctx, name, &args, c.deps, opts)
	return knownSecretsOnly(ctx, cluster, err)
}

// Annotate sets the token and the description.
func (c *DockerCluster) Annotate(a infer.Annotator) {
	a.SetToken("index", "DockerCluster")
	a.Describe(c, "A Talos Linux Kubernetes cluster in Docker containers on this machine, as `talosctl cluster create` "+
		"makes it: a Docker network, per node its state volumes and a privileged container of the Talos image, "+
		"and a TalosCluster on top. A new image replaces the containers one at a time, their volumes kept.")
}

// knownSecretsOnly hands a component's outputs on, except that outside a
// preview a secret output that is unknown becomes a plain unknown one. The
// engine gives a component's children unknown outputs outside a preview
// when it skips their create (`pulumi destroy --run-program`, a new
// resource left out of `--target`), and the Go SDK's construct (v3.259,
// go/pulumi/provider.go, KeepUnknowns only in a preview) then marshals a
// secret without its value, which the engine refuses: "malformed RPC
// secret: missing value for kubeconfig". A plain unknown is left out.
func knownSecretsOnly[C any](ctx *pulumi.Context, c *C, err error) (*C, error) {
	if err != nil || c == nil || ctx.DryRun() {
		return c, err
	}
	v := reflect.ValueOf(c).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if !v.Type().Field(i).IsExported() {
			continue
		}
		o, ok := f.Interface().(pulumi.Output)
		if !ok {
			continue
		}
		r, err := internals.UnsafeAwaitOutput(ctx.Context(), o)
		if err != nil {
			return nil, fmt.Errorf("unable to read the output %s: %w", v.Type().Field(i).Name, err)
		}
		if r.Known || !r.Secret {
			continue
		}
		if plain := reflect.ValueOf(pulumi.Unsecret(o)); plain.Type().AssignableTo(f.Type()) {
			f.Set(plain)
		}
	}
	return c, nil
}

// inferred are the components as infer serves them.
func inferred(o Options) []infer.InferredComponent {
	var out []infer.InferredComponent
	for _, c := range components(o) {
		out = append(out, c.infer)
	}
	return out
}

// languages are the SDKs' settings: infer's defaults (each SDK's version is
// the schema's) with the package names. The Kubernetes SDK may be any 4.x
// from the one the schema refers to, so a program on a newer 4.x shares
// its copy instead of installing a second.
func languages() map[string]any {
	return map[string]any{
		"nodejs": map[string]any{
			"respectSchemaVersion": true, "packageName": NPMPackage,
			"dependencies": map[string]any{"@pulumi/kubernetes": "^" + KubernetesVersion},
		},
		"python": map[string]any{
			"respectSchemaVersion": true, "packageName": PythonPackage,
			"requires":  map[string]any{"pulumi-kubernetes": ">=" + KubernetesVersion + ",<5"},
			"pyproject": map[string]any{"enabled": true},
		},
		"go": map[string]any{
			"respectSchemaVersion": true, "generateResourceContainerTypes": true,
			"importBasePath": GoImportBase,
			// No Defaults() methods for the object types: the Go generator
			// of CLI 3.259 writes `args.Cluster = args.Cluster.Defaults()`
			// for a required plain object whose type has defaults, a *T
			// where a T goes, and the SDK does not compile
			// (TestIntegrationGoSDK). The components apply their defaults
			// themselves, so nothing is lost.
			"disableObjectDefaults": true,
		},
		"csharp": map[string]any{"respectSchemaVersion": true, "rootNamespace": CSharpNamespace},
	}
}

// New builds the provider.
func New() (p.Provider, error) { return NewWith(Options{}) }

// NewWith builds the provider with the given seams.
func NewWith(o Options) (p.Provider, error) {
	if o.Proxmox.Talos.Hooks == nil {
		o.Proxmox.Talos = o.Talos
	}
	if o.VPS.Talos.Hooks == nil {
		o.VPS.Talos = o.Talos
	}
	if o.Docker.Talos.Hooks == nil {
		o.Docker.Talos = o.Talos
	}
	// The components register the package's type tokens.
	o.Talos.Package, o.Proxmox.Talos.Package, o.VPS.Talos.Package, o.Docker.Talos.Package = Name, Name, Name, Name
	prov, err := infer.NewProviderBuilder().
		WithDisplayName("Talos Anywhere").
		WithDescription("Talos Linux Kubernetes clusters on Proxmox VE VMs, rescue-installed VPS machines or local Docker containers.").
		WithKeywords("talos", "kubernetes", "proxmox", "vps", "docker", "category/infrastructure", "kind/component").
		WithNamespace(Namespace).
		WithPublisher(Publisher).
		WithRepository(Repository).
		WithHomepage(Homepage).
		WithLicense(License).
		WithPluginDownloadURL(PluginDownloadURL).
		WithLanguageMap(languages()).
		WithComponents(inferred(o)...).
		Build()
	if err != nil {
		return p.Provider{}, fmt.Errorf("unable to build the provider: %w", err)
	}
	var descs map[string]docs.Type
	if err := json.Unmarshal(descriptionsJSON, &descs); err != nil {
		return p.Provider{}, fmt.Errorf("unable to read descriptions.json: %w", err)
	}
	prov.Construct = resolving(prov.Construct)
	getSchema := prov.GetSchema
	prov.GetSchema = func(ctx context.Context, req p.GetSchemaRequest) (p.GetSchemaResponse, error) {
		resp, err := getSchema(ctx, req)
		if err != nil {
			return resp, err
		}
		resp.Schema, err = finish(resp.Schema, descs)
		return resp, err
	}
	return prov, nil
}
