package program

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/stacks"
)

// ReadStackOutputsToken is the engine's built-in function that reads a
// stack's outputs: what a StackReference resource reads, without a resource.
const ReadStackOutputsToken = "pulumi:pulumi:readStackOutputs" //nolint:gosec // a function token, not a credential

// Names of the stack outputs the program adds to the cluster's: what the
// next run compares itself with.
const (
	ClusterNameOutput = "clusterName"
	PlatformOutput    = "platform"
)

// Last is the stack as the last `up` left it.
type Last struct {
	// Platform the stack ran on; empty when unknown.
	Platform stacks.Platform
	// Cluster is the cluster the refusals of TalosCluster compare with;
	// nil when unknown.
	Cluster *talos.Previous
	// VMs are a Proxmox cluster's VMs as the last run left them, by node
	// name (nil on other platforms, or when the state was unreadable).
	VMs map[string]proxmox.PreviousVM
	// CSIRegions are the Proxmox CSI plugin's regions as the last run gave
	// them, by API URL (nil without the plugin).
	CSIRegions map[string]string
	// LocalPorts are the host ports a local cluster's containers
	// published, by node and container port (nil on other platforms).
	LocalPorts map[string]map[int]int
}

// ReadPrevious reads the cluster as the last `up` left it from this stack's
// own outputs (see ReadLast); nil when unknown.
func ReadPrevious(ctx *pulumi.Context) (*talos.Previous, error) {
	last, err := ReadLast(ctx)
	return last.Cluster, err
}

// ReadLast reads the stack as the last `up` left it from the stack's own
// outputs, which the engine keeps until this run registers new ones; Cluster is
// nil when there are none. It calls readStackOutputs, not a StackReference, so
// that a failure is only a warning and a preview shows no read
// (docs/decisions/0001-day2-hooks.md#consequences).
func ReadLast(ctx *pulumi.Context) (Last, error) {
	name := fmt.Sprintf("%s/%s/%s", ctx.Organization(), ctx.Project(), ctx.Stack())
	outputs, err := readStack(ctx, ReadStackOutputsToken, &readStackOutputsArgs{Name: name},
		"unable to read the stack's last outputs (%v): "+talos.SkippedWithoutPrevious)
	if err != nil || outputs == nil {
		return Last{}, err
	}
	last := Last{Cluster: previousFrom(outputs)}
	if p, ok := outputs[PlatformOutput].(string); ok {
		last.Platform = stacks.Platform(p)
	}
	if last.Cluster == nil {
		return last, nil
	}
	resources, err := readStack(ctx, ReadStackResourcesToken, &readStackResourcesArgs{StackName: name},
		"unable to read the stack's last state (%v): nodes still leaving the cluster after a failed removal are not counted")
	if err != nil {
		return Last{}, err
	}
	addLeaving(last.Cluster, resources)
	addAddons(last.Cluster, resources)
	last.VMs = previousVMs(resources)
	last.CSIRegions = previousCSIRegions(resources)
	last.LocalPorts = previousLocalPorts(resources)
	return last, nil
}

// readStack calls an engine function that reads a stack and returns its
// outputs, or nil and the warning unreadable (its %v the error). The outputs
// hold secrets, so it invokes raw and the callers keep only plain facts
// (docs/decisions/0004-upstream-behaviours.md#invoke-results-that-hold-secrets).
func readStack(ctx *pulumi.Context, token string, args any, unreadable string) (map[string]any, error) {
	var res struct {
		Outputs map[string]any `pulumi:"outputs"`
	}
	if _, err := ctx.InvokePackageRaw(token, args, &res, ""); err != nil {
		if werr := ctx.Log.Warn(fmt.Sprintf(unreadable, err), nil); werr != nil {
			return nil, fmt.Errorf("unable to log a warning: %w", werr)
		}
		return nil, nil
	}
	if res.Outputs == nil {
		res.Outputs = map[string]any{}
	}
	return res.Outputs, nil
}

