package talos_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/internals"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/kubeapi"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest"
	"github.com/fluodata/talos-pulumi/internal/rollout"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
)

// These tests live the sequences a user goes through with a running
// cluster: the program runs once as it was (the state) and once changed,
// under the mock engine, and an engine stand-in walks the changed applies
// in the graph's order, calling the hooks the new program bound as Pulumi
// would: the gate before the provider's update, the settle after it, the
// remove before a membership's delete. The hooks talk to a fake Talos
// cluster (gRPC, mTLS with the credentials the mock secrets hold) and a
// fake Kubernetes API.

const (
	oldTalos = "v1.12.0"
	newTalos = "v1.12.1"
	image    = "factory.talos.dev/metal-installer/abc:"
)

// lab is a fake cluster and what a program run needs to reach it.
type lab struct {
	t      testing.TB
	talos  *talosapitest.Cluster
	kube   *kubeapitest.Server
	timing rollout.Timing
	// realConfigs makes the program's base machine configs real ones,
	// generated from the fake's secrets bundle.
	realConfigs bool
	// destroy runs the program as `make destroy` does; dryRun as a
	// preview.
	destroy, dryRun bool
	// workerParallelism of the runs (0: the default).
	workerParallelism int
	// createEffects: the effect given to up also happens on a create.
	createEffects bool
	// ctx is the run's cancellation (the operator's Ctrl-C); nil: none.
	ctx context.Context
	// published gives every node's APIs another address
	// (Machines.APIAddresses), as a DockerCluster with published ports
	// does: the nodes' IPs then answer neither API.
	published bool
	// said is what the hooks say, by the URN of their resource.
	said *saidBy
	// removedAPIs replace upstream's removed API resources (nil: theirs).
	removedAPIs map[string][]kubeapi.APIResource

	mu sync.Mutex
	// apiServers are the versions the control planes' API servers answer
	// with, by IP: the configs the nodes took through ApplyConfiguration.
	apiServers map[string]string
}

// rebootingPatch is a config change Talos reboots for (in the lab, where
// the effect of an apply is the test's: see rebootAfterApply).
const rebootingPatch = "machine:\n  sysctls:\n    vm.nr_hugepages: \"64\"\n"

// rebootAfterApply is what Talos does with apply mode auto for a change
// that needs a reboot: the node reboots right after it takes the config.
func (l *lab) rebootAfterApply() func(node string) {
	crt, key := l.talos.AdminCert()
	self, err := talosapi.New(talosapi.Credentials{CA: l.talos.CA(), Cert: crt, Key: key}, talosapi.WithAddress(l.talos.Address))
	require.NoError(l.t, err)
	l.t.Cleanup(func() { _ = self.Close() })
	return func(node string) { require.NoError(l.t, self.Reboot(context.Background(), node)) }
}

// controlPlaneRuns makes the control plane's static pods and API server
// run the Kubernetes version (the kubelet restarted them from new
// manifests).
func (l *lab) controlPlaneRuns(ip, version string) {
	name := l.talos.Node(ip).Hostname()
	for _, c := range rollout.ControlPlaneComponents {
		l.kube.SetPodImage("kube-system", c+"-"+name, "registry.k8s.io/"+c+":"+version)
	}
	l.apiServers[ip] = version
}

// kube is the fake Kubernetes API as one server stands for all: a control
// plane's own API server answers with its version in the lab.
type kube struct {
	*kubeapi.Client
	l      *lab
	server string
}

func (k kube) ServerVersion(ctx context.Context) (string, error) {
	if k.server == "" {
		return k.Client.ServerVersion(ctx)
	}
	k.l.mu.Lock()
	defer k.l.mu.Unlock()
	ip := strings.TrimSuffix(strings.TrimPrefix(k.server, "https://"), ":6443")
	if k.l.published {
		ip = strings.TrimPrefix(k.server, publishedKube)
	}
	return k.l.apiServers[ip], nil
}

// publishedKube is where a published lab's control plane's Kubernetes API
// is, followed by its IP.
const publishedKube = "https://published.test/"

// apiAddresses are a published lab's: each node's Talos API at the fake's
// loopback port, each control plane's Kubernetes API at publishedKube.
func (l *lab) apiAddresses() map[string]talos.APIAddress {
	out := map[string]talos.APIAddress{}
	for _, n := range l.talos.Nodes() {
		a := talos.APIAddress{Talos: l.talos.Address(n.IP())}
		if n.Role() == talosapitest.ControlPlane {
			a.Kubernetes = publishedKube + n.IP()
		}
		out[n.IP()] = a
	}
	return out
}

// machineConfig generates the role's base config as the provider's
// getConfiguration does, from the fake's secrets bundle.
func (l *lab) machineConfig(args resource.PropertyMap) (string, error) {
	return generatedConfig(l.t, args)
}

// generatedConfig is the provider's getConfiguration for args, generated
// by Talos's machinery from the fixed secrets bundle.
func generatedConfig(t testing.TB, args resource.PropertyMap) (string, error) {
	vc, err := config.ParseContractFromVersion(args["talosVersion"].StringValue())
	if err != nil {
		return "", err
	}
	in, err := generate.NewInput(args["clusterName"].StringValue(), args["clusterEndpoint"].StringValue(), args["kubernetesVersion"].StringValue(),
		generate.WithSecretsBundle(talosapitest.Bundle(t)), generate.WithVersionContract(vc), generate.WithInstallDisk("/dev/sda"))
	if err != nil {
		return "", err
	}
	mt := machine.TypeWorker
	if args["machineType"].StringValue() == "controlplane" {
		mt = machine.TypeControlPlane
	}
	cfg, err := in.Config(mt)
	if err != nil {
		return "", err
	}
	out, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	return string(out), err
}

// saidBy records what the hooks say on each resource (by URN).
type saidBy struct {
	mu sync.Mutex
	by map[string]*said
}

func (s *saidBy) of(urn string) *said {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by == nil {
		s.by = map[string]*said{}
	}
	if s.by[urn] == nil {
		s.by[urn] = &said{}
	}
	return s.by[urn]
}

func newLab(t testing.TB, specs ...talosapitest.NodeSpec) *lab {
	l := &lab{
		t: t, talos: talosapitest.Start(t, specs...), kube: kubeapitest.Start(t), said: &saidBy{},
		timing: rollout.Timing{Poll: 5 * time.Millisecond, Reboot: 3 * time.Second, Healthy: 3 * time.Second, RebootStart: 40 * time.Millisecond, Drain: time.Second, EvictRetry: 5 * time.Millisecond},
	}
	l.apiServers = map[string]string{}
	for _, n := range l.talos.Nodes() {
		l.registers(n)
	}
	return l
}

// registers is what a node's kubelet does in Kubernetes when it starts:
// its Node, and a control plane's static pods.
func (l *lab) registers(n *talosapitest.Node) {
	l.kube.AddNode(kubeapitest.NodeSpec{Name: n.Hostname(), InternalIP: n.IP()})
	if n.Role() == talosapitest.ControlPlane {
		l.apiServers[n.IP()] = kubeapitest.DefaultVersion
		for _, c := range rollout.ControlPlaneComponents {
			l.kube.AddPod(kubeapitest.PodSpec{Namespace: "kube-system", Name: c + "-" + n.Hostname(), Node: n.Hostname(),
				Mirror: true, Image: "registry.k8s.io/" + c + ":" + kubeapitest.DefaultVersion})
		}
	}
}

// nodes are the fake's nodes as the stack names them (by hostname).
func (l *lab) nodes(except ...string) []talos.NodeSpec {
	var out []talos.NodeSpec
	for _, n := range l.talos.Nodes() {
		if slices.Contains(except, n.Hostname()) {
			continue
		}
		role := talos.RoleWorker
		if n.Role() == talosapitest.ControlPlane {
			role = talos.RoleControlPlane
		}
		out = append(out, talos.NodeSpec{Name: n.Hostname(), IP: n.IP(), Role: role, Network: talos.NodeNetwork{DHCP: true}})
	}
	return out
}

func clusterArgs(version string, nodes []talos.NodeSpec) talos.ClusterArgs {
	return talos.ClusterArgs{
		Cluster:        talos.ClusterSettings{Name: "lab", TalosVersion: version, KubernetesVersion: "1.34.1"},
		InstallerImage: pulumi.String(image + version),
		Nodes:          nodes,
	}
}

// run is one run of the program: what it registered and the hooks it
// bound.
type run struct {
	engine *componentstest.Engine
	hooks  *componentstest.Hooks
	// The outputs, read from the nodes at the end of the run.
	talosVersion, kubernetesVersion string
	nodes                           map[string]talos.NodeStatus
}

// run runs the program under the mock engine; its secrets hold the fake
// cluster's admin credentials.
func (l *lab) run(args talos.ClusterArgs) run {
	l.t.Helper()
	crt, key := l.talos.AdminCert()
	e := &componentstest.Engine{
		ClientConfiguration: &componentstest.ClientConfiguration{CA: string(l.talos.CA()), Cert: string(crt), Key: string(key)},
		TalosKubeconfigs:    l.published,
	}
	if l.realConfigs {
		e.MachineConfiguration = l.machineConfig
	}
	hooks := &componentstest.Hooks{}
	deps := talos.Deps{
		Hooks: hooks,
		Talos: func(creds talosapi.Credentials, opts ...talosapi.Option) (talosapi.API, error) {
			address := l.talos.Address
			if l.published {
				address = talosapi.Address // the nodes' IPs: nothing answers there
			}
			// The component's options last: an address it gives wins.
			return talosapi.New(creds, append([]talosapi.Option{talosapi.WithAddress(address), talosapi.WithTimeouts(500*time.Millisecond, time.Second)}, opts...)...)
		},
		Kube: func(_ []byte, server string) (rollout.Kube, error) {
			if l.published && !strings.HasPrefix(server, publishedKube) {
				return nil, fmt.Errorf("%s does not answer: the lab's APIs are published elsewhere", server)
			}
			c, err := kubeapi.New(l.kube.Kubeconfig(), kubeapi.WithTimeout(time.Second))
			return kube{Client: c, l: l, server: server}, err
		},
		Timing:      l.timing,
		RemovedAPIs: l.removedAPIs,
		Destroy:     l.destroy,
		Context:     l.ctx,
		Log:         func(_ *pulumi.Context, urn pulumi.URN) talos.Logger { return l.said.of(string(urn)) },
	}
	if l.published {
		args.APIAddresses = l.apiAddresses()
	}
	if l.workerParallelism > 0 {
		args.Cluster.Rollout = &talos.RolloutSettings{WorkerParallelism: l.workerParallelism}
	}
	r := run{engine: e, hooks: hooks}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		c, err := talos.NewClusterWithDeps(ctx, "lab", &args, deps)
		if err != nil {
			return err
		}
		tv, err := internals.UnsafeAwaitOutput(ctx.Context(), c.TalosVersion)
		if err != nil {
			return err
		}
		kv, err := internals.UnsafeAwaitOutput(ctx.Context(), c.KubernetesVersion)
		if err != nil {
			return err
		}
		nodes, err := internals.UnsafeAwaitOutput(ctx.Context(), c.Nodes)
		if err != nil {
			return err
		}
		r.talosVersion, r.kubernetesVersion = tv.Value.(string), kv.Value.(string)
		r.nodes = nodes.Value.(map[string]talos.NodeStatus)
		return nil
	}, pulumi.WithMocks("talos-cluster", "lab", e), func(info *pulumi.RunInfo) { info.DryRun = l.dryRun })
	require.NoError(l.t, err)
	return r
}

