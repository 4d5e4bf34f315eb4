// Package talosversion answers, from Talos's own compatibility data (the
// pinned machinery's compatibility package), which Kubernetes versions a
// Talos release runs, which one it runs by default, and which Talos
// upgrades it makes in one step. The stack's validation and TalosCluster's
// checks both ask it, so that a stack and the component refuse the same
// pairs with the same words.
//
// A release the data does not know (newer than the pinned machinery, or a
// version this package cannot read) is refused nothing here: the format
// checks and the stack's warning about releases newer than the machinery
// speak for it, and its default stays the machinery's.
package talosversion

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/version"
)

// releaseDefaults is the Kubernetes version each Talos minor before the pinned
// machinery's runs by default (constants.DefaultKubernetesVersion at its vX.Y.0
// tag). A row never changes once written, so that a machinery bump never moves
// the Kubernetes of a stack that leaves kubernetesVersion empty
// (docs/decisions/0004-upstream-behaviours.md#the-kubernetes-version-of-each-talos-minor).
var releaseDefaults = map[[2]int]string{
	{1, 2}:  "1.25.0",
	{1, 3}:  "1.26.0",
	{1, 4}:  "1.27.1",
	{1, 5}:  "1.28.0",
	{1, 6}:  "1.29.0",
	{1, 7}:  "1.30.0",
	{1, 8}:  "1.31.1",
	{1, 9}:  "1.32.0",
	{1, 10}: "1.33.0",
	{1, 11}: "1.34.0",
	{1, 12}: "1.35.0",
}

// OldestMinor is the oldest Talos release line (v1.OldestMinor) this
// project supports: the configs it writes are multi-document (v1.8+) and
// the VPS ingress firewall is a v1.8 document. Talos's compatibility data
// knows it (a test checks), so its Kubernetes range and upgrade steps are
// checked like any other release's.
const OldestMinor = 8

// CheckSupported returns why this project does not install Talos release
// talos (one older than v1.OldestMinor), or nil; a version it cannot read
// is the format check's to report.
func CheckSupported(talos string) error {
	v, ok := parse(talos)
	if !ok || v[0] == 1 && v[1] >= OldestMinor {
		return nil
	}
	return fmt.Errorf("%q is not supported; use v1.%d or newer", talos, OldestMinor)
}

// Pinned is the major and minor of the pinned machinery's Talos release:
// the newest release whose configs this build validates and whose
// compatibility data it has.
func Pinned() (major, minor int) { return pinned[0], pinned[1] }

// pinned is the major and minor of the pinned machinery's own Talos
// release, whose default is constants.DefaultKubernetesVersion (zero if its
// tag were unreadable: the table alone would then answer; a test reads it).
var pinned = func() [2]int {
	v, _ := parse(strings.TrimSpace(version.Tag))
	return [2]int{v[0], v[1]}
}()

// DefaultKubernetes is the Kubernetes version an empty kubernetesVersion
// means with Talos release talos (e.g. "v1.9.6" gives "1.32.0"): that
// release's default. A release the data does not know gets the pinned
// machinery's default, the best this build knows.
func DefaultKubernetes(talos string) string {
	v, ok := parse(talos)
	if !ok {
		return constants.DefaultKubernetesVersion
	}
	mm := [2]int{v[0], v[1]}
	if d, ok := releaseDefaults[mm]; ok && mm != pinned {
		return d
	}
	return constants.DefaultKubernetesVersion
}

// CheckKubernetes returns why Talos release talos does not run Kubernetes
// version kube, naming the range it runs, or nil when it does (or when
// either version cannot be read, or the data does not know the release).
func CheckKubernetes(talos, kube string) error {
	tv, ok := known(talos)
	if !ok {
		return nil
	}
	if _, ok := parse(kube); !ok {
		return nil
	}
	if kv, err := compatibility.ParseKubernetesVersion(kube); err == nil && kv.SupportedWith(tv) != nil {
		lo, hi, _ := kubernetesMinors(tv)
		return fmt.Errorf("%s is not supported by Talos %s, which runs Kubernetes 1.%d to 1.%d (its default: %s)",
			kube, talos, lo, hi, DefaultKubernetes(talos))
	}
	return nil
}

