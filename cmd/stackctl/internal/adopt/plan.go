package adopt

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/pulumi/pulumi/sdk/v3/go/auto/optimport"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"

	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
)

// Type tokens of the Talos provider's resources that are imported.
const (
	SecretsType   = "talos:machine/secrets:Secrets" //nolint:gosec // a type token, not a credential
	BootstrapType = "talos:machine/bootstrap:Bootstrap"
	ReleaseType   = "kubernetes:helm.sh/v3:Release"
)

// The Talos provider plugin the program's SDK asks for (its
// pulumi-plugin.json; a test holds them to go.mod's version). The import
// must use the same plugin, or the next `up` would see another default
// provider and replace what was imported.
const (
	TalosPluginVersion = "0.7.1"
	talosPluginServer  = "github://api.github.com/pulumiverse"
)

// BootstrapID is the id the provider gives every bootstrap it creates; the
// recorded bootstrap has it too (see RecordBootstrap).
const BootstrapID = "machine_bootstrap"

// PlanOptions say what to import.
type PlanOptions struct {
	// SecretsFile is the path of secrets.yaml; the provider reads it.
	SecretsFile string
	// Bootstrapped plans the bootstrap as done (an entry that Import leaves
	// out and RecordBootstrap writes into the state). True for a running
	// cluster, whose etcd refuses a second bootstrap; false when only the
	// secrets are reused for a new cluster.
	Bootstrapped bool
}

// Plan returns what adopt puts in the stack: the platform and Talos
// components as placeholders (so the imported resources get the URNs the
// program gives them), the secrets read from the file, and the bootstrap
// (recorded, not imported: Import gives the import file's entries).
// Entries are referenced by role ("platform", "cluster", ...); their
// logicalName is the program's resource name.
func Plan(cfg *stacks.Config, o PlanOptions) ([]*optimport.ImportResource, error) {
	if o.SecretsFile == "" {
		return nil, errors.New("no secrets file")
	}
	file, err := filepath.Abs(o.SecretsFile)
	if err != nil {
		return nil, fmt.Errorf("unable to resolve the path of the secrets file %s: %w", o.SecretsFile, err)
	}
	rs, err := components(cfg)
	if err != nil {
		return nil, err
	}
	name := cfg.Cluster.Name
	rs = append(rs, &optimport.ImportResource{
		Name: "secrets", LogicalName: name + talos.SecretsSuffix, Type: SecretsType, Parent: "cluster",
		ID: file, Version: TalosPluginVersion, PluginDownloadURL: talosPluginServer,
	})
	if o.Bootstrapped {
		rs = append(rs, &optimport.ImportResource{
			Name: "bootstrap", LogicalName: name + talos.BootstrapSuffix, Type: BootstrapType, Parent: "cluster",
			ID: BootstrapID, Version: TalosPluginVersion, PluginDownloadURL: talosPluginServer,
		})
	}
	return rs, nil
}

// components are the placeholders of the program's two components: the
// platform's ("platform") and TalosCluster ("cluster") under it.
func components(cfg *stacks.Config) ([]*optimport.ImportResource, error) {
	platformType, ok := program.ComponentType(cfg.Platform)
	if !ok {
		return nil, fmt.Errorf("platform %q has no component", cfg.Platform)
	}
	name := cfg.Cluster.Name
	return []*optimport.ImportResource{
		{Name: "platform", LogicalName: name, Type: platformType, Component: true},
		{Name: "cluster", LogicalName: name, Type: talos.ClusterType, Parent: "platform", Component: true},
	}, nil
}

// URNs resolves the URN each planned resource gets in a stack, by the rule
// `pulumi import` applies (parent's type chain, then type and logicalName).
func URNs(stack, project string, rs []*optimport.ImportResource) (map[string]resource.URN, error) {
	byName := map[string]*optimport.ImportResource{}
	for _, r := range rs {
		byName[r.Name] = r
	}
	out := map[string]resource.URN{}
	var resolve func(r *optimport.ImportResource, depth int) (resource.URN, error)
	resolve = func(r *optimport.ImportResource, depth int) (resource.URN, error) {
		if u, ok := out[r.Name]; ok {
			return u, nil
		}
		if depth > len(rs) {
			return "", fmt.Errorf("import entry %q: parent cycle", r.Name)
		}
		var parentType tokens.Type
		if r.Parent != "" {
			p, ok := byName[r.Parent]
			if !ok {
				return "", fmt.Errorf("import entry %q: unknown parent %q", r.Name, r.Parent)
			}
			pu, err := resolve(p, depth+1)
			if err != nil {
				return "", err
			}
			parentType = pu.QualifiedType()
		}
		u := resource.NewURN(tokens.QName(stack), tokens.PackageName(project), parentType, tokens.Type(r.Type), r.LogicalName)
		out[r.Name] = u
		return u, nil
	}
	for _, r := range rs {
		if _, err := resolve(r, 0); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// The name suffix of each Helm release's resource, by release name.
var releaseResources = map[string]string{
	talos.CiliumRelease:   talos.CiliumSuffix,
	talos.ApproverRelease: talos.CertApproverSuffix,
}

// k8sProviderType is the type token of the cluster's Kubernetes provider.
const k8sProviderType = "pulumi:providers:kubernetes"

// ReleasesPlan returns the import of Helm releases that already run in the
// cluster (the playbooks' `helm install cilium`), which `up` would
// otherwise fail to install again ("cannot re-use a name that is still in
// use"). They are imported under the cluster's own Kubernetes provider, so
// it must be in the stack already: run after an `up` that got that far.
// The next `up` upgrades them to the stack's chart version and values.
func ReleasesPlan(cfg *stacks.Config, stack, project string, releases []string) (nameTable map[string]string, rs []*optimport.ImportResource, err error) {
	if len(releases) == 0 {
		return nil, nil, errors.New("no release named")
	}
	chain, err := components(cfg)
	if err != nil {
		return nil, nil, err
	}
	chain = append(chain, &optimport.ImportResource{Name: "k8s", LogicalName: cfg.Cluster.Name + talos.K8sProviderSuffix, Type: k8sProviderType, Parent: "cluster"})
	urns, err := URNs(stack, project, chain)
	if err != nil {
		return nil, nil, err
	}
	nameTable = map[string]string{"cluster": string(urns["cluster"]), "k8s": string(urns["k8s"])}
	for _, rel := range releases {
		suffix, ok := releaseResources[rel]
		if !ok {
			return nil, nil, fmt.Errorf("release %q: the program installs only %s and %s", rel, talos.CiliumRelease, talos.ApproverRelease)
		}
		rs = append(rs, &optimport.ImportResource{
			Name: rel, LogicalName: cfg.Cluster.Name + suffix, Type: ReleaseType, Parent: "cluster", Provider: "k8s",
			ID: talos.SystemNamespace + "/" + rel,
		})
	}
	return nameTable, rs, nil
}
