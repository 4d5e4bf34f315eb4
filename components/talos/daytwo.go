package talos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/siderolabs/talos/pkg/machinery/client/dialer"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"google.golang.org/grpc"
	"gopkg.in/yaml.v3"

	"github.com/fluodata/talos-pulumi/internal/kubeapi"
	"github.com/fluodata/talos-pulumi/internal/progress"
	"github.com/fluodata/talos-pulumi/internal/rollout"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
)

// MemberSuffix names a node's membership (after the cluster's name, before
// the node's): the resource whose deletion takes the node out of etcd and
// Kubernetes before its machine goes.
const MemberSuffix = "-member-"

// Deps are the component's seams: how it reaches the cluster's APIs from
// its hooks. NewCluster uses the real ones.
type Deps struct {
	// Hooks binds the day-2 hooks (the engine's own when nil).
	Hooks Hooks
	// Talos opens the cluster's Talos API (talosapi.New when nil).
	Talos func(creds talosapi.Credentials) (talosapi.API, error)
	// Kube opens the Kubernetes API with a kubeconfig; server, when not
	// empty, replaces the kubeconfig's (kubeapi.New when nil).
	Kube func(kubeconfig []byte, server string) (rollout.Kube, error)
	// Timing bounds the rollout's waits (rollout.DefaultTiming's fields
	// where zero).
	Timing rollout.Timing
	// Destroy says that the run is a whole-stack destroy: no node is
	// taken out of the cluster, whatever the stack file says since the last
	// `up`, and nothing is read from the nodes. The engine tells a program
	// nothing about the operation it runs for: the program and the
	// component provider set it from the environment variable DestroyEnv,
	// which `make destroy` sets, and `stackctl destroy` sets it itself.
	Destroy bool
	// Context is cancelled when the operator cancels the run (Ctrl-C):
	// the hooks stop waiting then (context.Background() when nil). The
	// engine does not tell the program of a cancellation: the program
	// learns it from stackctl (see internal/cancelfile).
	Context context.Context
	// Log is what a hook says on the resource it runs for (NewHookLog, the
	// engine's log, when nil).
	Log func(ctx *pulumi.Context, urn pulumi.URN) Logger
}

// hookContext bounds one hook run: its timeout, and the operator's
// cancellation of the run.
func (d *dayTwo) hookContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(d.deps.Context, hookTimeout(d.deps.Timing))
}

// DestroyEnv is the environment variable that, set to 1 for `pulumi destroy
// --run-program`, tells the program that the whole stack goes (see
// Deps.Destroy).
const DestroyEnv = "TALOS_CLUSTER_DESTROY"

// WithDefaults fills the seams left nil with the real ones: the engine's
// hooks and log, the Talos and Kubernetes clients, a context that is never
// cancelled. A platform calls it for the hooks of its own resources.
func (d Deps) WithDefaults(ctx *pulumi.Context) Deps {
	if d.Context == nil {
		d.Context = context.Background()
	}
	if d.Hooks == nil {
		d.Hooks = &SDKHooks{Ctx: ctx}
	}
	if d.Log == nil {
		d.Log = func(ctx *pulumi.Context, urn pulumi.URN) Logger { return NewHookLog(ctx, urn) }
	}
	if d.Talos == nil {
		d.Talos = func(creds talosapi.Credentials) (talosapi.API, error) {
			// Dial as the Talos provider does: through HTTPS_PROXY when the
			// stack reaches its nodes through the ssh-proxy helper.
			return talosapi.New(creds, talosapi.WithDialOptions(grpc.WithContextDialer(dialer.DynamicProxyDialer)))
		}
	}
	if d.Kube == nil {
		d.Kube = func(kubeconfig []byte, server string) (rollout.Kube, error) {
			var opts []kubeapi.Option
			if server != "" {
				opts = append(opts, kubeapi.WithServer(server))
			}
			return kubeapi.New(kubeconfig, opts...)
		}
	}
	return d
}

