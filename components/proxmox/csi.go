package proxmox

import (
	"cmp"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strconv"

	"github.com/muhlba91/pulumi-proxmoxve/sdk/v7/go/proxmoxve"
	"github.com/muhlba91/pulumi-proxmoxve/sdk/v7/go/proxmoxve/permission"
	"github.com/muhlba91/pulumi-proxmoxve/sdk/v7/go/proxmoxve/user"
	"github.com/muhlba91/pulumi-proxmoxve/sdk/v7/go/proxmoxve/vm"
	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	corev1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/core/v1"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"go.yaml.in/yaml/v3"

	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/helmrelease"
)

// The Proxmox CSI plugin (github.com/sergelogvinov/proxmox-csi-plugin):
// Kubernetes volumes as disks of a Proxmox datastore, attached to the VM of
// the node a pod runs on. Its documented set-up is a role with five
// privileges on "/", a user and a token; here the role's ACLs are only on
// the datastore and on the cluster's own VMs.
const (
	// CSIChartRepo and CSIChart are the plugin's Helm chart.
	CSIChartRepo = "oci://ghcr.io/sergelogvinov/charts"
	CSIChart     = "proxmox-csi-plugin"
	// DefaultCSIChartVersion is the chart this package was written against.
	DefaultCSIChartVersion = "0.3.5"
	// CSINamespace holds the plugin; its node plugin is privileged.
	CSINamespace = "csi-proxmox"
	// DefaultCSIRegion is the topology region of the nodes (the Proxmox
	// cluster) when none is given.
	DefaultCSIRegion = "proxmox"
	// DefaultStorageClass names the StorageClass.
	DefaultStorageClass = "proxmox"
	// DefaultCSIFsType is the volumes' filesystem when none is given;
	// CSIFsTypeXFS the other one the plugin takes.
	DefaultCSIFsType = "ext4"
	CSIFsTypeXFS     = "xfs"
	// CSITokenName is the token's name under the plugin's user.
	CSITokenName = "csi"
	// CSIVolumePrefix starts the name of every volume the plugin makes: it
	// makes them for the placeholder VM 9999, which owns no VM's disks,
	// so that destroying a VM never destroys them.
	CSIVolumePrefix = "vm-9999-pvc-"
)

// CSIPrivileges are the privileges the plugin documents.
var CSIPrivileges = []string{"VM.Audit", "VM.Config.Disk", "Datastore.Allocate", "Datastore.AllocateSpace", "Datastore.Audit"}

// Name suffixes of the plugin's resources.
const (
	CSIRoleSuffix      = "-csi-role"
	CSIUserSuffix      = "-csi-user"
	CSITokenSuffix     = "-csi-token"
	CSIACLSuffix       = "-csi-acl-"
	CSINamespaceSuffix = "-csi-namespace"
	CSIReleaseSuffix   = "-csi"
)

// CSISettings install the Proxmox CSI plugin with a StorageClass on one
// datastore.
type CSISettings struct {
	// Datastore is the Proxmox storage the volumes are disks of, e.g.
	// local-zfs.
	Datastore string `pulumi:"datastore"`
	// StorageClass names the StorageClass (default proxmox); its volumes
	// are kept when their claim goes (reclaimPolicy Retain).
	StorageClass string `pulumi:"storageClass,optional"`
	// Region is the nodes' topology.kubernetes.io/region: the Proxmox
	// cluster's name (default proxmox). Their zone is their Proxmox node.
	Region string `pulumi:"region,optional"`
	// FsType is the volumes' filesystem: ext4 (default) or xfs.
	FsType string `pulumi:"fsType,optional"`
	// TokenID is a token of the user's for the plugin (user@realm!name),
	// with TokenSecret; without, a role, user, ACLs and token are made.
	TokenID string `pulumi:"tokenId,optional"`
	// TokenSecret is the secret of TokenID.
	TokenSecret pulumi.StringInput `pulumi:"tokenSecret,optional" provider:"secret"`
	// ChartVersion is the plugin chart's version (default
	// DefaultCSIChartVersion).
	ChartVersion string `pulumi:"chartVersion,optional"`
}

// check records the settings' problems under prefix ("csi.").
func (s *CSISettings) check(p *inputs.Problems, prefix string) {
	checkDatastore(p, prefix+"datastore", s.Datastore)
	if s.StorageClass != "" && !inputs.IsDNSLabel(s.StorageClass) {
		p.Add(prefix+"storageClass", "%q is not a Kubernetes name (lowercase letters, digits and '-')", s.StorageClass)
	}
	if s.Region != "" && !inputs.IsDNSLabel(s.Region) {
		p.Add(prefix+"region", "%q is not a topology label value (lowercase letters, digits and '-')", s.Region)
	}
	if s.FsType != "" && s.FsType != DefaultCSIFsType && s.FsType != CSIFsTypeXFS {
		p.Add(prefix+"fsType", "%q is not ext4 or xfs", s.FsType)
	}
	if (s.TokenID == "") != (s.TokenSecret == nil) {
		p.Add(prefix+"tokenId", "and tokenSecret go together: give both (a token of yours), or neither (one is made with the plugin's privileges)")
	}
}

