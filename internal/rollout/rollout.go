// Package rollout holds the day-2 operations on one node of a running Talos
// cluster, each behind the gates that keep the cluster up: a Talos upgrade,
// the wait after a config apply, and the removal of a node (etcd member
// first, then its Kubernetes Node). It is free of Pulumi: the cluster
// component calls it from resource hooks, one node at a time in the order
// its resource graph sets (control planes first), and tests drive it
// against the fake Talos API of talosapitest.
//
// Every operation is idempotent, so a run that stopped half way resumes on
// the next `pulumi up`: a node that already runs the wanted version is not
// upgraded again, an etcd member already gone is not removed again.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fluodata/talos-pulumi/internal/kubeapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
)

// Role is a node's machine type, as the machine config names it. It is the
// one Role type: the stack front-end and TalosCluster alias it.
type Role string

// Roles.
const (
	ControlPlane Role = "controlplane"
	Worker       Role = "worker"
)

// Node is one node of the cluster.
type Node struct {
	// Name is the node's name in the stack (its resources' names).
	Name string
	// IP is the node's address: its Talos API and its Kubernetes
	// InternalIP.
	IP   string
	Role Role
}

func (n Node) String() string { return fmt.Sprintf("node %s (%s)", n.Name, n.IP) }

// Timing bounds the waits. Zero fields take the defaults.
type Timing struct {
	// Poll is the interval of every wait (default 2 s).
	Poll time.Duration
	// Reboot bounds the wait for a node to come back from a reboot or an
	// upgrade, the pull and install of the new image included (default
	// 15 min).
	Reboot time.Duration
	// Healthy bounds the wait for services, etcd and the API server to be
	// healthy once the node answers (default 5 min).
	Healthy time.Duration
	// RebootStart is how long the wait after a config apply watches for
	// the node to start a reboot the change needed (default 20 s): Talos
	// answers the apply first and reboots right after.
	RebootStart time.Duration
	// Drain bounds the eviction of a removed worker's pods (default 5 min).
	Drain time.Duration
	// EvictRetry is how long a drain waits before it asks again an
	// eviction a PodDisruptionBudget refused (default
	// kubeapi.DefaultEvictRetry, kubectl drain's 5 s).
	EvictRetry time.Duration
	// ProgressEvery is how often a wait reports, through Ops.Log, what
	// it waits for and what it saw last (default 30 s): a wait of minutes
	// that prints nothing cannot be told from a hung run.
	ProgressEvery time.Duration
}

// DefaultTiming is what a real cluster gets.
var DefaultTiming = Timing{
	Poll: 2 * time.Second, Reboot: 15 * time.Minute, Healthy: 5 * time.Minute,
	RebootStart: 20 * time.Second, Drain: 5 * time.Minute, EvictRetry: kubeapi.DefaultEvictRetry, ProgressEvery: 30 * time.Second,
}

