package talos

import (
	"fmt"
	"strconv"

	"github.com/pulumi/pulumi-command/sdk/go/command/local"
	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumiverse/pulumi-talos/sdk/go/talos/client"
	"github.com/pulumiverse/pulumi-talos/sdk/go/talos/cluster"
	"github.com/pulumiverse/pulumi-talos/sdk/go/talos/machine"

	"github.com/fluodata/talos-pulumi/internal/kubeapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
)

// build is one construction of a TalosCluster, step by step: the machines
// (secrets, configs, the applies in rollout order with their day-2 hooks,
// the memberships), access to the cluster (bootstrap, kubeconfig,
// talosconfig), the add-ons and waits, and the outputs read from the nodes.
type build struct {
	ctx    *pulumi.Context
	name   string
	args   *ClusterArgs
	deps   Deps
	c      *Cluster
	parent pulumi.ResourceOption

	day2       *dayTwo
	secrets    *machine.Secrets
	base       map[Role]pulumi.StringOutput
	kubeconfig *cluster.Kubeconfig
	// kubeconfigRaw is the kubeconfig this machine uses: the resource's,
	// its server replaced where the platform publishes the API elsewhere.
	kubeconfigRaw pulumi.StringOutput
	talosconfig   pulumi.StringOutput
	nodeIPs       pulumi.StringMap
}

// clusterOpts are the options of the resources of the whole cluster: the
// component as parent, deleted with what takes the cluster (DeletedWith).
func (b *build) clusterOpts(extra ...pulumi.ResourceOption) []pulumi.ResourceOption {
	o := []pulumi.ResourceOption{b.parent}
	if b.args.DeletedWith != nil {
		o = append(o, pulumi.DeletedWith(b.args.DeletedWith))
	}
	return append(o, extra...)
}

// machines registers the machine secrets, one base config per role, the
// day-2 state its hooks share, and each node's config apply and membership
// in rollout order.
func (b *build) machines() error {
	ctx, name, args, c := b.ctx, b.name, b.args, b.c
	secrets, err := NewMachineSecrets(ctx, name+SecretsSuffix, args.Cluster.TalosVersion, b.parent)
	if err != nil {
		return err
	}
	c.Secrets, b.secrets = secrets, secrets

	// One base config per role, without patches: it holds key material and
	// is a secret, while every patch goes to the apply in plain sight.
	b.base = map[Role]pulumi.StringOutput{}
	for _, role := range []Role{RoleControlPlane, RoleWorker} {
		b.base[role] = machine.GetConfigurationOutput(ctx, machine.GetConfigurationOutputArgs{
			ClusterName:       pulumi.String(args.Cluster.Name),
			ClusterEndpoint:   pulumi.String(args.Cluster.Endpoint),
			MachineType:       pulumi.String(string(role)),
			MachineSecrets:    secrets.MachineSecrets,
			TalosVersion:      pulumi.String(args.Cluster.TalosVersion),
			KubernetesVersion: pulumi.String(args.Cluster.KubernetesVersion),
			Docs:              pulumi.Bool(false),
			Examples:          pulumi.Bool(false),
		}, pulumi.Parent(c)).MachineConfiguration()
	}

	// The day-2 hooks: they run when a node's apply updates a running
	// node (never on the first up) and when a node leaves the stack.
	b.day2 = newDayTwo(ctx, b.deps, args, name+"-apply-")
	if args.Leaver != nil {
		args.Leaver.day2.set(b.day2, nil)
	}
	cc0 := secrets.ClientConfiguration
	pulumi.All(cc0.CaCertificate(), cc0.ClientCertificate(), cc0.ClientKey()).ApplyT(func(xs []any) error {
		b.day2.credentials.set(talosapi.CredentialsFromClientConfiguration(xs[0].(string), xs[1].(string), xs[2].(string)))
		return nil
	})
	// The applies update one batch at a time, each batch after the one
	// before it: every control plane alone, in order, then the workers in
	// batches. A change reaches one control plane at a time, behind the
	// hooks' gates, and a failure stops the rollout where it is.
	var previous, all []pulumi.Resource
	for _, batch := range args.Cluster.Policy().Batches(args.Nodes) {
		var current []pulumi.Resource
		for _, n := range batch {
			apply, err := b.node(n, previous)
			if err != nil {
				return err
			}
			current = append(current, apply)
		}
		previous = current
		all = append(all, current...)
	}
	if err := b.manifests(all); err != nil {
		return err
	}
	// The removal hook's name is registered on every run, bound or not:
	// the memberships of earlier versions name it in their state.
	if _, err := b.deps.Hooks.Bind(name+RemoveHookSuffix, BeforeDelete, "", b.day2.remove); err != nil {
		return err
	}
	members := make([]pulumi.Resource, 0, len(args.Nodes))
	for _, n := range args.Nodes {
		members = append(members, c.Members[n.Name])
	}
	return b.roster(members)
}

