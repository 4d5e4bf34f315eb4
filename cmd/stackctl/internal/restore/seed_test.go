package restore_test

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/restore"
)

// kept are the fixture's resources a seed keeps, in the backup's order:
// the root, the components, the providers the kept resources use, the
// secrets, and what etcd holds (bootstrap, kubeconfig, Kubernetes
// provider, release).
func (f *fixture) kept() []string {
	return []string{f.Root, f.Platform, f.Cluster, f.TalosProvider, f.CommandProvider, f.Secrets, f.Bootstrap, f.Kubeconfig, f.APIReady, f.K8sProvider, f.Cilium, f.NodesReady}
}

// dropped are those `up` makes again: the machines, their configs and
// memberships, and the providers only they use.
func (f *fixture) dropped() []string {
	return []string{f.ProxmoxProvider, f.VM, f.Apply, f.Member}
}

func compact(t *testing.T, raw []byte) string {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, json.Compact(&b, raw))
	return b.String()
}

// A seed of the program's backup into a new stack keeps, in the backup's
// order, the root, the components, the secrets, the bootstrap and what
// depends on it (kubeconfig, Kubernetes provider, release, the waits), and
// the providers these use; it drops the machines, their configs and
// memberships and the providers only they use.
func TestSeedKeepsWhatEtcdHoldsAndDropsWhatUpMakesAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(testStack)
	seed, err := restore.Seed(emptyExport(t), f.Export(t), testStack)
	require.NoError(t, err)

	require.Equal(t, f.Bootstrap, seed.Bootstrap)
	require.Equal(t, f.kept(), seed.Kept, "kept, in the backup's order")
	require.Equal(t, len(f.dropped()), seed.Dropped)
	require.Equal(t, len(f.Resources), len(seed.Kept)+seed.Dropped)

	got := parse(t, seed.State)
	require.Equal(t, f.kept(), got.urns(), "the seeded state holds exactly the kept resources, in order")
	for _, u := range f.dropped() {
		require.NotContains(t, got.ByURN, u)
	}

	// A new stack whose export has "resources": [] is as empty.
	empty := exportOf(t, []map[string]any{}, nil)
	again, err := restore.Seed(empty, f.Export(t), testStack)
	require.NoError(t, err)
	require.Equal(t, seed.Kept, again.Kept)
}

