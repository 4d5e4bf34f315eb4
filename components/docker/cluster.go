package docker

import (
	dk "github.com/pulumi/pulumi-docker/sdk/v4/go/docker"
	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/siderolabs/talos/pkg/machinery/constants"

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
	talosAPIPort      = constants.ApidPort
	kubernetesAPIPort = constants.DefaultControlPlanePort
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
	// MachineConfigurations are the nodes' machine configs by node name, as
	// applied (base and patches merged): for break-glass, `talosctl
	// apply-config` when this program cannot run.
	MachineConfigurations pulumi.StringMapOutput `pulumi:"machineConfigurations" provider:"secret"`
	// Endpoint is the Kubernetes API URL.
	Endpoint pulumi.StringOutput `pulumi:"endpoint"`
	// NodeIPs are the nodes' IPs by node name.
	NodeIPs pulumi.StringMapOutput `pulumi:"nodeIps"`
	// ClusterName is the cluster's name: the next run refuses another.
	ClusterName pulumi.StringOutput `pulumi:"clusterName"`
	// TalosVersion is the oldest Talos version the nodes run, read from
	// them (the configured one when none answers).
	TalosVersion pulumi.StringOutput `pulumi:"talosVersion"`
	// KubernetesVersion is the oldest Kubernetes version the API servers
	// run, read from them (the configured one when none answers).
	KubernetesVersion pulumi.StringOutput `pulumi:"kubernetesVersion"`
	// Nodes are the nodes by name, each as the run found it: its ip, role,
	// and the Talos and kubelet versions it runs.
	Nodes talos.NodeStatusMapOutput `pulumi:"nodes"`
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
	in, _, err := talos.OwnArgs(ctx, deps.Talos, ComponentName, name, in, func(a *ClusterArgs) **talos.Previous { return &a.Previous })
	if err != nil {
		return nil, err
	}
	deps.Talos.LastRead = true // its TalosCluster gets it through in
	if err := in.Validate(name); err != nil {
		return nil, err
	}
	defaulted := in.WithDefaults()
	args := &defaulted
	deps.Talos = deps.Talos.WithDefaults(ctx)
	c := &Cluster{}
	typ, aliases := talos.ComponentType(deps.Talos.Package, ComponentName)
	if err := ctx.RegisterComponentResource(typ, name, c, append(opts, aliases...)...); err != nil {
		return nil, err
	}
	parent := pulumi.Parent(c)
	// A container replaced for a new image is deleted first (its name and
	// address are the new one's), after its node's gate, and waited for
	// once it runs again: the talos.Leaver seam.
	leaver := talos.NewLeaver()
	machines, err := NewContainers(ctx, name, args, restartHooks(deps.Talos.Hooks, name, leaver), parent)
	if err != nil {
		return nil, err
	}
	c.Network, c.Volumes, c.Containers = machines.Network, machines.Volumes, machines.Containers
	network := machines.Network
	targs := args.TalosArgs()
	targs.NodeOptions = map[string]talos.NodeOptions{}
	for n, ctr := range machines.Containers {
		targs.NodeOptions[n] = talos.NodeOptions{DependsOn: []pulumi.Resource{ctr}}
	}
	targs.Leaver = leaver
	// Destroying the network means every container went: nothing of the
	// cluster is called on its way out.
	targs.DeletedWith = network
	c.Talos, err = talos.NewClusterWithDeps(ctx, name, targs, deps.Talos, parent)
	if err != nil {
		return nil, err
	}
	if err := c.registerOutputs(ctx, args); err != nil {
		return nil, err
	}
	return c, nil
}

// Outputs are the stack outputs of a Docker cluster.
func (c *Cluster) Outputs() pulumi.Map {
	out := c.Talos.Outputs()
	out["localEndpoint"] = c.LocalEndpoint
	return out
}

// restartHooks binds, for each container, the hooks that gate its node
// before a replacement deletes it and wait for it once it runs again.
func restartHooks(hooks talos.Hooks, name string, leaver *talos.Leaver) RestartHooks {
	return func(container string) ([]pulumi.ResourceOption, error) {
		var out []pulumi.ResourceOption
		for _, h := range []struct {
			suffix string
			point  talos.HookPoint
			fn     func(node string) error
		}{
			{RestartHookSuffix, talos.BeforeDelete, leaver.Restart},
			{RestartedHookSuffix, talos.AfterCreate, leaver.Restarted},
		} {
			bound, err := hooks.Bind(name+h.suffix, h.point, container, nodeHook(name, h.fn))
			if err != nil {
				return nil, err
			}
			out = append(out, bound)
		}
		return out, nil
	}
}

// registerOutputs copies the TalosCluster's outputs and registers them.
func (c *Cluster) registerOutputs(ctx *pulumi.Context, args *ClusterArgs) error {
	t := c.Talos
	c.Kubeconfig, c.Talosconfig, c.Endpoint, c.NodeIPs = t.Kubeconfig, t.Talosconfig, t.Endpoint, t.NodeIPs
	c.ClusterName, c.TalosVersion, c.KubernetesVersion, c.Nodes = t.ClusterName, t.TalosVersion, t.KubernetesVersion, t.Nodes
	c.MachineConfigurations = t.MachineConfigurations
	c.KubernetesProvider = t.KubernetesProvider
	c.LocalEndpoint = pulumi.Sprintf("https://127.0.0.1:%d", args.Docker.KubernetesPort)
	return ctx.RegisterResourceOutputs(c, c.Outputs())
}
