package talosprovider_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pulumi/pulumi-go-provider/integration/fake"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/plugin"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/internals"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/pveapi/pveapitest"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/provider/talosprovider"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// The hook names as they are kept in state: they must never change.
const (
	legacyHook = "talos-proxmox-hard-stop" // every VM of the versions before per-cluster names
	hookSuffix = "-vm-hard-stop"
)

// hookEngine is the provider test server's monitor with the engine's
// registry of resource hooks (pulumi pkg/resource/deploy ResourceHooks): a
// name is registered once per deployment and a second registration of it
// refused, whichever pulumi.Context sends it. It keeps each hook's callback,
// so that a test can run a hook as the engine does for a delete: by the
// name kept in state.
type hookEngine struct {
	*fake.ResourceMonitorServer

	mu      sync.Mutex
	hooks   map[string]*pulumirpc.Callback
	refused []string
	// beforeDelete are the hooks bound before the delete of each VM, by
	// its name.
	beforeDelete map[string][]string
}

func (m *hookEngine) RegisterResource(ctx context.Context, req *pulumirpc.RegisterResourceRequest) (*pulumirpc.RegisterResourceResponse, error) {
	if req.GetType() == componentstest.VM {
		m.mu.Lock()
		m.beforeDelete[req.GetName()] = req.GetHooks().GetBeforeDelete()
		m.mu.Unlock()
	}
	return m.ResourceMonitorServer.RegisterResource(ctx, req)
}

func (m *hookEngine) RegisterResourceHook(_ context.Context, req *pulumirpc.RegisterResourceHookRequest) (*emptypb.Empty, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.hooks[req.GetName()]; ok {
		m.refused = append(m.refused, req.GetName())
		return nil, fmt.Errorf("resource hook already registered for name %q", req.GetName())
	}
	m.hooks[req.GetName()] = req.GetCallback()
	return &emptypb.Empty{}, nil
}

func (m *hookEngine) callback(name string) *pulumirpc.Callback {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hooks[name]
}

func (m *hookEngine) vms() map[string][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.beforeDelete)
}

func (m *hookEngine) refusedNames() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.refused)
}

