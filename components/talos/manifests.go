package talos

import (
	"fmt"

	"github.com/pulumi/pulumi-command/sdk/go/command/local"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

const (
	// ManifestsSuffix names the cluster's bootstrap-manifests resource
	// (after the cluster's name): it carries the Kubernetes version whose
	// manifests the cluster has, and its hook (ManifestsHookSuffix)
	// updates them when the version moves.
	ManifestsSuffix = "-manifests"
	// ManifestsHookSuffix names the hook that, before the
	// bootstrap-manifests resource is created or updated, applies the
	// manifests Talos renders (see dayTwo.syncManifests).
	ManifestsHookSuffix = "-manifests-sync"
)

// manifestsEnvKey holds the Kubernetes version in the resource's
// environment.
const manifestsEnvKey = "KUBERNETES_VERSION"

// manifests registers the bootstrap-manifests resource after every apply,
// so that its hook runs once the control planes and every kubelet are on
// the new version, as upgrade-k8s syncs them last. The hook runs before
// the step: a failure or a cancelled run leaves the old version in the
// state, and the next up tries again; an up that moves no version makes
// no step, so no call.
func (b *build) manifests(applies []pulumi.Resource) error {
	name := b.name + ManifestsSuffix
	opts := []pulumi.ResourceOption{b.parent, pulumi.DependsOn(applies), pulumi.DeletedWith(b.secrets)}
	for _, point := range []HookPoint{BeforeCreate, BeforeUpdate} {
		hook, err := b.deps.Hooks.Bind(b.name+ManifestsHookSuffix, point, name, b.day2.syncManifests)
		if err != nil {
			return err
		}
		opts = append(opts, hook)
	}
	env := pulumi.StringMap{manifestsEnvKey: pulumi.String(b.args.Cluster.KubernetesVersion)}
	if _, err := local.NewCommand(b.ctx, name, &local.CommandArgs{Environment: env}, opts...); err != nil {
		return fmt.Errorf("unable to create the bootstrap manifests of cluster %q: %w", b.name, err)
	}
	return nil
}

// manifestsVersion is the Kubernetes version the resource's inputs
// carry; "" when there are none (a create).
func manifestsVersion(inputs resource.PropertyMap) string {
	env := PlainValue(inputs["environment"])
	if !env.IsObject() {
		return ""
	}
	if v := PlainValue(env.ObjectValue()[manifestsEnvKey]); v.IsString() {
		return v.StringValue()
	}
	return ""
}

// syncManifests runs before the bootstrap-manifests resource is created
// or updated. An update moves the Kubernetes version: the manifests are
// synced. A create syncs only when this run moved the kubelets (a stack's
// first up with this release that upgrades too); else Talos applied them
// at bootstrap, or nothing moved. Its error fails the step.
func (d *dayTwo) syncManifests(args *pulumi.ResourceHookArgs) error {
	old := manifestsVersion(args.OldInputs)
	d.mu.Lock()
	upgraded := d.upgraded
	d.mu.Unlock()
	if old == manifestsVersion(args.NewInputs) || (old == "" && !upgraded) {
		return nil
	}
	// The settle waits' errors are only warnings to the engine: a node
	// that did not come back is not left behind by the sync.
	d.mu.Lock()
	for name, err := range d.settled {
		if err != nil {
			d.mu.Unlock()
			return fmt.Errorf("unable to update the bootstrap manifests for Kubernetes %s (cluster.kubernetesVersion): node %s did not come back healthy after its config apply (%w); fix it and run up again", d.kubernetes, name, err)
		}
	}
	d.mu.Unlock()
	ctx, cancel := d.hookContext()
	defer cancel()
	ops, err := d.ops(ctx, args.URN)
	if err == nil {
		err = ops.SyncManifests(ctx)
	}
	if err != nil {
		return fmt.Errorf("unable to update the bootstrap manifests for Kubernetes %s (cluster.kubernetesVersion): %w; the nodes run it already, run up again to retry the update", d.kubernetes, err)
	}
	return nil
}
