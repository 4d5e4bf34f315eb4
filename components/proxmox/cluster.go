package proxmox

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/muhlba91/pulumi-proxmoxve/sdk/v7/go/proxmoxve"
	"github.com/muhlba91/pulumi-proxmoxve/sdk/v7/go/proxmoxve/download"
	"github.com/muhlba91/pulumi-proxmoxve/sdk/v7/go/proxmoxve/vm"
	"github.com/pulumi/pulumi-command/sdk/go/command/local"
	"github.com/pulumi/pulumi-command/sdk/go/command/remote"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/pveapi"
	"github.com/fluodata/talos-pulumi/stacks"
)

// ClusterType is the component's type token.
const ClusterType = "talos-cluster:index:ProxmoxCluster"

// ClusterArgs are the inputs of a ProxmoxCluster.
type ClusterArgs struct {
	// Config is the validated stack config (platform proxmox).
	Config *stacks.Config
	// Stack is the Pulumi stack name: VM tags, descriptions, file headers.
	Stack string
	// Hooks binds the fast-stop hook to the VMs (the engine's when nil).
	Hooks Hooks
	// StopAPI is the Proxmox API the hook stops VMs with (a client built
	// from the stack config when nil).
	StopAPI StopAPI
}

// Cluster is the ProxmoxCluster component: the Talos image, DHCP
// reservations, one VM per node and the TalosCluster on top.
type Cluster struct {
	pulumi.ResourceState

	Kubeconfig     pulumi.StringOutput    `pulumi:"kubeconfig"`
	Talosconfig    pulumi.StringOutput    `pulumi:"talosconfig"`
	Endpoint       pulumi.StringOutput    `pulumi:"endpoint"`
	NodeIPs        pulumi.StringMapOutput `pulumi:"nodeIps"`
	VMIDs          pulumi.IntMapOutput    `pulumi:"vmIds"`
	MACs           pulumi.StringMapOutput `pulumi:"macs"`
	SchematicID    pulumi.StringOutput    `pulumi:"schematicId"`
	InstallerImage pulumi.StringOutput    `pulumi:"installerImage"`

	// Children, for tests and later steps.
	Provider *proxmoxve.Provider
	ISOs     map[string]*download.File // by Proxmox node
	DHCP     *remote.Command           // nil without dnsmasq
	VMs      map[string]*vm.VirtualMachine
	Ejects   map[string]*local.Command
	Talos    *talos.Cluster
}

// check finds problems the stack validation cannot see because they depend
// on derived values, before anything is registered, and returns every
// node's MAC.
func (a *ClusterArgs) check() (map[string]string, error) {
	if a.Config == nil || a.Config.Platform != stacks.PlatformProxmox {
		return nil, errors.New("proxmox cluster: needs a validated config of platform proxmox")
	}
	var nodes []NodeMAC
	for _, n := range a.Config.Nodes.All() {
		nodes = append(nodes, NodeMAC{Name: n.Name, MAC: n.MAC})
	}
	macs, problems := NodeMACs(a.Stack, a.Config.Cluster.Name, nodes)
	if len(problems) > 0 {
		return nil, fmt.Errorf("nodes: %s; nothing was created", strings.Join(problems, "; "))
	}
	return macs, nil
}

