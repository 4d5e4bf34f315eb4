package program

import (
	"cmp"
	"fmt"
	"os"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/image"
	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/program/overrides"
	"github.com/fluodata/talos-pulumi/stacks"
)

// proxmoxKeys are the ProxmoxCluster's inputs ProxmoxArgs fills from stack
// keys of other names.
var proxmoxKeys = []overrides.Rename{
	{Input: "proxmox.dnsmasq.ssh", Key: "proxmox.ssh"},
	{Input: "proxmox.gateway", Key: "cluster.network.gateway"},
	{Input: "proxmox.prefixLength", Key: "cluster.network.prefixLength"},
	{Input: "schematic", Key: "cluster.schematic"},
	{Input: "csi", Key: "storage.proxmoxCsi"},
}

// ProxmoxArgs are the ProxmoxCluster's arguments for a valid stack file of
// platform proxmox. It reads no file: a private key file is read by
// ReadProxmoxKey.
func ProxmoxArgs(cfg *stacks.Config) *proxmox.ClusterArgs {
	host := hostSettings(&cfg.Proxmox, cfg.Cluster.Network.Gateway, cfg.Cluster.Network.PrefixLength)
	args := &proxmox.ClusterArgs{
		Cluster:   ClusterSettings(cfg),
		Schematic: image.Schematic{ID: cfg.Cluster.Schematic.ID, Extensions: cfg.Cluster.Schematic.Extensions, KernelArgs: cfg.Cluster.Schematic.KernelArgs},
		Proxmox:   host,
	}
	for i := range cfg.Hosts {
		h := &cfg.Hosts[i]
		if h.Servers() {
			// Rented servers: their network is their own (their gateway
			// and prefix length, or the entry's network's defaults).
			s := vpsSettings(&h.VPS, h.Network.Gateway, h.Network.PrefixLength)
			args.Hosts = append(args.Hosts, proxmox.Host{Name: h.Name, VPS: &s, Gone: h.Gone})
			continue
		}
		// A host's network defaults to the cluster's.
		gateway := cmp.Or(h.Network.Gateway, cfg.Cluster.Network.Gateway)
		prefix := cmp.Or(h.Network.PrefixLength, cfg.Cluster.Network.PrefixLength)
		px := hostSettings(&h.Proxmox, gateway, prefix)
		args.Hosts = append(args.Hosts, proxmox.Host{Name: h.Name, Proxmox: &px, Gone: h.Gone})
	}
	for _, ref := range cfg.Nodes.Refs() {
		args.Nodes = append(args.Nodes, proxmox.Node{
			Name:              ref.Name,
			Role:              RoleOf(ref.Role),
			IP:                ref.IP,
			ProxmoxNode:       ref.ProxmoxNode,
			Host:              ref.Host,
			VMID:              ref.VMID,
			MAC:               ref.MAC,
			Cores:             ref.Cores,
			Memory:            ref.Memory,
			DiskSize:          ref.DiskSize,
			DataDiskSize:      ref.DataDiskSize,
			InstallDisk:       cfg.Cluster.InstallDisk,
			Patches:           PatchTexts(ref.Patches),
			KubeSpanEndpoints: ref.KubeSpanEndpoints,
			Labels:            ref.Labels,
			Taints:            ref.Taints,
			Schematic:         nodeSchematic(ref.Schematic),
		})
		if cfg.OnServers(ref.Host) {
			// A rented server: its install's keys instead of a VM's.
			n := &args.Nodes[len(args.Nodes)-1]
			n.InstallDisk = ref.InstallDisk
			n.Server = &proxmox.ServerNode{Rescue: rescueOf(ref.Rescue), Gateway: ref.Gateway, PrefixLength: ref.PrefixLength}
		}
	}
	if csi := cfg.Storage.ProxmoxCSI; csi.Enabled() {
		args.CSI = &proxmox.CSISettings{
			Datastore: csi.Datastore, StorageClass: csi.StorageClass, Region: csi.Region, FsType: csi.FsType,
			TokenID: csi.TokenID, ChartVersion: csi.ChartVersion,
		}
		if csi.TokenSecret.IsSet() {
			args.CSI.TokenSecret = csi.TokenSecret.Output()
		}
	}
	return args
}

