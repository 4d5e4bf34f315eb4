//go:build integration

package cli

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/events"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumiverse/pulumi-talos/sdk/go/talos/machine"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	storageapi "github.com/siderolabs/talos/pkg/machinery/api/storage"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/adopt"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/driver"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/exitcode"
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/testkit/pkitest"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// TestIntegrationAdoptWithTheRealCLI adopts a running cluster into a new
// stack of the Proxmox example with the real pulumi CLI and Talos plugin
// (0.7.1, from PULUMI_HOME), on a local file backend: the secrets imported
// from secrets.yaml under the URN the program uses, kept secret; the
// bootstrap recorded as done (the plugin cannot import it). Then the
// program's own registrations of the two (the component chain, the secrets
// and the bootstrap with the program's inputs; the rest of the program needs
// Proxmox) run a preview and an up on the adopted stack: the bootstrap stays
// as it is, the up makes no call to a node. A stack where `up` created a
// bootstrap (against a stand-in Talos API) holds it in the same shape. Run
// it with `make integration`; it is skipped, saying so, where pulumi is not
// on PATH.
func TestIntegrationAdoptWithTheRealCLI(t *testing.T) {
	pulumiPath, err := exec.LookPath("pulumi")
	if err != nil {
		t.Skip("SKIPPED: the pulumi CLI is not on PATH, so the adopt integration test did not run")
	}
	example := directExample(t)
	dir, pulumi := realCLIProject(t, pulumiPath)
	initExampleStack(t, dir, pulumi, "it", example)

	b := pkitest.TalosBundle(t)
	env := filepath.Join(dir, "environments", "it")
	require.NoError(t, os.MkdirAll(env, 0o700))
	secretsFile := pkitest.WriteTalosSecrets(t, b, env)
	pkitest.WriteTalosconfig(t, b, env, "homelab", "10.10.0.10")

	adoptIt := func() string {
		t.Helper()
		var out, errOut syncBuffer
		e := defaultAccessEnv(strings.NewReader(""), &out, &errOut)
		e.ReadConfig = nil
		start := time.Now()
		code := adoptCmd(context.Background(), []string{"--stack", "it", "--pulumi", pulumiPath, "--secrets", secretsFile, "--yes"}, e)
		require.Equal(t, exitcode.OK, code, out.String()+errOut.String())
		t.Logf("adopt: %s", time.Since(start).Round(time.Millisecond))
		return out.String() + errOut.String()
	}
	adoptIt()

	src, err := stacks.SourceFromConfigJSON([]byte(pulumi("config", "--show-secrets", "--json", "--stack", "it")))
	require.NoError(t, err)
	cfg, diags := stacks.Load(src)
	require.NoError(t, diags.Err())
	rs, err := adopt.Plan(cfg, adopt.PlanOptions{SecretsFile: secretsFile, Bootstrapped: true})
	require.NoError(t, err)
	urns, err := adopt.URNs("it", src.Project, rs)
	require.NoError(t, err)
	node, err := adopt.BootstrapNode(cfg)
	require.NoError(t, err)

	export := pulumi("stack", "export", "--stack", "it")
	found := resourcesOf(t, export)
	require.Contains(t, found, string(urns["secrets"]), "state: %s", export)
	require.Contains(t, found[string(urns["secrets"])].Outputs, "machineSecrets")
	boot, ok := found[string(urns["bootstrap"])]
	require.True(t, ok, "no bootstrap in the state: %s", export)
	require.Equal(t, adopt.BootstrapID, boot.ID)
	require.Equal(t, string(urns["cluster"]), boot.Parent)
	require.Equal(t, found[string(urns["secrets"])].Provider, boot.Provider)
	require.Equal(t, node, boot.Inputs["node"])
	require.Equal(t, node, boot.Inputs["endpoint"])
	// The provider marks the keys and tokens sensitive; the state keeps
	// them encrypted, the recorded bootstrap's client key too.
	for what, v := range map[string]string{
		"bootstrap token": b.Secrets.BootstrapToken, "cluster secret": b.Cluster.Secret,
		"Talos CA key": base64.StdEncoding.EncodeToString(b.Certs.OS.Key),
	} {
		require.NotContains(t, export, v, "%s in plain text in the state", what)
	}
	plain := pulumi("stack", "export", "--stack", "it", "--show-secrets")
	cc, _ := resourcesOf(t, plain)[string(urns["bootstrap"])].Outputs["clientConfiguration"].(map[string]any)
	require.NotEmpty(t, cc["clientKey"], "the recorded client configuration: %v", cc)
	require.NotContains(t, export, cc["clientKey"], "the client key in plain text in the state")

	// Run again, adopt imports and records nothing twice.
	again := adoptIt()
	require.Contains(t, again, "not imported again")
	require.NotContains(t, again, "homelab-bootstrap as done (node")
	require.Len(t, resourcesOf(t, pulumi("stack", "export", "--stack", "it")), len(found))

	// The program itself previews the adopted stack (`stackctl preview`,
	// every plugin it uses, no call to Proxmox or a node): the stack, its two
	// components, the secrets and the bootstrap unchanged, the rest to create.
	ctx := context.Background()
	var pout, perr syncBuffer
	summaryFile := filepath.Join(dir, "preview.json")
	start := time.Now()
	code := driverCmd(ctx, "preview", []string{"--stack", "it", "--summary", summaryFile}, &pout, &perr, os.Getenv, nil)
	require.Equal(t, exitcode.OK, code, pout.String()+perr.String())
	var summary driver.Summary
	raw, err := os.ReadFile(summaryFile)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &summary))
	t.Logf("the program's preview after adopt: %s, %v", time.Since(start).Round(time.Millisecond), summary.Changes)
	require.Equal(t, 5, summary.Changes["same"], "the stack, the components, the secrets and the bootstrap: %s", pout.String())
	require.Positive(t, summary.Changes["create"])
	require.Len(t, summary.Changes, 2, "only creates and unchanged: %v", summary.Changes)
	require.NotContains(t, pout.String(), "homelab-bootstrap", "the bootstrap is not in the list of changes")
	require.NotContains(t, pout.String(), "homelab-secrets")

	// The program's registrations of the adopted resources alone, in ups on
	// the adopted stack: the bootstrap stays as it is, not created or
	// replaced.
	talosAPI := startTalosStandIn(t)
	s, err := auto.SelectStackInlineSource(ctx, "it", src.Project, adoptedChain(cfg, node, node), auto.WorkDir(dir))
	require.NoError(t, err)
	ops, evs := stepOps()
	start = time.Now()
	_, err = s.Preview(ctx, optpreview.EventStreams(evs))
	require.NoError(t, err)
	t.Logf("preview after adopt: %s, steps %v", time.Since(start).Round(time.Millisecond), ops())
	require.Equal(t, "same", ops()[string(urns["bootstrap"])], "the bootstrap after adopt: %v", ops())
	require.Equal(t, "same", ops()[string(urns["secrets"])], "the secrets after adopt: %v", ops())

	ops, evs = stepOps()
	upCtx, cancel := context.WithTimeout(ctx, 3*time.Minute) // a create would retry for 10 minutes
	defer cancel()
	res, err := s.Up(upCtx, optup.EventStreams(evs))
	require.NoError(t, err)
	t.Logf("up after adopt: %v, steps %v", *res.Summary.ResourceChanges, ops())
	require.Equal(t, "same", ops()[string(urns["bootstrap"])])
	require.Zero(t, talosAPI.boots.Load())

	// The shape `up` gives a bootstrap it creates (the stand-in answers the
	// Bootstrap call), on a stack of its own: the recorded one has the same.
	initExampleStack(t, dir, pulumi, "created", example)
	c, err := auto.SelectStackInlineSource(ctx, "created", src.Project, adoptedChain(cfg, node, talosAPI.addr), auto.WorkDir(dir))
	require.NoError(t, err)
	_, err = c.Up(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, talosAPI.boots.Load(), "the created stack's bootstrap called the stand-in once")
	createdURN := strings.Replace(string(urns["bootstrap"]), "urn:pulumi:it::", "urn:pulumi:created::", 1)
	created, ok := resourcesOf(t, pulumi("stack", "export", "--stack", "created"))[createdURN]
	require.True(t, ok)
	recorded := resourcesOf(t, pulumi("stack", "export", "--stack", "it"))[string(urns["bootstrap"])]
	require.Equal(t, created.ID, recorded.ID)
	require.Equal(t, created.Custom, recorded.Custom)
	require.Equal(t, created.Outputs["__meta"], recorded.Outputs["__meta"])
	require.ElementsMatch(t, keys(created.Inputs), keys(recorded.Inputs))
	delete(created.Outputs, "__pulumi_raw_state_delta") // the bridge's cache; it reads a state without one
	require.ElementsMatch(t, keys(created.Outputs), keys(recorded.Outputs))
	require.ElementsMatch(t, keys(created.PropertyDependencies), keys(recorded.PropertyDependencies))

	// A later change of the node (a new first control plane) updates the
	// recorded bootstrap in place, which calls no node either.
	s, err = auto.SelectStackInlineSource(ctx, "it", src.Project, adoptedChain(cfg, node, talosAPI.addr), auto.WorkDir(dir))
	require.NoError(t, err)
	ops, evs = stepOps()
	_, err = s.Up(upCtx, optup.EventStreams(evs))
	require.NoError(t, err)
	require.Equal(t, "update", ops()[string(urns["bootstrap"])], "%v", ops())
	require.EqualValues(t, 1, talosAPI.boots.Load(), "only the created stack's bootstrap called the stand-in")
}

