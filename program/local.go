package program

import (
	"fmt"
	"net/netip"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/fluodata/talos-pulumi/components/docker"
	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/program/overrides"
	"github.com/fluodata/talos-pulumi/stacks"
)

// localKeys are the DockerCluster's inputs LocalArgs fills from stack keys
// of other names: the subnet is cluster.network's, the rest of its docker
// settings are the local section's.
var localKeys = []overrides.Rename{
	{Input: "docker.subnet", Key: "cluster.network"},
	{Input: "docker.gateway", Key: "cluster.network.gateway"},
	{Input: "docker", Key: "local"},
}

// LocalArgs are a validated stack file of platform local as the
// DockerCluster takes it: the Docker network on the node network
// (cluster.network), the nodes control planes first.
func LocalArgs(cfg *stacks.Config) *docker.ClusterArgs {
	l, n := cfg.Local, cfg.Cluster.Network
	subnet := ""
	if gw, err := netip.ParseAddr(n.Gateway); err == nil && gw.Is4() {
		subnet = netip.PrefixFrom(gw, n.PrefixLength).Masked().String()
	} else if n.Gateway != "" {
		// The component names the key: an address it cannot read.
		subnet = fmt.Sprintf("%s/%d", n.Gateway, n.PrefixLength)
	}
	args := &docker.ClusterArgs{
		Cluster: ClusterSettings(cfg),
		Docker: docker.Settings{
			Subnet: subnet, Gateway: n.Gateway, Network: l.Network, Image: l.Image,
			KubernetesPort: l.KubernetesPort, TalosPort: l.TalosPort, Privileged: l.Privileged, DisableIPv6: l.DisableIPv6,
			APIAccess: l.APIAccess,
		},
	}
	for _, p := range l.Ports {
		args.Docker.Ports = append(args.Docker.Ports, docker.PublishedPort(p))
	}
	for _, m := range l.Mounts {
		args.Docker.Mounts = append(args.Docker.Mounts, docker.Mount(m))
	}
	for _, ref := range cfg.Nodes.Refs() {
		args.Nodes = append(args.Nodes, docker.Node{
			Name: ref.Name, Role: RoleOf(ref.Role), IP: ref.IP, Patches: PatchTexts(ref.Patches), KubeSpanEndpoints: ref.KubeSpanEndpoints,
			Labels: ref.Labels, Taints: ref.Taints, Cores: ref.Cores, Memory: ref.Memory,
		})
	}
	return args
}

// localPlatform is a DockerCluster.
type localPlatform struct {
	args *docker.ClusterArgs
	// lastPorts are the host ports the last run published, by node and
	// container port.
	lastPorts map[string]map[int]int
}

func (p *localPlatform) problems(string) []inputs.Problem { return p.args.Problems() }

func (p *localPlatform) talos() *talos.ClusterArgs {
	d := p.args.WithDefaults()
	return d.TalosArgs()
}

func (p *localPlatform) share(inputName func(string) string, etcdBackup *talos.EtcdBackupSettings) {
	p.args.InputName, p.args.Cluster.EtcdBackup = inputName, etcdBackup
}

func (p *localPlatform) remember(last Last) {
	p.args.Previous, p.lastPorts = last.Cluster, last.LocalPorts
}

// portChooser is a platform that publishes ports on this machine.
type portChooser interface {
	choosePorts(free func(preferred []int) ([]int, error)) error
}

// choosePorts fills the host ports the stack leaves out: the last run's,
// so a running cluster keeps its ports; on a first up (and, with
// apiAccess published, for a node the cluster gains) the defaults where
// free, else ports free must choose.
func (p *localPlatform) choosePorts(free func(preferred []int) ([]int, error)) error {
	s := &p.args.Docker
	var open []*int
	var preferred []int
	want := func(port *int, last map[int]int, inside, fallback int, choose bool) {
		if *port != 0 {
			return
		}
		if v, ok := last[inside]; ok {
			*port = v
		} else if choose {
			open, preferred = append(open, port), append(preferred, fallback)
		}
	}
	first := p.lastOf(0)
	want(&s.KubernetesPort, first, constants.DefaultControlPlanePort, docker.DefaultKubernetesPort, p.args.Previous == nil)
	want(&s.TalosPort, first, constants.ApidPort, docker.DefaultTalosPort, p.args.Previous == nil)
	if s.APIAccess == docker.AccessPublished {
		for i := 1; i < len(p.args.Nodes); i++ {
			n := &p.args.Nodes[i]
			last := p.lastPorts[n.Name]
			want(&n.TalosPort, last, constants.ApidPort, docker.DefaultTalosPort+i, true)
			if n.Role == talos.RoleControlPlane {
				want(&n.KubernetesPort, last, constants.DefaultControlPlanePort, docker.DefaultKubernetesPort+i, true)
			}
		}
	}
	if len(open) == 0 {
		return nil
	}
	ports, err := free(preferred)
	if err != nil {
		return err
	}
	for i, port := range open {
		*port = ports[i]
	}
	return nil
}

// lastOf is the ports the i-th node published last; for the first, when
// its own are unknown (it was renamed), those of the one container that
// published the APIs, if only one did.
func (p *localPlatform) lastOf(i int) map[int]int {
	if i < len(p.args.Nodes) {
		if last, ok := p.lastPorts[p.args.Nodes[i].Name]; ok || i > 0 {
			return last
		}
	}
	// Before apiAccess published, one container published the APIs.
	var only map[int]int
	for _, ports := range p.lastPorts {
		if _, ok := ports[constants.ApidPort]; ok {
			if only != nil {
				return nil
			}
			only = ports
		}
	}
	return only
}

func (p *localPlatform) deploy(ctx *pulumi.Context, cfg *stacks.Config, o Options) (pulumi.Map, error) {
	c, err := docker.NewClusterWithDeps(ctx, cfg.Cluster.Name, p.args, docker.Deps{Talos: o.Talos})
	if err != nil {
		return nil, err
	}
	return c.Outputs(), nil
}
