// Package tests runs the whole Pulumi program under Pulumi mocks with real
// stack files.
package tests

import (
	"os"
	"sync"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// recorder is a mock monitor that records every registered resource.
type recorder struct {
	mu    sync.Mutex
	types []string
}

func (r *recorder) NewResource(args pulumi.MockResourceArgs) (string, resource.PropertyMap, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.types = append(r.types, args.TypeToken)
	return args.Name + "-id", args.Inputs, nil
}

func (r *recorder) Call(args pulumi.MockCallArgs) (resource.PropertyMap, error) {
	return resource.PropertyMap{}, nil
}

func run(t *testing.T, src stacks.Source) ([]string, error) {
	t.Helper()
	rec := &recorder{}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		return program.Run(ctx, src)
	}, pulumi.WithMocks("talos-cluster", "test", rec), stackstest.WithConfig(src))
	return rec.types, err
}

// The mock monitor does not pass the SDK's own root stack resource to
// NewResource; this control shows that anything else registered is seen, so
// an empty record really means nothing was registered.
func TestRecorderSeesRegistrations(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		var c pulumi.ResourceState
		return ctx.RegisterComponentResource("test:index:Probe", "probe", &c)
	}, pulumi.WithMocks("talos-cluster", "test", rec))
	require.NoError(t, err)
	assert.Equal(t, []string{"test:index:Probe"}, rec.types)
}

func TestInvalidConfigRegistersNothing(t *testing.T) {
	t.Parallel()
	src := stackstest.StackSource(t, stackstest.ProxmoxExample, nil) // the token secret was never set
	src.Values["talos-cluster:cluster"] = `{"name":"homelab","talosVersion":"1.12.4","network":{"gateway":"10.10.0.1"}}`

	registered, err := run(t, src)
	var invalid *stacks.InvalidConfigError
	require.ErrorAs(t, err, &invalid)
	assert.Contains(t, err.Error(), "cluster.talosVersion: \"1.12.4\" needs the v prefix")
	assert.Contains(t, err.Error(), "proxmox.apiTokenSecret: is required")
	assert.Empty(t, registered)
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o600) }