// state is what Pulumi keeps: the inputs of each apply, membership and
// the roster by resource name, and under hookKey(name) the name of the
// before-delete hook the resource's last registration bound (the engine
// looks a deleted resource's hooks up by these names).
type state map[string]resource.PropertyMap

// hookKey is where state keeps the before-delete hook of the resource name.
func hookKey(name string) string { return "hooks:" + name }

func stateOf(p run) state {
	s := state{}
	for _, r := range p.engine.All() {
		if r.Type == componentstest.Apply || r.Type == componentstest.LocalCommand {
			s.keep(p, r)
		}
	}
	return s
}

// keep records r as the run p registered it: its inputs and its bound
// before-delete hook.
func (s state) keep(p run, r componentstest.Registered) {
	s[r.Name] = r.Inputs
	delete(s, hookKey(r.Name))
	for _, b := range p.hooks.On(r.Name) {
		if b.Point == talos.BeforeDelete {
			s[hookKey(r.Name)] = resource.PropertyMap{"beforeDelete": resource.NewProperty(b.Hook)}
		}
	}
}

// result is what an `up` did: the gate error that stopped it, if any, and
// the settle errors Pulumi reports as warnings.
type result struct {
	err      error
	warnings []error
}

// up walks the changes from s to p as the engine would and updates s with
// every step that succeeded. effect is what the provider's apply does to
// the node (nil: nothing the fake sees).
func (l *lab) up(s state, p run, effect func(node string)) result {
	l.t.Helper()
	applies := p.engine.ByType(componentstest.Apply)
	// The engine starts a step once the steps it depends on are done: the
	// graph's order.
	sort.SliceStable(applies, func(i, j int) bool { return p.engine.After(applies[j], applies[i]) })
	var res result
	for _, a := range applies {
		old, ok := s[a.Name]
		if !ok {
			// A create: its create hooks (an after hook's error is a
			// warning).
			args := &pulumi.ResourceHookArgs{URN: pulumi.URN(a.URN), Name: a.Name, NewInputs: a.Inputs}
			if err := p.fire(a.Name, talos.BeforeCreate, args); err != nil {
				res.err = err
				return res
			}
			if effect != nil && l.createEffects {
				effect(a.Inputs["node"].StringValue())
			}
			s[a.Name] = a.Inputs
			if err := p.fire(a.Name, talos.AfterCreate, args); err != nil {
				res.warnings = append(res.warnings, err)
			}
			continue
		}
		if old.DeepEquals(a.Inputs) {
			continue
		}
		args := &pulumi.ResourceHookArgs{URN: pulumi.URN(a.URN), Name: a.Name, OldInputs: old, NewInputs: a.Inputs}
		if err := p.fire(a.Name, talos.BeforeUpdate, args); err != nil {
			res.err = err
			return res
		}
		if effect != nil {
			effect(a.Inputs["node"].StringValue())
		}
		s[a.Name] = a.Inputs
		if err := p.fire(a.Name, talos.AfterUpdate, args); err != nil {
			res.warnings = append(res.warnings, err)
		}
	}
	// The workers' taints, after their applies: a create or update runs
	// its before hook, whose failure stops the run and leaves the state.
	for _, r := range p.engine.ByType(componentstest.LocalCommand) {
		if !strings.HasPrefix(r.Name, "lab"+talos.TaintsSuffix) {
			continue
		}
		old, ok := s[r.Name]
		point := talos.BeforeCreate
		switch {
		case ok && old.DeepEquals(r.Inputs):
			continue
		case ok:
			point = talos.BeforeUpdate
		}
		if err := p.fire(r.Name, point, &pulumi.ResourceHookArgs{URN: pulumi.URN(r.URN), Name: r.Name, OldInputs: old, NewInputs: r.Inputs}); err != nil {
			res.err = err
			return res
		}
		s[r.Name] = r.Inputs
	}
	// The bootstrap manifests, after every apply: a create or update runs
	// its before hook, whose failure stops the run and leaves the state.
	if r := find(p.engine, "lab"+talos.ManifestsSuffix); r != nil {
		old, ok := s[r.Name]
		if !ok || !old.DeepEquals(r.Inputs) {
			point := talos.BeforeCreate
			if ok {
				point = talos.BeforeUpdate
			}
			if err := p.fire(r.Name, point, &pulumi.ResourceHookArgs{URN: pulumi.URN(r.URN), Name: r.Name, OldInputs: old, NewInputs: r.Inputs}); err != nil {
				res.err = err
				return res
			}
			s[r.Name] = r.Inputs
		}
	}
	// Memberships: creates run no hook, and every registration binds the
	// hooks it names now (a same step too).
	for _, m := range p.engine.ByType(componentstest.LocalCommand) {
		if strings.HasPrefix(m.Name, "lab"+talos.MemberSuffix) {
			s.keep(p, m)
		}
	}
	// The roster, after every membership: an update runs its before-update
	// hook (the departures); a failure stops the run before any delete.
	if roster := find(p.engine, "lab"+talos.RosterSuffix); roster != nil {
		if old, ok := s[roster.Name]; ok && !old.DeepEquals(roster.Inputs) {
			args := &pulumi.ResourceHookArgs{URN: pulumi.URN(roster.URN), Name: roster.Name, OldInputs: old, NewInputs: roster.Inputs}
			if err := p.fire(roster.Name, talos.BeforeUpdate, args); err != nil {
				res.err = err
				return res
			}
		}
		s.keep(p, *roster)
	}
	// Deletes come last, dependents first: a membership before its apply
	// and its machine. A delete runs the hook its state names, which must
	// be registered in this run (the engine's "hook was not registered").
	for name, inputs := range s {
		if r := find(p.engine, name); r != nil || inputs["environment"].IsNull() || strings.HasPrefix(name, "hooks:") {
			continue
		}
		if strings.HasPrefix(name, "lab"+talos.TaintsSuffix) {
			delete(s, name) // no hook: its Node goes with the node
			continue
		}
		if h, ok := s[hookKey(name)]; ok {
			hook := h["beforeDelete"].StringValue()
			fn := p.hooks.Hook(hook)
			if fn == nil {
				res.err = fmt.Errorf("%s: hook %q was not registered", name, hook)
				return res
			}
			if err := fn(&pulumi.ResourceHookArgs{Name: name, OldInputs: inputs}); err != nil {
				res.err = fmt.Errorf("%s: %w", name, err)
				return res
			}
		}
		ip := inputs["environment"].ObjectValue()["NODE_IP"].StringValue()
		delete(s, name)
		delete(s, hookKey(name))
		l.talos.Record(ip, "DeleteVM", "")
		l.talos.Node(ip).PowerOff()
	}
	return res
}

// fire runs the hooks the run bound to the resource name at point, as the
// engine does, and returns the first error, named after the resource (an
// after hook's error is a warning: the caller says which it is).
func (p run) fire(name string, point talos.HookPoint, args *pulumi.ResourceHookArgs) error {
	var errs []error
	for _, b := range p.hooks.On(name) {
		if b.Point != point {
			continue
		}
		if err := b.Fn(args); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			if point == talos.BeforeCreate || point == talos.BeforeUpdate {
				break
			}
		}
	}
	return errors.Join(errs...)
}

func find(e *componentstest.Engine, name string) *componentstest.Registered {
	for _, r := range e.All() {
		if r.Name == name {
			return &r
		}
	}
	return nil
}

func upgraded(c *talosapitest.Cluster) []string {
	var out []string
	for _, e := range c.Events("Upgrade") {
		if e.Err == "" {
			out = append(out, c.Node(e.Node).Hostname())
		}
	}
	return out
}

func TestTalosUpgradeReachesOneNodeAtATime(t *testing.T) {
	t.Parallel()
	eachAccess(t, testTalosUpgradeReachesOneNodeAtATime)
}

// eachAccess runs a test with the nodes' APIs at their IPs, and again
// with every API published elsewhere (Machines.APIAddresses), where a call
// to a node's IP finds nothing.
func eachAccess(t *testing.T, test func(t *testing.T, published bool)) {
	for _, published := range []bool{false, true} {
		t.Run(map[bool]string{false: "at the nodes' IPs", true: "published"}[published], func(t *testing.T) {
			t.Parallel()
			test(t, published)
		})
	}
}

func testTalosUpgradeReachesOneNodeAtATime(t *testing.T, published bool) {
	l := newLab(t, talosapitest.Topology(3, 2, oldTalos, 30*time.Millisecond)...)
	l.published = published
	s := stateOf(l.run(clusterArgs(oldTalos, l.nodes())))

	next := l.run(clusterArgs(newTalos, l.nodes()))
	assert.Equal(t, oldTalos, next.talosVersion, "the outputs say what the nodes run, not what the config asks for")
	res := l.up(s, next, nil)
	require.NoError(t, res.err)
	assert.Empty(t, res.warnings)

	assert.Equal(t, []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2"}, upgraded(l.talos), "control planes first, one node at a time")
	assert.Equal(t, 1, l.talos.MaxDown(talosapitest.ControlPlane), "never two control planes down")
	assert.Equal(t, 1, l.talos.MaxDown(""), "one node at a time (worker parallelism 1)")
	for _, n := range l.talos.Nodes() {
		assert.Equal(t, newTalos, n.Version(), n.Hostname())
	}
	for _, e := range l.talos.Events("Upgrade") {
		assert.Contains(t, e.Args, "image="+image+newTalos)
	}

	// A second `up` with nothing changed touches no node: it only reads
	// their versions for the outputs, which now say the new one.
	before := len(l.talos.Events())
	again := l.run(clusterArgs(newTalos, l.nodes()))
	res = l.up(s, again, nil)
	require.NoError(t, res.err)
	for _, e := range l.talos.Events()[before:] {
		assert.Equal(t, "Version", e.Call, "only reads: %s", e)
	}
	assert.Equal(t, newTalos, again.talosVersion)
	assert.Equal(t, "1.34.1", again.kubernetesVersion)
	assert.Equal(t, talos.NodeStatus{IP: "10.5.0.21", Role: "worker", TalosVersion: newTalos, KubeletVersion: "v1.34.1"}, again.nodes["worker-1"])
}

// Every wait of a 3+2 rollout reports on the line of the apply it belongs
// to, as status (not among the run's final diagnostics), at least every
// Timing.ProgressEvery (30 s in a real run) while it lasts: each node's
// reboot into the new version lasts several clocks here.
func TestEveryWaitOfARolloutReportsOnItsResource(t *testing.T) {
	t.Parallel()
	l := newLab(t, talosapitest.Topology(3, 2, oldTalos, 200*time.Millisecond)...)
	l.timing.ProgressEvery = 20 * time.Millisecond
	s := stateOf(l.run(clusterArgs(oldTalos, l.nodes())))
	next := l.run(clusterArgs(newTalos, l.nodes()))
	require.NoError(t, l.up(s, next, nil).err)

	for _, n := range []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2"} {
		apply := find(next.engine, "lab-apply-"+n)
		require.NotNil(t, apply, n)
		said := l.said.of(apply.URN)
		said.mu.Lock()
		var reports int
		for _, m := range said.status {
			if strings.HasPrefix(m, "waiting for node ") && strings.Contains(m, "last seen: ") {
				reports++
			}
		}
		assert.GreaterOrEqual(t, reports, 2, "%s: its reboot lasts 10 clocks, so the waits report on its line: %q", n, said.status)
		for _, m := range said.info {
			assert.NotContains(t, m, "last seen: ", "%s: a wait's reports stay out of the diagnostics", n)
		}
		assert.NotEmpty(t, said.info, "%s: what the rollout did is kept on its line", n)
		said.mu.Unlock()
	}
}

