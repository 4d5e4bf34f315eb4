package servers

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/pulumi/pulumi-command/sdk/go/command/local"
	"github.com/pulumi/pulumi-command/sdk/go/command/remote"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/talos"
)

// Servers are the steps that bring rented servers to Talos: per node a
// rescue-mode install, an optional reboot command and a wait for its Talos
// API. The VpsCluster's, and a ProxmoxCluster's for a hosts entry of
// rented servers.
type Servers struct {
	// Installs, Reboots (only with a reboot command) and Waits by node
	// name.
	Installs map[string]*remote.Command
	Reboots  map[string]*local.Command
	Waits    map[string]*local.Command
	// NodeOptions are each node's TalosCluster options: its config apply
	// waits for its wait, is made again when the install is, and resets or
	// forgets the server on delete as settings say.
	NodeOptions map[string]talos.NodeOptions

	imageURL func(node string) pulumi.StringOutput
}

// ImageURLs are the disk image the installs fetch (the factory's, or
// settings' own) and the one outputs show: a presigned URL's query is a
// credential, so the installs get it as a secret and the output leaves
// it out.
func ImageURLs(factory pulumi.StringOutput, settings Settings) (install, shown pulumi.StringOutput) {
	u := settings.ImageURL
	if u == "" {
		return factory, factory
	}
	install = pulumi.String(u).ToStringOutput()
	if base, query, ok := strings.Cut(u, "?"); ok && query != "" {
		return pulumi.ToSecret(install).(pulumi.StringOutput), pulumi.String(base).ToStringOutput()
	}
	return install, install
}

// NewServers registers the steps of nodes (defaulted, as WithDefaults
// leaves them) under parent, their names prefixed with name, each node
// installing imageURL(its name): a node with a schematic of its own
// writes its own image. deps.Talos must have its defaults
// (talos.Deps.WithDefaults).
func NewServers(ctx *pulumi.Context, name string, settings Settings, nodes []Node, imageURL func(node string) pulumi.StringOutput, deps Deps, parent pulumi.ResourceOption) (*Servers, error) {
	s := &Servers{
		Installs: map[string]*remote.Command{}, Reboots: map[string]*local.Command{}, Waits: map[string]*local.Command{},
		NodeOptions: map[string]talos.NodeOptions{}, imageURL: imageURL,
	}
	reset := settings.reset()
	inMaintenance := probeNodes(ctx.Context(), deps.Probe, nodes)
	for _, n := range nodes {
		ready, install, err := s.prepareNode(ctx, deps.Talos, name, settings, n, inMaintenance[n.Name], parent)
		if err != nil {
			return nil, err
		}
		o := talos.NodeOptions{
			DependsOn: []pulumi.Resource{ready},
			// A re-imaged node is back in maintenance mode: apply again.
			ReplacementTrigger: install.ID(),
			ResetOnDestroy:     reset,
		}
		if !reset {
			// Forget: the apply's delete is a no-op anyway; DeletedWith
			// says so, and makes no call to the node.
			o.DeletedWith = install
		}
		s.NodeOptions[n.Name] = o
	}
	return s, nil
}

