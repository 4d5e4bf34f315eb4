package rollout

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fluodata/talos-pulumi/internal/kubeapi"
)

// RemovedAPIs are the API resources a Kubernetes minor version stops
// serving whose objects no other version serves, by the upgrade that
// removes them ("1.28->1.29"): after the upgrade such an object cannot be
// read, changed or deleted. As upstream's upgrade check lists them
// (github.com/siderolabs/go-kubernetes v0.2.28
// kubernetes/upgrade/checks.go, removedAPIResources of NewChecks, read by
// TestRemovedAPIsAreUpstreams).
var RemovedAPIs = map[string][]kubeapi.APIResource{
	"1.24->1.25": {"podsecuritypolicies.v1beta1.policy"},
	"1.28->1.29": {"clustercidrs.v1alpha1.networking.k8s.io"},
	"1.31->1.32": {"podschedulingcontexts.v1alpha3.resource.k8s.io"},
}

// ErrRemovedAPIs means objects of an API the target Kubernetes version no
// longer serves are in the cluster.
var ErrRemovedAPIs = errors.New("objects of removed APIs")

// removedAPIsShown bounds the objects named per resource.
const removedAPIsShown = 10

// CheckRemovedAPIs refuses an upgrade from one Kubernetes version to
// another while the cluster holds objects of an API resource an upgrade on
// the way removes (removed, RemovedAPIs when nil), naming them, as
// talosctl upgrade-k8s refuses it. A resource the API server does not
// serve holds none.
func (o Ops) CheckRemovedAPIs(ctx context.Context, from, to string, removed map[string][]kubeapi.APIResource) error {
	if o.Kube == nil {
		return nil
	}
	if removed == nil {
		removed = RemovedAPIs
	}
	steps := minorSteps(from, to)
	if len(steps) == 0 {
		return nil
	}
	kube, err := o.Kube(ctx, "")
	if err != nil {
		return fmt.Errorf("unable to check the cluster for objects of APIs Kubernetes %s removes: %w", to, err)
	}
	var found []string
	for _, step := range steps {
		for _, r := range removed[step] {
			objects, err := kube.Objects(ctx, r, removedAPIsShown+1)
			if errors.Is(err, kubeapi.ErrNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("unable to check the cluster for objects of APIs Kubernetes %s removes: %w", to, err)
			}
			if len(objects) == 0 {
				continue
			}
			names := make([]string, 0, len(objects))
			for _, obj := range objects[:min(len(objects), removedAPIsShown)] {
				names = append(names, obj.String())
			}
			if len(objects) > removedAPIsShown {
				names = append(names, "...")
			}
			found = append(found, fmt.Sprintf("%s (gone in %s): %s", r, strings.SplitN(step, "->", 2)[1], strings.Join(names, ", ")))
		}
	}
	if len(found) > 0 {
		return fmt.Errorf("%w: Kubernetes %s no longer serves these objects' API, so they could not be read, changed or deleted after the upgrade: %s; migrate or delete them, then run up again (nothing was changed)",
			ErrRemovedAPIs, to, strings.Join(found, "; "))
	}
	o.logf("no objects of APIs removed on the way to Kubernetes %s", to)
	return nil
}

// minorSteps are the minor upgrades from one version to another
// ("1.34.1" to "1.36.0": "1.34->1.35", "1.35->1.36"); none when either
// does not parse or to is not newer.
func minorSteps(from, to string) []string {
	fromMajor, fromMinor, ok1 := majorMinor(from)
	toMajor, toMinor, ok2 := majorMinor(to)
	if !ok1 || !ok2 || fromMajor != toMajor {
		return nil
	}
	var out []string
	for m := fromMinor; m < toMinor; m++ {
		out = append(out, fmt.Sprintf("%d.%d->%d.%d", fromMajor, m, toMajor, m+1))
	}
	return out
}

func majorMinor(v string) (int, int, bool) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}

// Pull is an image a node pulls before the upgrade that runs it.
type Pull struct {
	Node  Node
	Image string
	// System pulls it into containerd's system namespace (the kubelet's);
	// else the CRI's (the static pods').
	System bool
}

// PrePull pulls each image on its node before anything restarts, as
// talosctl upgrade-k8s does: a node then restarts a component without
// waiting for its image, and a registry that cannot serve it stops the
// upgrade before any node moved. A Talos without the call is skipped,
// saying so.
func (o Ops) PrePull(ctx context.Context, pulls []Pull) error {
	for _, p := range pulls {
		o.logf("%s: pre-pulling %s", p.Node, p.Image)
		err := o.API.PullImage(ctx, p.Node.IP, p.Image, p.System)
		switch {
		case status.Code(err) == codes.Unimplemented: // status.Code finds a wrapped status
			o.logf("%s: its Talos cannot pre-pull images: skipped", p.Node)
		case err != nil:
			return fmt.Errorf("unable to pre-pull %s on %s (nothing was restarted yet): %w", p.Image, p.Node, err)
		}
	}
	return nil
}