func (s CSISettings) withDefaults() CSISettings {
	if s.StorageClass == "" {
		s.StorageClass = DefaultStorageClass
	}
	if s.Region == "" {
		s.Region = DefaultCSIRegion
	}
	if s.FsType == "" {
		s.FsType = DefaultCSIFsType
	}
	if s.ChartVersion == "" {
		s.ChartVersion = DefaultCSIChartVersion
	}
	return s
}

// CSINodePatch is what the plugin needs of a node: the topology labels it
// places volumes by (region: the Proxmox cluster, zone: the node's Proxmox
// node) and the provider id it finds the node's VM by
// (proxmox://<region>/<vmId>). The kubelet sets the provider id when it
// registers the node, so a node that ran before the plugin was added keeps
// none until it registers again.
func CSINodePatch(region string, n Node) string {
	return renderMachine(map[string]any{
		"nodeLabels": topologyLabels(region, n),
		"kubelet": map[string]any{"extraArgs": map[string]string{
			"provider-id": fmt.Sprintf("proxmox://%s/%d", region, n.VMID),
		}},
	})
}

// TopologyPatch labels a node with its failure domain: region the Proxmox
// cluster (DefaultCSIRegion), zone the node's Proxmox node. Given to every
// node of a cluster whose VMs run on more than one Proxmox node (without the
// CSI plugin, whose patch has the same labels): Longhorn spreads a
// volume's replicas over zones, and the scheduler's topology spread
// constraints read them.
func TopologyPatch(region string, n Node) string {
	return renderMachine(map[string]any{"nodeLabels": topologyLabels(region, n)})
}

func topologyLabels(region string, n Node) map[string]string {
	return map[string]string{
		"topology.kubernetes.io/region": region,
		"topology.kubernetes.io/zone":   n.ProxmoxNode,
	}
}

// renderMachine renders a patch of the machine section.
func renderMachine(machine map[string]any) string {
	out, err := yaml.Marshal(map[string]any{"machine": machine})
	if err != nil {
		panic(err) // plain maps of strings always encode
	}
	return string(out)
}

// CSIUserACLs is the proxmoxve user resource's input of its ACL entries.
const CSIUserACLs = "acls"

// csiCluster is a Proxmox VE host as the plugin knows it: its API, the
// region its nodes are labelled with, and the plugin's token there.
type csiCluster struct {
	settings   HostSettings
	region     string
	id, secret pulumi.StringOutput
}