// WithDefaults returns t with DefaultTiming's values where t's are zero.
func (t Timing) WithDefaults() Timing {
	d := DefaultTiming
	for _, f := range []struct{ v, def *time.Duration }{
		{&t.Poll, &d.Poll}, {&t.Reboot, &d.Reboot}, {&t.Healthy, &d.Healthy},
		{&t.RebootStart, &d.RebootStart}, {&t.Drain, &d.Drain}, {&t.EvictRetry, &d.EvictRetry}, {&t.ProgressEvery, &d.ProgressEvery},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	return t
}

// Kube is the part of the Kubernetes API the operations use.
type Kube interface {
	ServerVersion(ctx context.Context) (string, error)
	Nodes(ctx context.Context) ([]kubeapi.Node, error)
	DrainWithResult(ctx context.Context, node string, opts kubeapi.DrainOptions) (kubeapi.DrainResult, error)
	DeleteNode(ctx context.Context, node string) error
	StaticPods(ctx context.Context, node string) ([]kubeapi.StaticPod, error)
	SetTaints(ctx context.Context, node string, want []kubeapi.Taint, drop []string) error
	Objects(ctx context.Context, r kubeapi.APIResource, limit int) ([]kubeapi.ObjectRef, error)
	// The bootstrap manifests' sync (SyncManifests).
	Inventory(ctx context.Context, namespace, name string) ([]string, error)
	WriteInventory(ctx context.Context, namespace, name string, keys []string) error
	ApplyObject(ctx context.Context, obj map[string]any, opts kubeapi.ApplyOptions) (map[string]any, error)
	GetObject(ctx context.Context, apiVersion, kind, namespace, name string) (map[string]any, error)
	DeleteObject(ctx context.Context, apiVersion, kind, namespace, name string) error
	PreferredVersion(ctx context.Context, group string) (string, error)
}

// ControlPlaneComponents are the static pods of a control plane, by the
// name prefix of their mirror pods.
var ControlPlaneComponents = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// KubeConnector opens the Kubernetes API with the cluster's admin
// kubeconfig; server overrides the kubeconfig's server (one control plane's
// API server, https://<ip>:6443) when not empty.
type KubeConnector func(ctx context.Context, server string) (Kube, error)

// Ops runs the operations on one cluster. Every wait reports through Log,
// at least every Timing.ProgressEvery, what it waits for and what it saw
// last; a cancelled ctx ends every wait within a poll, with an error that
// says what it waited for and that the run was cancelled.
type Ops struct {
	// API is the cluster's Talos API.
	API talosapi.API
	// ControlPlanes are the IPs of every control plane of the cluster,
	// the node an operation is about included.
	ControlPlanes []string
	// Leaving are the control planes (of ControlPlanes) the run removes:
	// their etcd members may be unhealthy (a dead machine's) without
	// stopping the rollout of the nodes that stay, as long as the others
	// keep a quorum that counts them.
	Leaving []string
	// Kube opens the Kubernetes API; without it the operations skip what
	// needs it (the API server check, the drain and the Node's deletion).
	Kube KubeConnector
	// Timing bounds the waits.
	Timing Timing
	// Log reports progress (the Pulumi log in a program); may be nil.
	Log func(format string, args ...any)
	// Status, when set, takes the waits' reports every
	// Timing.ProgressEvery instead of Log: messages shown while the wait
	// lasts (an ephemeral message on the resource's line in a program),
	// which would flood a run's final diagnostics.
	Status func(message string)
	// Warn reports what an operation skipped to get done (the Pulumi
	// warning log in a program); Log when nil.
	Warn func(format string, args ...any)
}

func (o Ops) logf(format string, args ...any) {
	if o.Log != nil {
		o.Log(format, args...)
	}
}

func (o Ops) warnf(format string, args ...any) {
	if o.Warn != nil {
		o.Warn(format, args...)
		return
	}
	o.logf(format, args...)
}

// report is the progress reporter of the waits: Status, Log, or nil.
func (o Ops) report() func(string) {
	if o.Status != nil {
		return o.Status
	}
	if o.Log == nil {
		return nil
	}
	return func(m string) { o.Log("%s", m) }
}

// progress is the progress option of the waits of talosapi.
func (o Ops) progress(t Timing) talosapi.WaitOption {
	return talosapi.WithProgress(o.report(), t.ProgressEvery)
}

// call runs a call that may last long (Talos pulls the installer image
// inside an upgrade, retries an etcd leave for minutes) and reports while
// it runs. A call the run cancelled gives an error that says so.
func (o Ops) call(ctx context.Context, t Timing, what string, f func() error) error {
	p := talosapi.StartProgress(what, o.report(), t.ProgressEvery)
	defer p.Stop()
	err := f()
	if err != nil && ctx.Err() != nil {
		return p.Cancelled(ctx)
	}
	return err
}

// services are the Talos services that must run and be healthy on a node
// of the role before the next node is touched.
func services(r Role) []string {
	if r == ControlPlane {
		return []string{"apid", "etcd", "kubelet"}
	}
	return []string{"apid", "kubelet"}
}

// Gate is the check before a node is touched: for a control plane, etcd has
// every member healthy and keeps a quorum without the node's member; for a
// worker, etcd is healthy. The error names the member at fault. A cluster
// of one control plane cannot keep a quorum with it down: its control
// plane is checked for health only, and the Kubernetes API is down while
// it reboots (Talos itself allows that upgrade); two control planes can
// never lose one and are refused.
func (o Ops) Gate(ctx context.Context, n Node) error {
	down := ""
	if n.Role == ControlPlane {
		down = n.IP
		if len(o.ControlPlanes) == 1 {
			down = ""
			o.logf("%s is the only control plane: the Kubernetes API is down while it reboots", n)
		}
	}
	if err := talosapi.EtcdQuorumSafe(ctx, o.API, o.ControlPlanes, down, o.Leaving...); err != nil {
		return fmt.Errorf("unable to touch %s: %w", n, err)
	}
	return nil
}

// UpgradeTalos upgrades the node to the installer image, which installs
// Talos version, unless it runs that version already and force is false:
// behind the gate, it asks for the upgrade, waits for the reboot, for the
// version, for the services to be healthy and, for a control plane, for
// etcd to be healthy again. A node on the version is only checked to be
// healthy: the resumed rollout after a failure. Force reinstalls a node on
// the version (a new schematic: other extensions, same release).
func (o Ops) UpgradeTalos(ctx context.Context, n Node, image, version string, force bool) error {
	t := o.Timing.WithDefaults()
	running, err := o.API.Version(ctx, n.IP)
	if err != nil {
		return fmt.Errorf("unable to read the Talos version of %s: %w", n, err)
	}
	if running == version && !force {
		o.logf("%s already runs Talos %s", n, version)
		return o.healthy(ctx, n)
	}
	if err := o.Gate(ctx, n); err != nil {
		return err
	}
	booted, err := o.API.BootTime(ctx, n.IP)
	if err != nil {
		return fmt.Errorf("unable to read the boot time of %s: %w", n, err)
	}
	o.logf("upgrading %s from Talos %s to %s (%s)", n, running, version, image)
	// Talos pulls the image inside the call, before it answers: the pull
	// and the reboot share the bound of an upgrade.
	deadline := time.Now().Add(t.Reboot)
	err = o.call(ctx, t, fmt.Sprintf("%s to take the upgrade to %s (Talos pulls the image first)", n, image), func() error {
		return o.API.Upgrade(ctx, n.IP, image, talosapi.UpgradeOptions{Timeout: t.Reboot})
	})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("unable to upgrade %s to %s (it may have taken the upgrade: it then reboots into Talos %s on its own, and the next `pulumi up` resumes from there): %w", n, image, version, err)
	}
	if err != nil {
		return fmt.Errorf("unable to upgrade %s to %s: %w", n, image, err)
	}
	if err := o.upgraded(ctx, n, booted, version, deadline, t); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("unable to finish the upgrade of %s to Talos %s (it may finish rebooting on its own; the next `pulumi up` resumes from there): %w", n, version, err)
		}
		return err
	}
	o.logf("%s runs Talos %s", n, version)
	return nil
}

