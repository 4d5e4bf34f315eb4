package program

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/image"
	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/servers"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/components/vps"
	"github.com/fluodata/talos-pulumi/program/overrides"
	"github.com/fluodata/talos-pulumi/stacks"
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
	args := &vps.ClusterArgs{
		Cluster: ClusterSettings(cfg),
		Schematic: &image.Schematic{
			ID:         cfg.Cluster.Schematic.ID,
			Extensions: cfg.Cluster.Schematic.Extensions,
			KernelArgs: cfg.Cluster.Schematic.KernelArgs,
		},
		VPS: vpsSettings(&cfg.VPS, cfg.Cluster.Network.Gateway, cfg.Cluster.Network.PrefixLength),
	}
	for _, ref := range cfg.Nodes.Refs() {
		args.Nodes = append(args.Nodes, servers.Node{
			Name:              ref.Name,
			Role:              RoleOf(ref.Role),
			IP:                ref.IP,
			PrefixLength:      ref.PrefixLength,
			Gateway:           ref.Gateway,
			InstallDisk:       ref.InstallDisk,
			Patches:           PatchTexts(ref.Patches),
			KubeSpanEndpoints: ref.KubeSpanEndpoints,
			Labels:            ref.Labels,
			Taints:            ref.Taints,
			Schematic:         nodeSchematic(ref.Schematic),
			Rescue:            rescueOf(ref.Rescue),
		})
	}
	return args
}

// nodeSchematic is a node's own schematic as the components take it; nil
// when it has none (the cluster's).
func nodeSchematic(s *stacks.NodeSchematicConfig) *image.Schematic {
	if s == nil {
		return nil
	}
	return &image.Schematic{ID: s.ID, Extensions: s.Extensions, KernelArgs: s.KernelArgs}
}

// vpsSettings are a vps section of the stack file (vps, or a hosts
// entry's) as the components take them, the nodes' default gateway and
// prefix length those given (a node's own are passed as the file gives
// them).
func vpsSettings(v *stacks.VPSConfig, gateway string, prefixLength int) servers.Settings {
	return servers.Settings{
		AllowedCIDRs:   v.AllowedCIDRs,
		PublicTCPPorts: v.PublicTCPPorts,
		ImageURL:       v.ImageURL,
		// Load defaults it to on; off only when the file says so.
		RequireRescue:    v.RequireRescue,
		RebootCommand:    v.RebootCommand,
		TalosWaitTimeout: v.TalosWaitTimeout,
		OnDestroy:        v.OnDestroy,
		Gateway:          gateway,
		PrefixLength:     prefixLength,
	}
}

// rescueOf is a node's rescue access as the components take it: the
// password a secret, the host key reduced to the "<type> <base64>" line
// the command provider reads.
func rescueOf(r stacks.RescueConfig) servers.Rescue {
	return servers.Rescue{
		Host:     r.Host,
		Port:     r.Port,
		User:     r.User,
		Password: r.Password.Output(),
		HostKey:  stacks.CommandHostKey(r.HostKey),
	}
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
	c, err := vps.NewClusterWithDeps(ctx, cfg.Cluster.Name, p.args, servers.Deps{Probe: o.TalosProbe, Talos: o.Talos})
	if err != nil {
		return nil, err
	}
	return c.Outputs(), nil
}
