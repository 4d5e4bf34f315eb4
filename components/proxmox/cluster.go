package proxmox

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/muhlba91/pulumi-proxmoxve/sdk/v7/go/proxmoxve"
	"github.com/muhlba91/pulumi-proxmoxve/sdk/v7/go/proxmoxve/download"
	"github.com/muhlba91/pulumi-proxmoxve/sdk/v7/go/proxmoxve/vm"
	"github.com/pulumi/pulumi-command/sdk/go/command/local"
	"github.com/pulumi/pulumi-command/sdk/go/command/remote"
	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/image"
	"github.com/fluodata/talos-pulumi/components/servers"
	"github.com/fluodata/talos-pulumi/components/talos"
)

// ClusterType is the component's type token.
const ClusterType = talos.ProgramPackage + ":index:ProxmoxCluster"

// Cluster is the ProxmoxCluster component: per Proxmox VE host its Talos
// ISO, DHCP reservations and VMs, the installs of rented servers, and the
// TalosCluster on top.
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
	// VMIDs are the VM ids by node name.
	VMIDs pulumi.IntMapOutput `pulumi:"vmIds"`
	// MACs are the NICs' MAC addresses by node name (given or derived).
	MACs pulumi.StringMapOutput `pulumi:"macs"`
	// SchematicID is the Image Factory schematic of the image.
	SchematicID pulumi.StringOutput `pulumi:"schematicId"`
	// InstallerImage is the installer the nodes install from.
	InstallerImage pulumi.StringOutput `pulumi:"installerImage"`

	// Children, for tests and later steps.
	Provider *proxmoxve.Provider // the caller's, or the component's own (<name>-pve)
	// ISOs by Proxmox node (host/node on a hosts entry), with the
	// schematic's suffix for a node's own schematic (<node>-<suffix>).
	ISOs map[string]*download.File
	DHCP *remote.Command // nil without dnsmasq
	// HostProviders are the hosts entries' own (<name>-pve-<host>), and
	// HostDHCP their reservations, by host name.
	HostProviders map[string]*proxmoxve.Provider
	HostDHCP      map[string]*remote.Command
	// Servers are the installs of hosts entries of rented servers, by
	// host name.
	Servers map[string]*servers.Servers
	VMs     map[string]*vm.VirtualMachine
	Ejects  map[string]*local.Command
	Talos   *talos.Cluster
}

// NewCluster builds the Proxmox platform: the engine's hooks, and a Proxmox
// client for the ISO ejects. Its VMs carry no delete hook (Deps.FastStop),
// so a program may drop the cluster and `pulumi up` deletes it.
func NewCluster(ctx *pulumi.Context, name string, args *ClusterArgs, opts ...pulumi.ResourceOption) (*Cluster, error) {
	return NewClusterWithDeps(ctx, name, args, Deps{}, opts...)
}

// NewClusterWithDeps builds the Proxmox platform with the given seams.
// Nothing is registered unless every input is valid.
func NewClusterWithDeps(ctx *pulumi.Context, name string, in *ClusterArgs, deps Deps, opts ...pulumi.ResourceOption) (*Cluster, error) {
	in, children, err := talos.OwnArgs(ctx, deps.Talos, "ProxmoxCluster", name, in, func(a *ClusterArgs) **talos.Previous { return &a.Previous })
	if err != nil {
		return nil, err
	}
	if children != nil {
		in.PreviousVMs, in.PreviousCSIRegions = PreviousVMsFrom(children), PreviousCSIRegionsFrom(children)
	}
	deps.Talos.LastRead = true // its TalosCluster gets it through in
	args, macs, err := validated(ctx, name, in)
	if err != nil {
		return nil, err
	}
	// The hooks are registered before anything of the cluster, as nothing
	// waits for the one bound to nothing (see bindFastStop); and on every
	// run, a destroy too, because the state refers to them by name.
	hooks, apis := deps.withDefaults(ctx, args)
	deps.Talos = deps.Talos.WithDefaults(ctx)
	// A VM replaced by an edit of the stack file (a new proxmoxNode, vmId,
	// ...) is deleted before anything of the cluster runs: its node leaves
	// etcd or is drained first, then the VM is hard-stopped.
	leaver := talos.NewLeaver()
	fastStop := leaveThenStop(leaver, name, FastStopHookOnHosts(apis, StackTag(ctx.Stack()), fastStopTimeout, fastStopPoll))
	bindStop, err := bindFastStop(hooks, name, deps.FastStop, fastStop)
	if err != nil {
		return nil, err
	}
	c, parent, err := registerCluster(ctx, name, deps, opts)
	if err != nil {
		return nil, err
	}
	images, err := newImages(ctx, name, args, parent)
	if err != nil {
		return nil, err
	}
	c.SchematicID, c.InstallerImage = images.Cluster.SchematicID, images.Cluster.Installer
	turns := newTurns(ctx, args.TalosArgs(nil).ReplacedInTurn)
	defer func() { turns.settle(c.Talos) }()
	machines, err := c.newMachines(ctx, name, args, machinesArgs{images: images, macs: macs, bindStop: bindStop, hooks: hooks, leaver: leaver, turns: turns, deps: deps, opts: opts, parent: parent})
	if err != nil {
		return nil, err
	}
	if c.Talos, err = talos.NewClusterWithDeps(ctx, name, c.talosArgs(args, images, machines, leaver), deps.Talos, parent); err != nil {
		return nil, err
	}
	if err := c.ejectISOs(ctx, name, args, hooks, apis, deps.Talos, parent); err != nil {
		return nil, err
	}
	if err := c.newCSI(ctx, name, args, machines.pve, parent); err != nil {
		return nil, err
	}
	return c, c.registerOutputs(ctx, machines)
}