// probeNodes asks every node at once whether it runs Talos in maintenance
// mode, so that the probes' timeouts do not add up.
func probeNodes(ctx context.Context, probe MaintenanceProbe, nodes []Node) map[string]bool {
	if probe == nil {
		probe = TalosMaintenanceProbe(TalosAPIPort)
	}
	out := make(map[string]bool, len(nodes))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			up := probe(ctx, n.IP)
			mu.Lock()
			out[n.Name] = up
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// prepareNode registers a node's install, optional reboot command and wait,
// and returns the resource the node's config apply must wait for.
//
// A node that already answers in Talos maintenance mode gets an install
// and a reboot command without a create command: the command provider runs
// nothing and opens no connection for them (its Create returns at once when
// there is no command), the wait finds Talos at once, and the config apply
// follows. Both keep their names, and `create` is in their ignoreChanges, so
// a later `up`, when the node answers differently, shows no diff.
func (c *Servers) prepareNode(ctx *pulumi.Context, deps talos.Deps, name string, settings Settings, n Node, inMaintenance bool, parent pulumi.ResourceOption) (pulumi.Resource, *remote.Command, error) {
	r := n.Rescue
	disk, rescueHost := n.installDisk(), n.rescueHost()
	inst := Install{Disk: disk, RequireRescue: settings.requiresRescue()}
	installArgs := &remote.CommandArgs{
		Connection: remote.ConnectionArgs{
			Host: pulumi.String(rescueHost),
			Port: pulumi.Float64(float64(r.Port)),
			User: pulumi.String(r.User),
			// Secret whatever the caller passed.
			Password:       pulumi.ToSecret(r.Password).(pulumi.StringOutput),
			DialErrorLimit: pulumi.Int(3),
			PerDialTimeout: pulumi.Int(15),
			// The whole pinned key (Validate refuses anything else), or
			// nil: no check. Like the password, it is read when the
			// install is created: the connection is in installIgnoreChanges.
			HostKey: r.hostKey(),
		},
		Logging: remote.LoggingStdoutAndStderr,
	}
	if inMaintenance {
		msg := fmt.Sprintf("%s (%s) already runs Talos in maintenance mode: no rescue install, no reboot; its config is applied next", n.Name, n.IP)
		if err := ctx.Log.Info(msg, nil); err != nil {
			return nil, nil, fmt.Errorf("unable to log the state of node %q: %w", n.Name, err)
		}
	} else {
		installArgs.Create = pulumi.String("bash -s")
		installArgs.Stdin = c.imageURL(n.Name).ApplyT(func(url string) string {
			i := inst
			i.ImageURL = url
			return i.Stdin()
		}).(pulumi.StringOutput)
	}
	install, err := remote.NewCommand(ctx, name+"-install-"+n.Name, installArgs, parent,
		pulumi.IgnoreChanges(installIgnoreChanges),
		pulumi.Timeouts(&pulumi.CustomTimeouts{Create: installTimeout.String()}))
	if err != nil {
		return nil, nil, fmt.Errorf("unable to create install of node %q: %w", n.Name, err)
	}
	c.Installs[n.Name] = install

	// Both later steps are replaced with the install (`--replace`), and
	// neither re-runs for a changed command or timeout alone.
	triggers := pulumi.Array{install.ID()}
	var ready pulumi.Resource = install
	hint := ManualRebootHint(n.Name, n.IP, disk)
	if cmd := settings.RebootCommand; cmd != "" {
		rebootArgs := &local.CommandArgs{
			Environment: pulumi.StringMap{
				"NODE_NAME": pulumi.String(n.Name), "NODE_IP": pulumi.String(n.IP), "RESCUE_HOST": pulumi.String(rescueHost),
			},
			Triggers: triggers,
			Logging:  local.LoggingStdoutAndStderr,
		}
		if !inMaintenance {
			rebootArgs.Create = pulumi.String(cmd)
		}
		reboot, err := local.NewCommand(ctx, name+"-reboot-"+n.Name, rebootArgs, parent, pulumi.DependsOn([]pulumi.Resource{install}),
			pulumi.IgnoreChanges(localIgnoreChanges),
			pulumi.Timeouts(&pulumi.CustomTimeouts{Create: rebootTimeout.String()}))
		if err != nil {
			return nil, nil, fmt.Errorf("unable to create reboot command of node %q: %w", n.Name, err)
		}
		c.Reboots[n.Name] = reboot
		ready, hint = reboot, CommandRebootHint(n.Name)
	}

	timeout, label := settings.talosWait()
	w := Wait{NodeName: n.Name, NodeIP: n.IP, Timeout: timeout, TimeoutLabel: label, Hint: hint}
	waitName := name + "-wait-" + n.Name
	hook, err := deps.Hooks.Bind(name+TalosWaitHookSuffix, talos.BeforeCreate, waitName, func(args *pulumi.ResourceHookArgs) error {
		return RunWait(deps.Context, deps.Log(ctx, args.URN), talos.HookEnv(args.NewInputs), deps.Timing)
	})
	if err != nil {
		return nil, nil, err
	}
	// A command that runs nothing: its before-create hook waits, in the
	// program, so that a failed wait fails the create and the next `up`
	// waits again (see RunWait).
	wait, err := local.NewCommand(ctx, waitName, &local.CommandArgs{
		Environment: pulumi.ToStringMap(w.Env()),
		Triggers:    triggers,
		Logging:     local.LoggingStdoutAndStderr,
	}, parent, pulumi.DependsOn([]pulumi.Resource{ready}), hook,
		pulumi.IgnoreChanges([]string{"environment"}),
		pulumi.Timeouts(&pulumi.CustomTimeouts{Create: (w.Timeout + waitSlack).String()}))
	if err != nil {
		return nil, nil, fmt.Errorf("unable to create Talos wait of node %q: %w", n.Name, err)
	}
	c.Waits[n.Name] = wait
	return wait, install, nil
}

// ServerSpec is one server as the TalosCluster takes it (see TalosNodes),
// behind the firewall fw, with settings' defaults.
func ServerSpec(fw Firewall, settings Settings, n Node) talos.NodeSpec {
	gateway, prefix := n.gateway(settings), n.prefixLength(settings)
	var routes []talos.Route
	if prefix == 32 {
		routes = append(routes, talos.Route{Network: gateway + "/32"})
	}
	routes = append(routes, talos.Route{Network: "0.0.0.0/0", Gateway: gateway})
	return talos.NodeSpec{
		Name:        n.Name,
		IP:          n.IP,
		Role:        n.Role,
		InstallDisk: n.installDisk(),
		Hostname:    n.Name,
		UserPatches: n.Patches,
		// KubeSpan's extra endpoints, announced through discovery.
		KubeSpanEndpoints: n.KubeSpanEndpoints,
		Labels:            n.Labels,
		Taints:            n.Taints,
		// The firewall comes before the user's patches, so they can
		// add rules (a NetworkRuleConfig of their own) or replace ours.
		PlatformPatches: []string{fw.Patch(n.Role)},
		// A rented server may have a private network's NIC besides its
		// public one: the kubelet and etcd keep to IP.
		PinAddress: true,
		Network: talos.NodeNetwork{
			Addresses: []string{fmt.Sprintf("%s/%d", n.IP, prefix)},
			Routes:    routes,
		},
	}
}

// Bounds of the steps; Pulumi fails a step that runs longer.
const (
	// installTimeout covers a slow download of the disk image (~100 MB
	// compressed, ~1.3 GB written).
	installTimeout = 60 * time.Minute
	// waitSlack is added to vps.talosWaitTimeout: the wait stops itself
	// with a clear message before Pulumi's own timeout would.
	waitSlack = 5 * time.Minute
	// rebootTimeout bounds the operator's reboot command.
	rebootTimeout = 10 * time.Minute
)

// Inputs of the install and wait commands that must never re-run them: a
// new Talos version, image URL or rescue password must not re-image a node
// that runs Talos (upgrades go through Talos itself). Re-image on purpose
// with `pulumi up --replace <install URN>`.
var (
	installIgnoreChanges = []string{"connection", "create", "stdin", "logging"}
	localIgnoreChanges   = []string{"create", "environment", "interpreter", "logging"}
)