// checkPlatform refuses a move of a running cluster to another platform:
// every resource would be replaced, the machine secrets among them.
func checkPlatform(last Last, platform stacks.Platform) error {
	if last.Platform == "" || last.Platform == platform {
		return nil
	}
	return fmt.Errorf("invalid stack configuration (1 problem; nothing was created):\n  - platform: %q moves the running cluster from %q: every resource, the machine secrets and their CA included, would be replaced; a cluster on another platform is a new stack (`make init STACK=...`)",
		platform, last.Platform)
}

// ReadStackResourcesToken is the engine's built-in function that reads the
// outputs of every resource of a stack's last state, by URN.
const ReadStackResourcesToken = "pulumi:pulumi:readStackResourceOutputs" //nolint:gosec // a function token, not a credential

// readStackResourcesArgs are the arguments of ReadStackResourcesToken.
type readStackResourcesArgs struct {
	StackName string `pulumi:"stackName"`
}

// memberType is the type of a node's membership (talos.MemberSuffix).
const memberType = "command:local:Command"

// addLeaving adds to prev the nodes whose membership is still in the
// stack's state though the last outputs lost them: a removal that failed
// (the engine writes the new outputs even when a delete fails). They are
// still in etcd or Kubernetes: a control plane among them counts against
// the one removal per `up`, and its etcd member against the gates.
func addLeaving(prev *talos.Previous, resources map[string]any) {
	for urn, r := range resources {
		m, _ := r.(map[string]any)
		if m["type"] != memberType || !strings.Contains(urn, talos.MemberSuffix) {
			continue
		}
		outputs, _ := m["outputs"].(map[string]any)
		env, _ := outputs["environment"].(map[string]any)
		name, _ := env["NODE_NAME"].(string)
		ip, _ := env["NODE_IP"].(string)
		role, _ := env["NODE_ROLE"].(string)
		if name == "" || ip == "" || !strings.HasSuffix(urn, talos.MemberSuffix+name) {
			continue
		}
		if _, known := prev.Roles[name]; known {
			continue
		}
		prev.Roles[name] = talos.Role(role)
		if role == string(talos.RoleControlPlane) {
			prev.ControlPlanes = append(prev.ControlPlanes, name)
			prev.ControlPlaneIPs = append(prev.ControlPlaneIPs, ip)
		}
	}
	slices.Sort(prev.ControlPlanes)
	slices.Sort(prev.ControlPlaneIPs)
}

// readStackOutputsArgs are the arguments of ReadStackOutputsToken.
type readStackOutputsArgs struct {
	Name string `pulumi:"name"`
}

// PreviousFromOutputs is the cluster as a stack's outputs (their plain
// values) describe it: its name, versions and control planes; nil for
// outputs without the nodes map (no up yet). stackctl backup reads it.
func PreviousFromOutputs(outputs map[string]any) *talos.Previous { return previousFrom(outputs) }