// node registers one node's config apply, after the batch before its own,
// with the day-2 hooks, and its membership.
func (b *build) node(n NodeSpec, previous []pulumi.Resource) (pulumi.Resource, error) {
	ctx, name, args, day2, hooks := b.ctx, b.name, b.args, b.day2, b.deps.Hooks
	spec := args.PatchSpec()
	applyName := name + "-apply-" + n.Name
	var applyHooks []pulumi.ResourceOption
	for _, h := range []struct {
		suffix string
		point  HookPoint
		fn     pulumi.ResourceHookFunction
	}{
		{GateHookSuffix, BeforeUpdate, day2.gate},
		{SettleHookSuffix, AfterUpdate, day2.settle},
		{RejoinHookSuffix, BeforeCreate, day2.rejoin},
		{RejoinedHookSuffix, AfterCreate, day2.rejoined},
	} {
		bound, err := hooks.Bind(name+h.suffix, h.point, applyName, h.fn)
		if err != nil {
			return nil, err
		}
		applyHooks = append(applyHooks, bound)
	}
	installer := args.InstallerImage
	if own, ok := args.Installers[n.Name]; ok {
		installer = own
	}
	patches := installer.ToStringOutput().ApplyT(func(image string) []string {
		return NodePatches(spec, n, image)
	}).(pulumi.StringArrayOutput)
	if args.Cluster.SecretPatches {
		patches = pulumi.ToSecret(patches).(pulumi.StringArrayOutput)
	}
	pulumi.All(b.base[n.Role], patches).ApplyT(func(xs []any) error {
		day2.configs[n.Name].set(nodeConfig{base: xs[0].(string), patches: xs[1].([]string)}, nil)
		return nil
	})
	apply, err := newApply(ctx, applyName, args, n, b.secrets, b.base[n.Role], patches, applyOpts{
		parent: b.parent, after: previous, hooks: applyHooks,
	})
	if err != nil {
		return nil, err
	}
	b.c.Applies[n.Name] = apply
	// The membership: created after the apply, so deleted before
	// it and before the machine; deleted with the secrets, so a
	// whole-stack destroy skips it. Only a node reset on removal has a
	// hook on its deletion (see dayTwo.remove): a cluster removed from a
	// program can delete the others, as no hook of theirs is looked for.
	memberName := name + MemberSuffix + n.Name
	memberOpts := []pulumi.ResourceOption{b.parent, pulumi.DependsOn([]pulumi.Resource{apply}), pulumi.DeletedWith(b.secrets)}
	if args.resets(n) {
		remove, err := hooks.Bind(name+RemoveHookSuffix, BeforeDelete, memberName, day2.remove)
		if err != nil {
			return nil, err
		}
		memberOpts = append(memberOpts, remove)
	}
	member, err := local.NewCommand(ctx, memberName, &local.CommandArgs{
		Environment: memberEnv(n, args.resets(n), args.Cluster.encryption()),
	}, memberOpts...)
	if err != nil {
		return nil, fmt.Errorf("unable to create the membership of node %q: %w", n.Name, err)
	}
	b.c.Members[n.Name] = member
	if n.Role == RoleWorker {
		if err := b.taints(n, apply); err != nil {
			return nil, err
		}
	}
	return apply, nil
}

