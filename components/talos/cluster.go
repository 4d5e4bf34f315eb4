package talos

import (
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strconv"

	"github.com/pulumi/pulumi-command/sdk/go/command/local"
	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumiverse/pulumi-talos/sdk/go/talos/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/fluodata/talos-pulumi/internal/helmrelease"
)

// ClusterType is the component's type token in the program.
const ClusterType = ProgramPackage + ":index:TalosCluster"

// ProgramPackage is the package part of the components' type tokens in
// the program (talos-cluster:index:TalosCluster), and the component
// package's name before it was renamed (another package of that name is
// published): the package's types alias it.
const ProgramPackage = "talos-cluster"

// ComponentType is the type token of a component kind (TalosCluster,
// ProxmoxCluster, VpsCluster) in the package pkg (ProgramPackage when
// empty) and the options it registers with: in another package, the alias
// of its ProgramPackage token, so that a stack the package made under its
// old name sees no replacement (the engine carries the alias on to the
// component's children).
func ComponentType(pkg, kind string) (string, []pulumi.ResourceOption) {
	old := ProgramPackage + ":index:" + kind
	if pkg == "" || pkg == ProgramPackage {
		return old, nil
	}
	return pkg + ":index:" + kind, []pulumi.ResourceOption{pulumi.Aliases([]pulumi.Alias{{Type: pulumi.String(old)}})}
}

// Name suffixes of the component's children (after the cluster name). They
// are part of each child's URN, which `make adopt` imports under, so they
// are fixed here once.
const (
	SecretsSuffix      = "-secrets"
	BootstrapSuffix    = "-bootstrap"
	K8sProviderSuffix  = "-k8s"
	CiliumSuffix       = "-cilium"
	CertApproverSuffix = "-cert-approver"
	APIReadySuffix     = "-api-ready"
	NodesReadySuffix   = "-nodes-ready"
)

// ChartSettings pins a chart version and adds values.
type ChartSettings struct {
	// Version is the chart version (the package's tested default when empty).
	Version string `pulumi:"version,optional"`
	// Values are merged over the values the cluster needs; see the
	// configuration reference for what may not be overridden.
	Values map[string]any `pulumi:"values,optional"`
}

// ClusterPatches are the user's machine-config patches (YAML strings, in
// order) for all nodes and for each role; each node's own patches come last.
type ClusterPatches struct {
	// All nodes.
	All []string `pulumi:"all,optional" package:"input,secret"`
	// Control planes only.
	ControlPlane []string `pulumi:"controlPlane,optional" package:"input,secret"`
	// Workers only.
	Worker []string `pulumi:"worker,optional" package:"input,secret"`
}

// NodeOptions are per-node resource options a platform supplies.
type NodeOptions struct {
	// DependsOn: the node's apply waits for these (e.g. its VM).
	DependsOn []pulumi.Resource
	// DeletedWith: the resource whose deletion removes this node (its VM),
	// so no remote call is made for the node when both go.
	DeletedWith pulumi.Resource
	// ReplaceWith re-applies the config whenever one of these resources is
	// replaced (the node's VM): a new machine with the same IP is back in
	// maintenance mode, while the apply's own inputs show no diff.
	ReplaceWith []pulumi.Resource
	// ReplacementTrigger re-applies the config when its value changes (a
	// VPS install's id, new for every install).
	ReplacementTrigger pulumi.Input
	// ResetOnDestroy resets the node when it leaves the stack, or when the
	// whole stack is destroyed: Talos wipes its state and ephemeral
	// partitions and reboots into maintenance mode. For machines that
	// outlive the stack (VPS, opt-in). Never on a replacement of its
	// apply (a re-image): that would wipe the node just installed.
	ResetOnDestroy bool
}