// csiToken makes, on host, the plugin's role, user, ACLs (the datastore and
// each of the host's VMs) and token, and returns the token's id and secret;
// a token of the user's is the proxmox host's. A hosts entry's resources
// are named with its name after the suffix, the proxmox host's as before
// hosts existed.
func (a *ClusterArgs) csiToken(ctx *pulumi.Context, name string, s CSISettings, host hostView, vms map[string]*vm.VirtualMachine, pve []pulumi.ResourceOption) (pulumi.StringOutput, pulumi.StringOutput, error) {
	if s.TokenSecret != nil {
		return pulumi.String(s.TokenID).ToStringOutput(), pulumi.ToSecret(s.TokenSecret.ToStringOutput()).(pulumi.StringOutput), nil
	}
	suffix := host.suffix()
	cluster := a.Cluster.Name
	// A host lost for good: its grants leave the stack without a call to
	// its dead API, and nothing new is asked of it (goneOptions).
	role, err := permission.NewRole(ctx, name+CSIRoleSuffix+suffix, &permission.RoleArgs{
		RoleId: pulumi.String(cluster + "-csi"), Privileges: pulumi.ToStringArray(CSIPrivileges),
	}, append(slices.Clone(pve), host.goneOptions("roleId", "privileges")...)...)
	if err != nil {
		return pulumi.StringOutput{}, pulumi.StringOutput{}, fmt.Errorf("unable to create the CSI plugin's role: %w", err)
	}
	// bpg v0.95's user resource reads every ACL entry of the user into its
	// acl attribute (the Acl resources' below too), and its update deletes
	// the old set and adds the new one (proxmoxtf/resource/user.go; bpg
	// issue 2866, fixed in v0.107, which the registry does not serve).
	// After a refresh, the next up would revoke every grant the program
	// gives none of here. The grants are the Acl resources' alone: the
	// user ignores its own view of them.
	u, err := permission.NewUser(ctx, name+CSIUserSuffix+suffix, &permission.UserArgs{
		UserId:  pulumi.String(cluster + "-csi@pve"),
		Comment: pulumi.String("Proxmox CSI plugin of Talos cluster " + cluster),
	}, append(slices.Clone(pve), append(host.goneOptions("userId", "comment"), pulumi.IgnoreChanges([]string{CSIUserACLs}))...)...)
	if err != nil {
		return pulumi.StringOutput{}, pulumi.StringOutput{}, fmt.Errorf("unable to create the CSI plugin's user: %w", err)
	}
	grant := func(path string, opts ...pulumi.ResourceOption) (pulumi.Resource, error) {
		acl, err := proxmoxve.NewAcl(ctx, name+CSIACLSuffix+aclName(path)+suffix, &proxmoxve.AclArgs{
			Path: pulumi.String(path), RoleId: role.RoleId, UserId: u.UserId, Propagate: pulumi.Bool(false),
		}, slices.Concat(pve, opts, host.goneOptions("path", "roleId", "userId", "propagate"))...)
		if err != nil {
			return nil, fmt.Errorf("unable to grant the CSI plugin %s: %w", path, err)
		}
		return acl, nil
	}
	storage, err := grant("/storage/" + s.Datastore)
	if err != nil {
		return pulumi.StringOutput{}, pulumi.StringOutput{}, err
	}
	acls := []pulumi.Resource{storage}
	for _, n := range host.Nodes {
		// Proxmox drops a VM's ACLs when it destroys the VM: the grant
		// goes with its VM (no call for it on a destroy) and is made
		// again for a new one.
		machine := vms[n.Name]
		acl, err := grant("/vms/"+strconv.Itoa(n.VMID),
			pulumi.DependsOn([]pulumi.Resource{machine}), pulumi.DeletedWith(machine), pulumi.ReplaceWith([]pulumi.Resource{machine}))
		if err != nil {
			return pulumi.StringOutput{}, pulumi.StringOutput{}, err
		}
		acls = append(acls, acl)
	}
	token, err := user.NewToken(ctx, name+CSITokenSuffix+suffix, &user.TokenArgs{
		UserId: u.UserId, TokenName: pulumi.String(CSITokenName), PrivilegesSeparation: pulumi.Bool(false),
		Comment: pulumi.String("Proxmox CSI plugin"),
	}, slices.Concat(pve, []pulumi.ResourceOption{pulumi.DependsOn(acls)}, host.goneOptions("userId", "tokenName", "privilegesSeparation", "comment"))...)
	if err != nil {
		return pulumi.StringOutput{}, pulumi.StringOutput{}, fmt.Errorf("unable to create the CSI plugin's token: %w", err)
	}
	id := pulumi.Sprintf("%s!%s", u.UserId, CSITokenName)
	// The provider's value is "<token id>=<secret>".
	secret := pulumi.ToSecret(token.Value.ApplyT(func(v string) string {
		for i := len(v) - 1; i >= 0; i-- {
			if v[i] == '=' {
				return v[i+1:]
			}
		}
		return v
	})).(pulumi.StringOutput)
	return id, secret, nil
}

// aclName is an ACL path as a resource name part: /vms/110 is vms-110.
func aclName(path string) string {
	out := []byte(path[1:])
	for i, c := range out {
		if c == '/' {
			out[i] = '-'
		}
	}
	return string(out)
}

// csiPlugin installs the plugin: its privileged namespace and the chart,
// with the token and one StorageClass.
func (a *ClusterArgs) csiPlugin(ctx *pulumi.Context, name string, s CSISettings, clusters []csiCluster, k8s *kubernetes.Provider, opts []pulumi.ResourceOption) error {
	ns, err := corev1.NewNamespace(ctx, name+CSINamespaceSuffix, &corev1.NamespaceArgs{
		Metadata: &metav1.ObjectMetaArgs{
			Name: pulumi.String(CSINamespace),
			// The node plugin mounts host paths and runs privileged.
			Labels: pulumi.StringMap{
				"pod-security.kubernetes.io/enforce": pulumi.String("privileged"),
				"pod-security.kubernetes.io/audit":   pulumi.String("privileged"),
				"pod-security.kubernetes.io/warn":    pulumi.String("privileged"),
			},
		},
	}, append(opts, pulumi.Provider(k8s))...)
	if err != nil {
		return fmt.Errorf("unable to create the CSI plugin's namespace: %w", err)
	}
	values := pulumi.Map{
		"config": pulumi.Map{"clusters": csiClusters(clusters)},
		"storageClass": pulumi.Array{pulumi.Map{
			"name": pulumi.String(s.StorageClass), "storage": pulumi.String(s.Datastore),
			"reclaimPolicy": pulumi.String("Retain"), "fstype": pulumi.String(s.FsType),
		}},
		// The controller on control planes, the node plugin everywhere.
		"nodeSelector": pulumi.Map{"node-role.kubernetes.io/control-plane": pulumi.String("")},
		"tolerations": pulumi.Array{pulumi.Map{
			"key": pulumi.String("node-role.kubernetes.io/control-plane"), "effect": pulumi.String("NoSchedule"),
		}},
		"node": pulumi.Map{"tolerations": pulumi.Array{pulumi.Map{"operator": pulumi.String("Exists")}}},
	}
	_, err = helmrelease.New(ctx, name+CSIReleaseSuffix, helmrelease.Args{
		Name: pulumi.String(CSIChart), Chart: pulumi.String(CSIChartRepo + "/" + CSIChart), Version: pulumi.String(s.ChartVersion),
		Namespace: pulumi.String(CSINamespace), Values: values,
	}, append(opts, pulumi.Provider(k8s), pulumi.DependsOn([]pulumi.Resource{ns}))...)
	if err != nil {
		return fmt.Errorf("unable to install the CSI plugin: %w", err)
	}
	return nil
}