// taints registers a worker's taints resource after its apply: its
// create or update sets them on the Node as the cluster's admin, which a
// worker's own credentials may not (see TaintsPatch). The hook runs before
// the step: a failure fails it, so the next up tries again. Deleted with
// the secrets (a whole-stack destroy skips it); a removed worker's goes
// without a call (its Node is deleted).
func (b *build) taints(n NodeSpec, apply pulumi.Resource) error {
	taintsName := b.name + TaintsSuffix + n.Name
	opts := []pulumi.ResourceOption{b.parent, pulumi.DependsOn([]pulumi.Resource{apply}), pulumi.DeletedWith(b.secrets)}
	for _, point := range []HookPoint{BeforeCreate, BeforeUpdate} {
		hook, err := b.deps.Hooks.Bind(b.name+TaintsHookSuffix, point, taintsName, b.day2.setTaints)
		if err != nil {
			return err
		}
		opts = append(opts, hook)
	}
	if _, err := local.NewCommand(b.ctx, taintsName, &local.CommandArgs{Environment: taintsEnv(n)}, opts...); err != nil {
		return fmt.Errorf("unable to create the taints of node %q: %w", n.Name, err)
	}
	return nil
}

// access registers the bootstrap of etcd on the first control plane, the
// kubeconfig and the talosconfig.
func (b *build) access() error {
	ctx, name, args, c := b.ctx, b.name, b.args, b.c
	first := args.Nodes[0]
	// Bootstrap etcd once, on the first control plane, after its config is
	// applied. Its update and delete are no-ops, and re-creating it on a live
	// cluster fails: nothing here ever replaces it.
	bootstrap, err := machine.NewBootstrap(ctx, name+BootstrapSuffix, &machine.BootstrapArgs{
		ClientConfiguration: b.secrets.ClientConfiguration,
		Node:                pulumi.String(first.IP),
		Endpoint:            pulumi.String(args.talosAddress(first.IP)),
	}, b.clusterOpts(pulumi.DependsOn([]pulumi.Resource{c.Applies[first.Name]}))...)
	if err != nil {
		return fmt.Errorf("unable to create bootstrap: %w", err)
	}
	c.Bootstrap = bootstrap

	cc := b.secrets.ClientConfiguration
	// A resource, not the data source: it is kept in state and renewed when
	// its client certificate nears expiry, instead of being fetched on every
	// preview.
	kubeconfig, err := cluster.NewKubeconfig(ctx, name+"-kubeconfig", &cluster.KubeconfigArgs{
		ClientConfiguration: cluster.KubeconfigClientConfigurationArgs{
			CaCertificate: cc.CaCertificate(), ClientCertificate: cc.ClientCertificate(), ClientKey: cc.ClientKey(),
		},
		Node:     pulumi.String(first.IP),
		Endpoint: pulumi.String(args.talosAddress(first.IP)),
	}, b.clusterOpts(pulumi.DependsOn([]pulumi.Resource{bootstrap}))...)
	if err != nil {
		return fmt.Errorf("unable to create kubeconfig: %w", err)
	}

	var cpIPs, allIPs pulumi.StringArray
	b.nodeIPs = pulumi.StringMap{}
	for _, n := range args.Nodes {
		if n.Role == RoleControlPlane {
			cpIPs = append(cpIPs, pulumi.String(args.talosAddress(n.IP)))
		}
		allIPs = append(allIPs, pulumi.String(n.IP))
		b.nodeIPs[n.Name] = pulumi.String(n.IP)
	}
	// talosconfig: the control planes as endpoints (not the VIP, which needs
	// a healthy cluster) and every node, which a generated one leaves empty.
	b.talosconfig = client.GetConfigurationOutput(ctx, client.GetConfigurationOutputArgs{
		ClusterName: pulumi.String(args.Cluster.Name),
		ClientConfiguration: client.GetConfigurationClientConfigurationArgs{
			CaCertificate: cc.CaCertificate(), ClientCertificate: cc.ClientCertificate(), ClientKey: cc.ClientKey(),
		},
		Endpoints: cpIPs,
		Nodes:     allIPs,
	}, pulumi.Parent(c)).TalosConfig()
	b.kubeconfig = kubeconfig
	b.kubeconfigRaw = kubeconfig.KubeconfigRaw
	if server := args.kubeServer(args.Cluster.Endpoint); server != args.Cluster.Endpoint {
		// This machine reaches the API elsewhere than the nodes do: the
		// kubeconfig it uses and hands out names that address.
		b.kubeconfigRaw = kubeconfig.KubeconfigRaw.ApplyT(func(kc string) (string, error) {
			out, err := kubeapi.SetServer([]byte(kc), server)
			return string(out), err
		}).(pulumi.StringOutput)
	}
	return nil
}