// upgraded waits until the node that took an upgrade is back (by
// deadline), on the version and healthy.
func (o Ops) upgraded(ctx context.Context, n Node, booted time.Time, version string, deadline time.Time, t Timing) error {
	left := max(time.Until(deadline), t.Poll)
	if left >= time.Second {
		left = left.Round(time.Second)
	}
	if _, err := talosapi.WaitRebooted(ctx, o.API, n.IP, booted, t.Poll, left, o.progress(t)); err != nil {
		return err
	}
	if err := talosapi.WaitVersion(ctx, o.API, n.IP, version, t.Poll, t.Healthy, o.progress(t)); err != nil {
		return err
	}
	return o.healthy(ctx, n)
}

// healthy waits until the node's services are healthy and, for a control
// plane, every etcd member is.
func (o Ops) healthy(ctx context.Context, n Node) error {
	t := o.Timing.WithDefaults()
	if err := talosapi.WaitHealthy(ctx, o.API, n.IP, services(n.Role), t.Poll, t.Healthy, o.progress(t)); err != nil {
		return err
	}
	if n.Role != ControlPlane {
		return nil
	}
	return o.waitEtcd(ctx, t)
}

// waitEtcd waits until every etcd member is healthy: a member that just
// came back needs a moment to find its leader.
func (o Ops) waitEtcd(ctx context.Context, t Timing) error {
	return o.poll(ctx, t, "every etcd member to be healthy", func() error {
		return talosapi.EtcdQuorumSafe(ctx, o.API, o.ControlPlanes, "", o.Leaving...)
	})
}

