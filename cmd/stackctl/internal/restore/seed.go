// Package restore brings a stack's cluster back from a backup (issue 26):
// the state it starts from (Seed), then the machines as `up` makes them,
// then etcd from the backup's snapshot instead of a fresh bootstrap, then
// the rest of `up` (Run).
package restore

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/adopt"
	"github.com/fluodata/talos-pulumi/components/talos"
)

// rootType is the type of a stack's root resource.
const rootType = "pulumi:pulumi:Stack"

// providerPrefix starts the type of every provider resource.
const providerPrefix = "pulumi:providers:"

// waitSuffixes name the program's waits: they stay in the seed, tainted, so
// that the next whole `up` runs them again. Left out, they broke the first `up`
// of every restore through the Kubernetes provider's dependency on them
// (docs/decisions/0004-upstream-behaviours.md#an-excluded-run-still-registers-every-provider).
var waitSuffixes = []string{talos.APIReadySuffix, talos.NodesReadySuffix}

// Seeded is the state a restore starts from.
type Seeded struct {
	// State is the deployment for `pulumi stack import`.
	State []byte
	// Bootstrap is the bootstrap's URN: the first `up` of a restore leaves
	// it and its dependents out (they need etcd).
	Bootstrap string
	// Kept are the URNs taken from the backup, in its order; Dropped counts
	// the backup's resources that the restore makes again.
	Kept    []string
	Dropped int
}

// resource is what Seed reads of a resource of a state export; the rest
// of it is written back as it was.
type resource struct {
	raw                  map[string]json.RawMessage
	URN                  string              `json:"urn"`
	Type                 string              `json:"type"`
	Custom               bool                `json:"custom"`
	Parent               string              `json:"parent"`
	Provider             string              `json:"provider"`
	Dependencies         []string            `json:"dependencies"`
	PropertyDependencies map[string][]string `json:"propertyDependencies"`
	DeletedWith          string              `json:"deletedWith"`
	ReplaceWith          []string            `json:"replaceWith"`
	ViewOf               string              `json:"viewOf"`
}

// references are the URNs a resource depends on: its dependencies, property
// dependencies and provider (the URN part of "urn::id").
func (r *resource) references() []string {
	refs := slices.Clone(r.Dependencies)
	for _, deps := range r.PropertyDependencies {
		refs = append(refs, deps...)
	}
	if r.Provider != "" {
		refs = append(refs, providerURN(r.Provider))
	}
	return refs
}

func providerURN(ref string) string {
	if i := strings.LastIndex(ref, "::"); i > 0 {
		return ref[:i]
	}
	return ref
}

// export is a `pulumi stack export` document split where Seed edits it.
type export struct {
	top        map[string]json.RawMessage
	deployment map[string]json.RawMessage
	resources  []*resource
}

func parseExport(data []byte, what string) (*export, error) {
	e := &export{}
	if err := json.Unmarshal(data, &e.top); err != nil {
		return nil, fmt.Errorf("unable to read %s: %w", what, err)
	}
	if err := adopt.CheckDeploymentVersion(e.top, what); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(e.top["deployment"], &e.deployment); err != nil {
		return nil, fmt.Errorf("unable to read %s: %w", what, err)
	}
	var raws []map[string]json.RawMessage
	if r, ok := e.deployment["resources"]; ok && string(r) != "null" {
		if err := json.Unmarshal(r, &raws); err != nil {
			return nil, fmt.Errorf("unable to read the resources of %s: %w", what, err)
		}
	}
	for _, raw := range raws {
		b, _ := json.Marshal(raw)
		r := &resource{raw: raw}
		if err := json.Unmarshal(b, r); err != nil {
			return nil, fmt.Errorf("unable to read the resources of %s: %w", what, err)
		}
		e.resources = append(e.resources, r)
	}
	return e, nil
}

func (e *export) ofType(t string) []*resource {
	var out []*resource
	for _, r := range e.resources {
		if r.Type == t {
			out = append(out, r)
		}
	}
	return out
}

// Started reports whether a stack's state (its export) holds a bootstrap:
// a restore that was interrupted after its state was seeded, or a live
// cluster. Its URN is returned.
func Started(current []byte) (string, error) {
	cur, err := parseExport(current, "the stack's state")
	if err != nil {
		return "", err
	}
	if b := cur.ofType(adopt.BootstrapType); len(b) > 0 {
		return b[0].URN, nil
	}
	return "", nil
}

