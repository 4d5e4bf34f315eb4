package docker

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	dk "github.com/pulumi/pulumi-docker/sdk/v4/go/docker"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// PluginVersion is the Docker provider plugin the resources ask for, the
// SDK's own (TestThePluginIsTheSDKs holds the two together). It is 4.11.0,
// not the newest 4.11.2: the plugin is built from source for the tests
// with the real CLI, and 4.11.1's and 4.11.2's need terraform bridge
// releases the module proxy does not serve. The CLI installs the plugin of
// the SDK a program (or this package's provider) depends on, so the two
// must be the same version.
const PluginVersion = "4.11.0"

// Containers are the Docker resources of a cluster's nodes: its network,
// and per node its state volumes and its container.
type Containers struct {
	Network    *dk.Network
	Volumes    map[string][]*dk.Volume // by node name, in StateMounts' order
	Containers map[string]*dk.Container
}

// RestartHooks are the hook options of a node's container (named
// container): the gate before it is deleted for a replacement, the wait
// after its new one is created. nil: none, for a program that makes the
// containers without a TalosCluster (the project's integration test).
type RestartHooks func(container string) ([]pulumi.ResourceOption, error)

// NewContainers registers the network and, in the rollout's order and
// batches, each node's state volumes and container, each batch after the
// one before it: a new image reaches one control plane at a time, then the
// workers in batches. args must be valid, with their defaults
// (ClusterArgs.WithDefaults).
func NewContainers(ctx *pulumi.Context, name string, args *ClusterArgs, hooks RestartHooks, opts ...pulumi.ResourceOption) (*Containers, error) {
	m := &Containers{Volumes: map[string][]*dk.Volume{}, Containers: map[string]*dk.Container{}}
	opts = append(slices.Clone(opts), pulumi.Version(PluginVersion))
	s := args.Docker
	owner := labels(args.Cluster.Name, ctx)
	network, err := dk.NewNetwork(ctx, name+"-network", &dk.NetworkArgs{
		Name:   pulumi.String(s.Network),
		Driver: pulumi.String("bridge"),
		IpamConfigs: dk.NetworkIpamConfigArray{dk.NetworkIpamConfigArgs{
			Subnet: pulumi.String(s.Subnet), Gateway: pulumi.String(s.Gateway),
		}},
		Labels: dk.NetworkLabelArray(labelArgs(owner, func(k, v pulumi.StringInput) dk.NetworkLabelInput {
			return dk.NetworkLabelArgs{Label: k, Value: v}
		})),
	}, opts...)
	if err != nil {
		return nil, fmt.Errorf("unable to create the Docker network: %w", err)
	}
	m.Network = network
	byName := map[string]Node{}
	for _, n := range args.Nodes {
		byName[n.Name] = n
	}
	var previous []pulumi.Resource
	for _, batch := range args.Cluster.Policy().Batches(args.talosNodes()) {
		var current []pulumi.Resource
		for _, spec := range batch {
			n := byName[spec.Name]
			var bound []pulumi.ResourceOption
			if hooks != nil {
				if bound, err = hooks(name + nodeInfix + n.Name); err != nil {
					return nil, err
				}
			}
			ctr, err := m.node(ctx, name, args, n, n.Name == args.Nodes[0].Name, previous, owner,
				append(slices.Clone(opts), bound...)...)
			if err != nil {
				return nil, err
			}
			current = append(current, ctr)
		}
		previous = current
	}
	return m, nil
}

