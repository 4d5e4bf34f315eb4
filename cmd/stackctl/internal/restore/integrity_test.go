package restore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	pkgresource "github.com/pulumi/pulumi/pkg/v3/resource"
	"github.com/pulumi/pulumi/pkg/v3/resource/deploy"
	"github.com/pulumi/pulumi/pkg/v3/resource/stack"
	"github.com/pulumi/pulumi/pkg/v3/secrets"
	"github.com/pulumi/pulumi/pkg/v3/secrets/b64"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/adopt"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/restore"
	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/program/programtest"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// hookTypes are the hook types the engine writes to the state for the
// program's hook points.
var hookTypes = map[talos.HookPoint]resource.HookType{
	talos.BeforeCreate: resource.BeforeCreate, talos.BeforeUpdate: resource.BeforeUpdate,
	talos.AfterUpdate: resource.AfterUpdate, talos.BeforeDelete: resource.BeforeDelete,
}

// programState is the state the engine writes after an `up` of an example
// program that created everything: the program's registrations under
// mocks (type, parent, custom, explicit provider, dependencies, property
// dependencies, deletedWith, replaceWith, hooks), with a default provider
// per package for the resources without an explicit one, in registration
// order (the SDK awaits a resource's dependencies and parent before it
// registers it, so the order is the engine's: dependencies first),
// serialized by Pulumi's own SerializeUntypedDeployment: the version and
// features (`hooks`, `replaceWith`) are the engine's choice, not ours.
func programState(t *testing.T, example, stackName string) []byte {
	t.Helper()
	return programStateWith(t, example, stackName, b64.NewBase64SecretsManager())
}

// programStateWith is programState with the secrets manager sm.
func programStateWith(t *testing.T, example, stackName string, sm secrets.Manager) []byte {
	t.Helper()
	src := stackstest.Example(t, example)
	e, _, hooks, err := programtest.Run(t, src, stackName, program.Options{})
	require.NoError(t, err)
	project := tokens.PackageName(src.Project)
	root := resource.NewURN(tokens.QName(stackName), project, "", resource.RootStackType, src.Project+"-"+stackName)
	resources := []*pkgresource.State{pkgresource.NewState{Type: resource.RootStackType, URN: root}.Make()}
	defaults := map[string]string{}
	refOf := map[string]string{}
	for _, r := range e.All() {
		parent := resource.URN(r.Parent)
		if parent == "" {
			parent = root
		}
		st := pkgresource.NewState{
			Type: tokens.Type(r.Type), URN: resource.URN(r.URN), Custom: r.Custom, Parent: parent,
			DeletedWith: resource.URN(r.DeletedWith),
		}
		if r.URN == "" {
			st.URN = resource.NewURN(tokens.QName(stackName), project, "", tokens.Type(r.Type), r.Name)
		}
		for _, d := range r.Dependencies {
			st.Dependencies = append(st.Dependencies, resource.URN(d))
		}
		for k, ds := range r.PropertyDependencies {
			if st.PropertyDependencies == nil {
				st.PropertyDependencies = map[resource.PropertyKey][]resource.URN{}
			}
			for _, d := range ds {
				st.PropertyDependencies[resource.PropertyKey(k)] = append(st.PropertyDependencies[resource.PropertyKey(k)], resource.URN(d))
			}
		}
		for _, u := range r.ReplaceWith {
			st.ReplaceWith = append(st.ReplaceWith, resource.URN(u))
		}
		for _, b := range hooks.Bindings {
			if b.Resource == r.Name {
				if st.ResourceHooks == nil {
					st.ResourceHooks = map[resource.HookType][]string{}
				}
				st.ResourceHooks[hookTypes[b.Point]] = append(st.ResourceHooks[hookTypes[b.Point]], b.Hook)
			}
		}
		if r.Custom {
			st.ID = resource.ID(r.Name + "-id")
		}
		isProvider := strings.HasPrefix(r.Type, "pulumi:providers:")
		switch {
		case isProvider:
			refOf[string(st.URN)] = string(st.URN) + "::" + string(st.ID)
		case r.Custom && r.Provider != "":
			st.Provider = refOf[r.Provider]
			require.NotEmpty(t, st.Provider, "%s: its provider %s is registered first", st.URN, r.Provider)
		case r.Custom:
			pkg, _, _ := strings.Cut(r.Type, ":")
			if defaults[pkg] == "" {
				u := resource.NewURN(tokens.QName(stackName), project, "", tokens.Type("pulumi:providers:"+pkg), "default")
				defaults[pkg] = string(u) + "::default-" + pkg
				resources = append(resources, pkgresource.NewState{
					Type: tokens.Type("pulumi:providers:" + pkg), URN: u, Custom: true, ID: resource.ID("default-" + pkg),
				}.Make())
			}
			st.Provider = defaults[pkg]
		}
		resources = append(resources, st.Make())
	}
	snap := deploy.NewSnapshot(deploy.Manifest{Magic: "", Version: "v3.259.0"}, sm, resources, nil, deploy.SnapshotMetadata{}, nil, nil)
	snap.Manifest.Magic = snap.Manifest.NewMagic()
	require.NoError(t, snap.VerifyIntegrity(), "the program's own state passes the engine's check")
	untyped, err := stack.SerializeUntypedDeployment(context.Background(), snap, nil)
	require.NoError(t, err)
	b, err := json.Marshal(untyped)
	require.NoError(t, err)
	return b
}