// ClusterSettings are the cluster-wide settings, the same for every
// platform (ProxmoxCluster and VpsCluster take them as they are).
type ClusterSettings struct {
	// Name is the Kubernetes cluster's name: a DNS label.
	Name string `pulumi:"name"`
	// Endpoint is the Kubernetes API URL, https://<host>:6443; default: the
	// VIP, or else the first control plane's IP.
	Endpoint string `pulumi:"endpoint,optional" package:"input"`
	// TalosVersion is the Talos release the nodes run, e.g. v1.12.0. It
	// fixes the machine-config contract and the secrets' format.
	TalosVersion string `pulumi:"talosVersion"`
	// KubernetesVersion is the Kubernetes version, e.g. 1.34.1; the Talos
	// release's default when empty.
	KubernetesVersion string `pulumi:"kubernetesVersion,optional"`
	// Nameservers replace the DHCP-given or default DNS servers.
	Nameservers []string `pulumi:"nameservers,optional"`
	// RegistryMirrors send the nodes' image pulls to mirrors first, e.g. a
	// pull-through cache (Talos's RegistryMirrorConfig).
	RegistryMirrors []RegistryMirror `pulumi:"registryMirrors,optional"`
	// VIP is a shared layer-2 address the control planes hold (none when
	// empty).
	VIP string `pulumi:"vip,optional"`
	// Patches are the user's machine-config patches for all nodes and per
	// role, applied after the generated ones.
	Patches *ClusterPatches `pulumi:"patches,optional"`
	// Cilium is the CNI's chart version and values.
	Cilium *ChartSettings `pulumi:"cilium,optional"`
	// CertApprover is the kubelet serving-certificate approver's chart
	// version and values.
	CertApprover *ChartSettings `pulumi:"certApprover,optional"`
	// Rollout shapes how a change reaches running nodes.
	Rollout *RolloutSettings `pulumi:"rollout,optional"`
	// LoadBalancer gives Services of type LoadBalancer addresses out of
	// pools, announced on the node network by Cilium; none when unset.
	LoadBalancer *LoadBalancerSettings `pulumi:"loadBalancer,optional"`
	// KubeSpan joins the nodes in Talos's WireGuard mesh; off when unset.
	KubeSpan *KubeSpanSettings `pulumi:"kubeSpan,optional"`
	// GitOps hands the cluster to Argo CD after the bootstrap; none when
	// unset.
	GitOps *GitOpsSettings `pulumi:"gitops,optional"`
	// DataVolume says what the nodes' data disks (NodeSpec.DataDiskSize)
	// become: a user volume for Longhorn (the default) or a plain one.
	DataVolume *DataVolumeSettings `pulumi:"dataVolume,optional"`
	// EtcdBackup schedules etcd snapshots taken inside the cluster (a
	// CronJob of talos-backup) to an S3-compatible store; none when unset.
	EtcdBackup *EtcdBackupSettings `pulumi:"etcdBackup,optional"`
	// SecureBoot boots the nodes from Talos's signed Secure Boot image and
	// encrypts STATE, EPHEMERAL and the data volume with LUKS2 keys sealed
	// to each node's TPM (Talos v1.11 or newer). Only machines with UEFI
	// Secure Boot and a TPM take it: Proxmox VMs.
	SecureBoot bool `pulumi:"secureBoot,optional"`
	// DiskEncryption encrypts STATE, EPHEMERAL and the data volume with
	// LUKS2 where Secure Boot cannot be had (rented servers): "nodeID", a
	// key derived from each node's UUID and the volume. Weaker than
	// secureBoot: whoever holds the disk and learns the machine's UUID
	// (its hosting provider, anyone with the machine) unlocks it. Set it
	// when the nodes are made: Talos never re-encrypts a volume.
	DiskEncryption string `pulumi:"diskEncryption,optional"`

	// SecretPatches tells that a machine-config patch (of the cluster's or
	// a node's) holds a secret (Go only: the component package sets it
	// when a program passed one as a secret): every node's patches are
	// then stored as secrets, in the state and in previews.
	SecretPatches bool
}

// RolloutSettings shape how upgrades and config changes reach running
// nodes: control planes always go one at a time.
type RolloutSettings struct {
	// WorkerParallelism is how many workers take a change at once
	// (default 1).
	WorkerParallelism int `pulumi:"workerParallelism,optional"`
}

// WorkerParallelism is how many workers take a change at once: at least 1.
func (c ClusterSettings) WorkerParallelism() int {
	if c.Rollout == nil || c.Rollout.WorkerParallelism < 1 {
		return 1
	}
	return c.Rollout.WorkerParallelism
}