// The seeded state references nothing the seed dropped (dependencies,
// property dependencies, deletedWith, parent, provider), so that `pulumi
// stack import` takes it; the bootstrap keeps its dependency on the
// secrets but not on the config apply, the Kubernetes provider still
// depends on the API wait, which is kept tainted (the engine registers the
// provider in the restore's first up, which excludes the wait: seen with
// the real CLI in make e2e); the root has no outputs, the operation in
// flight is gone, and everything else of the kept resources (their
// encrypted secrets) and of the deployment (its secrets provider) is as
// the backup has it.
func TestSeededStateReferencesOnlyWhatItKeeps(t *testing.T) {
	t.Parallel()
	f := newFixture(testStack)
	backupState := f.Export(t)
	seed, err := restore.Seed(emptyExport(t), backupState, testStack)
	require.NoError(t, err)
	got, orig := parse(t, seed.State), parse(t, backupState)

	kept := map[string]bool{}
	for _, u := range f.kept() {
		kept[u] = true
	}
	refs := func(r map[string]any) []string {
		var out []string
		for _, d := range r["dependencies"].([]any) {
			out = append(out, d.(string))
		}
		for _, ds := range r["propertyDependencies"].(map[string]any) {
			for _, d := range ds.([]any) {
				out = append(out, d.(string))
			}
		}
		return out
	}
	for _, u := range f.kept() {
		r := got.ByURN[u]
		if _, ok := r["dependencies"]; !ok {
			r["dependencies"] = []any{}
		}
		if _, ok := r["propertyDependencies"]; !ok {
			r["propertyDependencies"] = map[string]any{}
		}
		for _, ref := range refs(r) {
			require.True(t, kept[ref], "%s depends on %s, which the seed dropped", u, ref)
		}
		for _, k := range []string{"deletedWith", "parent"} {
			if v, ok := r[k].(string); ok {
				require.True(t, kept[v], "%s's %s is %s, which the seed dropped", u, k, v)
			}
		}
		if p, ok := r["provider"].(string); ok {
			require.True(t, kept[p[:strings.LastIndex(p, "::")]], "%s's provider %s was dropped", u, p)
		}
	}

	boot := got.ByURN[f.Bootstrap]
	require.Equal(t, []any{f.Secrets}, boot["dependencies"], "the bootstrap depends on the secrets, no longer on the apply")
	require.Equal(t, map[string]any{"clientConfiguration": []any{f.Secrets}}, boot["propertyDependencies"])
	k8s := got.ByURN[f.K8sProvider]
	require.Equal(t, []any{f.Kubeconfig, f.APIReady}, k8s["dependencies"], "the Kubernetes provider still waits for the API wait")
	require.Equal(t, map[string]any{"kubeconfig": []any{f.Kubeconfig}, "waitFor": []any{f.APIReady}}, k8s["propertyDependencies"])
	for _, u := range []string{f.APIReady, f.NodesReady} {
		require.Equal(t, true, got.ByURN[u]["taint"], "%s: tainted, the next whole up runs it again", u)
	}
	require.Equal(t, f.K8sProviderRef, got.ByURN[f.Cilium]["provider"])
	require.Equal(t, f.TalosProviderRef, got.ByURN[f.Bootstrap]["provider"])

	require.Equal(t, map[string]any{}, got.ByURN[f.Root]["outputs"], "the root has no outputs")
	require.NotContains(t, slices.Collect(maps.Keys(got.Fields)), "pending_operations", "the operation in flight is gone")
	require.Contains(t, slices.Collect(maps.Keys(orig.Fields)), "pending_operations")
	require.Equal(t, secretsProviders, compact(t, got.Fields["secrets_providers"]))
	require.Equal(t, compact(t, orig.Fields["manifest"]), compact(t, got.Fields["manifest"]))

	// Every other field of a kept resource is the backup's, secrets as
	// ciphertext.
	cut := map[string]bool{"dependencies": true, "propertyDependencies": true}
	tainted := map[string]bool{f.APIReady: true, f.NodesReady: true}
	for _, u := range f.kept() {
		o, g := orig.Raw[u], got.Raw[u]
		for k, v := range o {
			switch {
			case cut[k], u == f.Root && k == "outputs":
				require.Contains(t, g, k, "%s lost its %s", u, k)
			default:
				require.Contains(t, g, k, "%s lost its %s", u, k)
				require.Equal(t, compact(t, v), compact(t, g[k]), "%s's %s", u, k)
			}
		}
		if tainted[u] {
			require.Len(t, g, len(o)+1, "%s has fields the backup's has not, but its taint", u)
			continue
		}
		require.Len(t, g, len(o), "%s has fields the backup's has not", u)
	}
	require.Contains(t, compact(t, got.Raw[f.Secrets]["outputs"]), `"machineSecrets":`+encryptedSecret)
	require.Equal(t, encryptedSecret, compact(t, mustMarshal(t, got.ByURN[f.Kubeconfig]["outputs"].(map[string]any)["kubeconfigRaw"])))

	// The membership's deletedWith names the secrets, which are kept: a
	// resource the seed drops is not edited, and one it keeps loses a
	// deletedWith only if it names a dropped resource.
	withDeleted := newFixture(testStack)
	withDeleted.Resources[slices.IndexFunc(withDeleted.Resources, func(r map[string]any) bool { return r["urn"] == f.Kubeconfig })]["deletedWith"] = f.VM
	withDeleted.Resources[slices.IndexFunc(withDeleted.Resources, func(r map[string]any) bool { return r["urn"] == f.Cilium })]["deletedWith"] = f.Secrets
	seed, err = restore.Seed(emptyExport(t), withDeleted.Export(t), testStack)
	require.NoError(t, err)
	got = parse(t, seed.State)
	require.NotContains(t, got.ByURN[f.Kubeconfig], "deletedWith", "deletedWith a dropped VM is cut")
	require.Equal(t, f.Secrets, got.ByURN[f.Cilium]["deletedWith"], "deletedWith the kept secrets stays")
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// A restore never writes over a live state: a stack that still holds a
// resource (a machine) is refused, naming `make destroy` and the stack; one
// that holds only its root and a provider (what a destroy leaves) is
// seeded.
func TestSeedRefusesALiveStack(t *testing.T) {
	t.Parallel()
	f := newFixture(testStack)
	byURN := map[string]map[string]any{}
	for _, r := range f.Resources {
		byURN[r["urn"].(string)] = r
	}
	live := exportOf(t, []map[string]any{byURN[f.Root], byURN[f.ProxmoxProvider], byURN[f.VM]}, nil)
	_, err := restore.Seed(live, f.Export(t), testStack)
	require.Error(t, err)
	require.ErrorContains(t, err, "make destroy STACK="+testStack)
	require.ErrorContains(t, err, "stack "+testStack+" still has 1 resources ("+f.VM)

	destroyed := exportOf(t, []map[string]any{byURN[f.Root], byURN[f.TalosProvider]}, nil)
	seed, err := restore.Seed(destroyed, f.Export(t), testStack)
	require.NoError(t, err)
	require.Equal(t, f.kept(), seed.Kept)

	// A component left is as live as a machine.
	partial := exportOf(t, []map[string]any{byURN[f.Root], byURN[f.Platform]}, nil)
	_, err = restore.Seed(partial, f.Export(t), testStack)
	require.ErrorContains(t, err, "make destroy")
}

// A backup of another stack is refused, naming the stack it is of: its
// URNs are not this stack's.
func TestSeedRefusesABackupOfAnotherStack(t *testing.T) {
	t.Parallel()
	other := newFixture("other")
	_, err := restore.Seed(emptyExport(t), other.Export(t), testStack)
	require.Error(t, err)
	require.ErrorContains(t, err, `stack "other"`)
}

// A backup's state without a bootstrap, or with two, or without the
// secrets, is not of a cluster this program made: it is refused.
func TestSeedNeedsOneBootstrapAndOneSecrets(t *testing.T) {
	t.Parallel()
	f := newFixture(testStack)
	_, err := restore.Seed(emptyExport(t), f.Without(t, f.Bootstrap, f.Kubeconfig, f.APIReady, f.K8sProvider, f.Cilium, f.NodesReady), testStack)
	require.ErrorContains(t, err, "0 bootstraps and 1 secrets")

	two := newFixture(testStack)
	second := map[string]any{}
	for k, v := range two.Resources[slices.IndexFunc(two.Resources, func(r map[string]any) bool { return r["urn"] == f.Bootstrap })] {
		second[k] = v
	}
	second["urn"] = strings.Replace(f.Bootstrap, "homelab-bootstrap", "homelab-bootstrap-2", 1)
	two.Resources = append(two.Resources, second)
	_, err = restore.Seed(emptyExport(t), two.Export(t), testStack)
	require.ErrorContains(t, err, "2 bootstraps and 1 secrets")

	_, err = restore.Seed(emptyExport(t), f.Without(t, f.Secrets), testStack)
	require.ErrorContains(t, err, "1 bootstraps and 0 secrets")

	_, err = restore.Seed(emptyExport(t), []byte(`{"version":2,"deployment":{}}`), testStack)
	require.ErrorContains(t, err, "deployment version 2, expected 3 or 4")
}

// Started finds the bootstrap of a seeded (or live) state, so that a
// restore run again does not seed twice; a new stack has none.
func TestStartedFindsTheBootstrap(t *testing.T) {
	t.Parallel()
	f := newFixture(testStack)
	seed, err := restore.Seed(emptyExport(t), f.Export(t), testStack)
	require.NoError(t, err)
	got, err := restore.Started(seed.State)
	require.NoError(t, err)
	require.Equal(t, f.Bootstrap, got)

	got, err = restore.Started(emptyExport(t))
	require.NoError(t, err)
	require.Empty(t, got)

	_, err = restore.Started([]byte("not json"))
	require.Error(t, err)
}