// addons registers the wait for the Kubernetes API, the Kubernetes
// provider, Cilium and the serving-certificate approver, and the wait for
// every node to be Ready.
func (b *build) addons() error {
	ctx, name, args, c, deps, kubeconfig := b.ctx, b.name, b.args, b.c, b.deps, b.kubeconfig
	bootstrap := c.Bootstrap
	var err error
	// pulumi-kubernetes decides once, when the provider is configured,
	// whether the cluster is reachable, and refuses every Helm release of
	// that run if not. Right after the bootstrap the API server is minutes
	// away, so the provider waits for the API (a provider's registration
	// waits until its dependencies are created).
	c.APIReady, err = newKubeWait(ctx, deps, name, name+APIReadySuffix, kubeWait{
		kubeconfig: b.kubeconfigRaw, waitFor: "api", timeoutSecs: apiReadyTimeoutSecs,
		// Once created it never runs again: a later `up` finds the API up,
		// and a renewed kubeconfig is no reason to wait.
		triggers: pulumi.Array{pulumi.String(args.Cluster.Endpoint)},
	}, b.clusterOpts(pulumi.DependsOn([]pulumi.Resource{bootstrap, kubeconfig}))...)
	if err != nil {
		return err
	}
	k8s, err := kubernetes.NewProvider(ctx, name+K8sProviderSuffix, &kubernetes.ProviderArgs{
		Kubeconfig:        b.kubeconfigRaw,
		DeleteUnreachable: pulumi.Bool(true),
	}, b.parent, pulumi.DependsOn([]pulumi.Resource{kubeconfig, c.APIReady}))
	if err != nil {
		return fmt.Errorf("unable to create kubernetes provider: %w", err)
	}
	c.KubernetesProvider = k8s

	// Helm waits (no skipAwait) until Cilium's agents and operator are ready:
	// nodes turn Ready once their agent runs, so `up` returns a usable cluster.
	c.Cilium, err = newRelease(ctx, name+CiliumSuffix, release{
		name: CiliumRelease, chart: CiliumChart, repo: CiliumRepo, version: args.Cluster.Cilium.Version,
		values: CiliumValues(len(args.Nodes), MergeValues(LoadBalancerCiliumValues(args.Cluster.LoadBalancer), args.Cluster.Cilium.Values)), timeoutSeconds: ciliumTimeoutSeconds,
	}, append(b.clusterOpts(pulumi.Provider(k8s), pulumi.DependsOn([]pulumi.Resource{kubeconfig})), b.addonOpts()...)...)
	if err != nil {
		return err
	}

	lbs, err := b.loadBalancer(k8s, []pulumi.Resource{c.Cilium})
	if err != nil {
		return err
	}

	var extraIPs []string
	if args.Cluster.VIP != "" {
		extraIPs = append(extraIPs, args.Cluster.VIP)
	}
	c.CertApprover, err = newRelease(ctx, name+CertApproverSuffix, release{
		name: ApproverRelease, chart: ApproverChart, repo: ApproverRepo, version: args.Cluster.CertApprover.Version,
		values: ApproverValues(args.Nodes, extraIPs, args.Cluster.CertApprover.Values), timeoutSeconds: approverTimeoutSecs,
	}, append(b.clusterOpts(pulumi.Provider(k8s), pulumi.DependsOn([]pulumi.Resource{c.Cilium})), b.addonOpts()...)...)
	if err != nil {
		return err
	}
	if err := b.gitOps(k8s, append([]pulumi.Resource{c.Cilium, c.CertApprover}, lbs...)); err != nil {
		return err
	}

	if args.Cluster.EtcdBackup != nil {
		// After Cilium (its pods need the network) and every control
		// plane's apply (they define the Talos service account's kind).
		after := []pulumi.Resource{c.Cilium}
		for _, n := range args.Nodes {
			if n.Role == RoleControlPlane {
				after = append(after, c.Applies[n.Name])
			}
		}
		if err := b.etcdBackup(k8s, after); err != nil {
			return err
		}
	}

	// Ready nodes: the kubelet and Cilium run on every node. Re-run only
	// when the cluster gains or loses nodes (a renewed kubeconfig is no
	// reason to wait again).
	c.NodesReady, err = newKubeWait(ctx, deps, name, name+NodesReadySuffix, kubeWait{
		kubeconfig: b.kubeconfigRaw, waitFor: "nodes", timeoutSecs: nodesReadyTimeoutSecs,
		env:      pulumi.StringMap{"NODE_COUNT": pulumi.String(strconv.Itoa(len(args.Nodes)))},
		triggers: pulumi.Array{pulumi.String(strconv.Itoa(len(args.Nodes)))},
	}, b.clusterOpts(pulumi.DependsOn([]pulumi.Resource{c.CertApprover}))...)
	if err != nil {
		return err
	}
	return nil
}

