package program

import (
	"github.com/fluodata/talos-pulumi/components/image"
	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/components/vps"
	"github.com/fluodata/talos-pulumi/program/overrides"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// vpsKeys are the VpsCluster's inputs VPSArgs fills from stack keys of
// other names.
var vpsKeys = []overrides.Rename{
	{Input: "vps.gateway", Key: "cluster.network.gateway"},
	{Input: "vps.prefixLength", Key: "cluster.network.prefixLength"},
	{Input: "schematic", Key: "cluster.schematic"},
}

// VPSArgs are a validated stack file of platform vps as the VpsCluster
// takes it: every default applied by stacks.Load, nodes control planes
// first, the rescue password a secret and each rescue host key reduced to
// the "<type> <base64>" line the command provider reads.
func VPSArgs(cfg *stacks.Config) *vps.ClusterArgs {
	v := cfg.VPS
	args := &vps.ClusterArgs{
		Cluster: ClusterSettings(cfg),
		Schematic: &image.Schematic{
			ID:         cfg.Cluster.Schematic.ID,
			Extensions: cfg.Cluster.Schematic.Extensions,
		},
		VPS: vps.Settings{
			AllowedCIDRs:   v.AllowedCIDRs,
			PublicTCPPorts: v.PublicTCPPorts,
			ImageURL:       v.ImageURL,
			// Load defaults it to on; off only when the file says so.
			RequireRescue:    v.RequireRescue,
			RebootCommand:    v.RebootCommand,
			TalosWaitTimeout: v.TalosWaitTimeout,
			OnDestroy:        v.OnDestroy,
			// The nodes' defaults: a node's own gateway and prefix
			// length are passed as the file gives them.
			Gateway:      cfg.Cluster.Network.Gateway,
			PrefixLength: cfg.Cluster.Network.PrefixLength,
		},
	}
	for _, ref := range cfg.Nodes.Refs() {
		r := ref.Rescue
		args.Nodes = append(args.Nodes, vps.Node{
			Name:              ref.Name,
			Role:              RoleOf(ref.Role),
			IP:                ref.IP,
			PrefixLength:      ref.PrefixLength,
			Gateway:           ref.Gateway,
			InstallDisk:       ref.InstallDisk,
			Patches:           PatchTexts(ref.Patches),
			KubeSpanEndpoints: ref.KubeSpanEndpoints,
			Rescue: vps.Rescue{
				Host:     r.Host,
				Port:     r.Port,
				User:     r.User,
				Password: r.Password.Output(),
				HostKey:  stacks.CommandHostKey(r.HostKey),
			},
		})
	}
	return args
}

// vpsPlatform is a VpsCluster.
type vpsPlatform struct{ args *vps.ClusterArgs }

func (p *vpsPlatform) problems(string) []inputs.Problem { return p.args.Problems() }

func (p *vpsPlatform) talos() *talos.ClusterArgs {
	d := p.args.WithDefaults()
	return d.TalosArgs(nil)
}

func (p *vpsPlatform) share(inputName func(string) string, etcdBackup *talos.EtcdBackupSettings) {
	p.args.InputName, p.args.Cluster.EtcdBackup = inputName, etcdBackup
}

func (p *vpsPlatform) remember(last Last) { p.args.Previous = last.Cluster }

func (p *vpsPlatform) deploy(ctx *pulumi.Context, cfg *stacks.Config, o Options) (pulumi.Map, error) {
	c, err := vps.NewClusterWithDeps(ctx, cfg.Cluster.Name, p.args, vps.Deps{Probe: o.TalosProbe, Talos: o.Talos})
	if err != nil {
		return nil, err
	}
	return c.Outputs(), nil
}