// csiClusters are the plugin's clusters: a Proxmox VE API with its token
// and region each.
func csiClusters(clusters []csiCluster) pulumi.Array {
	out := pulumi.Array{}
	for _, c := range clusters {
		out = append(out, pulumi.Map{
			"url": pulumi.String(apiURL(c.settings.csiEndpoint())), "insecure": pulumi.Bool(c.settings.Insecure),
			"token_id": c.id, "token_secret": c.secret, "region": pulumi.String(c.region),
		})
	}
	return out
}

// csiEndpoint is the API URL the plugin is given: the one the cluster
// reaches, which is this machine's unless CSIEndpoint says otherwise.
func (px HostSettings) csiEndpoint() string { return cmp.Or(px.CSIEndpoint, px.Endpoint) }

// csiHostProblems refuse a plugin API address that is a loopback one (in a
// pod, that is the pod itself: the endpoint of a local port forward,
// proxmox.localForward, is one).
func (a *ClusterArgs) csiHostProblems(p *inputs.Problems) {
	if a.CSI == nil {
		return
	}
	for _, h := range a.hostViews() {
		if h.VPS != nil || len(h.Nodes) == 0 {
			continue
		}
		if ip, ok := endpointIP(h.Settings.csiEndpoint()); ok && ip.IsLoopback() {
			p.Add(h.Path+"csiEndpoint", "%s is a loopback address, which inside the cluster is the CSI plugin's own pod: give the URL the control planes reach %s's API at", ip, h.label())
		}
		// The region is in every volume's handle (region/zone/storage/disk)
		// and node affinity: the plugin would no longer find the volumes.
		was, ok := a.PreviousCSIRegions[apiURL(h.Settings.csiEndpoint())]
		if now := a.regionOf(h.Name); ok && was != now && h.Name == "" {
			p.Add("csi.region", "was %q: the volumes the plugin made carry it in their handles and node affinity, so %q would orphan them; keep %q", was, now, was)
		}
	}
}

// csiWarnings say when a host's API, as the plugin is given it, is a
// private address and a control plane (where the plugin's controller
// runs) is on another network: KubeSpan carries only the nodes' own
// addresses, so the controller cannot reach it.
func (a *ClusterArgs) csiWarnings(name func(string) string) []string {
	if a.CSI == nil {
		return nil
	}
	views := a.hostViews()
	var out []string
	for _, h := range views {
		ip, ok := endpointIP(h.Settings.csiEndpoint())
		if h.VPS != nil || len(h.Nodes) == 0 || !ok || !ip.IsPrivate() {
			continue
		}
		for _, o := range views {
			i := slices.IndexFunc(o.Nodes, func(n Node) bool { return n.Role == talos.RoleControlPlane })
			if i < 0 || o.networkKey() == h.networkKey() {
				continue
			}
			out = append(out, fmt.Sprintf("%s: the Proxmox CSI plugin's controller runs on the control planes, and %s (%s) is on another network than %s's private address %s: give csiEndpoint a URL of %s's API every control plane reaches, and let TCP 8006 through from them",
				name(h.Path+"csiEndpoint"), o.Nodes[i].Name, o.label(), h.label(), ip, h.label()))
			break
		}
	}
	return out
}

// endpointIP is the address of an API URL, when it names one.
func endpointIP(endpoint string) (netip.Addr, bool) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return netip.Addr{}, false
	}
	ip, err := netip.ParseAddr(u.Hostname())
	return ip, err == nil
}

// apiURL is the plugin's form of the API endpoint: .../api2/json.
func apiURL(endpoint string) string {
	for len(endpoint) > 0 && endpoint[len(endpoint)-1] == '/' {
		endpoint = endpoint[:len(endpoint)-1]
	}
	return endpoint + "/api2/json"
}