// NewCluster builds the Proxmox platform for a stack config.
func NewCluster(ctx *pulumi.Context, name string, args *ClusterArgs, opts ...pulumi.ResourceOption) (*Cluster, error) {
	macs, err := args.check()
	if err != nil {
		return nil, err
	}
	cfg := args.Config
	px := cfg.Proxmox
	sshKey, err := args.sshPrivateKey()
	if err != nil {
		return nil, err
	}

	c := &Cluster{VMs: map[string]*vm.VirtualMachine{}, Ejects: map[string]*local.Command{}}
	if err := ctx.RegisterComponentResource(ClusterType, name, c, opts...); err != nil {
		return nil, err
	}
	parent := pulumi.Parent(c)

	// An explicit provider: nothing depends on ambient proxmoxve:* config,
	// and the token is a secret from the stack config to the provider.
	c.Provider, err = proxmoxve.NewProvider(ctx, name+"-pve", &proxmoxve.ProviderArgs{
		Endpoint: pulumi.String(px.Endpoint),
		ApiToken: pulumi.ToSecret(px.APITokenSecret.Output().ApplyT(func(s string) string {
			return px.APITokenID + "=" + s
		})).(pulumi.StringOutput),
		Insecure: pulumi.Bool(px.Insecure),
	}, parent)
	if err != nil {
		return nil, fmt.Errorf("unable to create Proxmox provider: %w", err)
	}
	pve := []pulumi.ResourceOption{parent, pulumi.Provider(c.Provider)}

	img, err := newImage(ctx, name, cfg, parent)
	if err != nil {
		return nil, err
	}
	c.SchematicID, c.InstallerImage = img.SchematicID, img.Installer
	c.ISOs, err = downloadISOs(ctx, name, cfg, img, pve...)
	if err != nil {
		return nil, err
	}

	var vmDeps []pulumi.Resource
	if px.DNSMasqEnabled() {
		c.DHCP, err = newReservations(ctx, name, args, macs, sshKey, parent)
		if err != nil {
			return nil, err
		}
		vmDeps = append(vmDeps, c.DHCP)
	}

	// The hook is registered on every run (bound to every VM), because a
	// destroy needs the name recorded in state to resolve.
	hooks, stopAPI, err := args.hookDeps(ctx)
	if err != nil {
		return nil, err
	}
	fastStop := FastStopHook(stopAPI, StackTag(args.Stack), fastStopTimeout, fastStopPoll)

	agent := hasGuestAgent(cfg)
	refs := cfg.Nodes.Refs()
	nodeOpts := map[string]talos.NodeOptions{}
	vmIDs := pulumi.IntMap{}
	macMap := pulumi.StringMap{}
	for _, ref := range refs {
		iso := c.ISOs[ref.ProxmoxNode]
		a := vmArgs(cfg, ref, vmSpec{
			Cluster: cfg.Cluster.Name, Stack: args.Stack, MAC: pulumi.String(macs[ref.Name]),
			ISO: iso.ID().ToStringOutput(), Agent: agent,
		})
		// VMs start only once their DHCP reservation is live and their ISO
		// is in storage.
		deps := append([]pulumi.Resource{iso}, vmDeps...)
		bindStop, err := hooks.BindFastStop(ref.Name, fastStop)
		if err != nil {
			return nil, err
		}
		machine, err := vm.NewVirtualMachine(ctx, name+"-vm-"+ref.Name, a, append(pve,
			pulumi.DependsOn(deps),
			// The replacement has the same vmId (and name, MAC, IP): it can
			// only be created once the old VM is gone. The fast-stop hook
			// runs for this delete too, as for every delete of the VM.
			pulumi.DeleteBeforeReplace(true),
			pulumi.IgnoreChanges(vmIgnoreChanges(len(a.Disks.(vm.VirtualMachineDiskArray)))),
			bindStop,
		)...)
		if err != nil {
			return nil, fmt.Errorf("unable to create VM for %s (%s): %w", ref.Path, ref.Name, err)
		}
		c.VMs[ref.Name] = machine
		vmIDs[ref.Name] = machine.VmId
		macMap[ref.Name] = pulumi.String(macs[ref.Name])
		nodeOpts[ref.Name] = talos.NodeOptions{
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

	targs := talos.ClusterArgsFromConfig(cfg, talos.Machines{
		InstallerImage: img.Installer, Nodes: TalosNodes(cfg), NodeOptions: nodeOpts,
		// Bootstrap, kubeconfig and Helm releases go with the first control
		// plane: a whole-stack destroy makes no call to the dying cluster.
		DeletedWith: c.VMs[cfg.Nodes.ControlPlanes[0].Name],
	})
	c.Talos, err = talos.NewCluster(ctx, name, &targs, parent)
	if err != nil {
		return nil, err
	}

	if err := c.ejectISOs(ctx, name, args, refs, parent); err != nil {
		return nil, err
	}

	c.Kubeconfig = c.Talos.Kubeconfig
	c.Talosconfig = c.Talos.Talosconfig
	c.Endpoint = c.Talos.Endpoint
	c.NodeIPs = c.Talos.NodeIPs
	c.VMIDs = vmIDs.ToIntMapOutput()
	c.MACs = macMap.ToStringMapOutput()
	if err := ctx.RegisterResourceOutputs(c, c.Outputs()); err != nil {
		return nil, err
	}
	return c, nil
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
func newReservations(ctx *pulumi.Context, name string, args *ClusterArgs, macs map[string]string, sshKey pulumi.StringInput, parent pulumi.ResourceOption) (*remote.Command, error) {
	cfg := args.Config
	file := DNSMasqFile{Dir: cfg.Proxmox.DNSMasq.ConfigDir, Cluster: cfg.Cluster.Name, Stack: args.Stack, Restart: cfg.Proxmox.DNSMasq.Restart,
		LeaseFile: cfg.Proxmox.DNSMasq.LeaseFile, Interface: cfg.Proxmox.Bridge}
	var rs []Reservation
	for _, n := range cfg.Nodes.All() {
		rs = append(rs, Reservation{MAC: macs[n.Name], IP: n.IP, Hostname: n.Name})
	}
	content := pulumi.String(file.Render(rs))
	ssh := cfg.Proxmox.SSH
	conn := remote.ConnectionArgs{
		Host:           pulumi.String(ssh.Host),
		Port:           pulumi.Float64(float64(ssh.Port)),
		User:           pulumi.String(ssh.User),
		DialErrorLimit: pulumi.Int(3),
		PerDialTimeout: pulumi.Int(15),
		// The whole pinned key (Load refuses a fingerprint or RSA key here,
		// as the provider could not check them). A changed pin updates the
		// command, which re-runs the idempotent install script once.
		HostKey: stacks.CommandHostKey(ssh.HostKey),
	}
	if sshKey != nil {
		conn.PrivateKey = sshKey
	}
	install := file.InstallScript()
	cmd, err := remote.NewCommand(ctx, name+"-dhcp-reservations", &remote.CommandArgs{
		Connection: conn,
		Create:     pulumi.String(install),
		Update:     pulumi.String(install),
		Delete:     pulumi.String(file.RemoveScript()),
		Stdin:      content,
		// The previous run's output in the environment is noise here.
		AddPreviousOutputInEnv: pulumi.Bool(false),
	}, parent)
	if err != nil {
		return nil, fmt.Errorf("unable to create DHCP reservations: %w", err)
	}
	return cmd, nil
}

// ejectISOs empties every VM's CD-ROM once the cluster is up (after its
// node's apply and the Helm releases, which wait for the nodes): Talos then
// runs from disk. Each command is replaced, and so runs again, when its VM is.
func (c *Cluster) ejectISOs(ctx *pulumi.Context, name string, args *ClusterArgs, refs []stacks.NodeRef, parent pulumi.ResourceOption) error {
	px := args.Config.Proxmox
	header := pulumi.ToSecret(px.APITokenSecret.Output().ApplyT(func(s string) string {
		return AuthHeader(px.APITokenID, s)
	})).(pulumi.StringOutput)
	for _, ref := range refs {
		machine := c.VMs[ref.Name]
		// Concrete resources, not the TalosCluster component: the SDK expands
		// a component into the children it knows of at that moment, and
		// children register asynchronously, so that could miss the releases.
		waitFor := []pulumi.Resource{c.Talos.Applies[ref.Name], c.Talos.Cilium, c.Talos.CertApprover, c.Talos.NodesReady}
		cmd, err := local.NewCommand(ctx, name+"-eject-iso-"+ref.Name, &local.CommandArgs{
			Create: pulumi.String(EjectCommand(px.Insecure)),
			Stdin:  header,
			Environment: pulumi.StringMap{
				"PVE_API":  pulumi.String(APIURL(px.Endpoint)),
				"PVE_NODE": pulumi.String(ref.ProxmoxNode),
				"PVE_VMID": machine.VmId.ApplyT(strconv.Itoa).(pulumi.StringOutput),
			},
			Triggers:               pulumi.Array{machine.ID()},
			AddPreviousOutputInEnv: pulumi.Bool(false),
		}, parent, pulumi.DependsOn(waitFor), pulumi.DeletedWith(machine),
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

// hookDeps returns the hook binder and the API client of the hook.
func (a *ClusterArgs) hookDeps(ctx *pulumi.Context) (Hooks, StopAPI, error) {
	hooks, api := a.Hooks, a.StopAPI
	if hooks == nil {
		hooks = &SDKHooks{Ctx: ctx}
	}
	if api == nil {
		px := a.Config.Proxmox
		c, err := pveapi.New(px.Endpoint, px.APITokenID, px.APITokenSecret.Reveal(), pveapi.Options{Insecure: px.Insecure})
		if err != nil {
			return nil, nil, err
		}
		api = c
	}
	return hooks, api, nil
}

// sshPrivateKey is the key for the Proxmox host: the configured secret, the
// key file (read now, so a missing file fails before anything is created),
// or nil for the SSH agent.
func (a *ClusterArgs) sshPrivateKey() (pulumi.StringInput, error) {
	ssh := a.Config.Proxmox.SSH
	switch {
	case ssh.PrivateKey.IsSet():
		return ssh.PrivateKey.Output(), nil
	case ssh.PrivateKeyFile != "" && a.Config.Proxmox.DNSMasqEnabled():
		key, err := os.ReadFile(ssh.KeyFilePath())
		if err != nil {
			return nil, fmt.Errorf("proxmox.ssh.privateKeyFile: %w; nothing was created", err)
		}
		return pulumi.ToSecret(pulumi.String(string(key))).(pulumi.StringOutput), nil
	default:
		return nil, nil
	}
}