// hookTimeout bounds one hook run: an upgrade's reboot and two health
// waits, with room to spare.
func hookTimeout(t rollout.Timing) time.Duration {
	t = t.WithDefaults()
	return t.Reboot + 3*t.Healthy + t.RebootStart + t.Drain
}

// dayTwo is what the hooks of one cluster share in one run: the nodes by
// resource name, the credentials once the secrets resolve, one Talos API
// connection, and what happened to the nodes so far.
type dayTwo struct {
	ctx        *pulumi.Context
	deps       Deps
	talos      string // the Talos version the nodes must run
	kubernetes string // the Kubernetes version
	byApply    map[string]rollout.Node
	cps        []string
	leaving    []string  // control planes of the last run this one removes
	previous   *Previous // the cluster as the last run left it; nil when unknown
	// machineChanged are the nodes whose Machine changed since the last
	// run: their machine is replaced.
	machineChanged map[string]bool
	applyPrefix    string
	credentials    *future[talosapi.Credentials]

	// configs are the nodes' new configs by node name, as their applies
	// get them: for the Kubernetes upgrade of the control planes.
	configs map[string]*future[nodeConfig]

	mu      sync.Mutex
	api     talosapi.API
	booted  map[string]time.Time
	reboots map[string]rollout.Reboot // by node name: what the gate's dry run said
	settled map[string]error          // by node name: the wait after its apply
	// rejoining are the nodes whose new machine's apply is being created
	// (see rejoin).
	rejoining map[string]bool
	// phase is the Kubernetes control-plane phase of this run, once run.
	phase *error

	// workerTurns and controlPlaneTurn hold a token per node leaving the
	// cluster (see removalTurn).
	workerTurns, controlPlaneTurn chan struct{}

	kubeMu     sync.Mutex
	kubeconfig []byte                  // the admin kubeconfig, fetched once per run
	kubes      map[string]rollout.Kube // a client per server, made once per run
}

// nodeConfig is a node's new machine config as its apply gets it: the
// role's base config and the node's patches.
type nodeConfig struct {
	base    string
	patches []string
}

func newDayTwo(ctx *pulumi.Context, deps Deps, args *ClusterArgs, prefix string) *dayTwo {
	d := &dayTwo{
		ctx: ctx, deps: deps,
		talos: args.Cluster.TalosVersion, kubernetes: args.Cluster.KubernetesVersion,
		byApply:     map[string]rollout.Node{},
		credentials: newFuture[talosapi.Credentials](),
		booted:      map[string]time.Time{}, settled: map[string]error{}, rejoining: map[string]bool{},
		reboots:     map[string]rollout.Reboot{},
		configs:     map[string]*future[nodeConfig]{},
		workerTurns: make(chan struct{}, args.Cluster.WorkerParallelism()), controlPlaneTurn: make(chan struct{}, 1),
	}
	d.previous, d.applyPrefix, d.machineChanged = args.Previous, prefix, map[string]bool{}
	for _, n := range args.Nodes {
		d.machineChanged[n.Name] = machineReplaced(args.Previous, n)
	}
	if args.Previous != nil {
		// Control planes the stack drops in this run are still etcd
		// members until their removal, after every update: the gates
		// check them too.
		for _, ip := range args.Previous.ControlPlaneIPs {
			if !slices.ContainsFunc(args.Nodes, func(n NodeSpec) bool { return n.IP == ip }) {
				d.leaving = append(d.leaving, ip)
			}
		}
	}
	for _, n := range args.Nodes {
		d.configs[n.Name] = newFuture[nodeConfig]()
		node := rollout.Node{Name: n.Name, IP: n.IP, Role: n.Role}
		d.byApply[prefix+n.Name] = node
		if n.Role == RoleControlPlane {
			d.cps = append(d.cps, n.IP)
		}
	}
	return d
}

