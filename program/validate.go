package program

import (
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/program/overrides"
	"github.com/fluodata/talos-pulumi/stacks"
)

// Validate loads the stack config (stacks.Load), adds the platform
// component's own problems with it (componentProblems) and, when it is
// valid, checks what its user patches and Helm values do to the settings the
// cluster relies on (overrides.CheckOverrides: the patches applied for real
// to each role's generated config). The check needs the platform's nodes and
// the generated patches, which the components make, so it runs here rather
// than in package stacks; it registers nothing, so Deploy and the driver run
// it before anything else. Errors and warnings of both come in one
// Diagnostics, stacks.Load's first.
func Validate(src stacks.Source) (*stacks.Config, *stacks.Diagnostics) {
	cfg, d := stacks.Load(src)
	d.AddErrors(componentProblems(cfg, "", d.Errors)...)
	if d.HasErrors() {
		return cfg, d
	}
	o := overrides.CheckOverrides(cfg, TalosArgs(cfg))
	d.Errors = append(d.Errors, o.Errors...)
	d.Warnings = append(d.Warnings, o.Warnings...)
	return cfg, d
}

// TalosArgs are the arguments the platform's cluster component hands to
// the TalosCluster, for a valid config (no installer image: the Image
// Factory gives it at run time, and nothing checked here reads it).
func TalosArgs(cfg *stacks.Config) *talos.ClusterArgs {
	switch cfg.Platform {
	case stacks.PlatformProxmox:
		return ProxmoxArgs(cfg).TalosArgs(nil)
	case stacks.PlatformVPS:
		return VPSArgs(cfg).TalosArgs(nil)
	default:
		return &talos.ClusterArgs{Cluster: ClusterSettings(cfg)}
	}
}
