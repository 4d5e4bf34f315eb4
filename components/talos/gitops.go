package talos

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/apiextensions"
	corev1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/core/v1"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/inputs"
)

// The GitOps hand-off: Argo CD from its chart (argoproj/argo-helm), KSOPS
// in its repository server (viaduct-ai/kustomize-sops), the SOPS age key
// and the repository credential as Secrets, the privileged namespaces, and
// the root Application. What Argo CD deploys from then on is its own.
const (
	// ArgoCDNamespace holds Argo CD, its repository credential, the SOPS
	// age key and the root Application.
	ArgoCDNamespace = "argocd"
	// RootApplicationName names the root Application (app of apps).
	RootApplicationName = "root"
	// ArgoCDRepo, ArgoCDChart and ArgoCDRelease are Argo CD's chart and
	// release; DefaultArgoCDVersion the chart version this package is
	// tested with (argo-helm tag argo-cd-10.1.1, Argo CD v3.4.4).
	ArgoCDRepo           = "https://argoproj.github.io/argo-helm"
	ArgoCDChart          = "argo-cd"
	ArgoCDRelease        = "argocd"
	DefaultArgoCDVersion = "10.1.1"
	// DefaultKsopsImage is the KSOPS release whose `ksops install
	// --with-kustomize` the init container runs (v4.5.1 is the first with
	// --with-kustomize; its image has no shell).
	DefaultKsopsImage = "viaductoss/ksops:v4.5.1"
	// SopsAgeSecret holds the age identity as keys.txt, mounted where
	// SOPS_AGE_KEY_FILE points in the repository server.
	SopsAgeSecret = "sops-age"
	// RepoSecret is the repository credential (Argo CD reads Secrets
	// labelled argocd.argoproj.io/secret-type=repository).
	RepoSecret       = "gitops-repository" //nolint:gosec // a Secret's name, not a credential
	argoCDTimeoutSec = 600
	sopsAgeDir       = "/.config/sops/age"
	customToolsDir   = "/custom-tools"
)

// Name suffixes of the hand-off's resources.
const (
	GitOpsNamespaceSuffix = "-gitops-namespace"
	SopsAgeSuffix         = "-gitops-sops-age"
	RepoSecretSuffix      = "-gitops-repository" //nolint:gosec // a resource name suffix, not a credential
	ArgoCDSuffix          = "-argocd"
	RootAppSuffix         = "-gitops-root"
	PrivilegedNsSuffix    = "-privileged-ns-"
)

// patchForceAnnotation makes a patch resource's server-side apply take
// fields another manager holds (pulumi-kubernetes metadata.IsPatchForce).
const patchForceAnnotation = "pulumi.com/patchForce"

// GitOpsSettings hand the cluster to Argo CD after the bootstrap.
type GitOpsSettings struct {
	// Repository is the GitOps repository the root Application follows.
	Repository GitOpsRepository `pulumi:"repository"`
	// SopsAgeKey is the age identity (AGE-SECRET-KEY-1..., the text of a
	// keys.txt) KSOPS decrypts the repository's SOPS files with; none when
	// empty.
	SopsAgeKey pulumi.StringInput `pulumi:"sopsAgeKey,optional" provider:"secret"`
	// ArgoCD is Argo CD's chart version and values.
	ArgoCD *ChartSettings `pulumi:"argoCd,optional"`
	// KsopsImage is the KSOPS image the repository server's init container
	// copies ksops and kustomize from (default DefaultKsopsImage).
	KsopsImage string `pulumi:"ksopsImage,optional"`
	// PrivilegedNamespaces are the namespaces labelled for the Pod Security admission's
	// privileged level (created when missing) before Argo CD syncs.
	PrivilegedNamespaces []string `pulumi:"privilegedNamespaces,optional"`
	// OwnsAddons says that Argo CD manages Cilium and the approver from
	// the repository: their releases are installed at the bootstrap and
	// left alone after it (never upgraded, never deleted).
	OwnsAddons bool `pulumi:"ownsAddons,optional"`
}

// GitOpsRepository is the repository and its credential.
type GitOpsRepository struct {
	// URL is the Git URL: https://... or an SSH one (git@host:path,
	// ssh://...).
	URL string `pulumi:"url"`
	// Revision is the branch, tag or commit (default HEAD).
	Revision string `pulumi:"revision,optional"`
	// Path is the folder of the root Application's manifests (default .).
	Path string `pulumi:"path,optional"`
	// Username goes with Password over https.
	Username string `pulumi:"username,optional"`
	// Password is the https password or token.
	Password pulumi.StringInput `pulumi:"password,optional" provider:"secret"`
	// SSHPrivateKey is the deploy key of an SSH URL (PEM or OpenSSH).
	SSHPrivateKey pulumi.StringInput `pulumi:"sshPrivateKey,optional" provider:"secret"`
}