// BootTime reads when the node booted, for Settle. A node that does not
// answer gives the zero time: Settle then waits for it to come back.
func (o Ops) BootTime(ctx context.Context, n Node) time.Time {
	bt, err := o.API.BootTime(ctx, n.IP)
	if err != nil {
		return time.Time{}
	}
	return bt
}

// Settle waits after a config apply until the node is back and healthy:
// it watches for RebootStart whether the node reboots (its boot time moves
// past bootedBefore, or it stops answering) and then waits for the reboot
// to end; it then waits for the node's services and, for a control plane,
// for etcd. With a Kubernetes connector and a kubernetesVersion, it also
// waits for a control plane's API server, controller manager and scheduler
// to run that version, and for the node's Kubernetes Node to be Ready with
// its kubelet on it.
func (o Ops) Settle(ctx context.Context, n Node, bootedBefore time.Time, kubernetesVersion string) error {
	return o.SettleAfter(ctx, n, bootedBefore, kubernetesVersion, RebootUnknown)
}

// Reboot says whether a config apply makes the node reboot, as Talos
// answered a dry run of it before.
type Reboot int

// What a dry run said.
const (
	// RebootUnknown: no answer; Settle watches for a reboot for
	// RebootStart.
	RebootUnknown Reboot = iota
	// RebootNeeded: the node reboots for the change, maybe seconds after
	// the apply (Talos stops its pods and services first).
	RebootNeeded
	// RebootNotNeeded: the node takes the change without a reboot.
	RebootNotNeeded
)

// SettleAfter is Settle when the dry run said whether the apply reboots the
// node: for a reboot, it waits until the boot time moves past bootedBefore
// (bounded by Reboot, not by RebootStart: a reboot that starts late is
// still waited for); for none, it watches for none.
func (o Ops) SettleAfter(ctx context.Context, n Node, bootedBefore time.Time, kubernetesVersion string, reboot Reboot) error {
	state, err := o.settle(ctx, n, bootedBefore, kubernetesVersion, reboot)
	if err != nil && ctx.Err() != nil {
		// The node has its config: the next `up` sees no change for it,
		// and only the etcd gate of the next control plane checks it.
		return fmt.Errorf("unable to settle %s after its config apply (it has its config%s; the next `pulumi up` may not check it again: see that it is healthy first): %w", n, state, err)
	}
	return err
}

// settle is Settle; state says, for a cancelled run, what the node may be
// doing on its own.
func (o Ops) settle(ctx context.Context, n Node, bootedBefore time.Time, kubernetesVersion string, reboot Reboot) (state string, err error) {
	t := o.Timing.WithDefaults()
	rebooting := reboot == RebootNeeded
	if reboot == RebootUnknown {
		if rebooting, err = o.rebooting(ctx, n, bootedBefore, t); err != nil {
			return " and may still reboot for it", err
		}
	}
	if rebooting {
		o.logf("%s reboots for its new config", n)
		if _, err := talosapi.WaitRebooted(ctx, o.API, n.IP, bootedBefore, t.Poll, t.Reboot, o.progress(t)); err != nil {
			return " and may finish rebooting on its own", err
		}
	}
	return "", o.settled(ctx, n, kubernetesVersion, t)
}