func TestWorkersGoInBatches(t *testing.T) {
	t.Parallel()
	l := newLab(t, talosapitest.Topology(1, 4, oldTalos, 30*time.Millisecond)...)
	s := stateOf(l.run(clusterArgs(oldTalos, l.nodes())))
	args := clusterArgs(newTalos, l.nodes())
	args.Cluster.Rollout = &talos.RolloutSettings{WorkerParallelism: 2}
	p := l.run(args)

	// The engine runs a batch's steps at once.
	applies := p.engine.ByType(componentstest.Apply)
	w1, w2 := p.engine.Named(t, componentstest.Apply, "lab-apply-worker-1"), p.engine.Named(t, componentstest.Apply, "lab-apply-worker-2")
	w3 := p.engine.Named(t, componentstest.Apply, "lab-apply-worker-3")
	assert.False(t, p.engine.After(w2, w1), "workers 1 and 2 are one batch")
	assert.True(t, p.engine.After(w3, w1) && p.engine.After(w3, w2), "worker 3 waits for the batch before")
	require.Len(t, applies, 5)
	require.NoError(t, l.up(s, p, nil).err)
	got := upgraded(l.talos)
	require.Len(t, got, 5)
	assert.Equal(t, "cp-1", got[0])
	assert.ElementsMatch(t, []string{"worker-1", "worker-2"}, got[1:3], "the first batch")
	assert.ElementsMatch(t, []string{"worker-3", "worker-4"}, got[3:], "the second batch")
}

func TestAStuckNodeStopsTheRolloutAndTheNextUpResumes(t *testing.T) {
	t.Parallel()
	specs := talosapitest.Topology(3, 1, oldTalos, 30*time.Millisecond)
	specs[1].NeverReturns = true
	l := newLab(t, specs...)
	l.timing.Reboot = 400 * time.Millisecond
	s := stateOf(l.run(clusterArgs(oldTalos, l.nodes())))
	next := l.run(clusterArgs(newTalos, l.nodes()))

	res := l.up(s, next, nil)
	require.Error(t, res.err)
	assert.ErrorIs(t, res.err, talosapi.ErrUnreachable)
	assert.Contains(t, res.err.Error(), "lab-apply-cp-2")
	assert.Equal(t, []string{"cp-1", "cp-2"}, upgraded(l.talos), "nothing after the stuck node")
	assert.Equal(t, 1, l.talos.MaxDown(talosapitest.ControlPlane))

	// What the stack reports meanwhile: the oldest version, and per node
	// what each runs.
	mid := l.run(clusterArgs(newTalos, l.nodes()))
	assert.Equal(t, oldTalos, mid.talosVersion)
	assert.Equal(t, newTalos, mid.nodes["cp-1"].TalosVersion)
	assert.Equal(t, talos.Unknown, mid.nodes["cp-2"].TalosVersion, "the stuck node does not answer")
	assert.Equal(t, oldTalos, mid.nodes["cp-3"].TalosVersion)

	// The next `up` refuses at the gate while the node is down, naming
	// its etcd member, and touches nothing.
	res = l.up(s, l.run(clusterArgs(newTalos, l.nodes())), nil)
	require.ErrorIs(t, res.err, talosapi.ErrEtcdUnhealthy)
	assert.Contains(t, res.err.Error(), "member cp-2")
	assert.Equal(t, []string{"cp-1", "cp-2"}, upgraded(l.talos))

	// The operator brings the node back; the next `up` resumes with the
	// nodes still on the old version and upgrades each node once.
	l.talos.Node("10.5.0.12").SetNeverReturns(false)
	l.talos.Node("10.5.0.12").PowerOn()
	res = l.up(s, l.run(clusterArgs(newTalos, l.nodes())), nil)
	require.NoError(t, res.err)
	assert.Equal(t, []string{"cp-1", "cp-2", "cp-3", "worker-1"}, upgraded(l.talos))
	for _, n := range l.talos.Nodes() {
		assert.Equal(t, newTalos, n.Version(), n.Hostname())
	}
}

// A config change that needs a reboot (Talos reboots right after the
// apply): the settle hook sees the reboot and waits, so the next control
// plane is touched only once the one before is back with etcd healthy.
func TestARebootingConfigChangeReachesOneControlPlaneAtATime(t *testing.T) {
	t.Parallel()
	specs := talosapitest.Topology(3, 1, oldTalos, 40*time.Millisecond)
	for i := range specs {
		specs[i].ShutdownDelay = 10 * time.Millisecond
		specs[i].ServiceDelay = 20 * time.Millisecond
	}
	l := newLab(t, specs...)
	s := stateOf(l.run(clusterArgs(oldTalos, l.nodes())))
	args := clusterArgs(oldTalos, l.nodes())
	args.Cluster.Patches = &talos.ClusterPatches{All: []string{rebootingPatch}}

	res := l.up(s, l.run(args), l.rebootAfterApply())
	require.NoError(t, res.err)
	assert.Empty(t, res.warnings)
	assert.Equal(t, 1, l.talos.MaxDown(talosapitest.ControlPlane), "never two control planes down")
	assert.Equal(t, 1, l.talos.MaxDown(""))
	for _, n := range l.talos.Nodes() {
		assert.Equal(t, 1, n.Boots(), "%s rebooted once", n.Hostname())
	}
	assert.Empty(t, upgraded(l.talos), "a config change upgrades nothing")
}

