package docker

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	dk "github.com/pulumi/pulumi-docker/sdk/v4/go/docker"
	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/talos"
)

// ClusterType is the component's type token.
const ClusterType = talos.ProgramPackage + ":index:DockerCluster"

// Names of the hooks on the containers, after the cluster's name; Pulumi
// keeps them in state, so they are fixed here once.
const (
	// RestartHookSuffix: before a node's container is deleted to be
	// replaced (a new image), the node's gate (talos.Leaver.Restart).
	RestartHookSuffix = "-node-restart"
	// RestartedHookSuffix: after its new container is created, the wait
	// until the node is back and healthy (talos.Leaver.Restarted).
	RestartedHookSuffix = "-node-restarted"
)

// Infixes of the children's names: <cluster>-node-<node> is a node's
// container, <cluster>-volume-<node>-<mount> one of its volumes.
const (
	nodeInfix   = "-node-"
	volumeInfix = "-volume-"
)

// talosAPIPort and kubernetesAPIPort are the ports inside a node.
const (
	talosAPIPort      = 50000
	kubernetesAPIPort = 6443
)

// stopGraceSeconds is how long a node's container gets to shut Talos down
// (its services, its nested containers, its mounts) before Docker kills
// it, as Talos's own provisioner gives it.
const stopGraceSeconds = 30

// StateMounts are the paths of a node that Talos's Docker provisioner
// backs with volumes (constants.EphemeralMountPoint, StateMountPoint and
// Overlays in Talos's machinery): the machine config, etcd, the kubelet's
// and containerd's data. They outlive a container, so a new image finds
// the node as it was. Each is one volume per node.
var StateMounts = []string{"/var", "/system/state", "/etc/cni", "/etc/kubernetes", "/usr/libexec/kubernetes", "/opt"}

// TmpfsMounts are the paths Talos's provisioner backs with tmpfs.
var TmpfsMounts = []string{"/run", "/system", "/tmp"}

// Cluster is the DockerCluster component: a Docker network, per node its
// state volumes and its container, then the TalosCluster.
type Cluster struct {
	pulumi.ResourceState

	// Kubeconfig is the cluster's admin kubeconfig; it resolves once the
	// cluster is ready.
	Kubeconfig pulumi.StringOutput `pulumi:"kubeconfig" provider:"secret"`
	// Talosconfig is the Talos client config.
	Talosconfig pulumi.StringOutput `pulumi:"talosconfig" provider:"secret"`
	// Endpoint is the Kubernetes API URL.
	Endpoint pulumi.StringOutput `pulumi:"endpoint"`
	// NodeIPs are the nodes' IPs by node name.
	NodeIPs pulumi.StringMapOutput `pulumi:"nodeIps"`
	// TalosVersion is the oldest Talos version the nodes run, read from
	// them (the configured one when none answers).
	TalosVersion pulumi.StringOutput `pulumi:"talosVersion"`
	// KubernetesVersion is the oldest Kubernetes version the API servers
	// run, read from them (the configured one when none answers).
	KubernetesVersion pulumi.StringOutput `pulumi:"kubernetesVersion"`
	// Nodes is, by node name, the node's ip, role, and the talosVersion
	// and kubeletVersion it runs ("unknown" when it did not answer).
	Nodes pulumi.StringMapMapOutput `pulumi:"nodes"`
	// KubernetesProvider is a Kubernetes provider for the new cluster,
	// configured with its admin kubeconfig once its API answers.
	KubernetesProvider *kubernetes.Provider `pulumi:"kubernetesProvider" provider:"type=kubernetes@v4.32.0:index:Provider"`
	// LocalEndpoint is the Kubernetes API URL on 127.0.0.1, the port
	// published from the first control plane.
	LocalEndpoint pulumi.StringOutput `pulumi:"localEndpoint"`

	// Children, for tests and later steps.
	Network    *dk.Network
	Volumes    map[string][]*dk.Volume // by node name, in StateMounts' order
	Containers map[string]*dk.Container
	Talos      *talos.Cluster
}

// NewCluster builds the cluster in Docker. Nothing is registered unless
// every input is valid (see Validate).
func NewCluster(ctx *pulumi.Context, name string, args *ClusterArgs, opts ...pulumi.ResourceOption) (*Cluster, error) {
	return NewClusterWithDeps(ctx, name, args, Deps{}, opts...)
}