// settled waits, once the node is back, for its services and etcd, and
// with a Kubernetes version, for its control plane and kubelet on it.
func (o Ops) settled(ctx context.Context, n Node, kubernetesVersion string, t Timing) error {
	if err := o.healthy(ctx, n); err != nil {
		return err
	}
	if kubernetesVersion == "" || o.Kube == nil {
		return nil
	}
	if n.Role == ControlPlane {
		if err := o.waitControlPlane(ctx, n, kubernetesVersion, t); err != nil {
			return err
		}
	}
	return o.waitKubelet(ctx, n, kubernetesVersion, t)
}

// waitKubelet waits until the node's Kubernetes Node is Ready with its
// kubelet on the version.
func (o Ops) waitKubelet(ctx context.Context, n Node, version string, t Timing) error {
	want := "v" + trimV(version)
	return o.poll(ctx, t, fmt.Sprintf("the kubelet of %s to be Ready on Kubernetes %s", n, want), func() error {
		kube, err := o.Kube(ctx, "")
		if err != nil {
			return err
		}
		nodes, err := kube.Nodes(ctx)
		if err != nil {
			return err
		}
		for _, k := range nodes {
			if k.InternalIP != n.IP {
				continue
			}
			switch {
			case !k.Ready:
				return fmt.Errorf("Node %s is not Ready", k.Name)
			case k.KubeletVersion != want:
				return fmt.Errorf("Node %s runs kubelet %s", k.Name, k.KubeletVersion)
			}
			return nil
		}
		return fmt.Errorf("no Kubernetes Node has the address %s", n.IP)
	})
}

// waitControlPlane waits until the control plane's own API server answers
// with the version, and its API server, controller manager and scheduler
// static pods run images of the version and are Ready.
func (o Ops) waitControlPlane(ctx context.Context, n Node, version string, t Timing) error {
	if err := o.waitAPIServer(ctx, n, version, t); err != nil {
		return err
	}
	want := ":v" + trimV(version)
	return o.poll(ctx, t, fmt.Sprintf("the control-plane pods of %s to run Kubernetes v%s", n, trimV(version)), func() error {
		kube, err := o.Kube(ctx, "")
		if err != nil {
			return err
		}
		name, err := nodeName(ctx, kube, n)
		if err != nil {
			return err
		}
		pods, err := kube.StaticPods(ctx, name)
		if err != nil {
			return err
		}
		for _, component := range ControlPlaneComponents {
			i := slices.IndexFunc(pods, func(p kubeapi.StaticPod) bool { return strings.HasPrefix(p.Name, component+"-") })
			if i < 0 {
				return fmt.Errorf("node %s has no %s pod", name, component)
			}
			p := pods[i]
			for _, img := range p.Images {
				if !strings.HasSuffix(img, want) {
					return fmt.Errorf("pod %s/%s runs %s", p.Namespace, p.Name, img)
				}
			}
			if !p.Ready {
				return fmt.Errorf("pod %s/%s is not Ready", p.Namespace, p.Name)
			}
		}
		return nil
	})
}

// poll retries check every Poll until it passes or Healthy runs out,
// reporting the last reason while it waits; the error names what was
// waited for and the last reason.
func (o Ops) poll(ctx context.Context, t Timing, what string, check func() error) error {
	p := talosapi.StartProgress(what, o.report(), t.ProgressEvery)
	defer p.Stop()
	deadline := time.Now().Add(t.Healthy)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			// The check was cut short by the cancellation: it says
			// nothing new.
			return fmt.Errorf("unable to wait for %s: %w", what, p.Cancelled(ctx))
		}
		p.Saw(err.Error())
		if time.Now().After(deadline) {
			return fmt.Errorf("unable to wait for %s: %w: %w", what, err, talosapi.ErrTimeout)
		}
		if sleep(ctx, t.Poll) != nil {
			return fmt.Errorf("unable to wait for %s: %w", what, p.Cancelled(ctx))
		}
	}
}