// A node that does not come back after its config apply: Pulumi only warns
// about the settle hook's error, and the next node's gate refuses.
func TestANodeThatDoesNotSettleStopsTheNext(t *testing.T) {
	t.Parallel()
	specs := talosapitest.Topology(1, 2, oldTalos, 30*time.Millisecond)
	specs[1].NeverReturns = true
	l := newLab(t, specs...)
	l.timing.Reboot = 300 * time.Millisecond
	s := stateOf(l.run(clusterArgs(oldTalos, l.nodes())))
	args := clusterArgs(oldTalos, l.nodes())
	args.Cluster.Patches = &talos.ClusterPatches{Worker: []string{rebootingPatch}}

	res := l.up(s, l.run(args), l.rebootAfterApply())
	require.Len(t, res.warnings, 1)
	require.Error(t, res.err)
	assert.Contains(t, res.err.Error(), "lab-apply-worker-2: unable to touch node worker-2 (10.5.0.22): node worker-1 did not come back healthy")
	assert.Equal(t, 1, l.talos.Node("10.5.0.21").Boots()+boolInt(!l.talos.Node("10.5.0.21").Up()))
	assert.Equal(t, 0, l.talos.Node("10.5.0.22").Boots(), "worker-2 untouched")
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Removing a control plane from the stack: its etcd member leaves before
// its machine is deleted, and its Kubernetes Node goes.
func TestRemovingAControlPlaneLeavesEtcdBeforeTheMachineGoes(t *testing.T) {
	t.Parallel()
	l := newLab(t, talosapitest.Topology(3, 1, oldTalos, 30*time.Millisecond)...)
	s := stateOf(l.run(clusterArgs(oldTalos, l.nodes())))

	res := l.up(s, l.run(clusterArgs(oldTalos, l.nodes("cp-3"))), nil)
	require.NoError(t, res.err)
	var calls []string
	for _, e := range l.talos.Events("EtcdLeaveCluster", "DeleteVM", "Upgrade", "Reboot") {
		calls = append(calls, e.Node+" "+e.Call)
	}
	assert.Equal(t, []string{"10.5.0.13 EtcdLeaveCluster", "10.5.0.13 DeleteVM"}, calls, "etcd first, then the machine; nothing else")
	assert.Equal(t, []string{"cp-1", "cp-2"}, l.talos.Members())
	_, ok := l.kube.Node("cp-3")
	assert.False(t, ok, "its Kubernetes Node is deleted")
	_, ok = l.kube.Node("cp-1")
	assert.True(t, ok)
}

// A control plane that is already gone (its machine died): its member is
// removed through another control plane.
func TestRemovingADeadControlPlaneRemovesItsMemberThroughAnother(t *testing.T) {
	t.Parallel()
	l := newLab(t, talosapitest.Topology(3, 0, oldTalos, 30*time.Millisecond)...)
	s := stateOf(l.run(clusterArgs(oldTalos, l.nodes())))
	l.talos.Node("10.5.0.13").PowerOff()

	require.NoError(t, l.up(s, l.run(clusterArgs(oldTalos, l.nodes("cp-3"))), nil).err)
	removals := l.talos.Events("EtcdRemoveMemberByID")
	require.Len(t, removals, 1)
	assert.Equal(t, "10.5.0.11", removals[0].Node, "through the first other control plane")
	assert.Equal(t, []string{"cp-1", "cp-2"}, l.talos.Members())
}

// Removing a worker: cordoned and drained (its DaemonSet pod stays), its
// Node deleted, then its machine.
func TestRemovingAWorkerDrainsIt(t *testing.T) {
	t.Parallel()
	l := newLab(t, talosapitest.Topology(1, 2, oldTalos, 30*time.Millisecond)...)
	l.kube.AddPod(kubeapitest.PodSpec{Name: "web", Node: "worker-2", OwnerKind: "ReplicaSet", PDBBlocks: 2})
	l.kube.AddPod(kubeapitest.PodSpec{Name: "cilium-x", Namespace: "kube-system", Node: "worker-2", OwnerKind: "DaemonSet"})
	s := stateOf(l.run(clusterArgs(oldTalos, l.nodes())))

	require.NoError(t, l.up(s, l.run(clusterArgs(oldTalos, l.nodes("worker-2"))), nil).err)
	var actions []string
	for _, e := range l.kube.Events() {
		actions = append(actions, fmt.Sprintf("%s %s %d", e.Action, e.Object, e.Code))
	}
	assert.Equal(t, []string{
		"cordon worker-2 200", "evict default/web 429", "evict default/web 429", "evict default/web 201", "delete-node worker-2 200",
	}, actions)
	assert.Empty(t, l.talos.Events("EtcdLeaveCluster", "EtcdRemoveMemberByID"), "a worker has no etcd member")
	assert.Equal(t, []string{"cp-1"}, l.talos.Members())
}

// A drain that cannot finish stops the removal before the machine goes,
// naming the pod: the departure fails the roster's update, so the run
// stops before the engine deletes anything of the node and the roster
// still lists it; the next `up` (the drain no longer blocked) takes it out
// and deletes it.
func TestAWorkerThatCannotBeDrainedStays(t *testing.T) {
	t.Parallel()
	l := newLab(t, talosapitest.Topology(1, 1, oldTalos, 30*time.Millisecond)...)
	l.timing.Drain = 100 * time.Millisecond
	l.kube.AddPod(kubeapitest.PodSpec{Name: "db-0", Node: "worker-1", OwnerKind: "StatefulSet", PDBBlocks: kubeapitest.Forever})
	s := stateOf(l.run(clusterArgs(oldTalos, l.nodes())))
	roster := s["lab"+talos.RosterSuffix]

	res := l.up(s, l.run(clusterArgs(oldTalos, l.nodes("worker-1"))), nil)
	require.ErrorIs(t, res.err, kubeapi.ErrDrainTimeout)
	assert.Contains(t, res.err.Error(), "default/db-0")
	assert.Contains(t, res.err.Error(), "lab-roster")
	assert.Empty(t, l.talos.Events("DeleteVM"), "the machine stays")
	_, ok := l.kube.Node("worker-1")
	assert.True(t, ok)
	assert.Contains(t, s, "lab-member-worker-1", "nothing of the node is deleted")
	assert.True(t, roster.DeepEquals(s["lab"+talos.RosterSuffix]), "the roster still lists the node")

	l.kube.DeletePod("default", "db-0")
	require.NoError(t, l.up(s, l.run(clusterArgs(oldTalos, l.nodes("worker-1"))), nil).err)
	assert.NotContains(t, s, "lab-member-worker-1")
	assert.NotContains(t, s["lab"+talos.RosterSuffix]["environment"].ObjectValue(), resource.PropertyKey("worker-1"))
	_, ok = l.kube.Node("worker-1")
	assert.False(t, ok, "drained and deleted on the second up")
	require.Len(t, l.talos.Events("DeleteVM"), 1)
}

// A stack of an earlier version (every membership bound to the removal
// hook, no roster) whose first `up` with this version also drops a worker:
// the roster is created then, so its hook does not run; the membership's
// delete runs the hook its state names, still registered, which takes the
// worker out as before. Memberships that stay lose the hook, so the next
// removal of the cluster from a program finds none.
func TestAnEarlierVersionsStateTakesARemovedNodeOutThroughItsHook(t *testing.T) {
	t.Parallel()
	l := newLab(t, talosapitest.Topology(1, 2, oldTalos, 30*time.Millisecond)...)
	s := stateOf(l.run(clusterArgs(oldTalos, l.nodes())))
	delete(s, "lab"+talos.RosterSuffix)
	for name := range s {
		if strings.HasPrefix(name, "lab"+talos.MemberSuffix) {
			s[hookKey(name)] = resource.PropertyMap{"beforeDelete": resource.NewProperty("lab" + talos.RemoveHookSuffix)}
		}
	}

	require.NoError(t, l.up(s, l.run(clusterArgs(oldTalos, l.nodes("worker-2"))), nil).err)
	deleted := slices.DeleteFunc(l.kube.Events(), func(e kubeapitest.Event) bool { return e.Action != "delete-node" })
	require.Len(t, deleted, 1, "taken out once")
	assert.Equal(t, "worker-2", deleted[0].Object)
	assert.Contains(t, s, "lab"+talos.RosterSuffix)
	for name := range s {
		assert.False(t, strings.HasPrefix(name, "hooks:"), "%s: the memberships that stay lose the hook", name)
	}
}

// A Kubernetes upgrade: every control plane's API server, controller
// manager and scheduler move first, one control plane at a time, each API
// server answering with the new version before the next, with the kubelets
// kept on the old version; then the applies move the kubelets node by node.
// No kubelet is ever newer than an API server.
func TestAKubernetesUpgradeMovesTheControlPlanesBeforeAnyKubelet(t *testing.T) {
	t.Parallel()
	eachAccess(t, testAKubernetesUpgradeMovesTheControlPlanesBeforeAnyKubelet)
}

func testAKubernetesUpgradeMovesTheControlPlanesBeforeAnyKubelet(t *testing.T, published bool) {
	const from, to = "1.34.1", "1.35.0"
	l := newLab(t, talosapitest.Topology(3, 2, oldTalos, 30*time.Millisecond)...)
	l.realConfigs = true
	l.published = published
	var log []string
	var skew []string
	l.talos.OnApply(func(ip string, data []byte) {
		cfg, err := configloader.NewFromBytes(data)
		if !assert.NoError(t, err, "the node gets a valid machine config") {
			return
		}
		api := cfg.Cluster().APIServer().Image()
		kubelet := cfg.Machine().Kubelet().Image()
		assert.True(t, strings.HasSuffix(kubelet, ":v"+from), "the kubelet stays on %s in the control-plane phase, got %s", from, kubelet)
		assert.Contains(t, cfg.Cluster().ControllerManager().Image(), ":v"+to)
		assert.Contains(t, cfg.Cluster().Scheduler().Image(), ":v"+to)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.controlPlaneRuns(ip, api[strings.LastIndex(api, ":")+1:])
		log = append(log, "api-server "+ip)
	})
	args := func(v string) talos.ClusterArgs {
		a := clusterArgs(oldTalos, l.nodes())
		a.Cluster.KubernetesVersion = v
		return a
	}
	s := stateOf(l.run(args(from)))

	// What the provider's apply does to a node: its whole config runs, its
	// kubelet (and a control plane's API server) on the new version. At
	// that moment every other API server must run it already.
	kubelet := func(ip string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if _, cp := l.apiServers[ip]; cp {
			l.controlPlaneRuns(ip, "v"+to)
		}
		for cp, v := range l.apiServers {
			if v != "v"+to {
				skew = append(skew, fmt.Sprintf("kubelet of %s moved while the API server of %s runs %s", ip, cp, v))
			}
		}
		log = append(log, "kubelet "+ip)
		l.kube.SetKubeletVersion(l.talos.Node(ip).Hostname(), "v"+to)
	}
	next := l.run(args(to))
	res := l.up(s, next, kubelet)
	require.NoError(t, res.err)
	assert.Empty(t, res.warnings)
	assert.Empty(t, skew, "no kubelet newer than an API server")
	assert.Equal(t, []string{
		"api-server 10.5.0.11", "api-server 10.5.0.12", "api-server 10.5.0.13",
		"kubelet 10.5.0.11", "kubelet 10.5.0.12", "kubelet 10.5.0.13", "kubelet 10.5.0.21", "kubelet 10.5.0.22",
	}, log)
	assert.Empty(t, upgraded(l.talos), "no Talos upgrade")
	assert.Len(t, l.talos.Events("Kubeconfig"), 1, "one admin kubeconfig per run: Talos signs a certificate for each")

	// The outputs of the next run say what runs now.
	after := l.run(args(to))
	assert.Equal(t, to, after.kubernetesVersion)
	assert.Equal(t, "v"+to, after.nodes["worker-2"].KubeletVersion)
}

// Ctrl-C during a wait that would last (a node that does not come back
// after its config apply): the settle hook stops within a poll, says that
// the run was cancelled, and the next node is not touched (item 14 of
// issue 23: the wait went on, silent, until a second Ctrl-C).
func TestACancelledRunStopsWaiting(t *testing.T) {
	t.Parallel()
	specs := talosapitest.Topology(1, 2, oldTalos, 30*time.Millisecond)
	specs[1].NeverReturns = true
	l := newLab(t, specs...)
	l.timing.Reboot = time.Minute
	s := stateOf(l.run(clusterArgs(oldTalos, l.nodes())))
	ctx, cancel := context.WithCancel(context.Background())
	l.ctx = ctx
	args := clusterArgs(oldTalos, l.nodes())
	args.Cluster.Patches = &talos.ClusterPatches{Worker: []string{rebootingPatch}}
	p := l.run(args)
	reboot := l.rebootAfterApply()
	var cancelled time.Time
	res := l.up(s, p, func(node string) {
		reboot(node)
		time.AfterFunc(200*time.Millisecond, func() { cancelled = time.Now(); cancel() })
	})
	require.Len(t, res.warnings, 1)
	assert.Contains(t, res.warnings[0].Error(), "the run was cancelled")
	assert.NotContains(t, res.warnings[0].Error(), "its time ran out", "cancelled by the operator, not by a timeout")
	assert.Less(t, time.Since(cancelled), 5*time.Second, "the wait stopped once the run was cancelled, not after Reboot (1 min)")
	require.Error(t, res.err, "the next node is not touched")
	assert.Equal(t, 0, l.talos.Node("10.5.0.22").Boots(), "worker-2 untouched")
}

// A config change Talos reboots for, where the reboot starts late (Talos
// stops pods and services first): the settle hook watched 20 s for it and
// then went on, so the next node was touched while this one rebooted (item
// 10 of issue 23). Now the gate asks Talos (a dry run, as the provider
// does) and the settle hook waits for the reboot however late it starts.
func TestALateRebootIsWaitedFor(t *testing.T) {
	t.Parallel()
	l := newLab(t, talosapitest.Topology(1, 2, oldTalos, 30*time.Millisecond)...)
	l.realConfigs = true
	l.talos.SetNeedsReboot(func(_ string, config []byte) bool { return strings.Contains(string(config), "nr_hugepages") })
	s := stateOf(l.run(clusterArgs(oldTalos, l.nodes())))
	args := clusterArgs(oldTalos, l.nodes())
	args.Cluster.Patches = &talos.ClusterPatches{Worker: []string{rebootingPatch}}
	reboot := l.rebootAfterApply()
	var seen []string
	res := l.up(s, l.run(args), func(ip string) {
		for _, w := range []string{"10.5.0.21", "10.5.0.22"} {
			seen = append(seen, fmt.Sprintf("%s at the apply of %s: %d boots", w, ip, l.talos.Node(w).Boots()))
		}
		// Later than the watch of RebootStart (40 ms in the lab).
		time.AfterFunc(150*time.Millisecond, func() { reboot(ip) })
	})
	require.NoError(t, res.err)
	assert.Empty(t, res.warnings)
	assert.Equal(t, []string{
		"10.5.0.21 at the apply of 10.5.0.21: 0 boots", "10.5.0.22 at the apply of 10.5.0.21: 0 boots",
		"10.5.0.21 at the apply of 10.5.0.22: 1 boots", "10.5.0.22 at the apply of 10.5.0.22: 0 boots",
	}, seen, "worker-1 rebooted before worker-2 was touched")
}

// A config change Talos takes without a reboot costs no watch for one: no
// boot time is read after the apply.
func TestAChangeWithoutARebootIsNotWatched(t *testing.T) {
	t.Parallel()
	l := newLab(t, talosapitest.Topology(1, 1, oldTalos, 30*time.Millisecond)...)
	l.realConfigs = true
	l.talos.SetNeedsReboot(func(string, []byte) bool { return false })
	s := stateOf(l.run(clusterArgs(oldTalos, l.nodes())))
	args := clusterArgs(oldTalos, l.nodes())
	args.Cluster.Patches = &talos.ClusterPatches{Worker: []string{"machine:\n  time:\n    servers: [time.example.com]\n"}}
	var applied int
	res := l.up(s, l.run(args), func(string) { applied = len(l.talos.Events()) })
	require.NoError(t, res.err)
	require.Positive(t, applied)
	for _, e := range l.talos.Events()[applied:] {
		assert.NotEqual(t, "SystemStat", e.Call, "no boot time read after the apply: %v", e)
	}
	assert.NotEmpty(t, l.talos.Events("dry-run"))
}

// resetArgs are the cluster's args with every node reset when it leaves
// (vps.onDestroy: reset).
func resetArgs(nodes []talos.NodeSpec) talos.ClusterArgs {
	a := clusterArgs(oldTalos, nodes)
	a.ResetOnDestroy = true
	return a
}

// With vps.onDestroy: reset, a removed worker is drained, then reset
// (items 3 and 13 of issue 23: the reset was the apply's delete, which a
// re-image's replacement runs too; and a dead node's reset failed the
// removal for good).
func TestARemovedNodeIsResetAfterItLeaves(t *testing.T) {
	t.Parallel()
	l := newLab(t, talosapitest.Topology(1, 2, oldTalos, 30*time.Millisecond)...)
	s := stateOf(l.run(resetArgs(l.nodes())))
	require.NoError(t, l.up(s, l.run(resetArgs(l.nodes("worker-2"))), nil).err)
	var calls []string
	for _, e := range l.talos.Events("wipe", "DeleteVM") {
		calls = append(calls, e.Node+" "+e.Call+" "+e.Args)
	}
	assert.Equal(t, []string{"10.5.0.22 wipe STATE,EPHEMERAL", "10.5.0.22 DeleteVM "}, calls, "reset after the drain, before the machine goes")
	_, ok := l.kube.Node("worker-2")
	assert.False(t, ok, "drained and deleted first")
}

// A dead node with vps.onDestroy: reset leaves with a warning: there is
// nothing to reset.
func TestADeadNodeIsRemovedWithoutItsReset(t *testing.T) {
	t.Parallel()
	l := newLab(t, talosapitest.Topology(1, 2, oldTalos, 30*time.Millisecond)...)
	s := stateOf(l.run(resetArgs(l.nodes())))
	l.talos.Node("10.5.0.22").PowerOff()
	l.kube.SetNodeReady("worker-2", false)
	require.NoError(t, l.up(s, l.run(resetArgs(l.nodes("worker-2"))), nil).err)
	assert.Empty(t, l.talos.Events("wipe"))
	_, ok := l.kube.Node("worker-2")
	assert.False(t, ok)
}

// A re-image (`pulumi up --replace` of a VPS install) replaces the node's
// apply: the old apply's delete does nothing now, and the membership stays,
// so the node just installed is not wiped (item 3 of issue 23).
func TestAReimageDoesNotResetTheNode(t *testing.T) {
	t.Parallel()
	l := newLab(t, talosapitest.Topology(1, 1, oldTalos, 30*time.Millisecond)...)
	p := l.run(resetArgs(l.nodes()))
	for _, a := range p.engine.ByType(componentstest.Apply) {
		assert.NotContains(t, a.Inputs, resource.PropertyKey("onDestroy"), "%s: no reset on the apply's delete", a.Name)
	}
	for _, m := range p.engine.ByType(componentstest.LocalCommand) {
		if strings.Contains(m.Name, talos.MemberSuffix) {
			assert.Empty(t, m.ReplaceWith, "%s: a replaced apply leaves the membership alone", m.Name)
		}
	}
}

// A whole-stack destroy with vps.onDestroy: reset resets every node and
// drains none; dead nodes only warn.
func TestAWholeStackDestroyResetsEveryNode(t *testing.T) {
	t.Parallel()
	l := newLab(t, talosapitest.Topology(1, 2, oldTalos, 30*time.Millisecond)...)
	s := stateOf(l.run(resetArgs(l.nodes())))
	l.talos.Node("10.5.0.22").PowerOff()
	l.destroy = true
	during := l.run(resetArgs(l.nodes()))
	remove := during.hooks.Hook("lab" + talos.RemoveHookSuffix)
	for name, inputs := range s {
		if strings.HasPrefix(name, "lab"+talos.MemberSuffix) {
			require.NoError(t, remove(&pulumi.ResourceHookArgs{Name: name, OldInputs: inputs}), name)
		}
	}
	var reset []string
	for _, e := range l.talos.Events("wipe") {
		reset = append(reset, e.Node)
	}
	slices.Sort(reset)
	assert.Equal(t, []string{"10.5.0.11", "10.5.0.21"}, reset, "every live node, the dead one skipped")
	assert.Empty(t, l.kube.Events(), "no drain")
}

// A Kubernetes upgrade in the same `up` as a control plane is added, on a
// cluster whose control planes' patch names a kubelet image of the user's
// (item 8 of issue 23): the control-plane phase went to the new control
// plane too, still in maintenance mode, and failed; and it pinned the
// kubelets to the base config's image, over the user's. Now the new control
// plane is left to its first config, and the kubelets keep the user's image.
func TestAKubernetesUpgradeSkipsANewControlPlaneAndKeepsTheUsersKubelet(t *testing.T) {
	t.Parallel()
	const from, to = "1.34.1", "1.35.0"
	const usersKubelet = "registry.example.com/kubelet:v1.34.1-patched"
	l := newLab(t, talosapitest.Topology(3, 1, oldTalos, 30*time.Millisecond)...)
	l.realConfigs = true
	var applied []string
	l.talos.OnApply(func(ip string, data []byte) {
		cfg, err := configloader.NewFromBytes(data)
		if !assert.NoError(t, err) {
			return
		}
		assert.Equal(t, usersKubelet, cfg.Machine().Kubelet().Image(), "the kubelet of %s keeps the user's image", ip)
		api := cfg.Cluster().APIServer().Image()
		l.mu.Lock()
		defer l.mu.Unlock()
		l.controlPlaneRuns(ip, api[strings.LastIndex(api, ":")+1:])
		applied = append(applied, ip)
	})
	args := func(v string, extra ...talos.NodeSpec) talos.ClusterArgs {
		a := clusterArgs(oldTalos, append(l.nodes(), extra...))
		a.Cluster.KubernetesVersion = v
		a.Cluster.Patches = &talos.ClusterPatches{ControlPlane: []string{"machine:\n  kubelet:\n    image: " + usersKubelet + "\n"}}
		return a
	}
	first := l.run(args(from))
	s := stateOf(first)
	// The stack's last outputs: three control planes.
	next := args(to, talos.NodeSpec{Name: "cp-4", IP: "10.5.0.14", Role: talos.RoleControlPlane, Network: talos.NodeNetwork{DHCP: true}})
	next.Previous = &talos.Previous{ControlPlanes: []string{"cp-1", "cp-2", "cp-3"}, ControlPlaneIPs: []string{"10.5.0.11", "10.5.0.12", "10.5.0.13"}}
	kubelet := func(ip string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if _, cp := l.apiServers[ip]; cp {
			l.controlPlaneRuns(ip, "v"+to)
		}
		if n := l.talos.Node(ip); n != nil {
			l.kube.SetKubeletVersion(n.Hostname(), "v"+to)
		}
	}
	res := l.up(s, l.run(next), kubelet)
	require.NoError(t, res.err)
	assert.Equal(t, []string{"10.5.0.11", "10.5.0.12", "10.5.0.13"}, applied, "the running control planes, not the new one")
}

// A control plane whose machine is replaced (a new VM, a reinstalled
// server) gets a new config apply (item 2 of issue 23): its old etcd
// member was left in etcd, so the new machine, with the same name and
// address, could not join. Now the old member goes first, through another
// control plane, then the new machine gets its config, and the rollout
// waits for it to be healthy.
func TestAReplacedControlPlaneLeavesEtcdBeforeItsNewMachineJoins(t *testing.T) {
	t.Parallel()
	l := newLab(t, talosapitest.Topology(3, 1, oldTalos, 30*time.Millisecond)...)
	s := stateOf(l.run(clusterArgs(oldTalos, l.nodes())))
	oldID, ok := l.talos.Node("10.5.0.13").MemberID()
	require.True(t, ok)

	// The engine replaces the VM (deleting the old one) and with it the
	// apply: the new machine waits in maintenance mode, not answering as
	// a member.
	delete(s, "lab-apply-cp-3")
	l.talos.Node("10.5.0.13").PowerOff()
	args := clusterArgs(oldTalos, l.nodes())
	args.Previous = &talos.Previous{
		ControlPlanes: []string{"cp-1", "cp-2", "cp-3"}, ControlPlaneIPs: []string{"10.5.0.11", "10.5.0.12", "10.5.0.13"},
		Roles: map[string]talos.Role{"cp-1": talos.RoleControlPlane, "cp-2": talos.RoleControlPlane, "cp-3": talos.RoleControlPlane, "worker-1": talos.RoleWorker},
	}
	var order []string
	l.createEffects = true
	res := l.up(s, l.run(args), func(ip string) {
		order = append(order, "config "+ip)
		_, stale := l.kube.Node("cp-3")
		assert.False(t, stale, "the old machine's Node is gone before the new one registers")
		l.talos.Node(ip).PowerOn() // the new machine installs and joins
		l.registers(l.talos.Node(ip))
	})
	require.NoError(t, res.err)
	assert.Empty(t, res.warnings, "the new machine came back healthy")
	removals := l.talos.Events("EtcdRemoveMemberByID")
	require.Len(t, removals, 1, "the old member is removed through another control plane")
	assert.Contains(t, removals[0].Args, fmt.Sprintf("%x", oldID), "the old member")
	assert.Equal(t, []string{"config 10.5.0.13"}, order)
	newID, ok := l.talos.Node("10.5.0.13").MemberID()
	require.True(t, ok)
	assert.NotEqual(t, oldID, newID, "the new machine joined as a new member")
	assert.Len(t, l.talos.Members(), 3)
}

// A control plane and a worker whose machines an edit replaces (their
// Machine changed): before the platform deletes the old machine, the
// control plane leaves etcd and the worker is drained (item 2 of issue 23:
// the VM was hard-stopped with neither). Unchanged machines, and a destroy,
// are left alone.
func TestAMachineReplacedByAnEditLeavesFirst(t *testing.T) {
	t.Parallel()
	l := newLab(t, talosapitest.Topology(3, 1, oldTalos, 30*time.Millisecond)...)
	l.kube.AddPod(kubeapitest.PodSpec{Name: "web", Node: "worker-1", OwnerKind: "ReplicaSet"})
	machines := func(nodes []talos.NodeSpec, changed ...string) []talos.NodeSpec {
		for i := range nodes {
			nodes[i].Machine = "vm of " + nodes[i].Name
			if slices.Contains(changed, nodes[i].Name) {
				nodes[i].Machine += " on another host"
			}
		}
		return nodes
	}
	prev := &talos.Previous{
		ControlPlanes: []string{"cp-1", "cp-2", "cp-3"}, ControlPlaneIPs: []string{"10.5.0.11", "10.5.0.12", "10.5.0.13"},
		Roles:    map[string]talos.Role{"cp-1": talos.RoleControlPlane, "cp-2": talos.RoleControlPlane, "cp-3": talos.RoleControlPlane, "worker-1": talos.RoleWorker},
		Machines: map[string]string{"cp-1": "vm of cp-1", "cp-2": "vm of cp-2", "cp-3": "vm of cp-3", "worker-1": "vm of worker-1"},
	}
	args := clusterArgs(oldTalos, machines(l.nodes(), "cp-3", "worker-1"))
	args.Previous = prev
	args.Leaver = talos.NewLeaver()
	l.run(args)
	for _, n := range []string{"cp-1", "cp-3", "worker-1"} {
		require.NoError(t, args.Leaver.Leave(n), n)
	}
	var calls []string
	for _, e := range l.talos.Events("EtcdLeaveCluster", "EtcdRemoveMemberByID") {
		calls = append(calls, e.Node+" "+e.Call)
	}
	assert.Equal(t, []string{"10.5.0.13 EtcdLeaveCluster"}, calls, "cp-3 left etcd; cp-1's machine is the same")
	var kube []string
	for _, e := range l.kube.Events() {
		kube = append(kube, e.Action+" "+e.Object)
	}
	assert.Equal(t, []string{"delete-node cp-3", "cordon worker-1", "evict default/web", "delete-node worker-1"}, kube)

	// A destroy takes no node out, whatever changed.
	before, beforeKube := len(l.talos.Events()), len(l.kube.Events())
	l.destroy = true
	args.Leaver = talos.NewLeaver()
	l.run(args)
	require.NoError(t, args.Leaver.Leave("cp-3"))
	assert.Len(t, l.talos.Events(), before)
	assert.Len(t, l.kube.Events(), beforeKube)
}

// A node whose machine the platform replaces with its state kept (a
// container on a new image, its volumes kept): Restart gates it before the
// old machine goes (etcd keeps its quorum without it) and Restarted waits
// until it is back and healthy, so the next container is replaced only
// then. A node the last run did not have, one leaving the stack and a
// destroy are left alone; with another control plane down, the gate
// refuses, and the restart does not happen.
func TestAMachineRestartedWithItsStateIsGatedAndAwaited(t *testing.T) {
	t.Parallel()
	l := newLab(t, talosapitest.Topology(3, 1, oldTalos, 30*time.Millisecond)...)
	args := clusterArgs(oldTalos, l.nodes())
	args.Previous = &talos.Previous{
		ControlPlanes: []string{"cp-1", "cp-2", "cp-3"}, ControlPlaneIPs: []string{"10.5.0.11", "10.5.0.12", "10.5.0.13"},
		Roles: map[string]talos.Role{"cp-1": talos.RoleControlPlane, "cp-2": talos.RoleControlPlane, "cp-3": talos.RoleControlPlane},
	}
	args.Leaver = talos.NewLeaver()
	l.run(args)

	cp1 := l.talos.Node("10.5.0.11")
	boots := cp1.Boots()
	require.NoError(t, args.Leaver.Restart("cp-1"))
	cp1.PowerOff() // the old container stops
	restarted := make(chan error, 1)
	go func() { restarted <- args.Leaver.Restarted("cp-1") }()
	select {
	case err := <-restarted:
		t.Fatalf("Restarted returned while the node was down: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	cp1.PowerOn() // the new container boots from the kept volumes
	require.NoError(t, <-restarted)
	assert.Equal(t, boots+1, cp1.Boots())

	// worker-1 is new to the stack; nothing was there to gate or wait for.
	before := len(l.talos.Events())
	require.NoError(t, args.Leaver.Restart("worker-1"))
	require.NoError(t, args.Leaver.Restarted("worker-1"))
	assert.Len(t, l.talos.Events(), before, "no call for a node the last run did not have")

	// A run stopped after cp-1's old container was deleted: the next run
	// creates its new one without having let it go, and still waits for
	// the node.
	stopped := talos.NewLeaver()
	args.Leaver = stopped
	l.run(args)
	boots = cp1.Boots()
	cp1.PowerOff()
	restarted = make(chan error, 1)
	go func() { restarted <- stopped.Restarted("cp-1") }()
	select {
	case err := <-restarted:
		t.Fatalf("Restarted returned while the node was down: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	cp1.PowerOn()
	require.NoError(t, <-restarted)
	assert.Equal(t, boots+1, cp1.Boots())

	// With cp-2 down, cp-3 away too would cost etcd its quorum.
	l.talos.Node("10.5.0.12").PowerOff()
	err := args.Leaver.Restart("cp-3")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cp-3")
	// (The engine then deletes nothing: the create, and Restarted, never
	// come.)

	// A destroy gates nothing.
	l.destroy = true
	args.Leaver = talos.NewLeaver()
	l.run(args)
	require.NoError(t, args.Leaver.Restart("cp-3"))
}

// A control plane removed in the same `up` as a config change: its etcd
// member stays until its removal at the end of the run, and the gates of
// the other control planes count it (from the stack's last outputs), so
// the config change goes through and the member leaves afterwards.
func TestAControlPlaneRemovedWithAConfigChange(t *testing.T) {
	t.Parallel()
	l := newLab(t, talosapitest.Topology(3, 1, oldTalos, 30*time.Millisecond)...)
	s := stateOf(l.run(clusterArgs(oldTalos, l.nodes())))
	args := clusterArgs(oldTalos, l.nodes("cp-3"))
	args.Cluster.Patches = &talos.ClusterPatches{All: []string{rebootingPatch}}
	args.Previous = &talos.Previous{ControlPlanes: []string{"cp-1", "cp-2", "cp-3"}, ControlPlaneIPs: []string{"10.5.0.11", "10.5.0.12", "10.5.0.13"}}

	res := l.up(s, l.run(args), nil)
	require.NoError(t, res.err)
	assert.Empty(t, res.warnings)
	assert.Equal(t, []string{"cp-1", "cp-2"}, l.talos.Members())
	assert.Len(t, l.talos.Events("EtcdLeaveCluster"), 1)
}

// Adding a worker: its apply and membership are creates, which run no
// hook, and no running node's config changes, so no node is touched; the
// outputs list the new node.
func TestAddingAWorkerTouchesNoRunningNode(t *testing.T) {
	t.Parallel()
	l := newLab(t, talosapitest.Topology(1, 2, oldTalos, 30*time.Millisecond)...)
	s := stateOf(l.run(clusterArgs(oldTalos, l.nodes("worker-2"))))
	before := len(l.talos.Events())
	next := l.run(clusterArgs(oldTalos, l.nodes()))
	require.NoError(t, l.up(s, next, nil).err)
	for _, e := range l.talos.Events()[before:] {
		assert.Equal(t, "Version", e.Call, "only the reads of the outputs: %s", e)
	}
	assert.Contains(t, s, "lab-apply-worker-2")
	assert.Contains(t, s, "lab-member-worker-2")
	assert.Equal(t, oldTalos, next.nodes["worker-2"].TalosVersion)
}

// A whole-stack destroy (`destroy --run-program` runs the program with the
// stack's config): Pulumi runs every membership's before-delete hook even
// though DeletedWith skips the delete itself; the hooks find their nodes
// still in the stack and touch nothing, so the destroy stays fast and never
// asks the last control plane to leave etcd.
func TestAWholeStackDestroyTouchesNoNode(t *testing.T) {
	t.Parallel()
	l := newLab(t, talosapitest.Topology(1, 1, oldTalos, 30*time.Millisecond)...)
	s := stateOf(l.run(clusterArgs(oldTalos, l.nodes())))
	during := l.run(clusterArgs(oldTalos, l.nodes()))
	before := len(l.talos.Events())
	remove := during.hooks.Hook("lab" + talos.RemoveHookSuffix)
	require.NotNil(t, remove)
	for name, inputs := range s {
		if !inputs["environment"].IsNull() && !inputs["environment"].ObjectValue()["NODE_ROLE"].IsNull() {
			require.NoError(t, remove(&pulumi.ResourceHookArgs{Name: name, OldInputs: inputs}))
		}
	}
	assert.Empty(t, l.talos.Events()[before:], "no call to any node")
	assert.Empty(t, l.kube.Events(), "no drain, no Node deleted")
}

// A whole-stack destroy after a node was taken out of the stack file but
// not yet out of the cluster (no `up` since), with every node dead (item
// 21 of issue 23): it ran that node's removal as a scale-down, which failed
// on the dead node, and nothing was deleted. As `make destroy` runs it, the
// program contacts no node, not even to read the versions for its outputs,
// and every removal hook succeeds.
func TestAWholeStackDestroyAfterANodeLeftTheFileTouchesNoNode(t *testing.T) {
	t.Parallel()
	l := newLab(t, talosapitest.Topology(1, 2, oldTalos, 30*time.Millisecond)...)
	s := stateOf(l.run(clusterArgs(oldTalos, l.nodes())))
	for _, n := range l.talos.Nodes() {
		n.PowerOff()
	}
	before := len(l.talos.Events())
	l.destroy = true
	during := l.run(clusterArgs(oldTalos, l.nodes("worker-2")))
	remove := during.hooks.Hook("lab" + talos.RemoveHookSuffix)
	require.NotNil(t, remove)
	for name, inputs := range s {
		if strings.HasPrefix(name, "lab"+talos.MemberSuffix) {
			require.NoError(t, remove(&pulumi.ResourceHookArgs{Name: name, OldInputs: inputs}), name)
		}
	}
	assert.Empty(t, l.talos.Events()[before:], "no call to any node")
	assert.Empty(t, l.kube.Events(), "no drain, no Node deleted")
	assert.Equal(t, talos.Unknown, during.nodes["cp-1"].TalosVersion, "nothing read from the nodes")
}

// A preview reads nothing from the nodes (item 11 of issue 23): with every
// node silent it took up to a minute more, for outputs a preview does not
// keep.
func TestAPreviewReadsNothingFromTheNodes(t *testing.T) {
	t.Parallel()
	l := newLab(t, talosapitest.Topology(1, 1, oldTalos, 30*time.Millisecond)...)
	before := len(l.talos.Events())
	l.dryRun = true
	p := l.run(clusterArgs(oldTalos, l.nodes()))
	assert.Empty(t, l.talos.Events()[before:], "no call to any node")
	assert.Equal(t, talos.Unknown, p.nodes["cp-1"].TalosVersion)
	assert.Equal(t, oldTalos, p.talosVersion, "the version asked for")

	// With the last run's outputs, it shows what the nodes reported then:
	// a preview of an unchanged stack shows no output change either (seen
	// on the real CLI: every node's versions went to "unknown").
	args := clusterArgs(oldTalos, l.nodes())
	args.Previous = &talos.Previous{Reported: map[string]map[string]string{"cp-1": {"talosVersion": oldTalos, "kubeletVersion": "v1.34.1"}}}
	p = l.run(args)
	assert.Empty(t, l.talos.Events()[before:], "no call to any node")
	assert.Equal(t, talos.NodeStatus{IP: p.nodes["cp-1"].IP, Role: "controlplane", TalosVersion: oldTalos, KubeletVersion: "v1.34.1"}, p.nodes["cp-1"])
	assert.Equal(t, talos.Unknown, p.nodes["worker-1"].TalosVersion, "a node the last run did not report")
}

// Several workers removed in one `up` leave the cluster
// workerParallelism at a time, as a rollout goes (item 12 of issue 23:
// the engine deletes their memberships at once, and every drain ran at
// once).
func TestRemovedWorkersLeaveByWorkerParallelism(t *testing.T) {
	t.Parallel()
	l := newLab(t, talosapitest.Topology(1, 4, oldTalos, 30*time.Millisecond)...)
	for _, w := range []string{"worker-2", "worker-3", "worker-4"} {
		// A pod whose eviction a PodDisruptionBudget refuses twice: each
		// drain takes a few polls, long enough for another to overlap.
		l.kube.AddPod(kubeapitest.PodSpec{Name: "web-" + w, Node: w, OwnerKind: "ReplicaSet", PDBBlocks: 2})
	}
	s := stateOf(l.run(clusterArgs(oldTalos, l.nodes())))
	require.NoError(t, l.up(s, l.run(clusterArgs(oldTalos, l.nodes("worker-2", "worker-3", "worker-4"))), nil).err)
	// The events of one drain (cordon .. delete-node) never interleave
	// with another's.
	draining := ""
	for _, e := range l.kube.Events() {
		switch e.Action {
		case "cordon":
			assert.Empty(t, draining, "%s is cordoned while %s drains", e.Object, draining)
			draining = e.Object
		case "delete-node":
			assert.Equal(t, draining, e.Object)
			draining = ""
		}
	}
	assert.Len(t, slices.DeleteFunc(l.kube.Events(), func(e kubeapitest.Event) bool { return e.Action != "delete-node" }), 3)
}

// BenchmarkTalosUpgradeThroughTheHooks measures a 3+2 Talos upgrade
// through the program's hooks on the fake, against its floor of five
// reboot latencies (one node at a time). Above the floor: each node's
// health waits and the settle hook's watch for a reboot after its apply.
func BenchmarkTalosUpgradeThroughTheHooks(b *testing.B) {
	const r = 50 * time.Millisecond
	for b.Loop() {
		l := newLab(b, talosapitest.Topology(3, 2, oldTalos, r)...)
		// The settle hook's watch for a reboot in the ratio of production:
		// 20 s against a reboot of about 80 s.
		l.timing.RebootStart = r / 4
		s := stateOf(l.run(clusterArgs(oldTalos, l.nodes())))
		next := l.run(clusterArgs(newTalos, l.nodes()))
		start := time.Now()
		require.NoError(b, l.up(s, next, nil).err)
		b.ReportMetric(float64(time.Since(start))/float64(5*r), "x_floor")
	}
}

// A new schematic of the same Talos version (other extensions): every node
// is reinstalled with the new installer, one at a time.
func TestASchematicChangeReinstallsEveryNode(t *testing.T) {
	t.Parallel()
	l := newLab(t, talosapitest.Topology(3, 1, oldTalos, 30*time.Millisecond)...)
	s := stateOf(l.run(clusterArgs(oldTalos, l.nodes())))
	args := clusterArgs(oldTalos, l.nodes())
	args.InstallerImage = pulumi.String("factory.talos.dev/metal-installer/def:" + oldTalos)

	require.NoError(t, l.up(s, l.run(args), nil).err)
	assert.Equal(t, []string{"cp-1", "cp-2", "cp-3", "worker-1"}, upgraded(l.talos))
	for _, e := range l.talos.Events("Upgrade") {
		assert.Contains(t, e.Args, "image=factory.talos.dev/metal-installer/def:"+oldTalos)
	}
	assert.Equal(t, 1, l.talos.MaxDown(talosapitest.ControlPlane))
}

// A cluster on Talos v1.12 moves to v1.13 (issue 24): the stack asks for
// v1.13.9, the program accepts the upgrade from the v1.12.4 the nodes ran
// (Talos's own data: v1.13 takes hosts from v1.11.0), each node gets a
// config that the v1.13 machinery accepts, and the rollout upgrades one
// node at a time, control planes first. Kubernetes 1.34 runs on both, so
// it stays; its move to 1.36 is the next `up`s, one minor at a time.
func TestAClusterOnTalos112MovesTo113OneNodeAtATime(t *testing.T) {
	t.Parallel()
	const from, to = "v1.12.4", "v1.13.9"
	l := newLab(t, talosapitest.Topology(3, 2, from, 30*time.Millisecond)...)
	l.realConfigs = true
	var invalid []string
	l.talos.OnApply(func(ip string, data []byte) {
		cfg, err := configloader.NewFromBytes(data)
		if err == nil {
			err = validateFor(t, cfg, runtimeMode("metal"))
		}
		if err != nil {
			l.mu.Lock()
			defer l.mu.Unlock()
			invalid = append(invalid, fmt.Sprintf("%s: %v", ip, err))
		}
	})
	s := stateOf(l.run(clusterArgs(from, l.nodes())))

	args := clusterArgs(to, l.nodes())
	args.Previous = &talos.Previous{TalosVersion: from, KubernetesVersion: "1.34.1"}
	require.NoError(t, args.Validate("lab"), "v1.12 to v1.13 is one step")
	res := l.up(s, l.run(args), nil)
	require.NoError(t, res.err)
	assert.Empty(t, res.warnings)
	assert.Empty(t, invalid, "every config a node got is one Talos v1.13 accepts")
	assert.Equal(t, []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2"}, upgraded(l.talos))
	assert.Equal(t, 1, l.talos.MaxDown(""), "one node at a time")
	for _, e := range l.talos.Events("Upgrade") {
		assert.Contains(t, e.Args, "image="+image+to)
	}
	after := l.run(clusterArgs(to, l.nodes()))
	assert.Equal(t, to, after.talosVersion)
}

// A worker's taints through their life: given in the stack after the
// node runs, changed, then removed. Its kubelet may not change them
// (NodeRestriction), so its taints resource's hook sets them as admin:
// the keys it had and lost go, another owner's stay, and a node whose
// taints did not change is not written. A set that fails is tried again
// by the next up.
func TestAWorkersTaintsAreSetAfterItsApply(t *testing.T) {
	t.Parallel()
	l := newLab(t, talosapitest.Topology(1, 2, oldTalos, 30*time.Millisecond)...)
	l.realConfigs = true
	l.talos.SetNeedsReboot(func(string, []byte) bool { return false })
	unreachable := kubeapi.Taint{Key: "node.kubernetes.io/unreachable", Effect: "NoExecute"}
	s := stateOf(l.run(clusterArgs(oldTalos, l.nodes())))
	require.NoError(t, l.kube.SetTaintsOf("worker-2", unreachable))

	withTaints := func(taints map[string]string) talos.ClusterArgs {
		nodes := l.nodes()
		for i := range nodes {
			if nodes[i].Name != "worker-1" {
				nodes[i].Taints = map[string]string{"example.com/all": "PreferNoSchedule"}
			}
		}
		nodes[1].Taints = taints
		require.Equal(t, "worker-1", nodes[1].Name)
		return clusterArgs(oldTalos, nodes)
	}
	taintsOf := func(name string) []kubeapi.Taint {
		n, ok := l.kube.Node(name)
		require.True(t, ok, name)
		return n.Taints
	}
	steps := []struct {
		taints map[string]string
		want   []kubeapi.Taint
	}{
		{map[string]string{"example.com/gpu": "NoExecute", "example.com/pool": "gpu:NoSchedule"},
			[]kubeapi.Taint{{Key: "example.com/gpu", Effect: "NoExecute"}, {Key: "example.com/pool", Value: "gpu", Effect: "NoSchedule"}}},
		{map[string]string{"example.com/pool": "big:NoSchedule"}, []kubeapi.Taint{{Key: "example.com/pool", Value: "big", Effect: "NoSchedule"}}},
		{nil, nil},
	}
	for i, step := range steps {
		next := l.run(withTaints(step.taints))
		res := l.up(s, next, nil)
		require.NoError(t, res.err, "step %d", i)
		assert.Empty(t, res.warnings, "step %d", i)
		s = stateOf(next)
		notReady := kubeapitest.NotReadyTaint // the API server's, at the Node's creation
		assert.Equal(t, append([]kubeapi.Taint{notReady}, step.want...), taintsOf("worker-1"), "step %d", i)
		assert.Equal(t, []kubeapi.Taint{unreachable, {Key: "example.com/all", Effect: "PreferNoSchedule"}}, taintsOf("worker-2"), "step %d: another owner's kept", i)
		assert.Equal(t, []kubeapi.Taint{notReady}, taintsOf("cp-1"), "step %d: a control plane's are Talos's to set", i)
	}
	var writes []string
	for _, e := range l.kube.Events() {
		if e.Action == "taint" {
			writes = append(writes, e.String())
		}
	}
	assert.ElementsMatch(t, []string{"taint worker-1 200", "taint worker-2 200", "taint worker-1 200", "taint worker-1 200"}, writes, "worker-2's written once")

	// A set that fails (here: another writer wins every time) fails the
	// run and leaves the state as it was: the next up tries again.
	l.kube.RaceNodeWrites("worker-1", 100)
	next := l.run(withTaints(map[string]string{"example.com/late": "NoSchedule"}))
	res := l.up(s, next, nil)
	require.Error(t, res.err)
	assert.Contains(t, res.err.Error(), "lab-taints-worker-1")
	assert.Contains(t, res.err.Error(), "409")
	l.kube.RaceNodeWrites("worker-1", 0)
	res = l.up(s, l.run(withTaints(map[string]string{"example.com/late": "NoSchedule"})), nil)
	require.NoError(t, res.err)
	assert.Equal(t, []kubeapi.Taint{kubeapitest.NotReadyTaint, {Key: "example.com/late", Effect: "NoSchedule"}}, taintsOf("worker-1"), "set by the next up")
}

// A Kubernetes upgrade while the cluster holds objects of an API the new
// version no longer serves is refused at the first gate, naming them and
// the key, before any node is touched (talosctl upgrade-k8s's check). A
// removed API the cluster does not serve, or serves without objects,
// lets the upgrade through.
func TestAKubernetesUpgradeIsRefusedWhileObjectsOfARemovedAPIRemain(t *testing.T) {
	t.Parallel()
	const from, to = "1.33.2", "1.35.0"
	l := newLab(t, talosapitest.Topology(1, 1, oldTalos, 30*time.Millisecond)...)
	l.realConfigs = true
	widgets, gadgets := kubeapi.APIResource("widgets.v1beta1.example.com"), kubeapi.APIResource("gadgets.v1alpha1.example.com")
	l.removedAPIs = map[string][]kubeapi.APIResource{
		"1.33->1.34": {widgets, "notserved.v1alpha1.example.com"},
		"1.34->1.35": {gadgets},
		"1.35->1.36": {"later.v1.example.com"},
	}
	for i := range 12 {
		l.kube.AddObject(widgets, "team-a", fmt.Sprintf("w%02d", i))
	}
	l.kube.AddObject(gadgets, "", "g1")
	args := func(v string) talos.ClusterArgs {
		a := clusterArgs(oldTalos, l.nodes())
		a.Cluster.KubernetesVersion = v
		return a
	}
	s := stateOf(l.run(args(from)))
	var applied []string
	l.talos.OnApply(func(ip string, data []byte) {
		l.mu.Lock()
		defer l.mu.Unlock()
		applied = append(applied, ip)
		l.controlPlaneRuns(ip, "v"+to)
	})
	res := l.up(s, l.run(args(to)), nil)
	require.ErrorIs(t, res.err, rollout.ErrRemovedAPIs)
	msg := res.err.Error()
	assert.Contains(t, msg, "unable to upgrade Kubernetes to 1.35.0 (cluster.kubernetesVersion)")
	assert.Contains(t, msg, "widgets.v1beta1.example.com (gone in 1.34): team-a/w00, team-a/w01,")
	assert.Contains(t, msg, "team-a/w09, ...; gadgets.v1alpha1.example.com (gone in 1.35): g1;")
	assert.NotContains(t, msg, "w10", "ten named")
	assert.NotContains(t, msg, "later", "a later upgrade's removals are not this one's")
	assert.Empty(t, applied, "no node touched")

	// With the objects migrated (none left of a removed API), the same
	// upgrade goes through.
	l.removedAPIs = map[string][]kubeapi.APIResource{"1.34->1.35": {"notserved.v1alpha1.example.com"}}
	// The last run as the component reads it from its state: the worker
	// is known by its name, not among the control planes' IPs.
	through := args(to)
	through.Previous = &talos.Previous{
		ControlPlanes: []string{"cp-1"}, ControlPlaneIPs: []string{"10.5.0.11"},
		Roles: map[string]talos.Role{"cp-1": talos.RoleControlPlane, "worker-1": talos.RoleWorker},
	}
	res = l.up(s, l.run(through), func(ip string) { l.kube.SetKubeletVersion(l.talos.Node(ip).Hostname(), "v"+to) })
	require.NoError(t, res.err)
	assert.Equal(t, []string{"10.5.0.11"}, applied, "the control plane's phase ran")

	// Before anything restarted, every node pulled the new version's
	// images: a control plane its static pods', each node its kubelet's.
	var pulls []string
	for _, e := range l.talos.Events("ImagePull") {
		pulls = append(pulls, e.Node+" "+e.Args)
	}
	assert.Equal(t, []string{
		"10.5.0.11 namespace=NS_CRI image=registry.k8s.io/kube-apiserver:v" + to,
		"10.5.0.11 namespace=NS_CRI image=registry.k8s.io/kube-controller-manager:v" + to,
		"10.5.0.11 namespace=NS_CRI image=registry.k8s.io/kube-scheduler:v" + to,
		"10.5.0.11 namespace=NS_SYSTEM image=ghcr.io/siderolabs/kubelet:v" + to,
		"10.5.0.21 namespace=NS_SYSTEM image=ghcr.io/siderolabs/kubelet:v" + to,
	}, pulls)
	lastPull := l.talos.Events("ImagePull")[len(pulls)-1].Seq
	for _, e := range l.talos.Events("ApplyConfiguration") {
		if e.Seq > l.talos.Events("ImagePull")[0].Seq {
			assert.Greater(t, e.Seq, lastPull, "no config applied before the last pull: %v", e)
		}
	}
}

// coreDNS is CoreDNS's part of the bootstrap manifests as Talos renders
// them, of an image.
func coreDNS(image string) talosapitest.Manifest {
	labels := map[string]any{"k8s-app": "kube-dns"}
	return talosapitest.Manifest{ID: "11-core-dns", Objects: []map[string]any{
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "coredns", "namespace": "kube-system"}, "data": map[string]any{"Corefile": ".:53 {\n}\n"}},
		{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "coredns", "namespace": "kube-system"},
			"spec": map[string]any{"selector": map[string]any{"matchLabels": labels}, "template": map[string]any{
				"metadata": map[string]any{"labels": labels},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "coredns", "image": image}}},
			}}},
	}}
}