// node registers a node's state volumes and its container, after the
// containers of the batch before it.
func (m *Containers) node(ctx *pulumi.Context, name string, args *ClusterArgs, n Node, publish bool,
	previous []pulumi.Resource, owner map[string]string, opts ...pulumi.ResourceOption,
) (*dk.Container, error) {
	s := args.Docker
	prefix := args.Cluster.Name + "-" + n.Name
	var mounts dk.ContainerMountArray
	for _, path := range TmpfsMounts {
		mounts = append(mounts, dk.ContainerMountArgs{Type: pulumi.String("tmpfs"), Target: pulumi.String(path)})
	}
	for _, path := range StateMounts {
		slug := mountSlug(path)
		// Named after the cluster and the node only: a new image or any
		// other change of the container leaves it as it is.
		vol, err := dk.NewVolume(ctx, name+volumeInfix+n.Name+"-"+slug, &dk.VolumeArgs{
			Name: pulumi.String(prefix + "-" + slug),
			Labels: dk.VolumeLabelArray(labelArgs(with(owner, "talos.node", n.Name), func(k, v pulumi.StringInput) dk.VolumeLabelInput {
				return dk.VolumeLabelArgs{Label: k, Value: v}
			})),
		}, opts...)
		if err != nil {
			return nil, fmt.Errorf("unable to create volume %s of node %q: %w", path, n.Name, err)
		}
		m.Volumes[n.Name] = append(m.Volumes[n.Name], vol)
		mounts = append(mounts, dk.ContainerMountArgs{Type: pulumi.String("volume"), Target: pulumi.String(path), Source: vol.Name})
	}
	for _, mt := range s.Mounts {
		mounts = append(mounts, dk.ContainerMountArgs{
			Type: pulumi.String("bind"), Source: pulumi.String(mt.Source), Target: pulumi.String(mt.Target), ReadOnly: pulumi.Bool(mt.ReadOnly),
		})
	}
	var ports dk.ContainerPortArray
	for _, p := range args.apiPorts(n, publish) {
		ports = append(ports, dk.ContainerPortArgs{
			Internal: pulumi.Int(p[1]), External: pulumi.Int(p[0]), Ip: pulumi.String(localhost), Protocol: pulumi.String("tcp"),
		})
	}
	if publish {
		for _, p := range s.Ports {
			ports = append(ports, dk.ContainerPortArgs{
				Internal: pulumi.Int(p.ContainerPort), External: pulumi.Int(p.HostPort),
				Ip: pulumi.String(cmp.Or(p.HostIP, "127.0.0.1")), Protocol: pulumi.String(cmp.Or(p.Protocol, "tcp")),
			})
		}
	}
	// talos.type as Talos's provisioner writes it: the role's own spelling.
	ctrLabels := dk.ContainerLabelArray(labelArgs(with(owner, "talos.type", string(n.Role)), func(k, v pulumi.StringInput) dk.ContainerLabelInput {
		return dk.ContainerLabelArgs{Label: k, Value: v}
	}))
	ctr, err := dk.NewContainer(ctx, name+nodeInfix+n.Name, &dk.ContainerArgs{
		Name:     pulumi.String(prefix),
		Hostname: pulumi.String(n.Name),
		Image:    pulumi.String(s.Image),
		// No USERDATA: the node waits in maintenance mode and the
		// TalosCluster applies its config over the Talos API, as on every
		// platform. Its config then lives in its STATE volume, never in
		// the container's environment, and a config change replaces no
		// container.
		Envs:         pulumi.StringArray{pulumi.String("PLATFORM=container")},
		Privileged:   pulumi.Bool(s.privileged()),
		SecurityOpts: pulumi.StringArray{pulumi.String("seccomp=unconfined")},
		ReadOnly:     pulumi.Bool(true),
		Mounts:       mounts,
		Sysctls:      sysctls(s),
		NetworksAdvanced: dk.ContainerNetworksAdvancedArray{dk.ContainerNetworksAdvancedArgs{
			Name: m.Network.Name, Ipv4Address: pulumi.String(n.IP),
		}},
		Ports:  ports,
		Labels: ctrLabels,
		Cpus:   pulumi.String(strconv.Itoa(cmp.Or(n.Cores, DefaultCores))),
		Memory: pulumi.Int(cmp.Or(n.Memory, DefaultMemory)),
		// Back after this machine restarts, unless stopped on purpose.
		Restart:             pulumi.String("unless-stopped"),
		DestroyGraceSeconds: pulumi.Int(stopGraceSeconds),
	}, append([]pulumi.ResourceOption{
		pulumi.DependsOn(previous),
		// Its name and address are the new container's.
		pulumi.DeleteBeforeReplace(true),
		pulumi.IgnoreChanges(keptLimits(n)),
	}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("unable to create the container of node %q: %w", n.Name, err)
	}
	m.Containers[n.Name] = ctr
	return ctr, nil
}

// sysctls turn IPv6 on in the container, as Talos's provisioner does
// unless told not to (talos pkg/provision/providers/docker/node.go).
func sysctls(s Settings) pulumi.StringMap {
	if s.DisableIPv6 {
		return nil
	}
	return pulumi.StringMap{"net.ipv6.conf.all.disable_ipv6": pulumi.String("0")}
}

// keptLimits are the limits the node leaves out: a new container takes
// the defaults, and a running one keeps what it was created with (none,
// before the defaults existed), instead of being replaced for them (the
// engine applies ignoreChanges only against an old state: pulumi
// pkg/resource/deploy/step_generator.go, processIgnoreChanges). The swap
// limit is never set: dockerd sets it to twice the memory limit, and the
// docker provider reads it back into a field it does not compute
// (kreuzwerker v3 internal/provider/resource_docker_container.go
// memory_swap, _funcs.go:834), which every later preview would remove.
func keptLimits(n Node) []string {
	out := []string{"memorySwap"}
	if n.Cores == 0 {
		out = append(out, "cpus")
	}
	if n.Memory == 0 {
		out = append(out, "memory")
	}
	return out
}

// nodeHook calls fn with the node of a container's hook, for containers
// of the cluster named cluster only.
func nodeHook(cluster string, fn func(node string) error) pulumi.ResourceHookFunction {
	return func(args *pulumi.ResourceHookArgs) error {
		node, ok := strings.CutPrefix(args.Name, cluster+nodeInfix)
		if !ok {
			return nil
		}
		return fn(node)
	}
}

// mountSlug is a mount path as part of a volume's name: /system/state is
// system-state.
func mountSlug(path string) string {
	return strings.ReplaceAll(strings.TrimPrefix(path, "/"), "/", "-")
}

// labels mark what the component makes as the cluster's, as Talos's
// provisioner does (talosctl cluster destroy finds them), and as the
// stack's.
func labels(cluster string, ctx *pulumi.Context) map[string]string {
	return map[string]string{
		"talos.owned":             "true",
		"talos.cluster.name":      cluster,
		"io.fluodata.talos.stack": ctx.Project() + "/" + ctx.Stack(),
	}
}

// labelArgs are a label map as the Docker provider takes it, in the keys'
// order (a map's own order would change the inputs from run to run).
func labelArgs[T any](labels map[string]string, arg func(label, value pulumi.StringInput) T) []T {
	out := make([]T, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		out = append(out, arg(pulumi.String(k), pulumi.String(labels[k])))
	}
	return out
}

// with is labels and one more.
func with(labels map[string]string, key, value string) map[string]string {
	out := maps.Clone(labels)
	out[key] = value
	return out
}