// previousFrom reads the previous cluster from the stack's outputs: the
// kubernetesVersion the API servers ran and the control planes of the
// nodes map. Outputs without the nodes map give nil.
func previousFrom(outputs map[string]any) *talos.Previous {
	nodes, ok := outputs["nodes"].(map[string]any)
	if !ok {
		return nil
	}
	prev := &talos.Previous{ControlPlanes: []string{}, Roles: map[string]talos.Role{}}
	if v, ok := outputs[ClusterNameOutput].(string); ok {
		prev.ClusterName = v
	}
	if v, ok := outputs["talosVersion"].(string); ok && v != talos.Unknown {
		prev.TalosVersion = v
	}
	if v, ok := outputs["kubernetesVersion"].(string); ok && v != talos.Unknown {
		prev.KubernetesVersion = v
	}
	for name, n := range nodes {
		m, _ := n.(map[string]any)
		if role, ok := m["role"].(string); ok && (role == string(talos.RoleControlPlane) || role == string(talos.RoleWorker)) {
			prev.Roles[name] = talos.Role(role)
		}
		if machine, ok := m["machine"].(string); ok && machine != "" {
			if prev.Machines == nil {
				prev.Machines = map[string]string{}
			}
			prev.Machines[name] = machine
		}
		if size, err := strconv.Atoi(fmt.Sprint(m[talos.DataDiskSizeOutput])); err == nil && size > 0 {
			if prev.DataDisks == nil {
				prev.DataDisks = map[string]int{}
			}
			prev.DataDisks[name] = size
		}
		for _, key := range []string{talos.TalosVersionOutput, talos.KubeletVersionOutput} {
			if v, ok := m[key].(string); ok && v != "" && v != talos.Unknown {
				if prev.Reported == nil {
					prev.Reported = map[string]map[string]string{}
				}
				if prev.Reported[name] == nil {
					prev.Reported[name] = map[string]string{}
				}
				prev.Reported[name][key] = v
			}
		}
		if m["role"] == string(talos.RoleControlPlane) {
			prev.ControlPlanes = append(prev.ControlPlanes, name)
			if ip, ok := m["ip"].(string); ok && ip != "" {
				prev.ControlPlaneIPs = append(prev.ControlPlaneIPs, ip)
			}
		}
	}
	// Map order is random: sorted, the messages that list them are stable.
	slices.Sort(prev.ControlPlanes)
	slices.Sort(prev.ControlPlaneIPs)
	return prev
}

// Types of the in-cluster resources addAddons looks for.
const (
	releaseType = "kubernetes:helm.sh/v3:Release"
	lbPoolType  = "kubernetes:" + talos.LBPoolAPIVersion + ":" + talos.LBPoolKind
)

// addAddons adds to prev the load balancer pools and the GitOps hand-off
// the last run made, from its state: a stack file that drops them gets its
// pools' removal guarded and the hand-off's removal said.
func addAddons(prev *talos.Previous, resources map[string]any) {
	for _, r := range resources {
		m, _ := r.(map[string]any)
		out, _ := m["outputs"].(map[string]any)
		switch m["type"] {
		case releaseType:
			if out["name"] == talos.ArgoCDRelease && out["namespace"] == talos.ArgoCDNamespace {
				prev.GitOps = true
			}
		case lbPoolType:
			meta, _ := out["metadata"].(map[string]any)
			if name, ok := meta["name"].(string); ok {
				prev.LoadBalancerPools = append(prev.LoadBalancerPools, name)
			}
		}
	}
	slices.Sort(prev.LoadBalancerPools)
}

// previousVMs reads the VMs of the last run from the state's resources, by
// node name.
func previousVMs(resources map[string]any) map[string]proxmox.PreviousVM {
	var vms map[string]proxmox.PreviousVM
	for _, r := range resources {
		m, _ := r.(map[string]any)
		if m["type"] != proxmox.VMType {
			continue
		}
		out, _ := m["outputs"].(map[string]any)
		name, vm, ok := proxmox.PreviousVMFrom(out)
		if !ok {
			continue
		}
		if vms == nil {
			vms = map[string]proxmox.PreviousVM{}
		}
		vms[name] = vm
	}
	return vms
}

// previousCSIRegions reads the Proxmox CSI plugin's clusters of the last
// run (its release's values, config.clusters) from the state: each API's
// region, by its URL.
func previousCSIRegions(resources map[string]any) map[string]string {
	var regions map[string]string
	for _, r := range resources {
		m, _ := r.(map[string]any)
		out, _ := m["outputs"].(map[string]any)
		if m["type"] != releaseType || out["namespace"] != proxmox.CSINamespace {
			continue
		}
		values, _ := out["values"].(map[string]any)
		config, _ := values["config"].(map[string]any)
		clusters, _ := config["clusters"].([]any)
		for _, c := range clusters {
			cluster, _ := c.(map[string]any)
			url, _ := cluster["url"].(string)
			region, _ := cluster["region"].(string)
			if url == "" || region == "" {
				continue
			}
			if regions == nil {
				regions = map[string]string{}
			}
			regions[url] = region
		}
	}
	return regions
}