// A Kubernetes upgrade updates the bootstrap manifests once the control
// planes and every kubelet run the new version, as talosctl upgrade-k8s
// does last. A sync that fails stops the run, naming the key, and the next
// up retries it (the nodes are not touched again); an up that moves no
// version makes no call.
func TestAKubernetesUpgradeUpdatesTheBootstrapManifestsAfterTheKubelets(t *testing.T) {
	t.Parallel()
	const from, to = "1.34.1", "1.35.0"
	const oldDNS, newDNS = "registry.k8s.io/coredns/coredns:v1.12.1", "registry.k8s.io/coredns/coredns:v1.12.4"
	l := newLab(t, talosapitest.Topology(1, 1, oldTalos, 30*time.Millisecond)...)
	l.realConfigs = true
	l.talos.SetManifests(coreDNS(oldDNS))
	args := func(v string) talos.ClusterArgs {
		a := clusterArgs(oldTalos, l.nodes())
		a.Cluster.KubernetesVersion = v
		return a
	}
	s := stateOf(l.run(args(from)))
	l.talos.OnApply(func(ip string, _ []byte) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.controlPlaneRuns(ip, "v"+to)
		l.talos.SetManifestsOf(ip, coreDNS(newDNS)) // rendered from its new config
	})
	kubelet := func(ip string) {
		l.kube.SetKubeletVersion(l.talos.Node(ip).Hostname(), "v"+to)
		l.talos.Record(ip, "kubelet moved", "v"+to)
	}
	// CoreDNS's ConfigMap belongs to another tool's inventory: the sync
	// stops there, after every node moved.
	k, err := kubeapi.New(l.kube.Kubeconfig())
	require.NoError(t, err)
	defer k.Close()
	foreign := coreDNS(oldDNS).Objects[0]
	foreign["metadata"] = map[string]any{"name": "coredns", "namespace": "kube-system", "annotations": map[string]any{"config.k8s.io/owning-inventory": "flux"}}
	_, err = k.ApplyObject(t.Context(), foreign, kubeapi.ApplyOptions{FieldManager: "flux"})
	require.NoError(t, err)

	next := l.run(args(to))
	res := l.up(s, next, kubelet)
	require.Error(t, res.err)
	assert.Contains(t, res.err.Error(), "lab-manifests: unable to update the bootstrap manifests for Kubernetes 1.35.0 (cluster.kubernetesVersion)")
	assert.Contains(t, res.err.Error(), "ConfigMap kube-system/coredns: it belongs to inventory flux")
	assert.Contains(t, res.err.Error(), "run up again to retry")
	moved := l.talos.Events("kubelet moved")
	require.Len(t, moved, 2, "both kubelets moved")
	reads := l.talos.Events("List")
	require.NotEmpty(t, reads)
	assert.Greater(t, reads[0].Seq, moved[len(moved)-1].Seq, "the manifests are read once every kubelet moved")
	assert.Nil(t, l.kube.Object("apps/v1", "Deployment", "kube-system", "coredns"), "nothing applied after the refusal")

	// The ConfigMap handed over (no inventory): the next up, with no node
	// to touch, retries the sync alone.
	foreign["metadata"] = map[string]any{"name": "coredns", "namespace": "kube-system"}
	_, err = k.ApplyObject(t.Context(), foreign, kubeapi.ApplyOptions{FieldManager: "flux"})
	require.NoError(t, err)
	configs := len(l.talos.Events("ApplyConfiguration"))
	res = l.up(s, l.run(args(to)), kubelet)
	require.NoError(t, res.err)
	assert.Len(t, l.talos.Events("ApplyConfiguration"), configs, "no node touched again")
	d := l.kube.Object("apps/v1", "Deployment", "kube-system", "coredns")
	require.NotNil(t, d)
	assert.Equal(t, newDNS, d["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["image"])
	assert.Equal(t, []string{"kube-system_coredns__ConfigMap", "kube-system_coredns_apps_Deployment"}, l.kube.InventoryKeys("kube-system", "talos-bootstrap-manifests-inventory"))

	// No version change: no step, no call.
	nreads, kubeEvents := len(l.talos.Events("List")), len(l.kube.Events())
	res = l.up(s, l.run(args(to)), kubelet)
	require.NoError(t, res.err)
	assert.Len(t, l.talos.Events("List"), nreads, "nothing read")
	assert.Len(t, l.kube.Events(), kubeEvents, "nothing applied")

	// A stack's first up with this release creates the resource: without
	// an upgrade in that up, no call either.
	delete(s, "lab"+talos.ManifestsSuffix)
	res = l.up(s, l.run(args(to)), kubelet)
	require.NoError(t, res.err)
	assert.Len(t, l.talos.Events("List"), nreads, "nothing read on the create")
	assert.Contains(t, s, "lab"+talos.ManifestsSuffix)
}

// A sync the operator stops (Ctrl-C) while a changed Deployment rolls out
// fails its step at once, saying so; the next up syncs again, touching no
// node.
func TestAStoppedManifestSyncIsRetriedByTheNextUp(t *testing.T) {
	t.Parallel()
	const from, to = "1.34.1", "1.35.0"
	const newDNS = "registry.k8s.io/coredns/coredns:v1.12.4"
	l := newLab(t, talosapitest.Topology(1, 0, oldTalos, 30*time.Millisecond)...)
	l.realConfigs = true
	l.timing.Healthy = time.Minute
	args := func(v string) talos.ClusterArgs {
		a := clusterArgs(oldTalos, l.nodes())
		a.Cluster.KubernetesVersion = v
		return a
	}
	s := stateOf(l.run(args(from)))
	l.talos.OnApply(func(ip string, _ []byte) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.controlPlaneRuns(ip, "v"+to)
		l.talos.SetManifestsOf(ip, coreDNS(newDNS))
	})
	kubelet := func(ip string) { l.kube.SetKubeletVersion(l.talos.Node(ip).Hostname(), "v"+to) }
	l.kube.HoldRollouts(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l.ctx = ctx
	var cancelled time.Time
	go func() {
		for l.kube.Object("apps/v1", "Deployment", "kube-system", "coredns") == nil {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // into the rollout's wait
		cancelled = time.Now()
		cancel()
	}()
	res := l.up(s, l.run(args(to)), kubelet)
	require.Error(t, res.err)
	assert.Less(t, time.Since(cancelled), 5*time.Second, "stopped at the cancel, not after Healthy (1 min)")
	assert.Contains(t, res.err.Error(), "lab-manifests: unable to update the bootstrap manifests for Kubernetes 1.35.0 (cluster.kubernetesVersion)")
	assert.Contains(t, res.err.Error(), "Deployment kube-system/coredns to roll out")
	assert.Contains(t, res.err.Error(), "cancelled")

	l.ctx = nil
	l.kube.HoldRollouts(false)
	reads, configs := len(l.talos.Events("List")), len(l.talos.Events("ApplyConfiguration"))
	res = l.up(s, l.run(args(to)), kubelet)
	require.NoError(t, res.err)
	assert.Greater(t, len(l.talos.Events("List")), reads, "synced again")
	assert.Len(t, l.talos.Events("ApplyConfiguration"), configs, "no node touched again")
}

// A Secure Boot cluster's Talos upgrade checks each node once it is back:
// under Secure Boot, STATE and EPHEMERAL unlocked by their TPM-sealed
// keys. A node whose firmware no longer enforces Secure Boot (its VM's EFI
// disk changed) stops the rollout there, saying why; the nodes after it
// are not touched.
func TestASecureBootUpgradeChecksEachNode(t *testing.T) {
	t.Parallel()
	specs := talosapitest.Topology(3, 1, oldTalos, 30*time.Millisecond)
	for i := range specs {
		specs[i].SecureBoot = true
	}
	l := newLab(t, specs...)
	l.realConfigs = true
	args := func(version string) talos.ClusterArgs {
		a := clusterArgs(version, l.nodes())
		a.Cluster.SecureBoot = true
		return a
	}
	s := stateOf(l.run(args(oldTalos)))
	l.talos.Node("10.5.0.12").SetSecureBoot(false)

	res := l.up(s, l.run(args(newTalos)), nil)
	require.Error(t, res.err)
	assert.Contains(t, res.err.Error(), "unable to check the Secure Boot of node cp-2 (10.5.0.12): it booted without Secure Boot")
	assert.Equal(t, []string{"cp-1", "cp-2"}, upgraded(l.talos), "stopped at cp-2")
	assert.Equal(t, map[string]string{"EPHEMERAL": "luks2", "STATE": "luks2"}, l.talos.Node("10.5.0.11").VolumeEncryption())
}