// WithDefaults fills the optional settings.
func (g GitOpsSettings) WithDefaults() GitOpsSettings {
	g.ArgoCD = copyOrNew(g.ArgoCD)
	if g.ArgoCD.Version == "" {
		g.ArgoCD.Version = DefaultArgoCDVersion
	}
	if g.KsopsImage == "" {
		g.KsopsImage = DefaultKsopsImage
	}
	if g.Repository.Revision == "" {
		g.Repository.Revision = "HEAD"
	}
	if g.Repository.Path == "" {
		g.Repository.Path = "."
	}
	return g
}

// scpURLRe is Git's scp-like SSH syntax, user@host:path.
var scpURLRe = regexp.MustCompile(`^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^/].*$`)

// isSSHURL says the URL is reached over SSH.
func isSSHURL(s string) bool {
	return strings.HasPrefix(s, "ssh://") || scpURLRe.MatchString(s)
}

// check records the settings' problems under prefix ("cluster.gitops.").
func (g *GitOpsSettings) check(p *inputs.Problems, prefix string) {
	at := func(path string) string { return prefix + path }
	r := g.Repository
	if p.Required(at("repository.url"), r.URL) {
		u, err := url.Parse(r.URL)
		https := err == nil && u.Scheme == "https" && u.Host != ""
		switch {
		case !https && !isSSHURL(r.URL):
			p.Add(at("repository.url"), "%q is not a Git URL like https://github.com/me/gitops.git or git@github.com:me/gitops.git", r.URL)
		case https && u.User != nil:
			p.Add(at("repository.url"), "holds a credential: give it in repository.username and repository.password (secret) instead, so that it is kept secret")
		case https && r.SSHPrivateKey != nil:
			p.Add(at("repository.sshPrivateKey"), "is for an SSH URL (git@host:path or ssh://); %q is https: use repository.username and repository.password", r.URL)
		case !https && (r.Password != nil || r.Username != ""):
			p.Add(at("repository.password"), "and username are for an https URL; %q is SSH: use repository.sshPrivateKey", r.URL)
		}
	}
	if r.Username != "" && r.Password == nil {
		p.Add(at("repository.password"), "is required with repository.username")
	}
	if strings.Contains(r.Revision, " ") {
		p.Add(at("repository.revision"), "%q is not a branch, tag or commit", r.Revision)
	}
	if strings.HasPrefix(r.Path, "/") || strings.Contains(r.Path, "..") {
		p.Add(at("repository.path"), "%q must be a folder inside the repository (relative, without ..)", r.Path)
	}
	if g.ArgoCD != nil {
		checkArgoCDValues(p, at("argoCd.values."), g.ArgoCD.Values, g.SopsAgeKey != nil)
	}
	if g.ArgoCD != nil && g.ArgoCD.Version != "" {
		if msg := chartVersionProblem(g.ArgoCD.Version); msg != "" {
			p.Add(at("argoCd.version"), "%s", msg)
		}
	}
	if g.KsopsImage != "" && strings.ContainsAny(g.KsopsImage, " \t\n") {
		p.Add(at("ksopsImage"), "%q is not an image reference", g.KsopsImage)
	}
	seen := map[string]bool{}
	for i, ns := range g.PrivilegedNamespaces {
		path := at(fmt.Sprintf("privilegedNamespaces[%d]", i))
		p.DNSLabel(path, ns)
		if seen[ns] {
			p.Add(path, "%q is listed twice", ns)
		}
		seen[ns] = true
		if ns == SystemNamespace || ns == "kube-public" || ns == "kube-node-lease" || ns == "default" {
			p.Add(path, "%q is Kubernetes' own namespace: only namespaces of workloads are labelled here", ns)
		}
	}
}

