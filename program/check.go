package program

import (
	"regexp"
	"slices"
	"strings"

	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/stacks"
)

// delegated are the stack keys whose rules are the platform component's (tag
// rules:"component" in stacks/types.go, issue 25); the component's problems
// there are named by these keys. stacks.Load checks the other keys with the
// components' own functions, where the file needs them valid for its own
// defaults or features (the Proxmox endpoint is the SSH host's default).
var delegated = stacks.ComponentKeys()

// isDelegated reports whether the stack key is, or is under, a delegated
// key (vps.allowedCidrs[1] is).
func isDelegated(key string) bool {
	if node, ok := nodeKey(key); ok {
		key = node
	}
	return slices.ContainsFunc(delegated, func(d string) bool {
		rest, ok := strings.CutPrefix(key, d)
		return ok && (rest == "" || rest[0] == '[' || rest[0] == '.')
	})
}

// componentProblems names the problems the platform's component finds in
// its Args (found: its own rules, which every language of the package
// gets) by the stack's keys (overrides.StackPath), before anything is
// registered. When stacks.Load found errors (stackErrors), cfg is not
// resolved and its Args may carry what Load refused, which the component
// would report again under another key: only the problems at delegated
// keys are kept, and none at a key Load already refused (a value of the
// wrong type, a special address), so every problem is still reported at
// once and only once.
func componentProblems(cfg *stacks.Config, found []inputs.Problem, stackErrors []stacks.Problem) []stacks.Problem {
	var out []stacks.Problem
	for _, p := range found {
		key := StackKey(cfg, p.Path)
		if len(stackErrors) > 0 && !isDelegated(key) || slices.ContainsFunc(stackErrors, func(e stacks.Problem) bool { return e.Path == key }) {
			continue
		}
		out = append(out, stacks.Problem{Path: key, Message: nodeRef.ReplaceAllStringFunc(p.Message, func(ref string) string {
			return StackKey(cfg, ref) // another node the message names
		})})
	}
	return out
}

// nodeRef is a node as a component's message names it (nodes[0]).
var nodeRef = regexp.MustCompile(`\bnodes\[\d+\]`)

// nodeKey is a node's key as delegated names it: nodes.workers[1].cores is
// nodes[].cores.
func nodeKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, "nodes.")
	if !ok {
		return "", false
	}
	i := strings.Index(rest, "].")
	if i < 0 || !strings.Contains(rest[:i], "[") {
		return "", false
	}
	return "nodes[]" + rest[i+1:], true
}
