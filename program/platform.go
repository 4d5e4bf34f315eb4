package program

import (
	"fmt"
	"regexp"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/docker"
	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/components/vps"
	"github.com/fluodata/talos-pulumi/program/overrides"
	"github.com/fluodata/talos-pulumi/stacks"
)

// platform is one platform of the stack file as the program drives it:
// its component's Args, built from the stack file once per run, and the
// component made from them. A new platform is one implementation and one
// entry in platforms.
type platform interface {
	// problems are the component's own problems with its Args. stack is
	// the stack's name ("" where unknown).
	problems(stack string) []inputs.Problem
	// talos are the Args the component hands to the TalosCluster (no
	// installer image: the Image Factory gives it at run time, and
	// nothing checked before the run reads it).
	talos() *talos.ClusterArgs
	// share hands the Args what the program gives every platform: the
	// stack's keys for the component's input paths, the etcd backup.
	share(inputName func(string) string, etcdBackup *talos.EtcdBackupSettings)
	// remember hands the Args the cluster as the last run left it.
	remember(last Last)
	// deploy registers the component and returns its outputs.
	deploy(ctx *pulumi.Context, cfg *stacks.Config, o Options) (pulumi.Map, error)
}

// ComponentType is the type token of the component the program makes for
// the platform p (`make adopt` imports under it), false for none.
func ComponentType(p stacks.Platform) (string, bool) {
	r, ok := platforms[p]
	return r.componentType, ok
}

// registration is one platform of the registry: its component's type
// token in the program, the platform built from a loaded stack file, and
// the component's inputs the program fills from stack keys of other names.
type registration struct {
	componentType string
	build         func(cfg *stacks.Config) platform
	keys          []overrides.Rename
}

// platforms are the stack file's platforms by their name there.
var platforms = map[stacks.Platform]registration{
	stacks.PlatformProxmox: {proxmox.ClusterType, func(cfg *stacks.Config) platform { return &proxmoxPlatform{args: ProxmoxArgs(cfg)} }, proxmoxKeys},
	stacks.PlatformVPS:     {vps.ClusterType, func(cfg *stacks.Config) platform { return &vpsPlatform{args: VPSArgs(cfg)} }, vpsKeys},
	stacks.PlatformLocal:   {docker.ClusterType, func(cfg *stacks.Config) platform { return &localPlatform{args: LocalArgs(cfg)} }, localKeys},
}

// StackKey is the stack key of an input path of cfg's platform component
// (overrides.StackPath with the platform's renames).
func StackKey(cfg *stacks.Config, path string) string {
	if key, ok := hostKey(path); ok {
		return key
	}
	// A rented server's own keys are a node's keys in the stack file.
	path = serverInputRe.ReplaceAllString(path, "$1")
	return overrides.StackPath(cfg.Nodes.Refs(), path, platforms[cfg.Platform].keys...)
}

// hostRenameRe matches the inputs of a hosts entry that ProxmoxArgs fills
// from keys of other names (as proxmoxKeys does for the proxmox input).
var hostRenameRe = regexp.MustCompile(`^(hosts\[\d+\]\.)(?:proxmox|vps)\.(gateway|prefixLength|dnsmasq\.ssh)(\b.*)?$`)

// serverInputRe matches the server input of a ProxmoxCluster's node,
// whose keys the stack file gives on the node itself.
var serverInputRe = regexp.MustCompile(`^(nodes\[\d+\])\.server\b`)

// hostKey is the stack key of a hosts entry's renamed input path.
func hostKey(path string) (string, bool) {
	m := hostRenameRe.FindStringSubmatch(path)
	if m == nil {
		return "", false
	}
	switch m[2] {
	case "dnsmasq.ssh":
		return m[1] + "proxmox.ssh" + m[3], true
	default:
		return m[1] + "network." + m[2] + m[3], true
	}
}

// platformOf is cfg's platform; noPlatform for one stacks.Load refuses.
func platformOf(cfg *stacks.Config) platform {
	if r, ok := platforms[cfg.Platform]; ok {
		return r.build(cfg)
	}
	return noPlatform{cfg: cfg}
}

// noPlatform stands for a platform stacks.Load refuses: its problems are
// Load's, and nothing is deployed.
type noPlatform struct{ cfg *stacks.Config }

func (noPlatform) problems(string) []inputs.Problem { return nil }

func (n noPlatform) talos() *talos.ClusterArgs {
	return &talos.ClusterArgs{Cluster: ClusterSettings(n.cfg)}
}

func (noPlatform) share(func(string) string, *talos.EtcdBackupSettings) {}

func (noPlatform) remember(Last) {}

func (n noPlatform) deploy(*pulumi.Context, *stacks.Config, Options) (pulumi.Map, error) {
	// Load refuses other platforms; reaching this is a bug.
	return nil, fmt.Errorf("unable to deploy platform %q: it has no component", n.cfg.Platform)
}