// Machines is the contract between a platform's machine kinds (VMs, rented
// servers, containers) and the TalosCluster: what the machines are to the
// cluster beyond each node's NodeSpec. docs/extending.md gives the rules:
// which a platform must set, which it may, and why.
type Machines struct {
	// NodeOptions are per-node resource options by node name: a node's
	// config waits for its machine (DependsOn), goes with it
	// (DeletedWith) and is replaced with it (ReplaceWith).
	NodeOptions map[string]NodeOptions
	// Installers are, by node name, the installer images of the nodes
	// with a schematic of their own (a pool's extensions or kernel
	// arguments); the others install InstallerImage. A node's upgrade
	// follows its own.
	Installers map[string]pulumi.StringInput
	// Leaver, when set, is how the platform takes a node out of the cluster
	// before its replaced machine goes (see Leaver).
	Leaver *Leaver
	// ReplacedInTurn are the nodes whose machine the platform replaces one
	// at a time, each once the node before it rejoined (its config apply
	// created), control planes first (see ReplacementOrder): the
	// machines of several control planes may then change in one `up`.
	ReplacedInTurn []string
	// DeletedWith is the resource whose deletion takes the whole cluster with
	// it (e.g. the first control plane's VM). In-cluster resources (Helm
	// releases) and the bootstrap carry it, so a destroy of the whole stack
	// makes no call to a cluster that is going away.
	DeletedWith pulumi.Resource
	// NodeNetwork is the nodes' network when the platform knows it: the
	// overrides guard judges the approver's prefixes against it.
	NodeNetwork netip.Prefix
	// NodeGateway is the nodes' gateway when the platform knows it: no
	// load balancer pool may hold it.
	NodeGateway netip.Addr
	// InContainer says the nodes run Talos in containers: the overrides
	// guard refuses the patches Talos's container mode refuses or ignores.
	InContainer bool
	// APIAddresses, by node IP, are where this machine reaches a node's
	// APIs when it cannot reach the node's IP: a container's ports
	// published on 127.0.0.1 where Docker's bridge is not routed (Docker
	// Desktop). Every call this machine makes goes there; the nodes still
	// reach each other at their IPs.
	APIAddresses map[string]APIAddress
}

// APIAddress is where this machine reaches one node's APIs.
type APIAddress struct {
	// Talos is the host:port of the node's Talos API.
	Talos string
	// Kubernetes is the URL of a control plane's Kubernetes API.
	Kubernetes string
}

// talosAddress is where this machine reaches the Talos API of the node at
// ip: its IP unless the platform gave another address.
func (m Machines) talosAddress(ip string) string {
	if a := m.APIAddresses[ip].Talos; a != "" {
		return a
	}
	return ip
}

// kubeServer is the URL this machine reaches a Kubernetes API server at:
// server itself unless it is a node's (https://<ip>:6443) and the
// platform gave another address for it.
func (m Machines) kubeServer(server string) string {
	u, err := url.Parse(server)
	if err != nil || u.Port() != strconv.Itoa(constants.DefaultControlPlanePort) {
		return server
	}
	if a := m.APIAddresses[u.Hostname()].Kubernetes; a != "" {
		return a
	}
	return server
}

// ClusterArgs are the inputs of a TalosCluster. The fields tagged `pulumi`
// are the component's inputs in every language; the others are Go-only
// wiring a platform component adds (its machines as resources).
type ClusterArgs struct {
	// Cluster holds the cluster-wide settings.
	Cluster ClusterSettings `pulumi:"cluster"`
	// InstallerImage is the installer for the schematic and version, e.g.
	// factory.talos.dev/installer/<schematic>:v1.12.0.
	InstallerImage pulumi.StringInput `pulumi:"installerImage"`
	// Nodes are the machines, reachable on their IP in maintenance mode or
	// already configured. The first must be a control plane: it is
	// bootstrapped.
	Nodes []NodeSpec `pulumi:"nodes"`
	// ResetOnDestroy resets every node (wipes Talos's state and ephemeral
	// partitions, reboots into maintenance mode) when it leaves the stack
	// or the stack is destroyed: for machines that outlive the stack.
	ResetOnDestroy bool `pulumi:"resetOnDestroy,optional"`

	// Machines is what the platform's machine kinds hand on (Go only): see
	// Machines. Its fields are promoted: a.NodeOptions is a.Machines'.
	Machines
	// Previous is the cluster as the last `up` left it (Go only; the
	// program reads it from the stack's outputs): changes a rollout
	// cannot make safely are refused against it.
	Previous *Previous
	// InputName names an input path of this component in the caller's
	// terms (Go only; the stack file's keys for the program): the warnings
	// the component logs carry it. The path itself when nil.
	InputName func(path string) string
}

