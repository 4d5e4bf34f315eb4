package talos

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"

	"github.com/fluodata/talos-pulumi/internal/rollout"
)

// gate runs before a node's config apply updates it: every node updated
// before it in this run came back healthy, the node is upgraded when its
// installer image changed or it runs another Talos version, and the etcd
// gate holds. Its error stops the rollout at this node.
func (d *dayTwo) gate(args *pulumi.ResourceHookArgs) error {
	n, err := d.node(args.Name)
	if err != nil {
		return err
	}
	if err := d.earlierSettled(n); err != nil {
		return err
	}
	ctx, cancel := d.hookContext()
	defer cancel()
	ops, err := d.ops(ctx, args.URN)
	if err != nil {
		return err
	}
	if err := d.kubernetesPhase(ctx, ops, args); err != nil {
		return err
	}
	oldImage, newImage := installerImage(args.OldInputs), installerImage(args.NewInputs)
	running, err := ops.API.Version(ctx, n.IP)
	if err != nil {
		// The etcd gate's error names the member at fault when the node
		// (or another control plane) is down: it says more.
		if gerr := ops.Gate(ctx, n); gerr != nil {
			return gerr
		}
		return fmt.Errorf("unable to read the Talos version of %s: %w", n, err)
	}
	if newImage != "" && (oldImage != newImage || running != d.talos) {
		// A new image of the same version is a new schematic: the upgrade
		// reinstalls the node. A node already on a new version got there
		// with the new image (a resumed rollout): it is not upgraded again.
		oldRepo, oldTag := SplitImage(oldImage)
		newRepo, newTag := SplitImage(newImage)
		force := oldImage != "" && oldTag == newTag && oldRepo != newRepo && running == d.talos
		if err := ops.UpgradeTalos(ctx, n, newImage, d.talos, force); err != nil {
			return err
		}
		if err := d.checkSecureBoot(ctx, ops, n); err != nil {
			return err
		}
	}
	// The etcd gate right before the config is applied.
	if err := ops.Gate(ctx, n); err != nil {
		return err
	}
	reboot := d.dryRun(ctx, ops, n)
	d.mu.Lock()
	d.booted[n.Name] = ops.BootTime(ctx, n)
	d.reboots[n.Name] = reboot
	d.mu.Unlock()
	return nil
}

// dryRun asks the node whether the new config makes it reboot, as the
// Talos provider itself asks before an apply: the settle hook then waits
// for a reboot that starts late and watches for none when none comes. An
// answer it cannot get leaves the watch of RebootStart.
func (d *dayTwo) dryRun(ctx context.Context, ops rollout.Ops, n rollout.Node) rollout.Reboot {
	nc, err := d.configs[n.Name].get(ctx)
	var config []byte
	if err == nil {
		config, err = mergeConfig(nc)
	}
	reboot := false
	if err == nil {
		reboot, err = ops.API.ApplyDryRun(ctx, n.IP, config)
	}
	switch {
	case err != nil:
		_ = d.ctx.Log.Info(fmt.Sprintf("%s: unable to tell whether its new config needs a reboot (%v): watching for one", n, err), nil)
		return rollout.RebootUnknown
	case reboot:
		_ = d.ctx.Log.Info(fmt.Sprintf("%s needs a reboot for its new config (Talos's dry run)", n), nil)
		return rollout.RebootNeeded
	}
	return rollout.RebootNotNeeded
}

// kubernetesPhase runs once per run, at the first gate, when the change
// moves the kubelet to another image (a Kubernetes version change): every
// control plane's API server, controller manager and scheduler move first,
// one control plane at a time, each API server answering with the new
// version before the next, while every kubelet stays on its version. The
// applies then move the kubelets, node by node, in the rollout's order. So
// no kubelet ever runs a version newer than an API server. Its error stops
// the rollout and is given to every later gate of the run.
func (d *dayTwo) kubernetesPhase(ctx context.Context, ops rollout.Ops, args *pulumi.ResourceHookArgs) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.phase != nil {
		return *d.phase
	}
	err := d.runKubernetesPhase(ctx, ops, args)
	d.phase = &err
	return err
}