// b64Only reads the base64 secrets manager the test states are written
// with (the CLI's provider reads the passphrase and cloud ones too).
type b64Only struct{}

func (b64Only) OfType(_ context.Context, ty string, _ json.RawMessage) (secrets.Manager, error) {
	if ty != b64.Type {
		return nil, fmt.Errorf("no secrets manager of type %q here", ty)
	}
	return b64.NewBase64SecretsManager(), nil
}

// verifyImport is what `pulumi stack import` does with the file before it
// writes anything (pkg/v3 cmd/pulumi/stack/stack_import.go): the
// deployment deserialized, then the snapshot's integrity check
// (SaveSnapshot), which refuses a reference to a missing resource.
func verifyImport(t *testing.T, export []byte) *deploy.Snapshot {
	t.Helper()
	var untyped apitype.UntypedDeployment
	require.NoError(t, json.Unmarshal(export, &untyped))
	snap, err := stack.DeserializeUntypedDeployment(context.Background(), &untyped, b64Only{})
	require.NoError(t, err)
	require.NoError(t, snap.VerifyIntegrity(), "pulumi stack import takes the seed")
	return snap
}

// The seed of each example program's state (issue 35, items 0.2 and A.1):
// the engine writes version 4 for it (hooks and replaceWith), which the
// seed took for unreadable, and the Proxmox program's ISO ejects are
// replaced with their VMs, which the seed drops: `pulumi stack import`
// refused the file ("... is specified as being replaced with ..., which
// is missing"). The seed is read back by Pulumi's own deserializer and
// passes its integrity check; what belongs to a machine (its eject) goes
// with the machine; the secrets, the bootstrap and the releases stay.
func TestTheSeedOfEachExampleProgramsStatePassesPulumisImportCheck(t *testing.T) {
	t.Parallel()
	for _, ex := range stackstest.Examples {
		t.Run(ex.Stack, func(t *testing.T) {
			t.Parallel()
			state := programState(t, ex.File, ex.Stack)
			var top struct {
				Version  int      `json:"version"`
				Features []string `json:"features"`
			}
			require.NoError(t, json.Unmarshal(state, &top))
			assert.Equal(t, apitype.DeploymentSchemaVersionLatest, top.Version, "the engine writes version 4 for hooks and replaceWith")
			assert.Contains(t, top.Features, "hooks")

			seed, err := restore.Seed(emptyExport(t), state, ex.Stack)
			require.NoError(t, err)
			snap := verifyImport(t, seed.State)

			byType := map[string]int{}
			for _, r := range snap.Resources {
				byType[string(r.Type)]++
				assert.NotContains(t, string(r.URN), "-eject-iso-", "an ISO eject is its VM's: made again with it")
				for _, u := range r.ReplaceWith {
					assert.Fail(t, "a kept resource is replaced with a dropped one", "%s: %s", r.URN, u)
				}
			}
			assert.Equal(t, 1, byType[adopt.SecretsType])
			assert.Equal(t, 1, byType[adopt.BootstrapType])
			assert.Positive(t, byType[componentstest.Release], "the Helm releases, whose records are in etcd, stay")
			assert.Zero(t, byType[componentstest.VM]+byType[componentstest.Apply], "the machines and their configs are made again")
		})
	}
}
