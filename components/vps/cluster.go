package vps

import (
	"github.com/pulumi/pulumi-command/sdk/go/command/local"
	"github.com/pulumi/pulumi-command/sdk/go/command/remote"
	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/image"
	"github.com/fluodata/talos-pulumi/components/servers"
	"github.com/fluodata/talos-pulumi/components/talos"
)

// ClusterType is the component's type token.
const ClusterType = talos.ProgramPackage + ":index:VpsCluster"

// Cluster is the VpsCluster component: per node a rescue-mode install, an
// optional reboot command and a wait for Talos, then the TalosCluster.
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
	// configured with its admin kubeconfig once its API answers: a program
	// deploys onto the cluster with it (the provider option of its
	// Kubernetes resources) without making one from the kubeconfig.
	KubernetesProvider *kubernetes.Provider `pulumi:"kubernetesProvider" provider:"type=kubernetes@v4.32.0:index:Provider"`
	// SchematicID is the Image Factory schematic of the image.
	SchematicID pulumi.StringOutput `pulumi:"schematicId"`
	// InstallerImage is the installer the nodes install from.
	InstallerImage pulumi.StringOutput `pulumi:"installerImage"`
	// ImageURL is the disk image the installs write (a presigned URL's
	// query left out).
	ImageURL pulumi.StringOutput `pulumi:"imageUrl"`

	// Children by node name, for tests and later steps.
	Installs map[string]*remote.Command
	Reboots  map[string]*local.Command // only with vps.rebootCommand
	Waits    map[string]*local.Command
	Talos    *talos.Cluster
}

// NewCluster builds the VPS platform: per node a rescue-mode install, an
// optional reboot command and a wait for Talos, then the TalosCluster.
// Nothing is registered unless every input is valid (see Validate).
func NewCluster(ctx *pulumi.Context, name string, args *ClusterArgs, opts ...pulumi.ResourceOption) (*Cluster, error) {
	return NewClusterWithDeps(ctx, name, args, servers.Deps{}, opts...)
}

// NewClusterWithDeps is NewCluster with its seams set (see Deps).
func NewClusterWithDeps(ctx *pulumi.Context, name string, in *ClusterArgs, deps servers.Deps, opts ...pulumi.ResourceOption) (*Cluster, error) {
	in, _, err := talos.OwnArgs(ctx, deps.Talos, "VpsCluster", name, in, func(a *ClusterArgs) **talos.Previous { return &a.Previous })
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
	typ, aliases := talos.ComponentType(deps.Talos.Package, "VpsCluster")
	if err := ctx.RegisterComponentResource(typ, name, c, append(opts, aliases...)...); err != nil {
		return nil, err
	}
	parent := pulumi.Parent(c)

	own := map[string]image.Schematic{}
	for _, n := range args.Nodes {
		if n.Schematic != nil {
			own[n.Name] = n.Schematic.Over(args.schematic())
		}
	}
	images, err := image.NewImages(ctx, name, args.schematic(), image.Args{
		TalosVersion: args.Cluster.TalosVersion,
		Platform:     image.PlatformMetal,
	}, own, parent)
	if err != nil {
		return nil, err
	}
	img := images.Cluster
	c.SchematicID, c.InstallerImage = img.SchematicID, img.Installer
	_, c.ImageURL = servers.ImageURLs(img.DiskImageURL, args.VPS)
	install := func(node string) pulumi.StringOutput {
		url, _ := servers.ImageURLs(images.Of(node).DiskImageURL, args.VPS)
		return url
	}
	servers, err := servers.NewServers(ctx, name, args.VPS, args.Nodes, install, deps, parent)
	if err != nil {
		return nil, err
	}
	c.Installs, c.Reboots, c.Waits = servers.Installs, servers.Reboots, servers.Waits

	targs := args.TalosArgs(img.Installer)
	targs.NodeOptions = servers.NodeOptions
	targs.Installers = images.Installers()
	// The servers outlive the stack: destroy never uninstalls Helm releases
	// from a cluster it forgets or resets. The first install is deleted (a
	// no-op) by every destroy, so it stands for "the whole cluster goes".
	targs.DeletedWith = c.Installs[args.Nodes[0].Name]
	c.Talos, err = talos.NewClusterWithDeps(ctx, name, targs, deps.Talos, parent)
	if err != nil {
		return nil, err
	}
	t := c.Talos
	c.Kubeconfig, c.Talosconfig, c.Endpoint, c.NodeIPs = t.Kubeconfig, t.Talosconfig, t.Endpoint, t.NodeIPs
	c.ClusterName, c.TalosVersion, c.KubernetesVersion, c.Nodes = t.ClusterName, t.TalosVersion, t.KubernetesVersion, t.Nodes
	c.MachineConfigurations = t.MachineConfigurations
	c.KubernetesProvider = t.KubernetesProvider
	if err := ctx.RegisterResourceOutputs(c, c.Outputs()); err != nil {
		return nil, err
	}
	return c, nil
}

// Outputs are the stack outputs of a VPS cluster.
func (c *Cluster) Outputs() pulumi.Map {
	out := c.Talos.Outputs()
	out["schematicId"] = c.SchematicID
	out["installerImage"] = c.InstallerImage
	out["imageUrl"] = c.ImageURL
	return out
}