// validated are the inputs with their defaults once they hold, and every
// node's MAC; the warnings are logged.
func validated(ctx *pulumi.Context, name string, in *ClusterArgs) (*ClusterArgs, map[string]string, error) {
	defaulted := in.WithDefaults()
	args := &defaulted
	macs, err := args.validate(name, ctx.Stack())
	if err != nil {
		return nil, nil, err
	}
	for _, w := range args.Warnings() {
		if err := ctx.Log.Warn(w, nil); err != nil {
			return nil, nil, fmt.Errorf("unable to log a warning: %w", err)
		}
	}
	return args, macs, nil
}

// registerCluster registers the component, and returns the option that
// parents its children.
func registerCluster(ctx *pulumi.Context, name string, deps Deps, opts []pulumi.ResourceOption) (*Cluster, pulumi.ResourceOrInvokeOption, error) {
	c := &Cluster{VMs: map[string]*vm.VirtualMachine{}, Ejects: map[string]*local.Command{}, ISOs: map[string]*download.File{},
		HostProviders: map[string]*proxmoxve.Provider{}, HostDHCP: map[string]*remote.Command{}, Servers: map[string]*servers.Servers{}}
	typ, aliases := talos.ComponentType(deps.Talos.Package, "ProxmoxCluster")
	if err := ctx.RegisterComponentResource(typ, name, c, append(opts, aliases...)...); err != nil {
		return nil, nil, err
	}
	return c, pulumi.Parent(c), nil
}

// machinesArgs are what the machines of every host are made from.
type machinesArgs struct {
	images   *image.Images
	macs     map[string]string
	bindStop func(vm string) (pulumi.ResourceOption, error)
	// hooks and leaver take a node out of the cluster before its VM's
	// replacement where no fast stop is bound (placementRecord).
	hooks  Hooks
	leaver *talos.Leaver
	// turns chain the VMs this run replaces, one at a time.
	turns  *turns
	deps   Deps
	opts   []pulumi.ResourceOption // the component's own (its providers)
	parent pulumi.ResourceOrInvokeOption
}

// machines are the nodes' machines as the TalosCluster and the outputs
// take them.
type machines struct {
	nodeOpts map[string]talos.NodeOptions
	vmIDs    pulumi.IntMap
	macs     pulumi.StringMap
	pve      []pulumi.ResourceOption // the proxmox input's host's provider
}