// Cluster is the TalosCluster component.
type Cluster struct {
	pulumi.ResourceState

	// Kubeconfig is the cluster's admin kubeconfig; it resolves once Cilium,
	// the approver and every node are ready.
	Kubeconfig pulumi.StringOutput `pulumi:"kubeconfig" provider:"secret"`
	// Talosconfig is the Talos client config: every control plane as an
	// endpoint, every node as a node.
	Talosconfig pulumi.StringOutput `pulumi:"talosconfig" provider:"secret"`
	// MachineConfigurations are the nodes' machine configs by node name, as
	// applied (base and patches merged): for break-glass, `talosctl
	// apply-config` when this program cannot run.
	MachineConfigurations pulumi.StringMapOutput `pulumi:"machineConfigurations" provider:"secret"`
	// Endpoint is the Kubernetes API URL.
	Endpoint pulumi.StringOutput `pulumi:"endpoint"`
	// NodeIPs are the nodes' IPs by node name.
	NodeIPs pulumi.StringMapOutput `pulumi:"nodeIps"`
	// ClusterName is the cluster's name (cluster.name): the next run
	// refuses another, which would rename the running cluster.
	ClusterName pulumi.StringOutput `pulumi:"clusterName"`
	// TalosVersion is the oldest Talos version the nodes run, read from
	// them after the rollout (the configured one when none answers).
	TalosVersion pulumi.StringOutput `pulumi:"talosVersion"`
	// KubernetesVersion is the oldest Kubernetes version the control
	// planes' API servers run, read from them after the rollout (the
	// configured one when none answers).
	KubernetesVersion pulumi.StringOutput `pulumi:"kubernetesVersion"`
	// Nodes are the nodes by name, each as the run found it: its ip, role,
	// and the Talos and kubelet versions it runs.
	Nodes NodeStatusMapOutput `pulumi:"nodes"`
	// KubernetesProvider is a Kubernetes provider for the new cluster,
	// configured with its admin kubeconfig once its API answers: a program
	// deploys onto the cluster with it (the provider option of its
	// Kubernetes resources) without making one from the kubeconfig.
	KubernetesProvider *kubernetes.Provider `pulumi:"kubernetesProvider" provider:"type=kubernetes@v4.32.0:index:Provider"`

	// Children, for platforms that build on them.
	Secrets *machine.Secrets
	Applies map[string]*machine.ConfigurationApply
	// Members are the nodes' memberships by node name: deleting one takes
	// the node out of etcd and Kubernetes.
	Members map[string]*local.Command
	// Roster lists the nodes; its update takes those that left the stack
	// out of the cluster (see RosterSuffix).
	Roster    *local.Command
	Bootstrap *machine.Bootstrap
	// APIReady waits after the bootstrap until the Kubernetes API answers
	// /readyz; the Kubernetes provider is configured only after it.
	APIReady     *local.Command
	Cilium       *helmrelease.Release
	CertApprover *helmrelease.Release
	// NodesReady waits until every node is Ready (after the releases).
	NodesReady *local.Command
}

// NewCluster builds the cluster: secrets once, a config apply per node (one
// control plane at a time, then workers in batches), bootstrap on the first control plane after its apply, kubeconfig
// after bootstrap, then Cilium and the approver through Helm.
func NewCluster(ctx *pulumi.Context, name string, in *ClusterArgs, opts ...pulumi.ResourceOption) (*Cluster, error) {
	return NewClusterWithDeps(ctx, name, in, Deps{}, opts...)
}