// rebooting watches the node for up to RebootStart: true once it stops
// answering or has booted since bootedBefore. Only a cancelled run is an
// error.
func (o Ops) rebooting(ctx context.Context, n Node, bootedBefore time.Time, t Timing) (bool, error) {
	what := fmt.Sprintf("%s to start a reboot for its new config", n)
	p := talosapi.StartProgress(what, o.report(), t.ProgressEvery)
	defer p.Stop()
	deadline := time.Now().Add(t.RebootStart)
	for {
		bt, err := o.API.BootTime(ctx, n.IP)
		switch {
		case ctx.Err() != nil:
			return false, fmt.Errorf("unable to wait for %s: %w", what, p.Cancelled(ctx))
		case errors.Is(err, talosapi.ErrUnreachable):
			return true, nil
		case err == nil && bt.After(bootedBefore):
			return true, nil
		case err == nil:
			p.Saw(fmt.Sprintf("it has not rebooted (booted at %s)", bt.UTC().Format(time.RFC3339)))
		default:
			p.Saw(err.Error())
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false, nil
		}
		// Not past the watch's end: a poll longer than the watch would
		// make every apply cost a poll.
		if sleep(ctx, min(t.Poll, left)) != nil {
			return false, fmt.Errorf("unable to wait for %s: %w", what, p.Cancelled(ctx))
		}
	}
}

// waitAPIServer waits until the control plane's own API server answers
// with the version.
func (o Ops) waitAPIServer(ctx context.Context, n Node, version string, t Timing) error {
	want := "v" + trimV(version)
	return o.poll(ctx, t, fmt.Sprintf("the API server of %s to run Kubernetes %s", n, want), func() error {
		kube, err := o.Kube(ctx, "https://"+n.IP+":6443")
		if err != nil {
			return err
		}
		got, err := kube.ServerVersion(ctx)
		if err == nil && got != want {
			err = fmt.Errorf("it answers %s", got)
		}
		return err
	})
}

// UpgradeControlPlane moves a control plane's API server, controller
// manager and scheduler to a new Kubernetes version: it applies config (the
// node's new machine config with its kubelet kept on the running version)
// without a reboot and waits until the node's own API server answers with
// version. An API server that answers with version already is left alone
// (a resumed upgrade). It needs the Kubernetes connector.
func (o Ops) UpgradeControlPlane(ctx context.Context, n Node, config []byte, version string) error {
	if o.Kube == nil {
		return fmt.Errorf("unable to upgrade the control plane of %s: no Kubernetes API", n)
	}
	t := o.Timing.WithDefaults()
	want := "v" + trimV(version)
	if kube, err := o.Kube(ctx, "https://"+n.IP+":6443"); err == nil {
		if got, err := kube.ServerVersion(ctx); err == nil && got == want {
			o.logf("the API server of %s runs Kubernetes %s already", n, want)
			return nil
		}
	}
	if err := o.Gate(ctx, n); err != nil {
		return err
	}
	o.logf("moving the control plane of %s to Kubernetes %s (its kubelet follows later)", n, want)
	if err := o.call(ctx, t, fmt.Sprintf("%s to take its new config", n), func() error {
		return o.API.ApplyConfiguration(ctx, n.IP, config)
	}); err != nil {
		return fmt.Errorf("unable to upgrade the control plane of %s: %w", n, err)
	}
	return o.waitControlPlane(ctx, n, version, t)
}