// ArgoCDValues are the values KSOPS needs in Argo CD's repository server
// (the chart's repoServer and configs.cm, argo-helm argo-cd 10.1.1
// values.yaml; the KSOPS README's Helm values for v4.5.1): an init
// container copies ksops and kustomize into a shared volume, kustomize runs
// plugins, and SOPS finds the age key (when there is one) at
// SOPS_AGE_KEY_FILE. user is merged over them, except that the user's
// entries of the repository server's lists are added to KSOPS's (Helm
// would replace the list) and the user's build options keep KSOPS's flags.
func ArgoCDValues(ksopsImage string, ageKey bool, user map[string]any) map[string]any {
	base := ksopsValues(ksopsImage, ageKey)
	out := MergeValues(base, user)
	userRS, _ := user["repoServer"].(map[string]any)
	rs := out["repoServer"].(map[string]any)
	baseRS := base["repoServer"].(map[string]any)
	for _, l := range ksopsLists {
		theirs, _ := userRS[l.key].([]any)
		ours, _ := baseRS[l.key].([]any)
		if merged := mergeByKey(ours, theirs, l.by); merged != nil {
			rs[l.key] = merged
		}
	}
	cm := out["configs"].(map[string]any)["cm"].(map[string]any)
	cm[buildOptionsKey] = withFlags(cm[buildOptionsKey], ksopsBuildFlags)
	return out
}

// ksopsBuildFlags are what kustomize needs to run KSOPS (an exec plugin).
var ksopsBuildFlags = []string{"--enable-alpha-plugins", "--enable-exec"}

const buildOptionsKey = "kustomize.buildOptions"

// ksopsLists are the repository server's lists KSOPS adds to, each with the
// field that names an entry (Kubernetes' own merge keys of a container's
// env, volumes, mounts and init containers).
var ksopsLists = []struct{ key, by string }{
	{"env", "name"}, {"volumes", "name"}, {"volumeMounts", "mountPath"}, {"initContainers", "name"},
}

// ksopsValues are KSOPS's own values, before the user's.
func ksopsValues(ksopsImage string, ageKey bool) map[string]any {
	volumes := []any{map[string]any{"name": "custom-tools", "emptyDir": map[string]any{}}}
	mounts := []any{
		map[string]any{"mountPath": "/usr/local/bin/kustomize", "name": "custom-tools", "subPath": "kustomize"},
		map[string]any{"mountPath": "/usr/local/bin/ksops", "name": "custom-tools", "subPath": "ksops"},
	}
	var env []any
	if ageKey {
		volumes = append(volumes, map[string]any{"name": SopsAgeSecret, "secret": map[string]any{"secretName": SopsAgeSecret}})
		mounts = append(mounts, map[string]any{"mountPath": sopsAgeDir, "name": SopsAgeSecret, "readOnly": true})
		env = append(env, map[string]any{"name": "SOPS_AGE_KEY_FILE", "value": sopsAgeDir + "/keys.txt"})
	}
	repoServer := map[string]any{
		"volumes":      volumes,
		"volumeMounts": mounts,
		"initContainers": []any{map[string]any{
			"name": "install-ksops", "image": ksopsImage,
			"command":      []any{"/usr/local/bin/ksops", "install", "--with-kustomize", customToolsDir},
			"volumeMounts": []any{map[string]any{"mountPath": customToolsDir, "name": "custom-tools"}},
		}},
	}
	if env != nil {
		repoServer["env"] = env
	}
	return map[string]any{
		"configs":    map[string]any{"cm": map[string]any{buildOptionsKey: strings.Join(ksopsBuildFlags, " ")}},
		"repoServer": repoServer,
	}
}

