package vps

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pulumi/pulumi-command/sdk/go/command/local"
	"github.com/pulumi/pulumi-command/sdk/go/command/remote"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/image"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/stacks"
)

// ClusterType is the component's type token.
const ClusterType = "talos-cluster:index:VpsCluster"

// ClusterArgs are the inputs of a VpsCluster.
type ClusterArgs struct {
	// Config is the validated stack config (platform vps).
	Config *stacks.Config
	// Probe tells whether a node already runs Talos in maintenance mode
	// (TalosMaintenanceProbe on port 50000 when nil).
	Probe MaintenanceProbe
}

// Cluster is the VpsCluster component: per node a rescue-mode install, an
// optional reboot command and a wait for Talos, then the TalosCluster.
type Cluster struct {
	pulumi.ResourceState

	SchematicID    pulumi.StringOutput `pulumi:"schematicId"`
	InstallerImage pulumi.StringOutput `pulumi:"installerImage"`
	ImageURL       pulumi.StringOutput `pulumi:"imageUrl"`

	// Children by node name, for tests and later steps.
	Installs map[string]*remote.Command
	Reboots  map[string]*local.Command // only with vps.rebootCommand
	Waits    map[string]*local.Command
	Talos    *talos.Cluster
}

// Bounds of the steps; Pulumi fails a step that runs longer.
const (
	// installTimeout covers a slow download of the disk image (~100 MB
	// compressed, ~1.3 GB written).
	installTimeout = 60 * time.Minute
	// waitSlack is added to vps.talosWaitTimeout: the script stops itself
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

// NewCluster builds the VPS platform for a stack config.
func NewCluster(ctx *pulumi.Context, name string, args *ClusterArgs, opts ...pulumi.ResourceOption) (*Cluster, error) {
	cfg := args.Config
	if cfg == nil || cfg.Platform != stacks.PlatformVPS {
		return nil, errors.New("vps cluster: needs a validated config of platform vps")
	}
	c := &Cluster{
		Installs: map[string]*remote.Command{},
		Reboots:  map[string]*local.Command{},
		Waits:    map[string]*local.Command{},
	}
	if err := ctx.RegisterComponentResource(ClusterType, name, c, opts...); err != nil {
		return nil, err
	}
	parent := pulumi.Parent(c)

	img, err := image.New(ctx, name, image.Args{
		TalosVersion: cfg.Cluster.TalosVersion,
		SchematicID:  cfg.Cluster.Schematic.ID,
		Extensions:   cfg.Cluster.Schematic.Extensions,
		Platform:     image.PlatformMetal,
	}, parent)
	if err != nil {
		return nil, err
	}
	c.SchematicID, c.InstallerImage = img.SchematicID, img.Installer
	c.ImageURL = img.DiskImageURL
	if cfg.VPS.ImageURL != "" {
		c.ImageURL = pulumi.String(cfg.VPS.ImageURL).ToStringOutput()
	}

	reset := cfg.VPS.OnDestroy == stacks.OnDestroyReset
	nodeOpts := map[string]talos.NodeOptions{}
	inMaintenance := probeNodes(ctx.Context(), args.Probe, cfg.Nodes.Refs())
	for _, ref := range cfg.Nodes.Refs() {
		ready, install, err := c.prepareNode(ctx, name, cfg, ref, inMaintenance[ref.Name], parent)
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
		nodeOpts[ref.Name] = o
	}

	targs := talos.ClusterArgsFromConfig(cfg, talos.Machines{
		InstallerImage: img.Installer, Nodes: TalosNodes(cfg), NodeOptions: nodeOpts,
		// The servers outlive the stack: destroy never uninstalls Helm
		// releases from a cluster it forgets or resets. The first install
		// is deleted (a no-op) by every destroy, so it stands for "the
		// whole cluster goes".
		DeletedWith: c.Installs[cfg.Nodes.ControlPlanes[0].Name],
	})
	c.Talos, err = talos.NewCluster(ctx, name, &targs, parent)
	if err != nil {
		return nil, err
	}
	if err := ctx.RegisterResourceOutputs(c, c.Outputs()); err != nil {
		return nil, err
	}
	return c, nil
}

// probeNodes asks every node at once whether it runs Talos in maintenance
// mode, so that the probes' timeouts do not add up.
func probeNodes(ctx context.Context, probe MaintenanceProbe, refs []stacks.NodeRef) map[string]bool {
	if probe == nil {
		probe = TalosMaintenanceProbe(talosAPIPort)
	}
	out := make(map[string]bool, len(refs))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, ref := range refs {
		wg.Go(func() {
			up := probe(ctx, ref.IP)
			mu.Lock()
			out[ref.Name] = up
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// talosAPIPort is the Talos API's port (apid, and the maintenance API).
const talosAPIPort = 50000

// prepareNode registers a node's install, optional reboot command and wait,
// and returns the resource the node's config apply must wait for.
//
// A node that already answers in Talos maintenance mode gets an install
// and a reboot command without a create command: the command provider runs
// nothing and opens no connection for them (its Create returns at once when
// there is no command), the wait finds Talos at once, and the config apply
// follows. Both keep their names, and `create` is in their ignoreChanges, so
// a later `up`, when the node answers differently, shows no diff.
func (c *Cluster) prepareNode(ctx *pulumi.Context, name string, cfg *stacks.Config, ref stacks.NodeRef, inMaintenance bool, parent pulumi.ResourceOption) (pulumi.Resource, *remote.Command, error) {
	r := ref.Rescue
	inst := Install{Disk: ref.InstallDisk, RequireRescue: *cfg.VPS.RequireRescue}
	installArgs := &remote.CommandArgs{
		Connection: remote.ConnectionArgs{
			Host:           pulumi.String(r.Host),
			Port:           pulumi.Float64(float64(r.Port)),
			User:           pulumi.String(r.User),
			Password:       r.Password.Output(),
			DialErrorLimit: pulumi.Int(3),
			PerDialTimeout: pulumi.Int(15),
			// The whole pinned key (Load refuses a fingerprint or RSA key).
			// Like the password, it is read when the install is created:
			// the connection is in installIgnoreChanges.
			HostKey: stacks.CommandHostKey(r.HostKey),
		},
		Logging: remote.LoggingStdoutAndStderr,
	}
	if inMaintenance {
		msg := fmt.Sprintf("%s (%s) already runs Talos in maintenance mode: no rescue install, no reboot; its config is applied next", ref.Name, ref.IP)
		if err := ctx.Log.Info(msg, nil); err != nil {
			return nil, nil, fmt.Errorf("unable to log the state of node %q: %w", ref.Name, err)
		}
	} else {
		installArgs.Create = pulumi.String("bash -s")
		installArgs.Stdin = c.ImageURL.ApplyT(func(url string) string {
			i := inst
			i.ImageURL = url
			return i.Stdin()
		}).(pulumi.StringOutput)
	}
	install, err := remote.NewCommand(ctx, name+"-install-"+ref.Name, installArgs, parent,
		pulumi.IgnoreChanges(installIgnoreChanges),
		pulumi.Timeouts(&pulumi.CustomTimeouts{Create: installTimeout.String()}))
	if err != nil {
		return nil, nil, fmt.Errorf("unable to create install of node %q: %w", ref.Name, err)
	}
	c.Installs[ref.Name] = install

	// Both later steps are replaced with the install (`--replace`), and
	// neither re-runs for a changed command or timeout alone.
	triggers := pulumi.Array{install.ID()}
	var ready pulumi.Resource = install
	hint := ManualRebootHint(ref.Name, ref.IP, ref.InstallDisk)
	if cmd := cfg.VPS.RebootCommand; cmd != "" {
		rebootArgs := &local.CommandArgs{
			Environment: pulumi.StringMap{
				"NODE_NAME": pulumi.String(ref.Name), "NODE_IP": pulumi.String(ref.IP), "RESCUE_HOST": pulumi.String(r.Host),
			},
			Triggers: triggers,
			Logging:  local.LoggingStdoutAndStderr,
		}
		if !inMaintenance {
			rebootArgs.Create = pulumi.String(cmd)
		}
		reboot, err := local.NewCommand(ctx, name+"-reboot-"+ref.Name, rebootArgs, parent, pulumi.DependsOn([]pulumi.Resource{install}),
			pulumi.IgnoreChanges(localIgnoreChanges),
			pulumi.Timeouts(&pulumi.CustomTimeouts{Create: rebootTimeout.String()}))
		if err != nil {
			return nil, nil, fmt.Errorf("unable to create reboot command of node %q: %w", ref.Name, err)
		}
		c.Reboots[ref.Name] = reboot
		ready, hint = reboot, CommandRebootHint(ref.Name)
	}

	w := Wait{NodeName: ref.Name, NodeIP: ref.IP, Timeout: cfg.VPS.TalosWait(), TimeoutLabel: cfg.VPS.TalosWaitTimeout, Hint: hint}
	wait, err := local.NewCommand(ctx, name+"-wait-"+ref.Name, &local.CommandArgs{
		Create:      pulumi.String(WaitScript),
		Interpreter: pulumi.ToStringArray([]string{"/bin/sh", "-c"}),
		Environment: pulumi.ToStringMap(w.Env()),
		Triggers:    triggers,
		Logging:     local.LoggingStdoutAndStderr,
	}, parent, pulumi.DependsOn([]pulumi.Resource{ready}),
		pulumi.IgnoreChanges(localIgnoreChanges),
		pulumi.Timeouts(&pulumi.CustomTimeouts{Create: (w.Timeout + waitSlack).String()}))
	if err != nil {
		return nil, nil, fmt.Errorf("unable to create Talos wait of node %q: %w", ref.Name, err)
	}
	c.Waits[ref.Name] = wait
	return wait, install, nil
}

// Outputs are the stack outputs of a VPS cluster.
func (c *Cluster) Outputs() pulumi.Map {
	out := c.Talos.Outputs()
	out["schematicId"] = c.SchematicID
	out["installerImage"] = c.InstallerImage
	out["imageUrl"] = c.ImageURL
	return out
}
