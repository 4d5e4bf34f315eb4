package talos

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// ReadStackResourcesToken is the engine's built-in function that reads the
// outputs of every resource of a stack's last state, by URN, each as
// {type, outputs} (pulumi v3.259.0 pkg/backend/backend.go
// GetStackResourceOutputs; components' registered outputs included).
const ReadStackResourcesToken = "pulumi:pulumi:readStackResourceOutputs" //nolint:gosec // a function token, not a credential

// ClusterNameOutput is the stack output, and a cluster component's output
// where it has one, that names the cluster the last run made.
const ClusterNameOutput = "clusterName"

// readStackResourcesArgs are the arguments of ReadStackResourcesToken.
type readStackResourcesArgs struct {
	StackName string `pulumi:"stackName"`
}

// ReadStack calls an engine function that reads a stack (token, args) and
// returns its outputs, or nil and a warning logged with unreadable (its %v
// the error). The outputs hold secrets, so it invokes raw and the callers
// keep only plain facts
// (docs/decisions/0004-upstream-behaviours.md#invoke-results-that-hold-secrets).
func ReadStack(ctx *pulumi.Context, token string, args any, unreadable string) (map[string]any, error) {
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

// ReadStackResources reads this run's own stack's last state
// (ReadStackResourcesToken; see ReadStack).
func ReadStackResources(ctx *pulumi.Context, unreadable string) (map[string]any, error) {
	name := fmt.Sprintf("%s/%s/%s", ctx.Organization(), ctx.Project(), ctx.Stack())
	return ReadStack(ctx, ReadStackResourcesToken, &readStackResourcesArgs{StackName: name}, unreadable)
}

// OwnArgs returns in, or a copy of it whose Previous (previous points at
// it) is the component's own last state when the caller gave none
// (Deps.OwnPrevious); children are the component's children in that state
// (nil unless read).
func OwnArgs[A any](ctx *pulumi.Context, d Deps, kind, name string, in *A, previous func(*A) **Previous) (args *A, children map[string]any, err error) {
	if in == nil {
		return nil, nil, nil
	}
	given := *previous(in)
	prev, children, err := d.OwnPrevious(ctx, kind, name, given)
	if err != nil || prev == given {
		return in, children, err
	}
	own := *in
	*previous(&own) = prev
	return &own, children, nil
}

// ReadOwnPrevious is the cluster as the last `up` left it, read by a
// cluster component from its own entry in the stack's last state (kind is
// its type's name, "ProxmoxCluster", name its resource name) and its
// children's: what a program that uses the component gets refused by, as
// the stack-file program is by its own outputs. Nil when the component is
// not in the state yet, has no nodes output (an earlier version), or is
// not the only one of its kind and name.
func ReadOwnPrevious(ctx *pulumi.Context, kind, name string) (*Previous, map[string]any, error) {
	resources, err := ReadStackResources(ctx, "unable to read the stack's last state (%v): "+SkippedWithoutPrevious)
	if err != nil || resources == nil {
		return nil, nil, err
	}
	var own []string
	for u := range resources {
		urn := resource.URN(u)
		if urn.IsValid() && urn.Name() == name && strings.HasSuffix(string(urn.Type()), ":index:"+kind) {
			own = append(own, u)
		}
	}
	switch len(own) {
	case 0:
		return nil, nil, nil
	case 1:
	default:
		slices.Sort(own)
		if err := ctx.Log.Warn(fmt.Sprintf("%s %q: the stack's last state has %d components of this kind and name (%s): %s",
			kind, name, len(own), strings.Join(own, ", "), SkippedWithoutPrevious), nil); err != nil {
			return nil, nil, fmt.Errorf("unable to log a warning: %w", err)
		}
		return nil, nil, nil
	}
	entry, _ := resources[own[0]].(map[string]any)
	outputs, _ := entry["outputs"].(map[string]any)
	prev := PreviousFromOutputs(outputs)
	if prev == nil {
		return nil, nil, nil
	}
	// Its children: their URNs' type chains go through the component's.
	chain := string(resource.URN(own[0]).QualifiedType()) + "$"
	children := map[string]any{}
	for u, r := range resources {
		if urn := resource.URN(u); urn.IsValid() && strings.HasPrefix(string(urn.QualifiedType()), chain) {
			children[u] = r
		}
	}
	prev.AddLeaving(children, name)
	prev.AddAddons(children)
	return prev, children, nil
}

// OwnPrevious is given, or, unless the caller read the last state itself
// (LastRead), the cluster as the component of kind and name left it in the
// stack's last state (ReadOwnPrevious): a component refuses what the
// stack file refuses whichever program uses it.
// Its children's last outputs come with it, for what a platform reads
// from them (nil when given or read by the caller).
func (d Deps) OwnPrevious(ctx *pulumi.Context, kind, name string, given *Previous) (*Previous, map[string]any, error) {
	if given != nil || d.LastRead {
		return given, nil, nil
	}
	return ReadOwnPrevious(ctx, kind, name)
}

// PreviousFromOutputs is the cluster as a stack's or a cluster component's
// outputs (their plain values) describe it: its name, versions, nodes and
// control planes; nil for outputs without the nodes map (no up yet, or an
// earlier version's).
func PreviousFromOutputs(outputs map[string]any) *Previous {
	nodes, ok := outputs["nodes"].(map[string]any)
	if !ok {
		return nil
	}
	prev := &Previous{ControlPlanes: []string{}, Roles: map[string]Role{}}
	if v, ok := outputs[ClusterNameOutput].(string); ok {
		prev.ClusterName = v
	}
	if v, ok := outputs["talosVersion"].(string); ok && v != Unknown {
		prev.TalosVersion = v
	}
	if v, ok := outputs["kubernetesVersion"].(string); ok && v != Unknown {
		prev.KubernetesVersion = v
	}
	for name, n := range nodes {
		m, _ := n.(map[string]any)
		if role, ok := m["role"].(string); ok && (role == string(RoleControlPlane) || role == string(RoleWorker)) {
			prev.Roles[name] = Role(role)
		}
		if machine, ok := m["machine"].(string); ok && machine != "" {
			if prev.Machines == nil {
				prev.Machines = map[string]string{}
			}
			prev.Machines[name] = machine
		}
		if size, err := strconv.Atoi(fmt.Sprint(m[DataDiskSizeOutput])); err == nil && size > 0 {
			if prev.DataDisks == nil {
				prev.DataDisks = map[string]int{}
			}
			prev.DataDisks[name] = size
		}
		for _, key := range []string{TalosVersionOutput, KubeletVersionOutput} {
			if v, ok := m[key].(string); ok && v != "" && v != Unknown {
				if prev.Reported == nil {
					prev.Reported = map[string]map[string]string{}
				}
				if prev.Reported[name] == nil {
					prev.Reported[name] = map[string]string{}
				}
				prev.Reported[name][key] = v
			}
		}
		if m["role"] == string(RoleControlPlane) {
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

// memberType is the type of a node's membership (MemberSuffix).
const memberType = "command:local:Command"

// AddLeaving adds the nodes whose membership is still in the stack's state
// though the last outputs lost them: a removal that failed (the engine
// writes the new outputs even when a delete fails). They are still in etcd
// or Kubernetes: a control plane among them counts against the one removal
// per `up`, and its etcd member against the gates. cluster is the
// TalosCluster's resource name ("" for any).
func (p *Previous) AddLeaving(resources map[string]any, cluster string) {
	for urn, r := range resources {
		m, _ := r.(map[string]any)
		if m["type"] != memberType || !strings.Contains(urn, cluster+MemberSuffix) {
			continue
		}
		outputs, _ := m["outputs"].(map[string]any)
		env, _ := outputs["environment"].(map[string]any)
		name, _ := env["NODE_NAME"].(string)
		ip, _ := env["NODE_IP"].(string)
		role, _ := env["NODE_ROLE"].(string)
		if name == "" || ip == "" || !strings.HasSuffix(urn, MemberSuffix+name) {
			continue
		}
		if p.Encryption == nil {
			p.Encryption = map[string]Encryption{}
		}
		enc, _ := env[encryptionEnv].(string)
		p.Encryption[name] = Encryption(enc)
		if _, known := p.Roles[name]; known {
			continue
		}
		p.Roles[name] = Role(role)
		if role == string(RoleControlPlane) {
			p.ControlPlanes = append(p.ControlPlanes, name)
			p.ControlPlaneIPs = append(p.ControlPlaneIPs, ip)
		}
	}
	slices.Sort(p.ControlPlanes)
	slices.Sort(p.ControlPlaneIPs)
}

// Types of the in-cluster resources AddAddons looks for.
const (
	HelmReleaseType = "kubernetes:helm.sh/v3:Release"
	LBPoolType      = "kubernetes:" + LBPoolAPIVersion + ":" + LBPoolKind
)

// AddAddons adds the load balancer pools and the GitOps hand-off the last
// run made, from its state: a change that drops them gets its pools'
// removal guarded and the hand-off's removal said.
func (p *Previous) AddAddons(resources map[string]any) {
	for _, r := range resources {
		m, _ := r.(map[string]any)
		out, _ := m["outputs"].(map[string]any)
		switch m["type"] {
		case HelmReleaseType:
			if out["name"] == ArgoCDRelease && out["namespace"] == ArgoCDNamespace {
				p.GitOps = true
			}
		case LBPoolType:
			meta, _ := out["metadata"].(map[string]any)
			if name, ok := meta["name"].(string); ok {
				p.LoadBalancerPools = append(p.LoadBalancerPools, name)
			}
		}
	}
	slices.Sort(p.LoadBalancerPools)
}