// mergeByKey is ours followed by the entries of theirs whose key no entry
// of ours holds (check refuses such entries before anything runs).
func mergeByKey(ours, theirs []any, by string) []any {
	taken := keysOf(ours, by)
	out := append([]any{}, ours...)
	for _, e := range theirs {
		if m, ok := e.(map[string]any); ok && taken[m[by]] {
			continue
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// keysOf is the set of the entries' values of field by.
func keysOf(entries []any, by string) map[any]bool {
	keys := map[any]bool{}
	for _, e := range entries {
		if m, ok := e.(map[string]any); ok {
			keys[m[by]] = true
		}
	}
	return keys
}

// withFlags is the user's kustomize build options with each flag of
// flags they lack appended.
func withFlags(options any, flags []string) string {
	s, _ := options.(string)
	have := strings.Fields(s)
	for _, f := range flags {
		if !slices.Contains(have, f) {
			have = append(have, f)
		}
	}
	return strings.Join(have, " ")
}

// checkArgoCDValues refuses user values that would undo KSOPS's: an entry
// of the repository server's lists named as one of KSOPS's, a list that
// is not one, build options that are not a string.
func checkArgoCDValues(p *inputs.Problems, prefix string, user map[string]any, ageKey bool) {
	ours := ksopsValues("", ageKey)["repoServer"].(map[string]any)
	if rs, ok := user["repoServer"].(map[string]any); ok {
		for _, l := range ksopsLists {
			v, set := rs[l.key]
			if !set {
				continue
			}
			path := prefix + "repoServer." + l.key
			list, ok := v.([]any)
			if !ok {
				p.Add(path, "must be a list (the chart's repoServer.%s); its entries are added to KSOPS's", l.key)
				continue
			}
			own, _ := ours[l.key].([]any)
			taken := keysOf(own, l.by)
			for i, e := range list {
				if m, ok := e.(map[string]any); ok && taken[m[l.by]] {
					p.Add(fmt.Sprintf("%s[%d].%s", path, i, l.by), "%q is KSOPS's own (the package adds your entries to KSOPS's): choose another %s", m[l.by], l.by)
				}
			}
		}
	}
	if cm, ok := valuesAt(user, "configs", "cm"); ok {
		if v, set := cm[buildOptionsKey]; set {
			if _, ok := v.(string); !ok {
				p.Add(prefix+"configs.cm."+buildOptionsKey, "must be a string of kustomize flags; %s are added to it", strings.Join(ksopsBuildFlags, " "))
			}
		}
	}
}

// valuesAt is the object at path in values.
func valuesAt(values map[string]any, path ...string) (map[string]any, bool) {
	for _, k := range path {
		next, ok := values[k].(map[string]any)
		if !ok {
			return nil, false
		}
		values = next
	}
	return values, true
}

// RootApplication is the root Application's spec: the repository's path
// at the revision, synced into the cluster automatically, pruning and
// healing. It carries no resources finalizer: deleting it (the section
// removed) leaves what Argo CD deployed in place.
func RootApplication(r GitOpsRepository) map[string]any {
	return map[string]any{
		"project": "default",
		"source":  map[string]any{"repoURL": r.URL, "targetRevision": r.Revision, "path": r.Path},
		"destination": map[string]any{
			"server": "https://kubernetes.default.svc", "namespace": ArgoCDNamespace,
		},
		"syncPolicy": map[string]any{
			"automated":   map[string]any{"prune": true, "selfHeal": true},
			"syncOptions": []any{"CreateNamespace=true"},
			"retry": map[string]any{"limit": 5, "backoff": map[string]any{
				"duration": "10s", "factor": 2, "maxDuration": "5m",
			}},
		},
	}
}

// AddonWarnings say what the stack can no longer do for the releases
// Argo CD owns.
func (a *ClusterArgs) AddonWarnings() []string {
	g := a.Cluster.GitOps
	if g == nil || !g.OwnsAddons || !a.Cluster.LoadBalancer.announced() {
		return nil
	}
	return []string{fmt.Sprintf("%s: Argo CD owns Cilium, so `up` no longer changes its release: the load balancer pools need "+
		"l2announcements.enabled: true and a k8sClientRateLimit (qps %d, burst %d) in the Cilium values of your GitOps repository",
		a.inputName("cluster.gitops.ownsAddons"), ciliumClientQPS, ciliumClientBurst)}
}

// addonOpts are the options of the Cilium and approver releases: with
// gitops.ownsAddons, Argo CD owns them once installed, so a later `up`
// changes nothing in them and never deletes them.
func (b *build) addonOpts() []pulumi.ResourceOption {
	g := b.args.Cluster.GitOps
	if g == nil || !g.OwnsAddons {
		return nil
	}
	return []pulumi.ResourceOption{
		pulumi.IgnoreChanges([]string{"name", "chart", "version", "namespace", "repositoryOpts", "values", "timeout", "maxHistory"}),
		pulumi.RetainOnDelete(true),
	}
}

// gitOps registers the hand-off after the releases (and the pools): the
// argocd namespace, the age key and repository Secrets, Argo CD, the
// privileged namespaces, then the root Application.
func (b *build) gitOps(k8s *kubernetes.Provider, after []pulumi.Resource) error {
	ctx, name := b.ctx, b.name
	if b.args.Cluster.GitOps == nil {
		return nil
	}
	g := b.args.Cluster.GitOps.WithDefaults()
	opts := func(deps ...pulumi.Resource) []pulumi.ResourceOption {
		return b.clusterOpts(pulumi.Provider(k8s), pulumi.DependsOn(append(append([]pulumi.Resource{}, after...), deps...)))
	}
	meta := func(n string, labels pulumi.StringMap) *metav1.ObjectMetaArgs {
		return &metav1.ObjectMetaArgs{Name: pulumi.String(n), Namespace: pulumi.String(ArgoCDNamespace), Labels: labels}
	}
	// A patch (server-side apply): it creates the namespace when missing
	// and adopts it when present (the section added back after a removal),
	// and its deletion never deletes the namespace: other Applications (the
	// root's children) live in it, and a deleted namespace would wait
	// forever on their finalizers once Argo CD's controller is gone.
	ns, err := corev1.NewNamespacePatch(ctx, name+GitOpsNamespaceSuffix, &corev1.NamespacePatchArgs{
		Metadata: &metav1.ObjectMetaPatchArgs{
			Name:        pulumi.String(ArgoCDNamespace),
			Annotations: pulumi.StringMap{patchForceAnnotation: pulumi.String("true")},
		},
	}, opts()...)
	if err != nil {
		return fmt.Errorf("unable to create the %s namespace: %w", ArgoCDNamespace, err)
	}
	deps := []pulumi.Resource{ns}
	if g.SopsAgeKey != nil {
		age, err := corev1.NewSecret(ctx, name+SopsAgeSuffix, &corev1.SecretArgs{
			Metadata:   meta(SopsAgeSecret, nil),
			StringData: pulumi.StringMap{"keys.txt": pulumi.ToSecret(g.SopsAgeKey).(pulumi.StringOutput)},
		}, opts(ns)...)
		if err != nil {
			return fmt.Errorf("unable to create the SOPS age key Secret: %w", err)
		}
		deps = append(deps, age)
	}
	repo := g.Repository
	data := pulumi.StringMap{"url": pulumi.String(repo.URL), "type": pulumi.String("git")}
	if repo.SSHPrivateKey != nil {
		data["sshPrivateKey"] = pulumi.ToSecret(repo.SSHPrivateKey).(pulumi.StringOutput)
	}
	if repo.Password != nil {
		data["username"] = pulumi.String(repo.Username)
		data["password"] = pulumi.ToSecret(repo.Password).(pulumi.StringOutput)
	}
	repoSecret, err := corev1.NewSecret(ctx, name+RepoSecretSuffix, &corev1.SecretArgs{
		Metadata:   meta(RepoSecret, pulumi.StringMap{"argocd.argoproj.io/secret-type": pulumi.String("repository")}),
		StringData: data,
	}, opts(ns)...)
	if err != nil {
		return fmt.Errorf("unable to create the GitOps repository Secret: %w", err)
	}
	deps = append(deps, repoSecret)
	argocd, err := newRelease(ctx, name+ArgoCDSuffix, release{
		name: ArgoCDRelease, chart: ArgoCDChart, repo: ArgoCDRepo, version: g.ArgoCD.Version, namespace: ArgoCDNamespace,
		values: ArgoCDValues(g.KsopsImage, g.SopsAgeKey != nil, g.ArgoCD.Values), timeoutSeconds: argoCDTimeoutSec,
	}, opts(deps...)...)
	if err != nil {
		return err
	}
	appDeps := []pulumi.Resource{argocd}
	for _, n := range g.PrivilegedNamespaces {
		// A patch (server-side apply of the labels): it creates the
		// namespace when missing, and its deletion (the namespace left out
		// of the list, the section removed) takes only the labels away,
		// never the namespace and its workloads.
		patch, err := corev1.NewNamespacePatch(ctx, name+PrivilegedNsSuffix+n, &corev1.NamespacePatchArgs{
			Metadata: &metav1.ObjectMetaPatchArgs{
				Name: pulumi.String(n),
				Labels: pulumi.StringMap{
					"pod-security.kubernetes.io/enforce": pulumi.String("privileged"),
					"pod-security.kubernetes.io/audit":   pulumi.String("privileged"),
					"pod-security.kubernetes.io/warn":    pulumi.String("privileged"),
				},
				Annotations: pulumi.StringMap{patchForceAnnotation: pulumi.String("true")},
			},
		}, opts()...)
		if err != nil {
			return fmt.Errorf("unable to label namespace %q privileged: %w", n, err)
		}
		appDeps = append(appDeps, patch)
	}
	_, err = apiextensions.NewCustomResource(ctx, name+RootAppSuffix, &apiextensions.CustomResourceArgs{
		ApiVersion:  pulumi.String("argoproj.io/v1alpha1"),
		Kind:        pulumi.String("Application"),
		Metadata:    meta(RootApplicationName, nil),
		OtherFields: map[string]any{"spec": RootApplication(repo)},
	}, opts(appDeps...)...)
	if err != nil {
		return fmt.Errorf("unable to create the root Application: %w", err)
	}
	return nil
}