// hostSettings are a Proxmox section of the stack file (proxmox, or a
// hosts entry's) as the component takes a host, on the network of that
// gateway and prefix length.
func hostSettings(px *stacks.ProxmoxConfig, gateway string, prefixLength int) proxmox.HostSettings {
	host := proxmox.HostSettings{
		Endpoint:       px.Endpoint,
		APITokenID:     px.APITokenID,
		APITokenSecret: px.APITokenSecret.Output(),
		Insecure:       px.Insecure,
		Bridge:         px.Bridge,
		VLANID:         px.VLANID,
		DiskDatastore:  px.DiskDatastore,
		ISODatastore:   px.ISODatastore,
		KeepISO:        px.KeepISO,
		CPUType:        px.CPUType,
		BIOS:           px.BIOS,
		Addressing:     px.Addressing,
		PrefixLength:   prefixLength,
		Gateway:        gateway,
		Site:           px.Site,
		CSIEndpoint:    px.CSIEndpoint,
	}
	if px.DNSMasqEnabled() {
		ssh := px.SSH
		host.DNSMasq = &proxmox.DNSMasqSettings{
			ConfigDir:      px.DNSMasq.ConfigDir,
			RestartCommand: px.DNSMasq.Restart,
			LeaseFile:      px.DNSMasq.LeaseFile,
			SSH: proxmox.SSHSettings{
				Host: ssh.Host, Port: ssh.Port, User: ssh.User,
				HostKey: stacks.CommandHostKey(ssh.HostKey),
			},
		}
		if ssh.PrivateKey.IsSet() {
			host.DNSMasq.SSH.PrivateKey = ssh.PrivateKey.Output()
		}
	}
	return host
}

// ReadProxmoxKey reads proxmox.ssh.privateKeyFile into the arguments when
// the reservations need SSH and no key is given inline, so that a missing
// file fails before anything is created. Without either, the SSH agent is
// used.
func ReadProxmoxKey(cfg *stacks.Config, args *proxmox.ClusterArgs) error {
	if err := readHostKey(cfg.Proxmox.SSH, "proxmox", &args.Proxmox); err != nil {
		return err
	}
	for i := range cfg.Hosts {
		if args.Hosts[i].Proxmox == nil {
			continue // rented servers
		}
		if err := readHostKey(cfg.Hosts[i].Proxmox.SSH, fmt.Sprintf("hosts[%d].proxmox", i), args.Hosts[i].Proxmox); err != nil {
			return err
		}
	}
	return nil
}

// readHostKey reads the SSH key file of one Proxmox section (at its key
// section) into the host's reservations, as ReadProxmoxKey says.
func readHostKey(ssh stacks.SSHConfig, section string, host *proxmox.HostSettings) error {
	if host.DNSMasq == nil || ssh.PrivateKey.IsSet() || ssh.PrivateKeyFile == "" {
		return nil
	}
	key, err := os.ReadFile(ssh.KeyFilePath())
	if err != nil {
		return fmt.Errorf("%s.ssh.privateKeyFile: %w; nothing was created", section, err)
	}
	host.DNSMasq.SSH.PrivateKey = pulumi.ToSecret(pulumi.String(string(key))).(pulumi.StringOutput)
	return nil
}

// proxmoxPlatform is a ProxmoxCluster.
type proxmoxPlatform struct{ args *proxmox.ClusterArgs }

func (p *proxmoxPlatform) problems(stack string) []inputs.Problem { return p.args.Problems(stack) }

func (p *proxmoxPlatform) talos() *talos.ClusterArgs {
	d := p.args.WithDefaults()
	return d.TalosArgs(nil)
}

func (p *proxmoxPlatform) share(inputName func(string) string, etcdBackup *talos.EtcdBackupSettings) {
	p.args.InputName, p.args.Cluster.EtcdBackup = inputName, etcdBackup
}

func (p *proxmoxPlatform) remember(last Last) {
	p.args.Previous, p.args.PreviousVMs, p.args.PreviousCSIRegions = last.Cluster, last.VMs, last.CSIRegions
}

func (p *proxmoxPlatform) deploy(ctx *pulumi.Context, cfg *stacks.Config, o Options) (pulumi.Map, error) {
	if err := ReadProxmoxKey(cfg, p.args); err != nil {
		return nil, err
	}
	c, err := proxmox.NewClusterWithDeps(ctx, cfg.Cluster.Name, p.args, proxmox.Deps{Hooks: o.Hooks, API: o.ProxmoxAPI, Probe: o.TalosProbe, Talos: o.Talos, FastStop: true})
	if err != nil {
		return nil, err
	}
	return c.Outputs(), nil
}