// NewClusterWithDeps is NewCluster with its seams set (see Deps).
func NewClusterWithDeps(ctx *pulumi.Context, name string, in *ClusterArgs, deps Deps, opts ...pulumi.ResourceOption) (*Cluster, error) {
	if err := in.Validate(name); err != nil {
		return nil, err
	}
	defaulted := in.WithDefaults()
	args := &defaulted
	deps.Talos = deps.Talos.WithDefaults(ctx)
	c := &Cluster{Volumes: map[string][]*dk.Volume{}, Containers: map[string]*dk.Container{}}
	typ, aliases := talos.ComponentType(deps.Talos.Package, ComponentName)
	if err := ctx.RegisterComponentResource(typ, name, c, append(opts, aliases...)...); err != nil {
		return nil, err
	}
	parent := pulumi.Parent(c)
	s := args.Docker
	owner := labels(args.Cluster.Name, ctx)

	network, err := dk.NewNetwork(ctx, name+"-network", &dk.NetworkArgs{
		Name:   pulumi.String(s.Network),
		Driver: pulumi.String("bridge"),
		IpamConfigs: dk.NetworkIpamConfigArray{dk.NetworkIpamConfigArgs{
			Subnet: pulumi.String(s.Subnet), Gateway: pulumi.String(s.Gateway),
		}},
		Labels: networkLabels(owner),
	}, parent)
	if err != nil {
		return nil, fmt.Errorf("unable to create the Docker network: %w", err)
	}
	c.Network = network

	// A container replaced for a new image is deleted first (its name and
	// address are the new one's), after its node's gate, and waited for
	// once it runs again: the talos.Leaver seam.
	leaver := talos.NewLeaver()
	restartHooks := func(container string) ([]pulumi.ResourceOption, error) {
		var out []pulumi.ResourceOption
		for _, h := range []struct {
			suffix string
			point  talos.HookPoint
			fn     func(node string) error
		}{
			{RestartHookSuffix, talos.BeforeDelete, leaver.Restart},
			{RestartedHookSuffix, talos.AfterCreate, leaver.Restarted},
		} {
			bound, err := deps.Talos.Hooks.Bind(name+h.suffix, h.point, container, nodeHook(name, h.fn))
			if err != nil {
				return nil, err
			}
			out = append(out, bound)
		}
		return out, nil
	}

	// The containers follow the rollout's order and batches: a new image
	// reaches one control plane at a time, then the workers in batches,
	// each batch after the one before it came back.
	targs := args.TalosArgs()
	byName := map[string]Node{}
	for _, n := range args.Nodes {
		byName[n.Name] = n
	}
	nodeOpts := map[string]talos.NodeOptions{}
	var previous []pulumi.Resource
	for _, batch := range args.Cluster.Policy().Batches(targs.Nodes) {
		var current []pulumi.Resource
		for _, spec := range batch {
			n := byName[spec.Name]
			hooks, err := restartHooks(name + nodeInfix + n.Name)
			if err != nil {
				return nil, err
			}
			ctr, err := c.node(ctx, name, args, n, n.Name == args.Nodes[0].Name, network, previous, owner,
				parent, hooks...)
			if err != nil {
				return nil, err
			}
			current = append(current, ctr)
			nodeOpts[n.Name] = talos.NodeOptions{DependsOn: []pulumi.Resource{ctr}}
		}
		previous = current
	}

	targs.NodeOptions = nodeOpts
	targs.Leaver = leaver
	// Destroying the network means every container went: nothing of the
	// cluster is called on its way out.
	targs.DeletedWith = network
	c.Talos, err = talos.NewClusterWithDeps(ctx, name, targs, deps.Talos, parent)
	if err != nil {
		return nil, err
	}
	t := c.Talos
	c.Kubeconfig, c.Talosconfig, c.Endpoint, c.NodeIPs = t.Kubeconfig, t.Talosconfig, t.Endpoint, t.NodeIPs
	c.TalosVersion, c.KubernetesVersion, c.Nodes = t.TalosVersion, t.KubernetesVersion, t.Nodes
	c.KubernetesProvider = t.KubernetesProvider
	c.LocalEndpoint = pulumi.Sprintf("https://127.0.0.1:%d", s.KubernetesPort)
	if err := ctx.RegisterResourceOutputs(c, c.Outputs()); err != nil {
		return nil, err
	}
	return c, nil
}