// newMachines makes each host's machines: a servers entry's installs, a
// Proxmox VE host's provider (its VMs or not: a host whose last node went
// is still where their deletes go), ISOs, reservations and VMs.
func (c *Cluster) newMachines(ctx *pulumi.Context, name string, args *ClusterArgs, in machinesArgs) (*machines, error) {
	m := &machines{nodeOpts: map[string]talos.NodeOptions{}, vmIDs: pulumi.IntMap{}, macs: pulumi.StringMap{}}
	for _, host := range args.hostViews() {
		if host.VPS != nil {
			opts, err := c.newServers(ctx, name, host, in.images, in.deps, in.parent)
			if err != nil {
				return nil, err
			}
			maps.Copy(m.nodeOpts, opts)
			continue
		}
		hostPVE, err := c.hostProvider(ctx, name, host, in.opts, in.parent)
		if err != nil {
			return nil, err
		}
		if host.Name == "" {
			m.pve = hostPVE
		}
		if len(host.Nodes) == 0 {
			continue
		}
		if err := c.newVMs(ctx, name, args, host, hostPVE, in, m); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// newVMs makes a Proxmox VE host's ISOs, reservations and VMs, and adds the
// VMs to m.
func (c *Cluster) newVMs(ctx *pulumi.Context, name string, args *ClusterArgs, host hostView, hostPVE []pulumi.ResourceOption, in machinesArgs, m *machines) error {
	isos, isoOf, err := downloadISOs(ctx, name, args, host, in.images, append(slices.Clone(hostPVE), host.goneOptions("fileName", "url")...)...)
	if err != nil {
		return err
	}
	maps.Copy(c.ISOs, isos)
	var vmDeps []pulumi.Resource
	if host.Settings.DNSMasq != nil {
		dhcp, err := newReservations(ctx, name, args, host, in.macs, append([]pulumi.ResourceOption{in.parent}, host.goneOptions("connection", "create", "update", "delete", "stdin")...)...)
		if err != nil {
			return err
		}
		if host.Name == "" {
			c.DHCP = dhcp
		} else {
			c.HostDHCP[host.Name] = dhcp
		}
		vmDeps = append(vmDeps, dhcp)
	}
	for _, ref := range host.Nodes {
		iso := isoOf[ref.Name]
		a := vmArgs(args, ref, vmSpec{
			Cluster: args.Cluster.Name, Stack: ctx.Stack(), MAC: pulumi.String(in.macs[ref.Name]),
			ISO: iso.ID().ToStringOutput(), Agent: hasGuestAgent(args.schematicOf(ref)),
		})
		// VMs start only once their DHCP reservation is live and their ISO
		// is in storage.
		deps := append([]pulumi.Resource{iso}, vmDeps...)
		turn := in.turns.options(ref.Name)
		if !in.deps.FastStop {
			record, err := placementRecord(ctx, name, in.hooks, in.leaver, ref, machineOf(ref, host.Settings, args.Cluster.SecureBoot), append([]pulumi.ResourceOption{in.parent}, turn...)...)
			if err != nil {
				return err
			}
			deps = append(deps, record)
		}
		vmName := name + vmInfix + ref.Name
		stop, err := in.bindStop(vmName)
		if err != nil {
			return err
		}
		vmOpts := append(slices.Clone(hostPVE),
			pulumi.DependsOn(deps),
			// The replacement has the same vmId (and name, MAC, IP): it can
			// only be created once the old VM is gone. The fast-stop hook,
			// when bound, runs for this delete too, as for every delete.
			pulumi.DeleteBeforeReplace(true),
			// bpg v0.95 changes the BIOS in place, taken at the VM's next
			// cold start (proxmoxtf/resource/vm/vm.go: bios is not
			// ForceNew), but Talos installed its boot loader for the
			// firmware it was installed under: the node would not boot
			// again. A new VM installs under the new one and rejoins.
			// A TPM added or dropped (Secure Boot turned on or off) is a
			// new machine too: the disks are encrypted anew under the
			// signed image (machineOf).
			pulumi.ReplaceOnChanges([]string{"bios", "tpmState"}),
			pulumi.IgnoreChanges(vmIgnoreChanges(len(a.Disks.(vm.VirtualMachineDiskArray)))),
			stop,
		)
		vmOpts = append(vmOpts, turn...)
		machine, err := vm.NewVirtualMachine(ctx, vmName, a, append(vmOpts, host.goneOptions()...)...)
		if err != nil {
			return fmt.Errorf("unable to create VM for node %q: %w", ref.Name, err)
		}
		c.VMs[ref.Name] = machine
		m.vmIDs[ref.Name] = machine.VmId
		m.macs[ref.Name] = pulumi.String(in.macs[ref.Name])
		m.nodeOpts[ref.Name] = talos.NodeOptions{
			DependsOn:   []pulumi.Resource{machine},
			DeletedWith: machine,
			// A VM replaced with the same IP boots the ISO again in
			// maintenance mode, while its apply would show no diff. The
			// provider's id is the vmId, the same for the new VM, so only
			// the engine knows it is a new instance: replace with it.
			ReplaceWith: []pulumi.Resource{machine},
			// Kept from earlier versions only so that their state sees no
			// change (the vmId never changes for a VM).
			ReplacementTrigger: machine.ID(),
		}
	}
	return nil
}

// talosArgs are the TalosCluster's arguments: the nodes on their machines.
// Bootstrap, kubeconfig and Helm releases go with the first control plane:
// a whole-stack destroy makes no call to the dying cluster.
func (c *Cluster) talosArgs(args *ClusterArgs, images *image.Images, m *machines, leaver *talos.Leaver) *talos.ClusterArgs {
	targs := args.TalosArgs(images.Cluster.Installer)
	targs.NodeOptions = m.nodeOpts
	targs.Installers = images.Installers()
	targs.Leaver = leaver
	targs.DeletedWith = c.machineOf(args.Nodes[0].Name)
	return targs
}

// newCSI makes the Proxmox CSI plugin, when asked for: one token per
// Proxmox VE host with VMs, each its own API's (the plugin knows each host
// as a cluster of its region), then its release.
func (c *Cluster) newCSI(ctx *pulumi.Context, name string, args *ClusterArgs, pve []pulumi.ResourceOption, parent pulumi.ResourceOrInvokeOption) error {
	if args.CSI == nil {
		return nil
	}
	s := args.CSI.withDefaults()
	var clusters []csiCluster
	for _, host := range args.hostViews() {
		if host.VPS != nil || (host.Name != "" && len(host.Nodes) == 0) {
			continue
		}
		opts := pve
		if host.Name != "" {
			opts = []pulumi.ResourceOption{parent, pulumi.Provider(c.HostProviders[host.Name])}
		}
		id, secret, err := args.csiToken(ctx, name, s, host, c.VMs, opts)
		if err != nil {
			return err
		}
		clusters = append(clusters, csiCluster{settings: host.Settings, region: args.regionOf(host.Name), id: id, secret: secret})
	}
	// After Cilium (its pods need the network); with the machines on a
	// whole-stack destroy, as the other releases: no call to the dying
	// cluster.
	k8sOpts := []pulumi.ResourceOption{parent, pulumi.DependsOn([]pulumi.Resource{c.Talos.Cilium}), pulumi.DeletedWith(c.machineOf(args.Nodes[0].Name))}
	return args.csiPlugin(ctx, name, s, clusters, c.Talos.KubernetesProvider, k8sOpts)
}

// registerOutputs copies the TalosCluster's outputs and the machines' and
// registers them.
func (c *Cluster) registerOutputs(ctx *pulumi.Context, m *machines) error {
	c.Kubeconfig = c.Talos.Kubeconfig
	c.Talosconfig = c.Talos.Talosconfig
	c.Endpoint = c.Talos.Endpoint
	c.NodeIPs = c.Talos.NodeIPs
	c.ClusterName = c.Talos.ClusterName
	c.TalosVersion = c.Talos.TalosVersion
	c.KubernetesVersion = c.Talos.KubernetesVersion
	c.Nodes = c.Talos.Nodes
	c.MachineConfigurations = c.Talos.MachineConfigurations
	c.KubernetesProvider = c.Talos.KubernetesProvider
	c.VMIDs = m.vmIDs.ToIntMapOutput()
	c.MACs = m.macs.ToStringMapOutput()
	return ctx.RegisterResourceOutputs(c, c.Outputs())
}

// Outputs are the TalosCluster's outputs plus the Proxmox ones.
func (c *Cluster) Outputs() pulumi.Map {
	out := c.Talos.Outputs()
	out["vmIds"] = c.VMIDs
	out["macs"] = c.MACs
	out["schematicId"] = c.SchematicID
	out["installerImage"] = c.InstallerImage
	return out
}

// newReservations writes the dnsmasq reservation file over SSH. Its content
// is the command's stdin, so a changed MAC or IP shows in the preview and
// re-runs the install script; delete removes the file with the old
// connection.
func newReservations(ctx *pulumi.Context, name string, args *ClusterArgs, host hostView, macs map[string]string, opts ...pulumi.ResourceOption) (*remote.Command, error) {
	dm := host.Settings.DNSMasq
	file := DNSMasqFile{Dir: dm.ConfigDir, Cluster: args.Cluster.Name, Stack: ctx.Stack(), Restart: dm.RestartCommand,
		LeaseFile: dm.LeaseFile, Interface: host.Settings.Bridge}
	var rs []Reservation
	for _, n := range host.Nodes {
		rs = append(rs, Reservation{MAC: macs[n.Name], IP: n.IP, Hostname: n.Name})
	}
	content := pulumi.String(file.Render(rs))
	ssh := dm.SSH
	conn := remote.ConnectionArgs{
		Host:           pulumi.String(ssh.Host),
		Port:           pulumi.Float64(float64(ssh.Port)),
		User:           pulumi.String(ssh.User),
		DialErrorLimit: pulumi.Int(3),
		PerDialTimeout: pulumi.Int(15),
		// The whole pinned key (Load refuses a fingerprint or RSA key here,
		// as the provider could not check them). A changed pin updates the
		// command, which re-runs the idempotent install script once.
		HostKey: hostKeyInput(ssh.HostKey),
	}
	if ssh.PrivateKey != nil {
		conn.PrivateKey = pulumi.ToSecret(ssh.PrivateKey).(pulumi.StringOutput)
	}
	install := file.InstallScript()
	cmd, err := remote.NewCommand(ctx, name+"-dhcp-reservations"+host.suffix(), &remote.CommandArgs{
		Connection: conn,
		Create:     pulumi.String(install),
		Update:     pulumi.String(install),
		Delete:     pulumi.String(file.RemoveScript()),
		Stdin:      content,
		// The previous run's output in the environment is noise here.
		AddPreviousOutputInEnv: pulumi.Bool(false),
	}, opts...)
	if err != nil {
		return nil, fmt.Errorf("unable to create DHCP reservations on %s: %w", host.label(), err)
	}
	return cmd, nil
}

// machineOf is a node's machine: its VM, or a rented server's install.
func (c *Cluster) machineOf(node string) pulumi.Resource {
	if vm, ok := c.VMs[node]; ok {
		return vm
	}
	for _, s := range c.Servers {
		if install, ok := s.Installs[node]; ok {
			return install
		}
	}
	return nil
}

// ejectHostEnv names, in a hosts entry's VM's eject, the host whose API
// ejects.
const ejectHostEnv = "PVE_HOST"

// ejectISOs empties every VM's CD-ROM once the cluster is up (after its
// node's apply and the Helm releases, which wait for the nodes): Talos then
// runs from disk. Each eject is a command resource that runs no command,
// with a before-create hook that ejects (Eject); it is replaced, and so
// ejects again, when its VM is. Earlier versions ran curl here; their
// stacks' ejects drop the command and its token header in one update that
// runs nothing.
func (c *Cluster) ejectISOs(ctx *pulumi.Context, name string, args *ClusterArgs, hooks Hooks, apis HostAPIs, tdeps talos.Deps, parent pulumi.ResourceOption) error {
	for _, ref := range args.Nodes {
		px := args.settingsOf(ref.Host)
		machine, isVM := c.VMs[ref.Name]
		if !isVM {
			// A rented server boots no ISO.
			continue
		}
		ejectName := name + "-eject-iso-" + ref.Name
		// One hook for every eject (the first binding's function): the
		// environment says which host's API to ask.
		hook, err := hooks.Bind(name+EjectHookSuffix, talos.BeforeCreate, ejectName, func(a *pulumi.ResourceHookArgs) error {
			env := talos.HookEnv(a.NewInputs)
			api, ok := apis[env[ejectHostEnv]]
			if !ok {
				return fmt.Errorf("unable to eject the ISO of %s: host %q is no host of the cluster", a.Name, env[ejectHostEnv])
			}
			return Eject(tdeps.Context, api, tdeps.Log(ctx, a.URN), env)
		})
		if err != nil {
			return err
		}
		// Concrete resources, not the TalosCluster component: the SDK expands
		// a component into the children it knows of at that moment, and
		// children register asynchronously, so that could miss the releases.
		waitFor := []pulumi.Resource{c.Talos.Applies[ref.Name], c.Talos.Cilium, c.Talos.CertApprover, c.Talos.NodesReady}
		env := pulumi.StringMap{
			"PVE_API":  pulumi.String(APIURL(px.Endpoint)),
			"PVE_NODE": pulumi.String(ref.ProxmoxNode),
			"PVE_VMID": machine.VmId.ApplyT(strconv.Itoa).(pulumi.StringOutput),
		}
		if ref.Host != "" {
			// Only there: the proxmox input's ejects keep their inputs.
			env[ejectHostEnv] = pulumi.String(ref.Host)
		}
		cmd, err := local.NewCommand(ctx, ejectName, &local.CommandArgs{
			Environment:            env,
			Triggers:               pulumi.Array{machine.ID()},
			AddPreviousOutputInEnv: pulumi.Bool(false),
		}, parent, hook, pulumi.DependsOn(waitFor), pulumi.DeletedWith(machine),
			// A new VM (same vmId, so the trigger above stays the same) has
			// the ISO inserted again: eject once more.
			pulumi.ReplaceWith([]pulumi.Resource{machine}))
		if err != nil {
			return fmt.Errorf("unable to create ISO eject for %s: %w", ref.Name, err)
		}
		c.Ejects[ref.Name] = cmd
	}
	return nil
}
