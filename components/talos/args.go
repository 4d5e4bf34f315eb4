package talos

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/internal/talosversion"
)

// Defaults of the optional inputs: the versions this package is tested with.
// The stack file's defaults (package stacks) are these constants.
const (
	DefaultInstallDisk     = "/dev/sda"
	DefaultCiliumVersion   = "1.18.4"
	DefaultApproverVersion = "1.2.10"
)

// ComponentName is how errors name the component.
const ComponentName = "TalosCluster"

// WithDefaults returns the arguments with every optional input that is empty
// set to its default. The nodes are copied; nothing in a is changed.
func (a ClusterArgs) WithDefaults() ClusterArgs {
	c := &a.Cluster
	if c.KubernetesVersion == "" {
		c.KubernetesVersion = DefaultKubernetesVersion(c.TalosVersion)
	}
	c.KubernetesVersion = strings.TrimPrefix(c.KubernetesVersion, "v")
	c.Patches = copyOrNew(c.Patches)
	c.Cilium = copyOrNew(c.Cilium)
	c.CertApprover = copyOrNew(c.CertApprover)
	if c.Cilium.Version == "" {
		c.Cilium.Version = DefaultCiliumVersion
	}
	if c.CertApprover.Version == "" {
		c.CertApprover.Version = DefaultApproverVersion
	}
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint(c.VIP, a.Nodes)
	}
	dv := c.dataVolume()
	c.DataVolume = &dv
	if c.Rollout != nil && c.Rollout.WorkerParallelism == 0 {
		r := *c.Rollout
		r.WorkerParallelism = c.WorkerParallelism()
		c.Rollout = &r
	}
	nodes := make([]NodeSpec, len(a.Nodes))
	for i, n := range a.Nodes {
		if n.InstallDisk == "" {
			n.InstallDisk = DefaultInstallDisk
		}
		nodes[i] = n
	}
	a.Nodes = nodes
	return a
}

// Validate checks the inputs and returns one error naming every invalid one
// (by its schema path, e.g. nodes[1].ip), or nil. name is the resource name.
// The user's patches and Helm values are judged too (CheckOverrides).
func (a *ClusterArgs) Validate(name string) error {
	_, err := a.validated(name)
	return err
}

// validated checks the inputs and, when they hold, what the user's patches
// and Helm values do (CheckOverrides), whose findings it returns for their
// warnings.
func (a *ClusterArgs) validated(name string) (Overrides, error) {
	var p inputs.Problems
	a.check(&p, "")
	if err := p.Err(ComponentName, name); err != nil {
		return Overrides{}, err
	}
	guard := a.CheckOverrides(a.NodeNetwork)
	for _, e := range guard.Errors {
		p.Add(a.inputName(e.Path), "%s", e.Message)
	}
	return guard, p.Err(ComponentName, name)
}

// inputName is path in the caller's terms (InputName).
func (a *ClusterArgs) inputName(path string) string {
	if a.InputName == nil {
		return path
	}
	return a.InputName(path)
}

// Check records the problems of the inputs under prefix (e.g. "talos." when
// a platform component carries them).
func (a *ClusterArgs) Check(p *inputs.Problems, prefix string) { a.check(p, prefix) }

func (a *ClusterArgs) check(p *inputs.Problems, prefix string) {
	at := func(path string) string { return prefix + path }
	a.Cluster.Check(p, at("cluster."))
	if a.InstallerImage == nil {
		p.Add(at("installerImage"), "is required")
	}
	a.CheckNodes(p, prefix)
}

// Check records the problems of the cluster-wide settings under prefix
// (e.g. "cluster.").
func (c *ClusterSettings) Check(p *inputs.Problems, prefix string) {
	at := func(path string) string { return prefix + path }
	if p.Required(at("name"), c.Name) && (!inputs.IsDNSLabel(c.Name) || len(c.Name) > inputs.MaxClusterNameLength) {
		// It names VM tags, files and resources.
		p.Add(at("name"), "%q must be lowercase letters, digits and '-', at most %d characters, starting and ending with a letter or digit", c.Name, inputs.MaxClusterNameLength)
	}
	for path, chart := range map[string]*ChartSettings{"cilium.version": c.Cilium, "certApprover.version": c.CertApprover} {
		if chart != nil && chart.Version != "" {
			if msg := chartVersionProblem(chart.Version); msg != "" {
				p.Add(at(path), "%s", msg)
			}
		}
	}
	if c.Endpoint != "" {
		if u, err := url.Parse(c.Endpoint); err != nil || u.Scheme != "https" || u.Hostname() == "" || u.Path != "" && u.Path != "/" {
			p.Add(at("endpoint"), "%q is not a URL like https://10.0.0.5:6443", c.Endpoint)
		}
	}
	if msg := talosVersionProblem(c.TalosVersion); msg != "" {
		p.Add(at("talosVersion"), "%s", msg)
	}
	c.checkEncryption(p, at)
	if c.KubernetesVersion != "" && !inputs.IsKubernetesVersion(c.KubernetesVersion) {
		p.Add(at("kubernetesVersion"), "%q is not a Kubernetes version like 1.35.0", c.KubernetesVersion)
	}
	c.checkKubernetesSupport(p, prefix)
	c.checkRegistryMirrors(p, prefix)
	for i, ns := range c.Nameservers {
		p.MachineIP(at(fmt.Sprintf("nameservers[%d]", i)), ns)
	}
	if c.VIP != "" {
		p.MachineIPv4(at("vip"), c.VIP)
	}
	if c.EtcdBackup != nil {
		c.EtcdBackup.check(p, at("etcdBackup."))
	}
	if c.DataVolume != nil {
		c.DataVolume.check(p, at("dataVolume."))
	}
	if c.GitOps != nil {
		c.GitOps.check(p, at("gitops."))
	}
	if c.Rollout != nil && c.Rollout.WorkerParallelism < 0 {
		p.Add(at("rollout.workerParallelism"), "%d is not a number of workers: 1 or more (0 for the default, 1)", c.Rollout.WorkerParallelism)
	}
}

