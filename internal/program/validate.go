package program

import (
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/components/vps"
	"github.com/fluodata/talos-pulumi/stacks"
)

// Validate loads the stack config (stacks.Load) and, when it is valid,
// checks what its user patches and Helm values do to the settings the
// cluster relies on (talos.CheckOverrides: the patches applied for real to
// each role's generated config). The check needs the platform's nodes and
// the generated patches, which live in the components, so it runs here
// rather than in package stacks; it registers nothing, so Deploy and the
// driver run it before anything else. Errors and warnings of both come in
// one Diagnostics, stacks.Load's first.
func Validate(src stacks.Source) (*stacks.Config, *stacks.Diagnostics) {
	cfg, d := stacks.Load(src)
	if d.HasErrors() {
		return cfg, d
	}
	o := talos.CheckOverrides(cfg, TalosNodes(cfg))
	d.Errors = append(d.Errors, o.Errors...)
	d.Warnings = append(d.Warnings, o.Warnings...)
	return cfg, d
}

// TalosNodes are the nodes the platform's cluster component hands to the
// TalosCluster, for a valid config.
func TalosNodes(cfg *stacks.Config) []talos.NodeSpec {
	switch cfg.Platform {
	case stacks.PlatformProxmox:
		return proxmox.TalosNodes(cfg)
	case stacks.PlatformVPS:
		return vps.TalosNodes(cfg)
	default:
		return nil
	}
}
