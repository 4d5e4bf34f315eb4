// Package helmrelease registers the kubernetes package's Helm release
// (kubernetes:helm.sh/v3:Release) as the pulumi-kubernetes Go SDK's
// helm/v3.NewRelease does, without importing that SDK package: it imports
// the SDK's yaml package and through it every Kubernetes API group, about
// 60 generated packages that take 12 CPU-minutes to compile and that
// nothing here uses (issue 53). The engine, the plugin and the state see
// the same resource: type token, inputs, plugin version.
package helmrelease

import (
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// Type is the release's type token (pulumi-kubernetes
// sdk/go/kubernetes/helm/v3/release.go, NewRelease).
const Type = "kubernetes:helm.sh/v3:Release"

// PluginVersion is the kubernetes plugin version the SDK's resources ask
// for (sdk/go/kubernetes/utilities/pulumiUtilities.go,
// PkgResourceDefaultOpts): the SDK version in go.mod.
const PluginVersion = "4.32.0"

// Args are the release's inputs that this project sets; the names are the
// plugin's input properties.
type Args struct {
	// Name is the Helm release's name.
	Name pulumi.StringInput
	// Chart is the chart's name, or repo/name without Repo.
	Chart pulumi.StringInput
	// Version is the chart's version.
	Version pulumi.StringInput
	// Namespace is where the release is installed.
	Namespace pulumi.StringInput
	// Repo is the chart repository's URL (repositoryOpts.repo); nil for none.
	Repo pulumi.StringInput
	// Values are the chart's values.
	Values pulumi.MapInput
	// TimeoutSeconds is Helm's wait; 0 leaves the plugin's default.
	TimeoutSeconds int
	// MaxHistory is the number of revisions Helm keeps; 0 leaves the
	// plugin's default.
	MaxHistory int
}

// Release is the registered release.
type Release struct {
	pulumi.CustomResourceState

	// Status is the release's status as Helm reports it (the plugin's
	// ReleaseStatus object: name, namespace, revision, status, ...).
	Status pulumi.AnyOutput `pulumi:"status"`
}

// New registers the release. As NewRelease, it sets compat to "true" (the
// plugin's marker of a release made by an SDK of the current form) and
// asks for the plugin of PluginVersion unless opts say otherwise.
func New(ctx *pulumi.Context, name string, args Args, opts ...pulumi.ResourceOption) (*Release, error) {
	if args.Chart == nil {
		return nil, fmt.Errorf("unable to register release %s: no chart", name)
	}
	inputs := pulumi.Map{"chart": args.Chart, "compat": pulumi.String("true")}
	set := map[string]pulumi.Input{"name": args.Name, "version": args.Version, "namespace": args.Namespace, "values": args.Values}
	for key, value := range set {
		if value != nil {
			inputs[key] = value
		}
	}
	if args.Repo != nil {
		inputs["repositoryOpts"] = pulumi.Map{"repo": args.Repo}
	}
	if args.TimeoutSeconds != 0 {
		inputs["timeout"] = pulumi.Int(args.TimeoutSeconds)
	}
	if args.MaxHistory != 0 {
		inputs["maxHistory"] = pulumi.Int(args.MaxHistory)
	}
	var r Release
	opts = append([]pulumi.ResourceOption{pulumi.Version(PluginVersion)}, opts...)
	if err := ctx.RegisterResource(Type, name, inputs, &r, opts...); err != nil {
		return nil, fmt.Errorf("unable to register release %s: %w", name, err)
	}
	return &r, nil
}
