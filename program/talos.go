package program

import (
	"fmt"
	"os"
	"path"

	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/backuptarget"
	"github.com/fluodata/talos-pulumi/stacks"
)

// ClusterSettings are the stack file's cluster block as the components take
// it: every default already applied by stacks.Load, the endpoint resolved.
func ClusterSettings(cfg *stacks.Config) talos.ClusterSettings {
	c := cfg.Cluster
	return talos.ClusterSettings{
		Name:              c.Name,
		Endpoint:          cfg.KubernetesEndpoint(),
		TalosVersion:      c.TalosVersion,
		KubernetesVersion: c.KubernetesVersion,
		Nameservers:       c.Network.Nameservers,
		VIP:               c.VIP,
		Patches: &talos.ClusterPatches{
			All:          PatchTexts(c.Patches.All),
			ControlPlane: PatchTexts(c.Patches.ControlPlane),
			Worker:       PatchTexts(c.Patches.Worker),
		},
		Cilium:          &talos.ChartSettings{Version: c.Cilium.Version, Values: c.Cilium.Values},
		CertApprover:    &talos.ChartSettings{Version: c.CertApprover.Version, Values: c.CertApprover.Values},
		Rollout:         &talos.RolloutSettings{WorkerParallelism: c.Rollout.WorkerParallelism},
		EtcdBackup:      EtcdBackupSettings(cfg, ""),
		DataVolume:      &talos.DataVolumeSettings{Name: c.DataVolume.Name, Layout: c.DataVolume.Layout},
		LoadBalancer:    LoadBalancerSettings(c.LoadBalancer),
		KubeSpan:        kubeSpanSettings(c.KubeSpan),
		RegistryMirrors: registryMirrors(c.RegistryMirrors),
		GitOps:          GitOpsSettings(cfg.GitOps),
		SecureBoot:      c.SecureBoot,
		DiskEncryption:  c.DiskEncryption,
	}
}

// kubeSpanSettings are cluster.kubeSpan as the TalosCluster takes it; nil
// when off, so that a stack without it registers what it did before.
// registryMirrors are the stack's mirrors as the TalosCluster takes them.
func registryMirrors(in []stacks.RegistryMirrorConfig) []talos.RegistryMirror {
	var out []talos.RegistryMirror
	for _, m := range in {
		out = append(out, talos.RegistryMirror(m))
	}
	return out
}

func kubeSpanSettings(c stacks.KubeSpanConfig) *talos.KubeSpanSettings {
	if !c.Enabled {
		return nil
	}
	return &talos.KubeSpanSettings{Enabled: true}
}

// LoadBalancerSettings are cluster.loadBalancer as the TalosCluster takes
// it; nil when the section is left out.
func LoadBalancerSettings(c stacks.LoadBalancerConfig) *talos.LoadBalancerSettings {
	if !c.Enabled() {
		return nil
	}
	lb := &talos.LoadBalancerSettings{Interfaces: c.Interfaces, Nodes: c.Nodes}
	for _, p := range c.Pools {
		pool := talos.LBPool{Name: p.Name, Blocks: p.Blocks, Routed: p.Routed}
		if len(p.ServiceSelector) > 0 {
			pool.ServiceSelector = map[string]string{}
			for k, v := range p.ServiceSelector {
				pool.ServiceSelector[k] = fmt.Sprint(v) // stacks.Load refuses a value that is no string
			}
		}
		lb.Pools = append(lb.Pools, pool)
	}
	return lb
}

// GitOpsSettings are the gitops section as the TalosCluster takes it; nil
// when the section is left out.
func GitOpsSettings(c stacks.GitOpsConfig) *talos.GitOpsSettings {
	if !c.Enabled() {
		return nil
	}
	r := c.Repository
	g := &talos.GitOpsSettings{
		Repository: talos.GitOpsRepository{URL: r.URL, Revision: r.Revision, Path: r.Path, Username: r.Username},
		ArgoCD:     &talos.ChartSettings{Version: c.ArgoCD.Version, Values: c.ArgoCD.Values},
		KsopsImage: c.KsopsImage, PrivilegedNamespaces: c.PrivilegedNamespaces, OwnsAddons: c.OwnsAddons,
	}
	if c.SopsAgeKey.IsSet() {
		g.SopsAgeKey = c.SopsAgeKey.Output()
	}
	if r.Password.IsSet() {
		g.Repository.Password = r.Password.Output()
	}
	if r.SSHPrivateKey.IsSet() {
		g.Repository.SSHPrivateKey = r.SSHPrivateKey.Output()
	}
	return g
}

// InClusterDir is where, under a stack's backups (<target>/<stack>/), the
// in-cluster schedule puts its snapshots.
const InClusterDir = "in-cluster"

// EtcdBackupSettings are backup.schedule's settings of the TalosCluster
// (nil without a schedule): the target's bucket, endpoint and region, the
// one recipient, the credentials; the snapshots go beside the stack's
// backups, under <target prefix>/<stack>/in-cluster ("" stack: not known
// yet, for the checks).
func EtcdBackupSettings(cfg *stacks.Config, stack string) *talos.EtcdBackupSettings {
	b := cfg.Backup
	if b.Schedule == "" {
		return nil
	}
	t, _ := backuptarget.Parse(b.Target) // Load reports a bad target
	e := &talos.EtcdBackupSettings{
		Schedule: b.Schedule, Bucket: t.Bucket, Prefix: path.Join(t.Prefix, stack, InClusterDir),
		Endpoint: t.Endpoint, Region: t.SigningRegion(), UsePathStyle: t.PathStyle, AccessKeyID: b.S3.AccessKeyID,
	}
	if len(b.Recipients) > 0 {
		e.Recipient = b.Recipients[0]
	}
	if b.S3.SecretAccessKey.IsSet() {
		e.SecretAccessKey = b.S3.SecretAccessKey.Output()
	}
	return e
}

// ReadBackupCA reads backup.s3.caFile into the schedule's settings e (nil:
// no schedule): a file that cannot be read stops the run before anything
// is created.
func ReadBackupCA(cfg *stacks.Config, e *talos.EtcdBackupSettings) error {
	path := cfg.Backup.S3.CAFilePath()
	if e == nil || path == "" {
		return nil
	}
	pemData, err := os.ReadFile(path) //nolint:gosec // the operator's own file, named in the stack file
	if err != nil {
		return fmt.Errorf("backup.s3.caFile: %w; nothing was created", err)
	}
	e.CABundle = string(pemData)
	return nil
}

// PatchTexts returns the YAML of config patches.
func PatchTexts(ps []stacks.Patch) []string {
	if len(ps) == 0 {
		return nil
	}
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.YAML)
	}
	return out
}

// RoleOf maps a stack node role to a Talos machine type.
func RoleOf(r stacks.Role) talos.Role {
	if r == stacks.RoleControlPlane {
		return talos.RoleControlPlane
	}
	return talos.RoleWorker
}