// CheckNodes records the problems of the nodes under prefix.
func (a *ClusterArgs) CheckNodes(p *inputs.Problems, prefix string) {
	at := func(path string) string { return prefix + path }
	a.checkChange(p, prefix)
	a.checkDataDiskSizes(p, prefix)
	a.checkLoadBalancer(p, at("cluster.loadBalancer."))
	if len(a.Nodes) == 0 {
		p.Add(at("nodes"), "at least one node (a control plane) is required")
	} else if a.Nodes[0].Role != RoleControlPlane {
		p.Add(at("nodes[0].role"), "the first node must be a control plane (it is bootstrapped), not %q", a.Nodes[0].Role)
	}
	names, ips := map[string]string{}, map[string]string{} // the node that has it first
	for i, n := range a.Nodes {
		np := at(fmt.Sprintf("nodes[%d]", i))
		if p.Required(np+".name", n.Name) {
			p.DNSLabel(np+".name", n.Name)
			if first, dup := names[n.Name]; dup {
				p.Add(np+".name", "%q is already the name of %s", n.Name, first)
			} else {
				names[n.Name] = np
			}
		}
		if p.Required(np+".ip", n.IP) {
			p.MachineIPv4(np+".ip", n.IP)
			if first, dup := ips[n.IP]; dup {
				p.Add(np+".ip", "%s is already the IP of %s", n.IP, first)
			} else {
				ips[n.IP] = np
			}
		}
		a.checkKubeSpanEndpoints(p, np+".kubeSpanEndpoints", n.KubeSpanEndpoints)
		checkLabels(p, np+".labels", n.Role, n.Labels)
		checkTaints(p, np+".taints", n.Taints)
		if n.Role != RoleControlPlane && n.Role != RoleWorker {
			p.Add(np+".role", "%q is not a role: controlplane or worker", n.Role)
		}
		if n.IP != "" && n.IP == a.Cluster.VIP {
			p.Add(at("cluster.vip"), "%s is also the IP of %s (%s); the VIP must be an unused address", n.IP, np, n.Name)
		}
		for j, c := range n.Network.Addresses {
			p.CIDR(fmt.Sprintf("%s.network.addresses[%d]", np, j), c)
		}
		for j, r := range n.Network.Routes {
			p.CIDR(fmt.Sprintf("%s.network.routes[%d].network", np, j), r.Network)
			if r.Gateway != "" {
				p.IPv4(fmt.Sprintf("%s.network.routes[%d].gateway", np, j), r.Gateway)
			}
		}
	}
}

// PatchSpec is the cluster-wide input of the generated patches.
func (a *ClusterArgs) PatchSpec() PatchSpec {
	workers := 0
	for _, n := range a.Nodes {
		if n.Role == RoleWorker {
			workers++
		}
	}
	c := a.Cluster
	patches := copyOrNew(c.Patches)
	return PatchSpec{
		TalosVersion:             c.TalosVersion,
		Nameservers:              c.Nameservers,
		VIP:                      c.VIP,
		SchedulableControlPlanes: workers == 0,
		TalosAPIAccess:           c.EtcdBackup != nil,
		KubeSpan:                 c.kubeSpanOn(),
		RegistryMirrors:          c.RegistryMirrors,
		DataVolume:               c.dataVolume(),
		Encryption:               c.encryption(),
		AllPatches:               patches.All,
		ControlPlanePatches:      patches.ControlPlane,
		WorkerPatches:            patches.Worker,
	}
}

// DefaultEndpoint is the Kubernetes API URL on the VIP, or else on the
// first control plane's IP.
func DefaultEndpoint(vip string, nodes []NodeSpec) string {
	host := vip
	if host == "" {
		for _, n := range nodes {
			if n.Role == RoleControlPlane {
				host = n.IP
				break
			}
		}
	}
	return "https://" + net.JoinHostPort(host, strconv.Itoa(constants.DefaultControlPlanePort))
}

// PublicNameservers are public resolvers (Cloudflare's and Quad9's), the
// nameservers of machines that have no local DNS server.
func PublicNameservers() []string { return []string{"1.1.1.1", "9.9.9.9"} }

// copyOrNew is a copy of *v, or a new zero value for nil: an optional
// object input the caller left out.
func copyOrNew[T any](v *T) *T {
	var out T
	if v != nil {
		out = *v
	}
	return &out
}

// talosVersionProblem says what is wrong with a Talos version, or "".
func talosVersionProblem(v string) string {
	switch {
	case v == "":
		return "is required, e.g. v1.12.4"
	case inputs.IsChartVersion(v):
		return fmt.Sprintf("%q needs the v prefix: v%s", v, v)
	case !inputs.IsReleaseVersion(v):
		return fmt.Sprintf("%q is not a Talos version like v1.12.4", v)
	}
	if err := talosversion.CheckSupported(v); err != nil {
		return err.Error()
	}
	return ""
}

// chartVersionProblem says what is wrong with a Helm chart version, or "".
func chartVersionProblem(v string) string {
	switch {
	case inputs.IsChartVersion(v):
		return ""
	case strings.HasPrefix(v, "v") && inputs.IsChartVersion(v[1:]):
		return fmt.Sprintf("%q: chart versions have no v prefix; use %q", v, v[1:])
	}
	return fmt.Sprintf("%q is not a chart version like 1.18.4", v)
}
