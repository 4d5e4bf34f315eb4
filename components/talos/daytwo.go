package talos

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/siderolabs/talos/pkg/machinery/client/dialer"
	"google.golang.org/grpc"

	"github.com/fluodata/talos-pulumi/internal/kubeapi"
	"github.com/fluodata/talos-pulumi/internal/rollout"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
)

// MemberSuffix names a node's membership (after the cluster's name, before
// the node's): the node as the last run left it (the program reads the
// last run's nodes from them), whose deletion resets a node whose removal
// resets it. The roster takes the nodes out of the cluster.
const MemberSuffix = "-member-"

// Deps are the component's seams: how it reaches the cluster's APIs from
// its hooks. NewCluster uses the real ones.
type Deps struct {
	// Package is the package the components' type tokens name
	// (ProgramPackage when empty; see ComponentType): the component
	// package sets its own name.
	Package string
	// Hooks binds the day-2 hooks (the engine's own when nil).
	Hooks Hooks
	// Talos opens the cluster's Talos API (talosapi.New when nil).
	Talos func(creds talosapi.Credentials, opts ...talosapi.Option) (talosapi.API, error)
	// Kube opens the Kubernetes API with a kubeconfig; server, when not
	// empty, replaces the kubeconfig's (kubeapi.New when nil).
	Kube func(kubeconfig []byte, server string) (rollout.Kube, error)
	// Timing bounds the rollout's waits (rollout.DefaultTiming's fields
	// where zero).
	Timing rollout.Timing
	// RemovedAPIs are the API resources each Kubernetes upgrade removes
	// (rollout.RemovedAPIs, upstream's, when nil).
	RemovedAPIs map[string][]kubeapi.APIResource
	// Destroy says that the run is a whole-stack destroy: no node is
	// taken out of the cluster, whatever the stack file says since the last
	// `up`, and nothing is read from the nodes. The engine tells a program
	// nothing about the operation it runs for: the program and the
	// component provider set it from the environment variable DestroyEnv,
	// which `make destroy` sets, and `stackctl destroy` sets it itself.
	Destroy bool
	// LastRead says the caller has read the cluster's last state into its
	// Args' Previous (nil: unknown), as the stack-file program does from
	// its outputs; the component then does not read it itself
	// (ReadOwnPrevious).
	LastRead bool
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
		d.Talos = func(creds talosapi.Credentials, opts ...talosapi.Option) (talosapi.API, error) {
			// Dial as the Talos provider does: through HTTPS_PROXY when the
			// stack reaches its nodes through the ssh-proxy helper.
			return talosapi.New(creds, append([]talosapi.Option{talosapi.WithDialOptions(grpc.WithContextDialer(dialer.DynamicProxyDialer))}, opts...)...)
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
	// secureBoot: every node must run under Secure Boot with its volumes
	// encrypted, checked after each upgrade and apply (see
	// checkSecureBoot).
	secureBoot bool
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
	// restarting are the nodes whose machine restarts with its state
	// kept (see Leaver.Restart).
	restarting map[string]bool
	// departed are the nodes the roster took out of the cluster in this
	// run (see depart).
	departed map[string]bool
	// phase is the Kubernetes control-plane phase of this run, once run;
	// upgraded: it moved the kubelets' version (see syncManifests).
	phase    *error
	upgraded bool

	// workerTurns and controlPlaneTurn hold a token per node leaving the
	// cluster (see removalTurn).
	workerTurns, controlPlaneTurn chan struct{}

	// machines say where this machine reaches the nodes' APIs; endpoint
	// is the cluster's Kubernetes API URL.
	machines Machines
	endpoint string

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
		talos: args.Cluster.TalosVersion, kubernetes: args.Cluster.KubernetesVersion, secureBoot: args.Cluster.SecureBoot,
		byApply:     map[string]rollout.Node{},
		credentials: newFuture[talosapi.Credentials](),
		booted:      map[string]time.Time{}, settled: map[string]error{}, rejoining: map[string]bool{}, restarting: map[string]bool{}, departed: map[string]bool{},
		reboots:          map[string]rollout.Reboot{},
		configs:          map[string]*future[nodeConfig]{},
		workerTurns:      make(chan struct{}, args.Cluster.Policy().AtOnce(false)),
		controlPlaneTurn: make(chan struct{}, args.Cluster.Policy().AtOnce(true)),
	}
	d.previous, d.applyPrefix, d.machineChanged = args.Previous, prefix, map[string]bool{}
	d.machines, d.endpoint = args.Machines, args.Cluster.Endpoint
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
// with extra control planes (a removed one) added to the etcd checks. A
// hook passes the URN of its resource (at), so that what the operations
// say shows on that resource's line, the waits' reports as ephemeral
// status; "" logs on the stack.
func (d *dayTwo) ops(ctx context.Context, at pulumi.URN, extraCPs ...string) (rollout.Ops, error) {
	creds, err := d.credentials.get(ctx)
	if err != nil {
		return rollout.Ops{}, fmt.Errorf("unable to read the cluster's Talos credentials: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.api == nil {
		var opts []talosapi.Option
		if len(d.machines.APIAddresses) > 0 {
			opts = append(opts, talosapi.WithAddress(func(node string) string {
				return talosapi.Address(d.machines.talosAddress(node))
			}))
		}
		if d.api, err = d.deps.Talos(creds, opts...); err != nil {
			return rollout.Ops{}, fmt.Errorf("unable to open the Talos API: %w", err)
		}
	}
	cps := append(append(append([]string{}, d.cps...), d.leaving...), extraCPs...)
	slices.Sort(cps[len(d.cps):])
	cps = append(cps[:len(d.cps)], slices.Compact(cps[len(d.cps):])...)
	api := d.api
	info := func(msg string) { _ = d.ctx.Log.Info(msg, nil) }
	var status func(string)
	if at != "" {
		l := d.deps.Log(d.ctx, at)
		info, status = l.Info, l.Status
	}
	return rollout.Ops{
		API: api, ControlPlanes: cps, Leaving: slices.Clone(d.leaving), Timing: d.deps.Timing,
		Kube: d.kubeConnector(api, cps),
		Log: func(format string, args ...any) {
			info(fmt.Sprintf(format, args...))
		},
		Status: status,
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
		k, err := d.openKube(d.kubeconfig, server)
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

// openKube opens the Kubernetes API at server ("": the kubeconfig's),
// where this machine reaches it (see Machines.APIAddresses).
func (d *dayTwo) openKube(kubeconfig []byte, server string) (rollout.Kube, error) {
	if server == "" && len(d.machines.APIAddresses) > 0 {
		server = d.endpoint
	}
	return d.deps.Kube(kubeconfig, d.machines.kubeServer(server))
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

// configured reports whether the control plane at ip ran in the cluster
// before this run (true when the last run is unknown).
func (d *dayTwo) configured(ip string) bool {
	return d.previous == nil || d.previous.ControlPlanes == nil || slices.Contains(d.previous.ControlPlaneIPs, ip)
}

// ranBefore reports whether the node ran before this run: a node added in
// it gets the new version with its first config. A control plane is known
// by its IP (configured), a worker by its name among the last run's
// nodes; any node when the last run is not known.
func (d *dayTwo) ranBefore(n rollout.Node) bool {
	if n.Role == RoleControlPlane {
		return d.configured(n.IP)
	}
	if d.previous == nil || d.previous.Roles == nil {
		return true
	}
	_, ok := d.previous.Roles[n.Name]
	return ok
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

// resetEnv, in a membership's environment, resets the node when it leaves
// the stack or the stack is destroyed.
const resetEnv = "NODE_RESET"

// encryptionEnv holds, in a membership's environment, how the node's
// volumes are encrypted (see memberEnv).
const encryptionEnv = "NODE_ENCRYPTION"

// observeTimeout bounds the reading of what the nodes run, at the end of a
// run.
const observeTimeout = time.Minute
