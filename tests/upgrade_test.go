package tests

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/program/programtest"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// A stack that exists keeps what it asked for when the project moves to new
// dependencies (issue 24): each example stack file as the release before the
// upgrade shipped it (testdata/upgrade/<stack>.yaml, Talos v1.12.4, an empty
// kubernetesVersion) registers, under the new SDKs, machinery and defaults,
// the same resources with the same inputs and options as that release
// registered (testdata/upgrade/<stack>.inputs.json, written by this test,
// with UPGRADE_FIXTURE_WRITE=1, at commit ba3d0df, the last one on Pulumi SDK 3.219, Talos machinery 1.12.0,
// kubernetes SDK 4.25 and command SDK 1.1.3). A changed input is an update
// of a running resource at best and a replacement at worst (a VM, the machine
// secrets), so none is allowed without a line here saying why. The files
// are a fixture of the release before, not a golden file of this one:
// `make verify` leaves them alone; before the next upgrade, write them from
// the release of the day (and its stack files).
func TestAnExistingStackAsksForTheSameAfterTheUpgrade(t *testing.T) {
	t.Parallel()
	for _, tc := range stackstest.Examples {
		t.Run(tc.Stack, func(t *testing.T) {
			t.Parallel()
			fixture := filepath.Join("testdata", "upgrade", tc.Stack+".yaml")
			if _, err := os.Stat(fixture); errors.Is(err, os.ErrNotExist) {
				t.Skipf("SKIPPED: %s: the example is newer than the release of the fixtures", tc.Stack)
			}
			src := stackstest.StackSource(t, filepath.Join("tests", "testdata", "upgrade", tc.Stack+".yaml"), stackstest.ExampleSecrets[tc.File])
			e, _, _, err := programtest.Run(t, src, tc.Stack, program.Options{})
			require.NoError(t, err)
			got := map[string]any{}
			for _, r := range e.Created() {
				got[r.URN] = map[string]any{
					"inputs":              canonical(resource.NewObjectProperty(r.Inputs)),
					"parent":              r.Parent,
					"provider":            r.Provider,
					"ignoreChanges":       sorted(r.IgnoreChanges),
					"retainOnDelete":      r.RetainOnDelete,
					"replaceWith":         sorted(r.ReplaceWith),
					"deleteBeforeReplace": r.DeleteBeforeReplace,
					"deletedWith":         r.DeletedWith,
				}
			}
			// The functions it calls: the machine configs and image URLs
			// are generated from their arguments, not from any input.
			calls := map[string][]string{}
			for _, c := range e.Invokes() {
				b, err := json.Marshal(canonical(resource.NewObjectProperty(c.Args)))
				require.NoError(t, err)
				calls[c.Token] = append(calls[c.Token], string(b))
			}
			for token, args := range calls {
				slices.Sort(args)
				got["invoke "+token] = args
			}
			encoded, err := json.MarshalIndent(got, "", " ")
			require.NoError(t, err)
			path := filepath.Join("testdata", "upgrade", tc.Stack+".inputs.json")
			if os.Getenv("UPGRADE_FIXTURE_WRITE") == "1" {
				require.NoError(t, os.WriteFile(path, append(encoded, '\n'), 0o600))
			}
			raw, err := os.ReadFile(path) //nolint:gosec // the test's own golden file
			require.NoError(t, err)
			var want map[string]any
			require.NoError(t, json.Unmarshal(raw, &want))
			require.NoError(t, json.Unmarshal(encoded, &got))
			volumes, pins := 0, 0
			for urn, w := range want {
				droppedShell(urn, w)
				if addedDataVolume(urn, got[urn]) {
					volumes++
				}
				if addedAddressPin(urn, got[urn]) {
					pins++
				}
				assert.Equal(t, w, got[urn], "%s: what the stack asks of it changed", urn)
			}
			assert.Equal(t, dataDisks(t, src), volumes, "the nodes with a data disk, and only they, get its user volume")
			assert.Equal(t, pinnedNodes(t, src), pins, "the nodes with KubeSpan or on rented servers, and only they, are pinned to their IP")
			for urn := range got {
				_, had := want[urn]
				// The resources added: the cluster's roster (issue 25),
				// whose create runs nothing and no hook (its hook runs on
				// its updates, when nodes leave the stack); each worker's
				// taints (issue 51), whose create asks nothing of a worker
				// without taints; the bootstrap manifests (issue 51), whose
				// create syncs nothing unless that up upgrades Kubernetes.
				roster := strings.Contains(urn, "$command:local:Command::") && strings.HasSuffix(urn, talos.RosterSuffix)
				taints := strings.Contains(urn, "$command:local:Command::") && strings.Contains(urn, talos.TaintsSuffix)
				manifests := strings.Contains(urn, "$command:local:Command::") && strings.HasSuffix(urn, talos.ManifestsSuffix)
				assert.True(t, had || roster || taints || manifests, "%s: new in this release", urn)
			}
		})
	}
}