// directExample is the Proxmox example's stack file reached directly (no
// ssh-proxy to a Proxmox host: the programs run here need no host). Read
// it before realCLIProject changes the working directory.
func directExample(t *testing.T) []byte {
	t.Helper()
	example, err := os.ReadFile(filepath.Join(stackstest.RepoRoot(t), stackstest.ProxmoxExample))
	require.NoError(t, err)
	example = []byte(strings.Replace(string(example), "access: ssh-proxy", "access: direct", 1))
	require.Contains(t, string(example), "access: direct")
	return example
}

// initExampleStack makes stack name in the project dir with the stack file
// example and the example's secrets set.
func initExampleStack(t *testing.T, dir string, pulumi func(args ...string) string, name string, example []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi."+name+".yaml"), example, 0o600))
	pulumi("stack", "init", name, "--secrets-provider", "passphrase")
	for k, v := range stackstest.ExampleSecrets[stackstest.ProxmoxExample] {
		pulumi("config", "set", "--secret", "--path", "--stack", name, k, v)
	}
}

// stateResource is a resource of `pulumi stack export`.
type stateResource struct {
	URN, Type, ID, Parent, Provider string
	Custom                          bool
	Inputs, Outputs                 map[string]any
	PropertyDependencies            map[string][]string
}

func resourcesOf(t *testing.T, export string) map[string]stateResource {
	t.Helper()
	var state struct {
		Deployment struct{ Resources []stateResource }
	}
	require.NoError(t, json.Unmarshal([]byte(export), &state))
	out := map[string]stateResource{}
	for _, r := range state.Deployment.Resources {
		out[r.URN] = r
	}
	return out
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// adoptedChain registers what adopt puts in the stack as the program does:
// the platform and Talos components, the secrets (talosVersion ignored) and
// the bootstrap of the first control plane with the secrets' client
// configuration (components/talos/cluster.go). endpoint is the program's
// (the node) or a stand-in's address.
func adoptedChain(cfg *stacks.Config, node, endpoint string) pulumi.RunFunc {
	return func(ctx *pulumi.Context) error {
		name := cfg.Cluster.Name
		var platform, cluster pulumi.ResourceState
		if err := ctx.RegisterComponentResource(proxmox.ClusterType, name, &platform); err != nil {
			return err
		}
		if err := ctx.RegisterComponentResource(talos.ClusterType, name, &cluster, pulumi.Parent(&platform)); err != nil {
			return err
		}
		secrets, err := machine.NewSecrets(ctx, name+talos.SecretsSuffix, &machine.SecretsArgs{
			TalosVersion: pulumi.String(cfg.Cluster.TalosVersion),
		}, pulumi.Parent(&cluster), pulumi.IgnoreChanges([]string{"talosVersion"}))
		if err != nil {
			return err
		}
		_, err = machine.NewBootstrap(ctx, name+talos.BootstrapSuffix, &machine.BootstrapArgs{
			ClientConfiguration: secrets.ClientConfiguration,
			Node:                pulumi.String(node),
			Endpoint:            pulumi.String(endpoint),
		}, pulumi.Parent(&cluster))
		return err
	}
}

// stepOps collects the step of each resource from the engine's events.
func stepOps() (func() map[string]string, chan events.EngineEvent) {
	ch := make(chan events.EngineEvent)
	done := make(chan struct{})
	ops := map[string]string{}
	go func() {
		defer close(done)
		for e := range ch {
			if e.ResourcePreEvent != nil {
				ops[e.ResourcePreEvent.Metadata.URN] = string(e.ResourcePreEvent.Metadata.Op)
			}
		}
	}()
	return func() map[string]string { <-done; return ops }, ch
}

// talosStandIn answers the calls the Talos provider's bootstrap makes: the
// Disks probe (over TLS without a client certificate, as it first tries)
// and Bootstrap, counted.
type talosStandIn struct {
	machineapi.UnimplementedMachineServiceServer
	addr  string
	boots atomic.Int32
}

func (s *talosStandIn) Bootstrap(context.Context, *machineapi.BootstrapRequest) (*machineapi.BootstrapResponse, error) {
	s.boots.Add(1)
	return &machineapi.BootstrapResponse{Messages: []*machineapi.Bootstrap{{}}}, nil
}

type storageStandIn struct {
	storageapi.UnimplementedStorageServiceServer
}

func (storageStandIn) Disks(context.Context, *emptypb.Empty) (*storageapi.DisksResponse, error) {
	return &storageapi.DisksResponse{}, nil
}

func startTalosStandIn(t *testing.T) *talosStandIn {
	t.Helper()
	p := pkitest.New(t, "127.0.0.1")
	kp, err := tls.X509KeyPair(p.ServerCert, p.ServerKey)
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{kp}, MinVersion: tls.VersionTLS12})))
	s := &talosStandIn{addr: l.Addr().String()}
	machineapi.RegisterMachineServiceServer(srv, s)
	storageapi.RegisterStorageServiceServer(srv, storageStandIn{})
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return s
}