// ops connects (once per run) and returns the operations on the cluster,
// with extra control planes (a removed one) added to the etcd checks.
func (d *dayTwo) ops(ctx context.Context, extraCPs ...string) (rollout.Ops, error) {
	creds, err := d.credentials.get(ctx)
	if err != nil {
		return rollout.Ops{}, fmt.Errorf("unable to read the cluster's Talos credentials: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.api == nil {
		if d.api, err = d.deps.Talos(creds); err != nil {
			return rollout.Ops{}, fmt.Errorf("unable to open the Talos API: %w", err)
		}
	}
	cps := append(append(append([]string{}, d.cps...), d.leaving...), extraCPs...)
	slices.Sort(cps[len(d.cps):])
	cps = append(cps[:len(d.cps)], slices.Compact(cps[len(d.cps):])...)
	api := d.api
	return rollout.Ops{
		API: api, ControlPlanes: cps, Timing: d.deps.Timing,
		Kube: d.kubeConnector(api, cps),
		Log: func(format string, args ...any) {
			_ = d.ctx.Log.Info(fmt.Sprintf(format, args...), nil)
		},
		Warn: func(format string, args ...any) {
			_ = d.ctx.Log.Warn(fmt.Sprintf(format, args...), nil)
		},
	}, nil
}

// kubeConnector opens Kubernetes with the admin kubeconfig a control plane
// generates (through the Talos API: the kubeconfig resource of the cluster
// waits for the bootstrap, which waits for the first node's apply, so a
// hook on that apply cannot wait for it). Talos signs a new client
// certificate for every kubeconfig it gives, so one is fetched per run, and
// a client is made once per server: the waits poll every few seconds.
func (d *dayTwo) kubeConnector(api talosapi.API, cps []string) rollout.KubeConnector {
	return func(ctx context.Context, server string) (rollout.Kube, error) {
		d.kubeMu.Lock()
		defer d.kubeMu.Unlock()
		if k, ok := d.kubes[server]; ok {
			return k, nil
		}
		if d.kubeconfig == nil {
			var last error
			for _, cp := range cps {
				kc, err := api.Kubeconfig(ctx, cp)
				if err == nil {
					d.kubeconfig = kc
					break
				}
				last = err
			}
			if d.kubeconfig == nil {
				return nil, fmt.Errorf("unable to fetch the admin kubeconfig from a control plane: %w", last)
			}
		}
		k, err := d.deps.Kube(d.kubeconfig, server)
		if err != nil {
			return nil, err
		}
		if d.kubes == nil {
			d.kubes = map[string]rollout.Kube{}
		}
		d.kubes[server] = k
		return k, nil
	}
}

// has reports whether the program has a node of that name.
func (d *dayTwo) has(name string) bool {
	for _, n := range d.byApply {
		if n.Name == name {
			return true
		}
	}
	return false
}

func (d *dayTwo) node(name string) (rollout.Node, error) {
	n, ok := d.byApply[name]
	if !ok {
		return n, fmt.Errorf("unable to find the node of %s", name)
	}
	return n, nil
}

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
	ops, err := d.ops(ctx)
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
		oldRepo, oldTag := splitImage(oldImage)
		newRepo, newTag := splitImage(newImage)
		force := oldImage != "" && oldTag == newTag && oldRepo != newRepo && running == d.talos
		if err := ops.UpgradeTalos(ctx, n, newImage, d.talos, force); err != nil {
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
	// The kubelets stay on what they run: the old config with the user's
	// patches, which may name a kubelet image of their own.
	running, err := mergedKubelet(args.OldInputs)
	if err != nil {
		return fmt.Errorf("unable to read the kubelet image the nodes run: %w", err)
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

// configured reports whether the control plane at ip ran in the cluster
// before this run (true when the last run is unknown).
func (d *dayTwo) configured(ip string) bool {
	return d.previous == nil || d.previous.ControlPlanes == nil || slices.Contains(d.previous.ControlPlaneIPs, ip)
}

// byIP is the node with that IP.
func (d *dayTwo) byIP(ip string) rollout.Node {
	for _, n := range d.byApply {
		if n.IP == ip {
			return n
		}
	}
	return rollout.Node{IP: ip, Role: rollout.ControlPlane}
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
	ops, err := d.ops(ctx)
	if err == nil {
		d.mu.Lock()
		booted, reboot := d.booted[n.Name], d.reboots[n.Name]
		d.mu.Unlock()
		err = ops.SettleAfter(ctx, n, booted, d.kubernetes, reboot)
	}
	d.mu.Lock()
	d.settled[n.Name] = err
	d.mu.Unlock()
	return err
}

// remove runs before a node's membership is deleted: the node left the
// stack. Its identity comes from the membership's old inputs. Pulumi runs a
// before-delete hook even where DeletedWith then skips the delete (a
// whole-stack `destroy --run-program`, which runs this program with the
// stack's config): a node the program still has is not leaving the
// cluster, the whole cluster is going, and nothing is done.
func (d *dayTwo) remove(args *pulumi.ResourceHookArgs) error {
	n, err := memberNode(args.OldInputs)
	if err != nil {
		return fmt.Errorf("unable to remove %s from the cluster: %w", args.Name, err)
	}
	if d.deps.Destroy || d.has(n.Name) {
		if d.deps.Destroy {
			_ = d.ctx.Log.Info(fmt.Sprintf("the whole stack is destroyed: %s is not taken out of the cluster first", n), nil)
		} else {
			_ = d.ctx.Log.Info(fmt.Sprintf("%s is still in the stack: the whole cluster goes, nothing to take out of it", n), nil)
		}
		if resetsOnRemoval(args.OldInputs) {
			ctx, cancel := d.hookContext()
			defer cancel()
			d.reset(ctx, n)
		}
		return nil
	}
	// Removals take turns as a rollout does: control planes one at a
	// time, workers by workerParallelism (the engine deletes the
	// memberships of a run all at once).
	release, err := d.removalTurn(n)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := d.hookContext()
	defer cancel()
	var extra []string
	if n.Role == rollout.ControlPlane {
		extra = append(extra, n.IP)
	}
	ops, err := d.ops(ctx, extra...)
	if err != nil {
		return err
	}
	if err := ops.Remove(ctx, n); err != nil {
		return err
	}
	if resetsOnRemoval(args.OldInputs) {
		d.reset(ctx, n)
	}
	return nil
}

// removalTurn waits until n may leave the cluster: at most one control
// plane and workerParallelism workers leave at once. release ends the turn.
func (d *dayTwo) removalTurn(n rollout.Node) (release func(), err error) {
	turns := d.workerTurns
	if n.Role == rollout.ControlPlane {
		turns = d.controlPlaneTurn
	}
	waiting := time.NewTicker(progress.DefaultEvery)
	defer waiting.Stop()
	for {
		select {
		case turns <- struct{}{}:
			return func() { <-turns }, nil
		case <-d.deps.Context.Done():
			return nil, fmt.Errorf("unable to take %s out of the cluster: the run was cancelled while it waited for its turn", n)
		case <-waiting.C:
			_ = d.ctx.Log.Info(fmt.Sprintf("%s waits for its turn to leave the cluster (%d at once)", n, cap(turns)), nil)
		}
	}
}

// rejoin runs before a node's config apply is created. On a first `up`, or
// for a node the last run did not have, there is nothing to do. A node the
// last run had gets a new apply when its machine was replaced (a new VM,
// a reinstalled server): the old machine's etcd member and Kubernetes Node
// are stale, and a new control plane with the same name and address cannot
// join etcd while its old member is listed. So, when the node does not
// answer as a configured member (the new machine waits in maintenance
// mode), its old member is removed through another control plane and its
// Node deleted, behind the same checks as a removal. A node that answers
// is the running machine (its apply was replaced for another reason): it
// is left alone.
func (d *dayTwo) rejoin(args *pulumi.ResourceHookArgs) error {
	n, err := d.node(args.Name)
	if err != nil || !d.hadBefore(n) || d.deps.Destroy {
		return err
	}
	ctx, cancel := d.hookContext()
	defer cancel()
	ops, err := d.ops(ctx)
	if err != nil {
		return err
	}
	if _, err := ops.API.Version(ctx, n.IP); err == nil {
		_ = d.ctx.Log.Info(fmt.Sprintf("%s answers as a configured node: its config is applied again, nothing to clean up", n), nil)
		return nil
	}
	release, err := d.removalTurn(n)
	if err != nil {
		return err
	}
	defer release()
	_ = d.ctx.Log.Info(fmt.Sprintf("%s is a new machine: its old etcd member and Kubernetes Node go before it joins", n), nil)
	if err := ops.Remove(ctx, n); err != nil {
		return fmt.Errorf("unable to clear the old machine of %s before the new one joins: %w", n, err)
	}
	d.mu.Lock()
	d.rejoining[n.Name] = true
	d.mu.Unlock()
	return nil
}

// rejoined runs after a node's config apply was created: for a new machine
// of a node the cluster had (see rejoin), it waits until the machine runs
// its config and is healthy (for a control plane: its etcd member with
// the others), and records the result as settle does, so the rollout does
// not go on past a replacement that did not come back.
func (d *dayTwo) rejoined(args *pulumi.ResourceHookArgs) error {
	n, err := d.node(args.Name)
	if err != nil {
		return err
	}
	d.mu.Lock()
	rejoining := d.rejoining[n.Name]
	d.mu.Unlock()
	if !rejoining {
		return nil
	}
	return d.settle(args)
}

// hadBefore reports whether the last run had the node.
func (d *dayTwo) hadBefore(n rollout.Node) bool {
	if d.previous == nil {
		return false
	}
	_, ok := d.previous.Roles[n.Name]
	return ok
}

// memberEnv is a membership's environment: the node it stands for, and
// whether its removal resets it (only then, so that the memberships of
// other stacks see no change).
func memberEnv(n NodeSpec, reset bool) pulumi.StringMap {
	env := pulumi.StringMap{
		"NODE_NAME": pulumi.String(n.Name),
		"NODE_IP":   pulumi.String(n.IP),
		"NODE_ROLE": pulumi.String(string(n.Role)),
	}
	if reset {
		env[resetEnv] = pulumi.String("1")
	}
	return env
}

// resetEnv, in a membership's environment, resets the node when it leaves
// the stack or the stack is destroyed.
const resetEnv = "NODE_RESET"

// resetsOnRemoval reports whether a membership's removal resets its node.
func resetsOnRemoval(inputs resource.PropertyMap) bool {
	env := inputs["environment"]
	if !env.IsObject() {
		return false
	}
	v := env.ObjectValue()[resetEnv]
	return v.IsString() && v.StringValue() == "1"
}

// reset wipes a node that leaves (vps.onDestroy: reset). A node that does
// not answer is left as it is, with a warning: it is dead or already in
// maintenance mode, and the removal must not wait on it.
func (d *dayTwo) reset(ctx context.Context, n rollout.Node) {
	ops, err := d.ops(ctx)
	if err == nil {
		_ = d.ctx.Log.Info(fmt.Sprintf("resetting %s: its STATE and EPHEMERAL partitions are wiped, it reboots into maintenance mode", n), nil)
		err = ops.API.Reset(ctx, n.IP)
	}
	if err != nil {
		_ = d.ctx.Log.Warn(fmt.Sprintf("%s was not reset (%v): if the machine still runs Talos with this cluster's credentials, reset or reinstall it", n, err), nil)
	}
}

// memberNode reads the node back from a membership's inputs.
func memberNode(inputs resource.PropertyMap) (rollout.Node, error) {
	env := inputs["environment"]
	if !env.IsObject() {
		return rollout.Node{}, errors.New("its state has no environment")
	}
	get := func(k resource.PropertyKey) string {
		if v := env.ObjectValue()[k]; v.IsString() {
			return v.StringValue()
		}
		return ""
	}
	n := rollout.Node{Name: get("NODE_NAME"), IP: get("NODE_IP"), Role: rollout.Role(get("NODE_ROLE"))}
	if n.Name == "" || n.IP == "" || (n.Role != rollout.ControlPlane && n.Role != rollout.Worker) {
		return n, fmt.Errorf("its state names no node: %v", n)
	}
	return n, nil
}

// baseConfig is an apply's base machine config (a secret input).
func baseConfig(inputs resource.PropertyMap) string {
	v := inputs["machineConfigurationInput"]
	for v.IsSecret() {
		v = v.SecretValue().Element
	}
	if v.IsString() {
		return v.StringValue()
	}
	return ""
}

// kubeletImage is machine.kubelet.image of a machine config's v1alpha1
// document; "" when it has none.
func kubeletImage(config string) string {
	dec := yaml.NewDecoder(strings.NewReader(config))
	for {
		var doc struct {
			Version string `yaml:"version"`
			Machine struct {
				Kubelet struct {
					Image string `yaml:"image"`
				} `yaml:"kubelet"`
			} `yaml:"machine"`
		}
		if err := dec.Decode(&doc); err != nil {
			return ""
		}
		if doc.Version == "v1alpha1" {
			return doc.Machine.Kubelet.Image
		}
	}
}

// mergedKubelet is the kubelet image of an apply's config: its base config
// with its patches, as the provider merges them.
func mergedKubelet(inputs resource.PropertyMap) (string, error) {
	out, err := mergeConfig(nodeConfig{base: baseConfig(inputs), patches: stringsOf(inputs["configPatches"])})
	if err != nil {
		return "", err
	}
	return kubeletImage(string(out)), nil
}

// stringsOf is an array input's strings (secrets unwrapped).
func stringsOf(v resource.PropertyValue) []string {
	for v.IsSecret() {
		v = v.SecretValue().Element
	}
	if !v.IsArray() {
		return nil
	}
	var out []string
	for _, e := range v.ArrayValue() {
		for e.IsSecret() {
			e = e.SecretValue().Element
		}
		if e.IsString() {
			out = append(out, e.StringValue())
		}
	}
	return out
}

// pinnedConfig is the node's new machine config (base and patches merged as
// the provider merges them) with its kubelet kept on kubelet.
func pinnedConfig(nc nodeConfig, kubelet string) ([]byte, error) {
	pin := fmt.Sprintf("machine:\n  kubelet:\n    image: %s\n", kubelet)
	return mergeConfig(nodeConfig{base: nc.base, patches: append(append([]string{}, nc.patches...), pin)})
}

// mergeConfig is a base config with its patches applied, as the provider
// applies them.
func mergeConfig(nc nodeConfig) ([]byte, error) {
	patches, err := configpatcher.LoadPatches(nc.patches)
	if err != nil {
		return nil, fmt.Errorf("unable to load the patches: %w", err)
	}
	out, err := configpatcher.Apply(configpatcher.WithBytes([]byte(nc.base)), patches)
	if err != nil {
		return nil, fmt.Errorf("unable to apply the patches: %w", err)
	}
	return out.Bytes()
}

// installerImage finds the installer image in an apply's config patches
// (the last patch that sets machine.install.image); "" when none does.
func installerImage(inputs resource.PropertyMap) string {
	patches := inputs["configPatches"]
	for patches.IsSecret() {
		patches = patches.SecretValue().Element
	}
	if !patches.IsArray() {
		return ""
	}
	image := ""
	for _, p := range patches.ArrayValue() {
		for p.IsSecret() {
			p = p.SecretValue().Element
		}
		if !p.IsString() || !strings.Contains(p.StringValue(), "image") {
			continue
		}
		var doc struct {
			Machine struct {
				Install struct {
					Image string `yaml:"image"`
				} `yaml:"install"`
			} `yaml:"machine"`
		}
		if yaml.Unmarshal([]byte(p.StringValue()), &doc) == nil && doc.Machine.Install.Image != "" {
			image = doc.Machine.Install.Image
		}
	}
	return image
}

// splitImage splits an image reference into its repository and its tag.
func splitImage(ref string) (repo, tag string) {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[:i], ref[i+1:]
	}
	return ref, ""
}

// future is a value a hook waits for: an output resolved later in the run.
type future[T any] struct {
	once sync.Once
	done chan struct{}
	v    T
	err  error
}

func newFuture[T any]() *future[T] { return &future[T]{done: make(chan struct{})} }

func (f *future[T]) set(v T, err error) {
	f.once.Do(func() {
		f.v, f.err = v, err
		close(f.done)
	})
}

func (f *future[T]) get(ctx context.Context) (T, error) {
	select {
	case <-f.done:
		return f.v, f.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// Unknown is what the outputs say of a version no node reported.
const Unknown = "unknown"

// observeTimeout bounds the reading of what the nodes run, at the end of a
// run.
const observeTimeout = time.Minute

// observation is what the nodes run, read from them.
type observation struct {
	// talos is the oldest Talos version a node reported; kubernetes the
	// oldest Kubernetes version an API server reported.
	talos, kubernetes string
	// nodes: by node name, its ip, role, talosVersion and kubeletVersion.
	nodes map[string]map[string]string
}

// observe reads what every node runs: its Talos version through the Talos
// API, its kubelet's version and each control plane's API server version
// through Kubernetes. What does not answer is reported as Unknown, and a
// cluster-wide version no node reported falls back to the one asked for.
func (d *dayTwo) observe(kubeconfig string, nodes []NodeSpec) observation {
	ctx, cancel := context.WithTimeout(d.deps.Context, observeTimeout)
	defer cancel()
	obs := observation{talos: d.talos, kubernetes: d.kubernetes, nodes: map[string]map[string]string{}}
	for _, n := range nodes {
		obs.nodes[n.Name] = map[string]string{"ip": n.IP, "role": string(n.Role), "talosVersion": Unknown, "kubeletVersion": Unknown}
		if n.Machine != "" {
			obs.nodes[n.Name]["machine"] = n.Machine
		}
	}
	// A preview changes nothing and a destroy leaves nothing to report:
	// neither waits for nodes that may not answer.
	if d.ctx.DryRun() || d.deps.Destroy {
		return obs
	}
	var talosVersions, apiVersions []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	if ops, err := d.ops(ctx); err == nil {
		for _, n := range nodes {
			wg.Go(func() {
				v, err := ops.API.Version(ctx, n.IP)
				if err != nil {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				obs.nodes[n.Name]["talosVersion"] = v
				talosVersions = append(talosVersions, v)
			})
		}
	}
	if kubeconfig != "" {
		for _, n := range nodes {
			if n.Role != RoleControlPlane {
				continue
			}
			wg.Go(func() {
				kube, err := d.deps.Kube([]byte(kubeconfig), "https://"+n.IP+":6443")
				if err != nil {
					return
				}
				defer closeKube(kube)
				if v, err := kube.ServerVersion(ctx); err == nil {
					mu.Lock()
					apiVersions = append(apiVersions, v)
					mu.Unlock()
				}
			})
		}
		wg.Go(func() {
			kube, err := d.deps.Kube([]byte(kubeconfig), "")
			if err != nil {
				return
			}
			defer closeKube(kube)
			knodes, err := kube.Nodes(ctx)
			if err != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, n := range nodes {
				for _, k := range knodes {
					if k.InternalIP == n.IP {
						obs.nodes[n.Name]["kubeletVersion"] = k.KubeletVersion
					}
				}
			}
		})
	}
	wg.Wait()
	if v := oldest(talosVersions); v != "" {
		obs.talos = v
	}
	if v := oldest(apiVersions); v != "" {
		obs.kubernetes = strings.TrimPrefix(v, "v")
	}
	return obs
}

// closeKube closes a Kubernetes client made for one read: its idle
// connections would stay open for the rest of the run.
func closeKube(k rollout.Kube) {
	if c, ok := k.(interface{ Close() }); ok {
		c.Close()
	}
}

// oldest is the lowest of the versions ("" for none); versions it cannot
// read sort first.
func oldest(versions []string) string {
	out := ""
	for _, v := range versions {
		if out == "" || versionLess(v, out) {
			out = v
		}
	}
	return out
}

func versionLess(a, b string) bool {
	va, okA := parseVersion(a)
	vb, okB := parseVersion(b)
	if !okA || !okB {
		return !okA && okB
	}
	for i := range va {
		if va[i] != vb[i] {
			return va[i] < vb[i]
		}
	}
	return false
}