func (d *dayTwo) runKubernetesPhase(ctx context.Context, ops rollout.Ops, args *pulumi.ResourceHookArgs) error {
	oldKubelet := kubeletImage(baseConfig(args.OldInputs))
	newKubelet := kubeletImage(baseConfig(args.NewInputs))
	if oldKubelet == "" || newKubelet == "" || oldKubelet == newKubelet {
		return nil
	}
	d.upgraded = true // d.mu held (kubernetesPhase)
	// The kubelets stay on what they run: the old config with the user's
	// patches, which may name a kubelet image of their own.
	running, err := mergedKubelet(args.OldInputs)
	if err != nil {
		return fmt.Errorf("unable to read the kubelet image the nodes run: %w", err)
	}
	// Before anything moves: no object of an API the new version no
	// longer serves (talosctl upgrade-k8s's check).
	_, from := SplitImage(oldKubelet)
	if err := ops.CheckRemovedAPIs(ctx, from, d.kubernetes, d.deps.RemovedAPIs); err != nil {
		return fmt.Errorf("unable to upgrade Kubernetes to %s (cluster.kubernetesVersion): %w", d.kubernetes, err)
	}
	pulls, err := d.prePulls(ctx)
	if err != nil {
		return err
	}
	if err := ops.PrePull(ctx, pulls); err != nil {
		return err
	}
	for _, ip := range d.cps {
		n := d.byIP(ip)
		if !d.configured(ip) {
			// Added in this run: its first config, applied after the
			// running control planes', brings the new version already.
			_ = d.ctx.Log.Info(fmt.Sprintf("%s joins in this run: its first config brings Kubernetes %s", n, d.kubernetes), nil)
			continue
		}
		nc, err := d.configs[n.Name].get(ctx)
		if err != nil {
			return fmt.Errorf("unable to read the new config of %s: %w", n, err)
		}
		config, err := pinnedConfig(nc, running)
		if err != nil {
			return fmt.Errorf("unable to build the control-plane config of %s: %w", n, err)
		}
		if err := ops.UpgradeControlPlane(ctx, n, config, d.kubernetes); err != nil {
			return err
		}
	}
	return nil
}

// earlierSettled refuses to touch a node while a node updated before it in
// this run did not come back healthy (an after hook's error is only a
// warning to the engine).
func (d *dayTwo) earlierSettled(n rollout.Node) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for name, err := range d.settled {
		if err != nil {
			return fmt.Errorf("unable to touch %s: node %s did not come back healthy after its config apply (%w); fix it and run `pulumi up` again", n, name, err)
		}
	}
	return nil
}

// settle runs after a node's config apply: it waits until the node is back
// (from a reboot the change needed) and healthy.
func (d *dayTwo) settle(args *pulumi.ResourceHookArgs) error {
	n, err := d.node(args.Name)
	if err != nil {
		return err
	}
	ctx, cancel := d.hookContext()
	defer cancel()
	ops, err := d.ops(ctx, args.URN)
	if err == nil {
		d.mu.Lock()
		booted, reboot := d.booted[n.Name], d.reboots[n.Name]
		d.mu.Unlock()
		err = ops.SettleAfter(ctx, n, booted, d.kubernetes, reboot)
	}
	if err == nil {
		err = d.checkSecureBoot(ctx, ops, n)
	}
	d.mu.Lock()
	d.settled[n.Name] = err
	d.mu.Unlock()
	return err
}

// checkSecureBoot checks, on a Secure Boot cluster, that the node came
// back under Secure Boot with STATE and EPHEMERAL encrypted by its TPM: a
// node that booted without it would otherwise be found only by its
// volumes that never unlock.
func (d *dayTwo) checkSecureBoot(ctx context.Context, ops rollout.Ops, n rollout.Node) error {
	if !d.secureBoot {
		return nil
	}
	return ops.CheckSecureBoot(ctx, n, rollout.SecureBootVolumes)
}

// prePulls are the images of the new Kubernetes version each running node
// pulls before the first restarts (upgrade-k8s's prePullImages): every
// control plane its API server's, controller manager's and scheduler's,
// every node its kubelet's; read from a running control plane's new config
// (a worker's has no API server: its image would be the machinery's
// default; the user's patches may name other images). A node that joins
// in this run pulls its own.
func (d *dayTwo) prePulls(ctx context.Context) ([]rollout.Pull, error) {
	var cfg config.Provider
	for _, ip := range d.cps {
		if !d.configured(ip) {
			continue
		}
		nc, err := d.configs[d.byIP(ip).Name].get(ctx)
		var merged []byte
		if err == nil {
			merged, err = mergeConfig(nc)
		}
		if err == nil {
			cfg, err = configloader.NewFromBytes(merged)
		}
		if err != nil {
			return nil, fmt.Errorf("unable to read the images of Kubernetes %s from the new config of %s: %w", d.kubernetes, d.byIP(ip), err)
		}
		break
	}
	if cfg == nil {
		return nil, nil // no running control plane: nothing runs to restart
	}
	nodes := slices.Collect(maps.Values(d.byApply))
	rank := func(n rollout.Node) int {
		if n.Role == RoleControlPlane {
			return 0
		}
		return 1
	}
	slices.SortFunc(nodes, func(a, b rollout.Node) int { return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a.Name, b.Name)) })
	var pulls []rollout.Pull
	for _, n := range nodes {
		if !d.ranBefore(n) {
			continue
		}
		if n.Role == RoleControlPlane {
			for _, image := range []string{cfg.Cluster().APIServer().Image(), cfg.Cluster().ControllerManager().Image(), cfg.Cluster().Scheduler().Image()} {
				pulls = append(pulls, rollout.Pull{Node: n, Image: image})
			}
		}
		pulls = append(pulls, rollout.Pull{Node: n, Image: cfg.Machine().Kubelet().Image(), System: true})
	}
	return pulls, nil
}