// CheckUpgrade returns why the nodes cannot go from the Talos release they
// run to the wanted one in one upgrade, naming the release to go through
// first, or nil when they can. Only upgrades are checked: a downgrade, the
// same release, a version it cannot read or a wanted release the data
// does not know give nil.
func CheckUpgrade(running, wanted string) error {
	r, okR := parse(running)
	w, okW := parse(wanted)
	if !okR || !okW || !before(r, w) {
		return nil
	}
	wv, ok := known(wanted)
	if !ok {
		return nil
	}
	rv, ok := talosVersion(running)
	if !ok {
		return nil
	}
	err := wv.UpgradeableFrom(rv)
	if err == nil {
		return nil
	}
	msg := fmt.Sprintf("%s is not an upgrade Talos makes in one step from the running %s (Talos: %v)", wanted, running, err)
	// The newest release between them that takes the running one: the
	// fewest upgrades. Every patch of a minor takes the same hosts, and
	// Talos's upgrade notes advise the latest patch of each minor.
	for m := w[1] - 1; m > r[1] && w[0] == r[0]; m-- {
		step := fmt.Sprintf("v%d.%d.0", w[0], m)
		sv, ok := known(step)
		if !ok || sv.UpgradeableFrom(rv) != nil {
			continue
		}
		then := "then to " + wanted
		if wv.UpgradeableFrom(sv) != nil {
			then = "then on towards " + wanted + " the same way"
		}
		return fmt.Errorf("%s: set talosVersion to the latest v%d.%d patch release first, one `up`, %s", msg, w[0], m, then)
	}
	return fmt.Errorf("%s", msg)
}

// known is the release as the compatibility package reads it, when its
// data knows the release.
func known(talos string) (*compatibility.TalosVersion, bool) {
	tv, ok := talosVersion(talos)
	if !ok {
		return nil, false
	}
	if _, _, ok := kubernetesMinors(tv); !ok {
		return nil, false
	}
	return tv, true
}

func talosVersion(talos string) (*compatibility.TalosVersion, bool) {
	if _, ok := parse(talos); !ok {
		return nil, false
	}
	tv, err := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: talos})
	return tv, err == nil
}

// maxKubernetesMinor bounds the search of kubernetesMinors, far above any
// Kubernetes minor a Talos release of this machinery runs.
const maxKubernetesMinor = 100

// kubernetesMinors is the range of Kubernetes 1.x minors the release runs,
// asked of the compatibility package one minor at a time: it exports its
// answer (SupportedWith), not the per-release bounds behind it. ok is false
// when it knows no Kubernetes for the release: a release it does not know.
func kubernetesMinors(tv *compatibility.TalosVersion) (lo, hi int, ok bool) {
	lo = -1
	for m := range maxKubernetesMinor {
		kv, err := compatibility.ParseKubernetesVersion(fmt.Sprintf("1.%d.0", m))
		if err != nil || kv.SupportedWith(tv) != nil {
			continue
		}
		if lo < 0 {
			lo = m
		}
		hi = m
	}
	return lo, hi, lo >= 0
}

// Minor is the minor release of a version ("v1.12.4": 12), if it reads as
// one.
func Minor(v string) (int, bool) {
	p, ok := parse(v)
	return p[1], ok
}

// parse reads "v1.12.4", "1.35.0" or "v1.13.0-alpha.1" as major, minor
// and patch (a pre-release counts as its release).
func parse(v string) ([3]int, bool) {
	var out [3]int
	core, _, _ := strings.Cut(strings.TrimPrefix(v, "v"), "-")
	parts := strings.Split(core, ".")
	if len(parts) != len(out) {
		return out, false
	}
	for i := range out {
		n, err := strconv.Atoi(parts[i])
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n //nolint:gosec // i ranges over out itself
	}
	return out, true
}

// before says whether version a is older than b.
func before(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}
