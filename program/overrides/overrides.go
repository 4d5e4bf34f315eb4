// Package overrides names the findings of the TalosCluster's overrides
// guard (talos.ClusterArgs.CheckOverrides: the user's patches and Helm
// values against the settings the cluster relies on) by the stack file's
// keys. The rules are the component's, so that every language gets them;
// this package only translates its input paths (nodes[2].patches[0]) to
// the stack's (nodes.workers[1].patches[0]).
package overrides

import (
	"iter"
	"strconv"
	"strings"

	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/stacks"
)

// CheckOverrides runs the guard on args, the TalosCluster arguments the
// platform builds from cfg (a valid stack config: stacks.Load without
// errors), with the nodes' network of the stack, and names every finding by
// its stack key. It registers nothing, so the program runs it first.
func CheckOverrides(cfg *stacks.Config, args *talos.ClusterArgs) *stacks.Diagnostics {
	network, _ := cfg.NodeNetwork()
	o := args.CheckOverrides(network)
	refs := cfg.Nodes.Refs()
	d := &stacks.Diagnostics{}
	for _, p := range o.Errors {
		d.Errors = append(d.Errors, stackProblem(refs, p))
	}
	for _, p := range o.Warnings {
		d.Warnings = append(d.Warnings, stackProblem(refs, p))
	}
	return d
}

func stackProblem(refs []stacks.NodeRef, p inputs.Problem) stacks.Problem {
	return stacks.Problem{Path: StackPath(refs, p.Path), Message: p.Message}
}

// Rename is a component input the program fills from a stack key of
// another name: the input path (or the start of it) and the key.
type Rename struct{ Input, Key string }

// StackPath is the stack key of a component's input path: nodes[i] is the
// i-th of refs (control planes first, as the platforms build the
// components' nodes); the inputs the program moves (renamed, and the
// platform's own renames) are named by the keys they come from; the others
// are the stack's own keys.
func StackPath(refs []stacks.NodeRef, path string, platform ...Rename) string {
	for r := range chain(platform, renamed) {
		if rest, ok := strings.CutPrefix(path, r.Input); ok && (rest == "" || rest[0] == '.' || rest[0] == '[') {
			return r.Key + rest
		}
	}
	rest, ok := strings.CutPrefix(path, "nodes[")
	if !ok {
		return path
	}
	end := strings.IndexByte(rest, ']')
	if end < 0 {
		return path
	}
	i, err := strconv.Atoi(rest[:end])
	if err != nil || i < 0 || i >= len(refs) {
		return path
	}
	return refs[i].Path + rest[end+1:]
}

// chain yields the renames of each list in turn.
func chain(lists ...[]Rename) iter.Seq[Rename] {
	return func(yield func(Rename) bool) {
		for _, l := range lists {
			for _, r := range l {
				if !yield(r) {
					return
				}
			}
		}
	}
}

// renamed are the inputs every platform's component takes that the
// program fills from stack keys of other names (program.ClusterSettings).
var renamed = []Rename{
	{"cluster.nameservers", "cluster.network.nameservers"},
	{"cluster.gitops", "gitops"},
	{"cluster.etcdBackup.schedule", "backup.schedule"},
	{"cluster.etcdBackup.recipient", "backup.recipients[0]"},
	{"cluster.etcdBackup.accessKeyId", "backup.s3"},
	{"cluster.etcdBackup.caBundle", "backup.s3.caFile"},
	{"cluster.etcdBackup.bucket", "backup.target"},
	{"cluster.etcdBackup.prefix", "backup.target"},
	{"cluster.etcdBackup.endpoint", "backup.target"},
}
