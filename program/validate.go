package program

import (
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/program/overrides"
	"github.com/fluodata/talos-pulumi/stacks"
)

// Load loads the stack config (stacks.Load) and adds the platform
// component's own problems with it (componentProblems): what the stack
// front-end refuses, without the check of user patches and Helm values
// (see Validate). The tools that only need the config (stackctl exec and
// proxy) use it.
func Load(src stacks.Source) (*stacks.Config, *stacks.Diagnostics) {
	cfg, d, _ := load(src, "")
	return cfg, d
}

// load is Load for the stack named stack ("" where unknown), with the
// platform's Args it built.
func load(src stacks.Source, stack string) (*stacks.Config, *stacks.Diagnostics, platform) {
	cfg, d := stacks.Load(src)
	args := platformOf(cfg)
	d.AddErrors(componentProblems(cfg, args.problems(stack), d.Errors)...)
	return cfg, d, args
}

// Validate is Load and, when the config is valid, the check of what its
// user patches and Helm values do to the settings the cluster relies on
// (overrides.CheckOverrides: the patches applied for real to each role's
// generated config). The check needs the platform's nodes and the
// generated patches, which the components make, so it runs here rather
// than in package stacks; it registers nothing, so Deploy and the driver
// run it before anything else. Errors and warnings of both come in one
// Diagnostics, stacks.Load's first.
func Validate(src stacks.Source) (*stacks.Config, *stacks.Diagnostics) {
	cfg, d, args := load(src, "")
	if d.HasErrors() {
		return cfg, d
	}
	o := overrides.CheckOverrides(cfg, args.talos())
	d.Errors = append(d.Errors, o.Errors...)
	d.Warnings = append(d.Warnings, o.Warnings...)
	return cfg, d
}

// TalosArgs are the arguments the platform's cluster component hands to
// the TalosCluster, for a valid config.
func TalosArgs(cfg *stacks.Config) *talos.ClusterArgs { return platformOf(cfg).talos() }