// node registers a node's state volumes and its container, after the
// containers of the batch before it.
func (c *Cluster) node(ctx *pulumi.Context, name string, args *ClusterArgs, n Node, publish bool, network *dk.Network,
	previous []pulumi.Resource, owner map[string]string, parent pulumi.ResourceOption, hooks ...pulumi.ResourceOption,
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
			Name:   pulumi.String(prefix + "-" + slug),
			Labels: volumeLabels(owner, n.Name),
		}, parent)
		if err != nil {
			return nil, fmt.Errorf("unable to create volume %s of node %q: %w", path, n.Name, err)
		}
		c.Volumes[n.Name] = append(c.Volumes[n.Name], vol)
		mounts = append(mounts, dk.ContainerMountArgs{Type: pulumi.String("volume"), Target: pulumi.String(path), Source: vol.Name})
	}
	var ports dk.ContainerPortArray
	if publish {
		for _, p := range [][2]int{{s.TalosPort, talosAPIPort}, {s.KubernetesPort, kubernetesAPIPort}} {
			ports = append(ports, dk.ContainerPortArgs{
				Internal: pulumi.Int(p[1]), External: pulumi.Int(p[0]), Ip: pulumi.String("127.0.0.1"), Protocol: pulumi.String("tcp"),
			})
		}
	}
	var ctrLabels dk.ContainerLabelArray
	nl := nodeLabels(owner, n)
	for _, k := range slices.Sorted(maps.Keys(nl)) {
		ctrLabels = append(ctrLabels, dk.ContainerLabelArgs{Label: pulumi.String(k), Value: pulumi.String(nl[k])})
	}
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
		Sysctls:      pulumi.StringMap{"net.ipv6.conf.all.disable_ipv6": pulumi.String("0")},
		NetworksAdvanced: dk.ContainerNetworksAdvancedArray{dk.ContainerNetworksAdvancedArgs{
			Name: network.Name, Ipv4Address: pulumi.String(n.IP),
		}},
		Ports:  ports,
		Labels: ctrLabels,
		// Back after this machine restarts, unless stopped on purpose.
		Restart:             pulumi.String("unless-stopped"),
		DestroyGraceSeconds: pulumi.Int(stopGraceSeconds),
	}, append([]pulumi.ResourceOption{
		parent, pulumi.DependsOn(previous),
		// Its name and address are the new container's.
		pulumi.DeleteBeforeReplace(true),
	}, hooks...)...)
	if err != nil {
		return nil, fmt.Errorf("unable to create the container of node %q: %w", n.Name, err)
	}
	c.Containers[n.Name] = ctr
	return ctr, nil
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

func nodeLabels(owner map[string]string, n Node) map[string]string {
	out := maps.Clone(owner)
	out["talos.type"] = nodeType(n.Role)
	return out
}

// nodeType is the talos.type label's value for a role, as Talos's
// provisioner writes it.
func nodeType(r talos.Role) string {
	if r == talos.RoleControlPlane {
		return "controlplane"
	}
	return "worker"
}

func networkLabels(owner map[string]string) dk.NetworkLabelArray {
	var out dk.NetworkLabelArray
	for _, k := range slices.Sorted(maps.Keys(owner)) {
		out = append(out, dk.NetworkLabelArgs{Label: pulumi.String(k), Value: pulumi.String(owner[k])})
	}
	return out
}

func volumeLabels(owner map[string]string, node string) dk.VolumeLabelArray {
	out := dk.VolumeLabelArray{dk.VolumeLabelArgs{Label: pulumi.String("talos.node"), Value: pulumi.String(node)}}
	for _, k := range slices.Sorted(maps.Keys(owner)) {
		out = append(out, dk.VolumeLabelArgs{Label: pulumi.String(k), Value: pulumi.String(owner[k])})
	}
	return out
}

// Outputs are the stack outputs of a Docker cluster.
func (c *Cluster) Outputs() pulumi.Map {
	out := c.Talos.Outputs()
	out["localEndpoint"] = c.LocalEndpoint
	return out
}