// Remove takes the node out of the cluster before its machine goes. A control
// plane's etcd member leaves, through another control plane if the node does
// not answer (refused unless the others are healthy and it is not the last).
// A worker is drained, without waiting for its pods if it does not answer: no
// kubelet would confirm them gone. Then its Node is deleted, for a control
// plane through another one's API server (the endpoint may be its own).
func (o Ops) Remove(ctx context.Context, n Node) error {
	t := o.Timing.WithDefaults()
	_, talosErr := o.API.Version(ctx, n.IP)
	if n.Role == ControlPlane {
		if err := o.leaveEtcd(ctx, n, talosErr == nil, t); err != nil {
			return err
		}
	}
	if o.Kube == nil {
		return nil
	}
	kube, k, err := o.clusterKube(ctx, n)
	if err != nil || k.Name == "" {
		return err
	}
	if n.Role == Worker {
		if err := o.drain(ctx, n, kube, k, talosErr, t); err != nil {
			return err
		}
	}
	if err := kube.DeleteNode(ctx, k.Name); err != nil {
		return fmt.Errorf("unable to delete the Kubernetes Node of %s: %w", n, err)
	}
	o.logf("deleted the Kubernetes Node %s of %s", k.Name, n)
	return nil
}

// drain drains the worker's Node k, without waiting for its pods when the
// node does not answer.
func (o Ops) drain(ctx context.Context, n Node, kube Kube, k kubeapi.Node, talosErr error, t Timing) error {
	var dead []string
	if errors.Is(talosErr, talosapi.ErrUnreachable) || errors.Is(talosErr, talosapi.ErrTimeout) {
		dead = append(dead, "its Talos API does not answer")
	}
	if !k.Ready {
		dead = append(dead, fmt.Sprintf("its Kubernetes Node %s is NotReady", k.Name))
	}
	o.logf("draining %s (Kubernetes Node %s)", n, k.Name)
	res, err := kube.DrainWithResult(ctx, k.Name, kubeapi.DrainOptions{
		Timeout: t.Drain, Poll: t.Poll, EvictRetry: t.EvictRetry, SkipWaitForDelete: len(dead) > 0,
		Progress: o.report(), ProgressEvery: t.ProgressEvery,
	})
	if err != nil {
		return fmt.Errorf("unable to drain %s: %w", n, err)
	}
	switch {
	case len(dead) == 0:
	case len(res.Skipped) == 0:
		o.logf("%s does not answer (%s): its pods are gone", n, strings.Join(dead, "; "))
	default:
		o.warnf("%s does not answer (%s): its kubelet cannot confirm that its pods end, so the drain did not wait for %d pod(s) to end: %s; they go with its Kubernetes Node, deleted now (the pod garbage collector deletes them)",
			n, strings.Join(dead, "; "), len(res.Skipped), strings.Join(res.Skipped, ", "))
	}
	return nil
}

// clusterKube returns the Kubernetes API to remove n through, and n's
// Node (by its InternalIP; no name when it has none). For a control plane
// it asks the other control planes' API servers first: the cluster's
// endpoint may be the node's own, which stops serving once its etcd member
// is gone, or never answers when the node is dead. For a worker, the
// endpoint first. The first that lists the Nodes is used.
func (o Ops) clusterKube(ctx context.Context, n Node) (Kube, kubeapi.Node, error) {
	var servers []string
	for _, ip := range o.ControlPlanes {
		if ip != n.IP {
			servers = append(servers, "https://"+ip+":6443")
		}
	}
	if n.Role == ControlPlane {
		servers = append(servers, "")
	} else {
		servers = append([]string{""}, servers...)
	}
	var errs []error
	for _, server := range servers {
		kube, err := o.Kube(ctx, server)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		nodes, err := kube.Nodes(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("unable to list the Kubernetes Nodes: %w", err))
			continue
		}
		for _, k := range nodes {
			if k.InternalIP == n.IP {
				return kube, k, nil
			}
		}
		return kube, kubeapi.Node{}, nil
	}
	return nil, kubeapi.Node{}, fmt.Errorf("unable to remove the Kubernetes Node of %s: %w", n, errors.Join(errs...))
}