// run runs a hook through its callback, as the engine does before a delete,
// with outs as the resource's old outputs.
func (m *hookEngine) run(t *testing.T, hook, name string, outs resource.PropertyMap) error {
	t.Helper()
	cb := m.callback(hook)
	require.NotNil(t, cb, "hook %s registered", hook)
	old, err := plugin.MarshalProperties(outs, plugin.MarshalOptions{KeepSecrets: true, KeepUnknowns: true})
	require.NoError(t, err)
	req, err := proto.Marshal(&pulumirpc.ResourceHookRequest{Name: name, Type: componentstest.VM, OldOutputs: old})
	require.NoError(t, err)
	conn, err := grpc.NewClient(cb.GetTarget(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	resp, err := pulumirpc.NewCallbacksClient(conn).Invoke(t.Context(), &pulumirpc.CallbackInvokeRequest{Token: cb.GetToken(), Request: req})
	require.NoError(t, err)
	var out pulumirpc.ResourceHookResponse
	require.NoError(t, proto.Unmarshal(resp.GetResponse(), &out))
	if out.GetError() != "" {
		return fmt.Errorf("%s", out.GetError())
	}
	return nil
}

// awaitOutputs awaits every output of the cluster and the URN of every
// resource it depends on, as the provider does before it answers a
// construct (a resource whose registration failed has no URN: the CLI
// then says "invalid dependency URN: missing required URN").
func awaitOutputs(ctx *pulumi.Context, name string, c *proxmox.Cluster) error {
	for k, v := range c.Outputs() {
		out, err := internals.UnsafeAwaitOutput(ctx.Context(), pulumi.ToOutput(v))
		if err != nil {
			return fmt.Errorf("awaiting output %q of %s: %w", k, name, err)
		}
		for _, dep := range out.Dependencies {
			urn, err := internals.UnsafeAwaitOutput(ctx.Context(), dep.URN())
			if err != nil || fmt.Sprint(urn.Value) == "" {
				return fmt.Errorf("awaiting output %q of %s: a resource it depends on has no URN (%w)", k, name, err)
			}
		}
	}
	return nil
}

// Two ProxmoxClusters in one program, their hooks registered with (a
// stand-in of) the engine's registry: through the provider (a Pulumi YAML
// program, say), where each construct has a pulumi.Context of its own, and
// in a Go program, with a Hooks each or one shared. Each cluster registers
// its fast-stop hook under a name of its own, and the name of the earlier
// versions is registered too, once, so that a stack whose state still
// names one destroys. With one fixed name the engine refused the second
// cluster's hook and its VMs failed to register. Only the stack-file
// program's way (Deps.FastStop) binds the hook to the VMs: through the
// provider and NewCluster no VM carries one, so that a program can drop a
// cluster (a deleted resource's hooks must be registered by the run).
func TestTwoProxmoxClustersInOneProgram(t *testing.T) {
	t.Parallel()
	cfg, d := stacks.Load(stackstest.Example(t, stackstest.ProxmoxExample))
	require.NoError(t, d.Err())
	clusters := []struct {
		name       string
		vmidOffset int
	}{{"homelab", 0}, {"lab2", 100}}

	for _, tc := range []struct {
		name string
		// run builds the clusters in newCtx's contexts.
		run func(newCtx func() *pulumi.Context, args func(cluster string, vmidOffset int) proxmox.ClusterArgs) error
		// refused are the registrations the engine refuses; owner is the
		// cluster whose function the earlier name runs ("": either,
		// their registrations race).
		refused []string
		owner   string
		// bound: the VMs carry their cluster's hook (Deps.FastStop).
		bound bool
	}{
		{"component provider: a context per construct", func(newCtx func() *pulumi.Context, args func(string, int) proxmox.ClusterArgs) error {
			for _, c := range clusters {
				err := pulumi.RunWithContext(newCtx(), func(ctx *pulumi.Context) error {
					// The provider's own construct, with its real seams.
					cl, err := (&talosprovider.ProxmoxCluster{}).Construct(ctx, c.name, talosprovider.ProxmoxToken, args(c.name, c.vmidOffset), pulumi.Composite())
					if err != nil {
						return err
					}
					return awaitOutputs(ctx, c.name, cl)
				})
				if err != nil {
					return err
				}
			}
			return nil
		}, []string{legacyHook}, "homelab", false},
		{"Go program: a Hooks each", func(newCtx func() *pulumi.Context, args func(string, int) proxmox.ClusterArgs) error {
			return pulumi.RunWithContext(newCtx(), func(ctx *pulumi.Context) error {
				for _, c := range clusters {
					a := args(c.name, c.vmidOffset)
					cl, err := proxmox.NewCluster(ctx, c.name, &a)
					if err != nil {
						return err
					}
					if err := awaitOutputs(ctx, c.name, cl); err != nil {
						return err
					}
				}
				return nil
			})
		}, []string{legacyHook}, "", false},
		{"Go program: one Hooks", func(newCtx func() *pulumi.Context, args func(string, int) proxmox.ClusterArgs) error {
			return pulumi.RunWithContext(newCtx(), func(ctx *pulumi.Context) error {
				hooks := &talos.SDKHooks{Ctx: ctx}
				for _, c := range clusters {
					a := args(c.name, c.vmidOffset)
					cl, err := proxmox.NewClusterWithDeps(ctx, c.name, &a, proxmox.Deps{Hooks: hooks, FastStop: true})
					if err != nil {
						return err
					}
					if err := awaitOutputs(ctx, c.name, cl); err != nil {
						return err
					}
				}
				return nil
			})
		}, nil, "homelab", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const tags = "cluster-%s;stack-stack;talos"
			pve := pveapitest.New(t, map[int]*pveapitest.VM{
				110: {Node: "pve", Name: "cp-0", Tags: fmt.Sprintf(tags, "homelab"), Running: true},
				210: {Node: "pve", Name: "cp-0", Tags: fmt.Sprintf(tags, "lab2"), Running: true},
				220: {Node: "pve", Name: "worker-0", Tags: fmt.Sprintf(tags, "lab2"), Running: true},
			})
			args := func(cluster string, vmidOffset int) proxmox.ClusterArgs {
				a := program.ProxmoxArgs(cfg)
				a.Cluster.Name = cluster
				a.Proxmox.Endpoint, a.Proxmox.Insecure = pve.URL, true
				a.Proxmox.APITokenID, a.Proxmox.APITokenSecret = pveapitest.TokenID, pulumi.String(pveapitest.TokenSecret)
				for i := range a.Nodes {
					a.Nodes[i].VMID += vmidOffset
				}
				return *a
			}
			e := &componentstest.Engine{}
			m := &hookEngine{ResourceMonitorServer: fake.NewResourceMonitorServer(e), hooks: map[string]*pulumirpc.Callback{}, beforeDelete: map[string][]string{}}
			monitorAddr, _, err := fake.StartMonitorServer(t.Context(), m)
			require.NoError(t, err)
			engineAddr, _, err := fake.StartEngineServer(t.Context(), fake.NewEngineServer())
			require.NoError(t, err)
			newCtx := func() *pulumi.Context {
				ctx, err := pulumi.NewContext(t.Context(), pulumi.RunInfo{
					Project: "talos-cluster", Stack: stack, MonitorAddr: monitorAddr, EngineAddr: engineAddr, Parallel: 4,
				})
				require.NoError(t, err)
				return ctx
			}
			require.NoError(t, tc.run(newCtx, args), "hooks the engine refused: %q", m.refusedNames())

			for _, c := range clusters {
				vms := 0
				for name, hooks := range m.vms() {
					if !strings.HasPrefix(name, c.name+"-vm-") {
						continue
					}
					vms++
					if tc.bound {
						assert.Equal(t, []string{c.name + hookSuffix}, hooks, "%s: its cluster's hook only", name)
					} else {
						assert.Empty(t, hooks, "%s: no delete hook", name)
					}
				}
				assert.Equal(t, 3, vms, "%s: every VM registered", c.name)
				assert.NotNil(t, m.callback(c.name+hookSuffix), "%s: its hook registered", c.name)
			}
			assert.NotNil(t, m.callback(legacyHook), "the earlier name registered")
			assert.Equal(t, tc.refused, m.refusedNames(),
				"the engine keeps the first registration of a name; the earlier name's others, bound to nothing, fail nothing")

			// Each cluster's hook stops its VMs.
			vm := func(name string) resource.PropertyMap { return e.Named(t, componentstest.VM, name).Inputs }
			require.NoError(t, m.run(t, "lab2"+hookSuffix, "lab2-vm-worker-0", vm("lab2-vm-worker-0")))
			assert.Equal(t, 1, pve.StopCalls(220))
			// A VM whose state still names the earlier hook (made by an
			// earlier version, where a program could only have one
			// ProxmoxCluster) is stopped if it is a VM of the cluster that
			// registered that name first, and left to the provider's own
			// stop otherwise.
			require.NoError(t, m.run(t, legacyHook, "homelab-vm-cp-0", vm("homelab-vm-cp-0")))
			require.NoError(t, m.run(t, legacyHook, "lab2-vm-cp-0", vm("lab2-vm-cp-0")))
			switch tc.owner {
			case "homelab":
				assert.Equal(t, 1, pve.StopCalls(110))
				assert.False(t, pve.Running(110))
				assert.Zero(t, pve.StopCalls(210))
			default:
				assert.Equal(t, 1, pve.StopCalls(110)+pve.StopCalls(210), "the VM of one cluster stopped")
			}
		})
	}
}
