package talos

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/pulumi/pulumi-command/sdk/go/command/local"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/internal/kubeapi"
)

// KubeWaitHookSuffix names (after the cluster's name) the hook that runs
// the Kubernetes waits: before each wait resource is created, in the
// program's process, with the project's own Kubernetes client.
const KubeWaitHookSuffix = "-kube-wait"

// Bounds of the two waits. The API wait covers etcd's first start, the
// control-plane images' pull and the VIP's election after the bootstrap.
const (
	apiReadyTimeoutSecs   = 900
	nodesReadyTimeoutSecs = 600
	// apiStreak is how many /readyz answers of ok in a row the API wait
	// needs: a VIP that just moved can answer once and then not.
	apiStreak = 3
)

// kubeWait is one wait for the cluster's Kubernetes API.
type kubeWait struct {
	kubeconfig  pulumi.StringOutput
	waitFor     string // api or nodes
	timeoutSecs int
	env         pulumi.StringMap
	// triggers re-run the wait when they change; nothing else does.
	triggers pulumi.Array
}

// newKubeWait is a wait that runs once, when it is created: a command
// resource that runs no command (its create is empty), with a before-create
// hook that waits, so that a failed wait fails the create and the next
// `up` waits again. What the hook waits for is in the resource's
// environment (WAIT_FOR, WAIT_TIMEOUT, NODE_COUNT, KUBECONFIG_DATA), which
// is ignored in diffs: a renewed kubeconfig is no reason to wait again.
// Earlier versions ran a shell script with curl here; their stacks' waits
// drop it in one update that runs nothing.
func newKubeWait(ctx *pulumi.Context, deps Deps, cluster, resourceName string, w kubeWait, opts ...pulumi.ResourceOption) (*local.Command, error) {
	env := pulumi.StringMap{
		"KUBECONFIG_DATA": pulumi.ToSecret(w.kubeconfig).(pulumi.StringOutput),
		"WAIT_FOR":        pulumi.String(w.waitFor),
		"WAIT_TIMEOUT":    pulumi.String(strconv.Itoa(w.timeoutSecs)),
	}
	for k, v := range w.env {
		env[k] = v
	}
	hook, err := deps.Hooks.Bind(cluster+KubeWaitHookSuffix, BeforeCreate, resourceName, func(args *pulumi.ResourceHookArgs) error {
		return RunKubeWait(ctx, deps, args)
	})
	if err != nil {
		return nil, err
	}
	cmd, err := local.NewCommand(ctx, resourceName, &local.CommandArgs{
		Environment: env,
		Triggers:    w.triggers,
		Logging:     local.LoggingStdoutAndStderr,
	}, append(opts, hook, pulumi.IgnoreChanges([]string{"environment"}))...)
	if err != nil {
		return nil, fmt.Errorf("unable to create the %s wait: %w", w.waitFor, err)
	}
	return cmd, nil
}

// RunKubeWait is the hook of the Kubernetes waits: it waits for what the
// environment of the resource it runs for says (WAIT_FOR api or nodes,
// WAIT_TIMEOUT, NODE_COUNT, KUBECONFIG_DATA), reporting through deps.Log
// every deps.Timing.ProgressEvery, until deps.Context is cancelled.
func RunKubeWait(ctx *pulumi.Context, deps Deps, args *pulumi.ResourceHookArgs) error {
	env := HookEnv(args.NewInputs)
	log := deps.Log(ctx, args.URN)
	timing := deps.Timing.WithDefaults()
	var timeout time.Duration
	var err error
	switch env["WAIT_FOR"] {
	case "api":
		timeout, err = EnvSeconds(env, "WAIT_TIMEOUT", apiReadyTimeoutSecs*time.Second)
	case "nodes":
		timeout, err = EnvSeconds(env, "WAIT_TIMEOUT", nodesReadyTimeoutSecs*time.Second)
	case "pools":
		timeout, err = EnvSeconds(env, "WAIT_TIMEOUT", lbWaitTimeoutSecs*time.Second)
	default:
		err = fmt.Errorf("unable to wait: WAIT_FOR must be api, nodes or pools, not %q", env["WAIT_FOR"])
	}
	if err != nil {
		return err
	}
	client, err := kubeapi.New([]byte(env["KUBECONFIG_DATA"]))
	if err != nil {
		return fmt.Errorf("unable to ask the Kubernetes API: %w", err)
	}
	defer client.Close()
	wait := kubeapi.Wait{Interval: timing.Poll, Timeout: timeout, Report: log.Status, Every: timing.ProgressEvery}
	start := time.Now()
	if env["WAIT_FOR"] == "api" {
		log.Status(fmt.Sprintf("waiting up to %s for the Kubernetes API at %s to answer /readyz", timeout, client.Server()))
		if err := client.WaitReady(deps.Context, apiStreak, wait); err != nil {
			return kubeWaitFailed(err, "check that this machine reaches it (make doctor), that the VIP is up and etcd and kube-apiserver "+
				"run ('talosctl -n <first control plane IP> services' and 'talosctl -n <first control plane IP> dmesg')")
		}
		log.Info(fmt.Sprintf("the Kubernetes API at %s is ready after %s", client.Server(), time.Since(start).Round(time.Second)))
		return nil
	}
	if env["WAIT_FOR"] == "pools" {
		return guardPools(deps.Context, client, env["POOLS"], wait, log)
	}
	count, err := strconv.Atoi(env["NODE_COUNT"])
	if err != nil || count <= 0 {
		return fmt.Errorf("unable to wait for the nodes: NODE_COUNT %q is not a positive number", env["NODE_COUNT"])
	}
	log.Status(fmt.Sprintf("waiting up to %s for %d nodes to be Ready", timeout, count))
	if err := client.WaitNodesReady(deps.Context, count, wait); err != nil {
		return kubeWaitFailed(err, "look at 'kubectl get nodes' and 'kubectl -n kube-system get pods -l k8s-app=cilium' (make outputs writes the kubeconfig)")
	}
	log.Info(fmt.Sprintf("all %d nodes are Ready after %s", count, time.Since(start).Round(time.Second)))
	return nil
}

// kubeWaitFailed adds what to look at to a wait that timed out, and that
// the next `up` waits again; a cancelled wait only says so.
func kubeWaitFailed(err error, look string) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("%w; %s; then run 'pulumi up' again: it goes on waiting", err, look)
}