// outputs sets the component's outputs: the versions and nodes are read
// from the nodes once the rollout is done and every node is Ready (what
// they run, not what the config asks for), and the kubeconfig resolves
// only once the cluster is usable.
func (b *build) outputs() {
	args, c, day2 := b.args, b.c, b.day2
	c.Talosconfig = pulumi.ToSecret(b.talosconfig).(pulumi.StringOutput)
	c.Endpoint = pulumi.String(args.Cluster.Endpoint).ToStringOutput()
	c.NodeIPs = b.nodeIPs.ToStringMapOutput()
	configs := pulumi.StringMap{}
	for _, n := range args.Nodes {
		configs[n.Name] = c.Applies[n.Name].MachineConfiguration
	}
	c.MachineConfigurations = pulumi.ToSecret(configs.ToStringMapOutput()).(pulumi.StringMapOutput)
	done := []any{b.kubeconfigRaw, c.NodesReady.Stdout}
	for _, n := range args.Nodes {
		done = append(done, c.Applies[n.Name].ID(), c.Members[n.Name].ID())
	}
	// Read once; the kubeconfig among the inputs is secret, the versions
	// are not.
	observed := pulumi.Unsecret(pulumi.All(done...).ApplyT(func(xs []any) any {
		return day2.observe(xs[0].(string), args.Nodes)
	}))
	c.ClusterName = pulumi.String(args.Cluster.Name).ToStringOutput()
	c.TalosVersion = observed.ApplyT(func(o any) string { return o.(observation).talos }).(pulumi.StringOutput)
	c.KubernetesVersion = observed.ApplyT(func(o any) string { return o.(observation).kubernetes }).(pulumi.StringOutput)
	c.Nodes = observed.ApplyT(func(o any) map[string]NodeStatus {
		seen := o.(observation).nodes
		out := make(map[string]NodeStatus, len(seen))
		// Where each node's data volume is, and its disk's size, which
		// the next run may not shrink.
		for _, n := range args.Nodes {
			if m, ok := seen[n.Name]; ok {
				out[n.Name] = nodeStatus(m, n, args.Cluster.DataMount(n))
			}
		}
		return out
	}).(NodeStatusMapOutput)
	// The kubeconfig output resolves only after the cluster is usable, so
	// whoever reads it (a stack export) waits for Cilium, the approver and
	// Ready nodes.
	c.Kubeconfig = pulumi.ToSecret(pulumi.All(b.kubeconfigRaw, c.CertApprover.Status, c.NodesReady.Stdout).ApplyT(func(xs []any) string {
		return xs[0].(string)
	})).(pulumi.StringOutput)
}