// Seed returns the state a restore of stack starts from: the part of the
// backup's state export whose counterpart is in the etcd snapshot or nowhere
// else (the root stack without outputs, the components, the secrets the
// snapshot is encrypted with, the bootstrap and its dependents with the waits
// tainted, their providers). `up` makes the rest again. The stack must hold
// only providers and its root: a restore never overwrites a live state.
func Seed(current, backupState []byte, stack string) (Seeded, error) {
	cur, err := parseExport(current, "the stack's state")
	if err != nil {
		return Seeded{}, err
	}
	var live []string
	for _, r := range cur.resources {
		if r.Type != rootType && !strings.HasPrefix(r.Type, providerPrefix) {
			live = append(live, r.URN)
		}
	}
	if len(live) > 0 {
		return Seeded{}, fmt.Errorf("stack %s still has %d resources (%s, ...): a restore starts from a stack without a cluster; "+
			"run make destroy STACK=%s first (the backup holds the secrets the restore needs)", stack, len(live), live[0], stack)
	}
	b, err := parseExport(backupState, "the backup's state")
	if err != nil {
		return Seeded{}, err
	}
	boots, secrets := b.ofType(adopt.BootstrapType), b.ofType(adopt.SecretsType)
	if len(boots) != 1 || len(secrets) != 1 {
		return Seeded{}, fmt.Errorf("the backup's state has %d bootstraps and %d secrets, expected one of each: it was not taken of a cluster this program made", len(boots), len(secrets))
	}
	for _, r := range b.resources {
		if r.Type == rootType {
			if got := stackOf(r.URN); got != stack {
				return Seeded{}, fmt.Errorf("the backup's state is of stack %q: restore it into a stack of that name", got)
			}
		}
	}

	// The bootstrap and its dependents, in the state's order (dependencies
	// come first in it).
	needsEtcd := map[string]bool{boots[0].URN: true}
	for _, r := range b.resources {
		for _, ref := range r.references() {
			if needsEtcd[ref] {
				needsEtcd[r.URN] = true
			}
		}
	}
	keep := map[string]bool{secrets[0].URN: true}
	for _, r := range b.resources {
		switch {
		case r.Type == rootType, !r.Custom:
			keep[r.URN] = true
		case needsEtcd[r.URN]:
			keep[r.URN] = true
		}
	}
	// A resource replaced with one the seed drops is that one's (the ISO
	// eject of a VM): made again with it, so that it runs again for the
	// new instance. Kept, it would name a missing resource, and `pulumi
	// stack import` refuses such a file.
	for changed := true; changed; {
		changed = false
		for _, r := range b.resources {
			if keep[r.URN] && r.Type != rootType && slices.ContainsFunc(r.ReplaceWith, func(u string) bool { return !keep[u] }) {
				keep[r.URN], changed = false, true
			}
		}
	}
	for _, r := range b.resources {
		if keep[r.URN] && r.Provider != "" {
			keep[providerURN(r.Provider)] = true
		}
	}

	seed := Seeded{Bootstrap: boots[0].URN}
	var out []map[string]json.RawMessage
	for _, r := range b.resources {
		if !keep[r.URN] {
			seed.Dropped++
			continue
		}
		if r.Parent != "" && !keep[r.Parent] {
			return Seeded{}, fmt.Errorf("the backup's %s has a parent the restore makes again (%s)", r.URN, r.Parent)
		}
		if err := r.cut(keep); err != nil {
			return Seeded{}, err
		}
		if isWait(r.URN) {
			r.raw["taint"] = json.RawMessage("true")
		}
		seed.Kept = append(seed.Kept, r.URN)
		out = append(out, r.raw)
	}
	res, err := json.Marshal(out)
	if err != nil {
		return Seeded{}, err
	}
	b.deployment["resources"] = res
	// An operation the backup's state had in flight is not this one's.
	delete(b.deployment, "pending_operations")
	if b.top["deployment"], err = json.Marshal(b.deployment); err != nil {
		return Seeded{}, err
	}
	if seed.State, err = json.MarshalIndent(b.top, "", "  "); err != nil {
		return Seeded{}, err
	}
	return seed, nil
}

// cut drops the references to what is not kept (every URN-valued field of
// a resource's state: dependencies, property dependencies, deletedWith,
// replaceWith, viewOf; the parent and provider are kept with it), and the
// root's outputs.
func (r *resource) cut(keep map[string]bool) error {
	if r.Type == rootType {
		r.raw["outputs"] = json.RawMessage("{}")
	}
	deps := slices.DeleteFunc(slices.Clone(r.Dependencies), func(u string) bool { return !keep[u] })
	props := map[string][]string{}
	for k, us := range r.PropertyDependencies {
		props[k] = slices.DeleteFunc(slices.Clone(us), func(u string) bool { return !keep[u] })
	}
	var err error
	set := func(key string, v any, present bool) {
		if err != nil || !present {
			return
		}
		r.raw[key], err = json.Marshal(v)
	}
	set("dependencies", deps, r.Dependencies != nil)
	set("propertyDependencies", props, r.PropertyDependencies != nil)
	set("replaceWith", slices.DeleteFunc(slices.Clone(r.ReplaceWith), func(u string) bool { return !keep[u] }), r.ReplaceWith != nil)
	if r.DeletedWith != "" && !keep[r.DeletedWith] {
		delete(r.raw, "deletedWith")
	}
	if r.ViewOf != "" && !keep[r.ViewOf] {
		delete(r.raw, "viewOf")
	}
	return err
}

func isWait(urn string) bool {
	for _, s := range waitSuffixes {
		if strings.HasSuffix(urn, s) {
			return true
		}
	}
	return false
}

// stackOf is the stack part of a URN (urn:pulumi:<stack>::<project>::...).
func stackOf(urn string) string {
	s, _ := strings.CutPrefix(urn, "urn:pulumi:")
	stack, _, _ := strings.Cut(s, "::")
	return stack
}