// NewClusterWithDeps is NewCluster with its seams set (see Deps).
func NewClusterWithDeps(ctx *pulumi.Context, name string, in *ClusterArgs, deps Deps, opts ...pulumi.ResourceOption) (*Cluster, error) {
	in, _, err := OwnArgs(ctx, deps, "TalosCluster", name, in, func(a *ClusterArgs) **Previous { return &a.Previous })
	if err != nil {
		return nil, err
	}
	guard, err := in.validated(name)
	if err != nil {
		return nil, err
	}
	warnings := slices.Concat(in.ChangeWarnings(), in.AddonWarnings(), in.PlacementWarnings(), in.LoadBalancerWarnings())
	for _, w := range guard.Warnings {
		warnings = append(warnings, in.inputName(w.Path)+": "+w.Message)
	}
	for _, w := range warnings {
		if err := ctx.Log.Warn(w, nil); err != nil {
			return nil, fmt.Errorf("unable to log a warning: %w", err)
		}
	}
	defaulted := in.WithDefaults()
	c := &Cluster{Applies: map[string]*machine.ConfigurationApply{}, Members: map[string]*local.Command{}}
	typ, aliases := ComponentType(deps.Package, "TalosCluster")
	if err := ctx.RegisterComponentResource(typ, name, c, append(opts, aliases...)...); err != nil {
		return nil, err
	}
	b := &build{ctx: ctx, name: name, args: &defaulted, deps: deps.WithDefaults(ctx), c: c, parent: pulumi.Parent(c)}
	for _, step := range []func() error{b.machines, b.access, b.addons} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	b.outputs()
	if err := ctx.RegisterResourceOutputs(c, c.Outputs()); err != nil {
		return nil, err
	}
	return c, nil
}

// NewMachineSecrets registers the cluster's machine secrets: created once,
// never replaced or rotated by an edit of the stack. Their talosVersion
// only picks the format of the secrets created (the provider's update just
// stores it), but the provider forces a replacement when it is lowered,
// even by a patch release: new secrets, a new CA, and every node refusing
// the next call. So a change of the version is ignored: the secrets keep
// the one they were created with.
func NewMachineSecrets(ctx *pulumi.Context, resourceName, talosVersion string, opts ...pulumi.ResourceOption) (*machine.Secrets, error) {
	secrets, err := machine.NewSecrets(ctx, resourceName, &machine.SecretsArgs{
		TalosVersion: pulumi.String(talosVersion),
	}, append(opts, pulumi.IgnoreChanges([]string{"talosVersion"}))...)
	if err != nil {
		return nil, fmt.Errorf("unable to create machine secrets: %w", err)
	}
	return secrets, nil
}

// applyOpts are the options of one node's apply the cluster adds.
type applyOpts struct {
	parent pulumi.ResourceOption
	after  []pulumi.Resource // the batch before
	hooks  []pulumi.ResourceOption
}

// newApply applies the node's config. Create and update use the insecure
// maintenance API when the node still answers it and the client certificate
// otherwise; delete is a no-op unless the platform asks for a reset.
func newApply(ctx *pulumi.Context, resourceName string, args *ClusterArgs, n NodeSpec, secrets *machine.Secrets, base pulumi.StringOutput, patches pulumi.StringArrayOutput, o applyOpts) (*machine.ConfigurationApply, error) {
	nopts := args.NodeOptions[n.Name]
	deps := append(append([]pulumi.Resource{}, nopts.DependsOn...), o.after...)
	ropts := append([]pulumi.ResourceOption{o.parent, pulumi.DependsOn(deps)}, o.hooks...)
	if nopts.DeletedWith != nil {
		ropts = append(ropts, pulumi.DeletedWith(nopts.DeletedWith))
	}
	if len(nopts.ReplaceWith) > 0 {
		ropts = append(ropts, pulumi.ReplaceWith(nopts.ReplaceWith))
	}
	if nopts.ReplacementTrigger != nil {
		ropts = append(ropts, pulumi.ReplacementTrigger(nopts.ReplacementTrigger))
	}
	applyArgs := &machine.ConfigurationApplyArgs{
		ClientConfiguration:       secrets.ClientConfiguration,
		MachineConfigurationInput: base,
		ConfigPatches:             patches,
		Node:                      pulumi.String(n.IP),
		Endpoint:                  pulumi.String(args.talosAddress(n.IP)),
		ApplyMode:                 pulumi.String("auto"),
	}
	// No reset on the apply's delete (the provider's onDestroy): the
	// engine deletes the old apply after a replacement too, which would
	// wipe the node just re-imaged. The membership's removal resets the
	// node instead (see resetsOnRemoval).
	apply, err := machine.NewConfigurationApply(ctx, resourceName, applyArgs, ropts...)
	if err != nil {
		return nil, fmt.Errorf("unable to create config apply for node %q: %w", n.Name, err)
	}
	return apply, nil
}