// SetTaints makes the Kubernetes Node of n carry want and none of the
// keys of drop, as the cluster's admin: a worker's own credentials may not
// change its taints (the API server's NodeRestriction), so Talos sets
// them only on control planes. A node not registered yet is left to its
// kubelet, which registers it with the taints of its config.
func (o Ops) SetTaints(ctx context.Context, n Node, want []kubeapi.Taint, drop []string) error {
	if o.Kube == nil {
		return nil
	}
	kube, err := o.Kube(ctx, "")
	if err != nil {
		return fmt.Errorf("unable to set the taints of %s: %w", n, err)
	}
	name, err := nodeName(ctx, kube, n)
	if err != nil || name == "" {
		return err
	}
	if err := kube.SetTaints(ctx, name, want, drop); err != nil {
		return fmt.Errorf("unable to set the taints of %s: %w", n, err)
	}
	o.logf("%s: its Kubernetes Node %s carries the taints of its config", n, name)
	return nil
}

// nodeName finds the Kubernetes Node of n by its InternalIP (the node's
// hostname may come from DHCP); "" when it has none.
func nodeName(ctx context.Context, kube Kube, n Node) (string, error) {
	nodes, err := kube.Nodes(ctx)
	if err != nil {
		return "", fmt.Errorf("unable to list the Kubernetes Nodes: %w", err)
	}
	for _, k := range nodes {
		if k.InternalIP == n.IP {
			return k.Name, nil
		}
	}
	return "", nil
}

// leaveEtcd removes the node's etcd member: through the node when it
// answers, through another control plane when not.
func (o Ops) leaveEtcd(ctx context.Context, n Node, answers bool, t Timing) error {
	others := slices.DeleteFunc(slices.Clone(o.ControlPlanes), func(ip string) bool { return ip == n.IP })
	all := append(slices.Clone(others), n.IP)
	report, err := talosapi.EtcdHealth(ctx, o.API, all)
	if err != nil {
		return fmt.Errorf("unable to remove the etcd member of %s: %w", n, err)
	}
	if err := report.SafeToRemove(n.IP); errors.Is(err, talosapi.ErrMemberNotFound) {
		o.logf("%s has no etcd member: nothing to remove", n)
		return nil
	} else if err != nil {
		return fmt.Errorf("unable to remove the etcd member of %s: %w", n, err)
	}
	member, _ := report.Member(n.IP)
	if answers {
		o.logf("%s leaves etcd", n)
		// Talos retries a leave etcd calls unsafe for minutes.
		if err := o.call(ctx, t, fmt.Sprintf("%s to leave etcd", n), func() error {
			return o.API.EtcdLeaveCluster(ctx, n.IP)
		}); err != nil {
			return fmt.Errorf("unable to make %s leave etcd: %w", n, err)
		}
		return nil
	}
	// Through the healthy members first: others of a lost host may be dead
	// too, and each would cost a timeout.
	slices.SortStableFunc(others, func(a, b string) int {
		ma, _ := report.Member(a)
		mb, _ := report.Member(b)
		switch {
		case ma.Healthy == mb.Healthy:
			return 0
		case ma.Healthy:
			return -1
		default:
			return 1
		}
	})
	var last error
	for _, via := range others {
		o.logf("%s does not answer: removing its etcd member %016x through %s", n, member.ID, via)
		err := o.API.EtcdRemoveMemberByID(ctx, via, member.ID)
		if err == nil || errors.Is(err, talosapi.ErrMemberNotFound) {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("unable to remove the etcd member of %s (the run was cancelled): %w", n, err)
		}
		last = err
	}
	return fmt.Errorf("unable to remove the etcd member of %s through another control plane: %w", n, last)
}

func trimV(v string) string {
	if len(v) > 0 && v[0] == 'v' {
		return v[1:]
	}
	return v
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