// droppedShell is the one change allowed, to the waits and ISO ejects
// (issue 25): they ran a shell script with curl on the operator's machine
// and now run in the program, in a before-create hook, so their `create`
// command, its interpreter and the eject's token header (stdin) are gone.
// An existing stack's waits and ejects show one update that runs nothing
// (the command provider's Update runs no command when there is none); their
// triggers, environment and options are unchanged, so none re-runs or is
// replaced.
func droppedShell(urn string, want any) {
	if !strings.Contains(urn, "$command:local:Command::") {
		return
	}
	name := urn[strings.LastIndex(urn, "::")+2:]
	if !strings.HasSuffix(name, "-api-ready") && !strings.HasSuffix(name, "-nodes-ready") &&
		!strings.Contains(name, "-wait-") && !strings.Contains(name, "-eject-iso-") {
		return
	}
	w := want.(map[string]any)
	inputs := w["inputs"].(map[string]any)
	for _, k := range []string{"create", "interpreter", "stdin"} {
		delete(inputs, k)
	}
	if ic, ok := w["ignoreChanges"].([]any); ok && len(ic) > 0 {
		w["ignoreChanges"] = []any{"environment"}
	}
}

// addedDataVolume takes out the one other change allowed (issue 27): a node
// with a data disk gets its user volume (a UserVolumeConfig document) and
// the kubelet mount Longhorn needs, in its config apply. It is a config
// change without a reboot, rolled out as any; Talos partitions only an empty
// disk (as the release before left it) or free space of a GPT one, and
// never touches a disk with other contents (its block volume controller's
// CheckDiskForProvisioning). It reports whether it took them out.
func addedDataVolume(urn string, got any) bool {
	return droppedPatches(urn, got, func(text string) bool {
		return strings.Contains(text, "kind: UserVolumeConfig\n") || strings.Contains(text, "extraMounts:") && strings.Contains(text, talos.DataVolumeMountRoot)
	})
}

// droppedPatches takes the config patches that added match out of a
// config apply's inputs, and reports whether it took any.
func droppedPatches(urn string, got any, added func(text string) bool) bool {
	if !strings.Contains(urn, "$talos:machine/configurationApply:ConfigurationApply::") || got == nil {
		return false
	}
	inputs := got.(map[string]any)["inputs"].(map[string]any)
	patches, _ := inputs["configPatches"].([]any)
	kept := patches[:0:0]
	for _, p := range patches {
		if text, _ := p.(string); added(text) {
			continue
		}
		kept = append(kept, p)
	}
	inputs["configPatches"] = kept
	return len(kept) < len(patches)
}

// addedAddressPin takes out the third change allowed (issue 48, item 15):
// with KubeSpan, or on a rented server (which may have a second NIC), the
// kubelet's node IP and etcd's advertised address are pinned to the
// node's IP, which Talos chose from the machine's addresses before. On a
// machine with one address it is the one Talos chose: a config change
// without a reboot, rolled out as any. It reports whether it took one out.
func addedAddressPin(urn string, got any) bool {
	return droppedPatches(urn, got, func(text string) bool { return strings.Contains(text, "validSubnets:") })
}

// pinnedNodes counts the nodes of a stack pinned to their IP: all with
// KubeSpan, else those on rented servers.
func pinnedNodes(t *testing.T, src stacks.Source) int {
	t.Helper()
	cfg, d := stacks.Load(src)
	require.NoError(t, d.Err())
	n := 0
	for _, ref := range cfg.Nodes.Refs() {
		if cfg.Cluster.KubeSpan.Enabled || cfg.Platform == stacks.PlatformVPS || cfg.OnServers(ref.Host) {
			n++
		}
	}
	return n
}

// dataDisks counts the nodes of a stack with a data disk.
func dataDisks(t *testing.T, src stacks.Source) int {
	t.Helper()
	cfg, d := stacks.Load(src)
	require.NoError(t, d.Err())
	n := 0
	for _, ref := range cfg.Nodes.Refs() {
		if ref.DataDiskSize > 0 {
			n++
		}
	}
	return n
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// canonical is a property value as plain JSON data, secrets and unknowns
// marked, so that two releases' registrations compare.
func canonical(v resource.PropertyValue) any {
	switch {
	case v.IsSecret():
		return map[string]any{"secret": canonical(v.SecretValue().Element)}
	case v.IsComputed():
		return "<unknown>"
	case v.IsOutput():
		o := v.OutputValue()
		if !o.Known {
			return "<unknown>"
		}
		if o.Secret {
			return map[string]any{"secret": canonical(o.Element)}
		}
		return canonical(o.Element)
	case v.IsObject():
		m := map[string]any{}
		for k, e := range v.ObjectValue() {
			m[string(k)] = canonical(e)
		}
		return m
	case v.IsArray():
		a := []any{}
		for _, e := range v.ArrayValue() {
			a = append(a, canonical(e))
		}
		return a
	case v.IsResourceReference():
		return map[string]any{"resource": string(v.ResourceReferenceValue().URN)}
	case v.IsAsset():
		return map[string]any{"asset": v.AssetValue().Hash}
	case v.IsArchive():
		return map[string]any{"archive": v.ArchiveValue().Hash}
	default:
		return v.Mappable()
	}
}