// RolloutPolicy is how changes reach the nodes, and how nodes leave:
// control planes one at a time, in the order given, then workers
// WorkerParallelism at a time. The applies' batches (upgrades and config
// changes) and the removals' turns (nodes that leave the stack) both follow
// it, so a change to the rollout is made here once.
type RolloutPolicy struct {
	// WorkerParallelism is how many workers go at once (at least 1).
	WorkerParallelism int
}

// Policy is the cluster's rollout policy.
func (c ClusterSettings) Policy() RolloutPolicy {
	return RolloutPolicy{WorkerParallelism: c.WorkerParallelism()}
}

// AtOnce is how many nodes of a role take a change, or leave, at once.
func (p RolloutPolicy) AtOnce(controlPlane bool) int {
	if controlPlane {
		return 1
	}
	return max(p.WorkerParallelism, 1)
}

// Batches are the nodes in the order changes reach them: each control
// plane alone, in the order given, then the workers AtOnce at a time.
func (p RolloutPolicy) Batches(nodes []NodeSpec) [][]NodeSpec {
	var out [][]NodeSpec
	var workers []NodeSpec
	for _, n := range nodes {
		if n.Role == RoleControlPlane {
			out = append(out, []NodeSpec{n})
		} else {
			workers = append(workers, n)
		}
	}
	for len(workers) > 0 {
		k := min(p.AtOnce(false), len(workers))
		out = append(out, workers[:k:k])
		workers = workers[k:]
	}
	return out
}

// Outputs are the component's outputs by name: what every platform's
// cluster exports.
func (c *Cluster) Outputs() pulumi.Map {
	return pulumi.Map{
		"kubeconfig":            c.Kubeconfig,
		"talosconfig":           c.Talosconfig,
		ClusterNameOutput:       c.ClusterName,
		"endpoint":              c.Endpoint,
		"nodeIps":               c.NodeIPs,
		"talosVersion":          c.TalosVersion,
		"kubernetesVersion":     c.KubernetesVersion,
		"nodes":                 c.Nodes,
		"machineConfigurations": c.MachineConfigurations,
	}
}

// release is one Helm release of the cluster, in kube-system unless
// namespace says otherwise.
type release struct {
	name, chart, repo, version, namespace string
	values                                map[string]any
	timeoutSeconds                        int
}

// newRelease installs r and waits for it (Helm --wait, no skipAwait).
func newRelease(ctx *pulumi.Context, resourceName string, r release, opts ...pulumi.ResourceOption) (*helmrelease.Release, error) {
	if r.namespace == "" {
		r.namespace = SystemNamespace
	}
	rel, err := helmrelease.New(ctx, resourceName, helmrelease.Args{
		Name:           pulumi.String(r.name),
		Chart:          pulumi.String(r.chart),
		Version:        pulumi.String(r.version),
		Namespace:      pulumi.String(r.namespace),
		Repo:           pulumi.String(r.repo),
		Values:         pulumi.ToMap(r.values),
		TimeoutSeconds: r.timeoutSeconds,
		MaxHistory:     5,
	}, opts...)
	if err != nil {
		return nil, fmt.Errorf("unable to create %s release: %w", r.name, err)
	}
	return rel, nil
}
