package rollout_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fluodata/talos-pulumi/internal/rollout"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
)

// pullsAnswering is a Talos API whose PullImage answers with code for
// the images in refuse, as the client wraps a node's status.
type pullsAnswering struct {
	talosapi.API
	code   codes.Code
	refuse map[string]bool
}

func (p pullsAnswering) PullImage(ctx context.Context, node, image string, system bool) error {
	if p.refuse[image] {
		return fmt.Errorf("unable to pull %s on node %s: %w", image, node, status.Error(p.code, "no"))
	}
	return p.API.PullImage(ctx, node, image, system)
}

// Each image on its node, in order; a Talos that cannot pull (an old
// one: Unimplemented) is skipped, saying so; any other failure stops the
// pulls, saying nothing was restarted.
func TestPrePull(t *testing.T) {
	t.Parallel()
	c := talosapitest.Start(t, talosapitest.Topology(1, 1, "v1.12.0", 10*time.Millisecond)...)
	o := ops(t, c)
	var said []string
	o.Log = func(format string, args ...any) { said = append(said, fmt.Sprintf(format, args...)) }
	w := rollout.Node{Name: "worker-1", IP: "10.5.0.21", Role: rollout.Worker}
	pulls := []rollout.Pull{
		{Node: cp("10.5.0.11", "cp-1"), Image: "registry.k8s.io/kube-apiserver:v1.35.0"},
		{Node: w, Image: "ghcr.io/siderolabs/kubelet:v1.35.0", System: true},
	}
	require.NoError(t, o.PrePull(t.Context(), pulls))
	var got []string
	for _, e := range c.Events("ImagePull") {
		got = append(got, e.Node+" "+e.Args)
	}
	assert.Equal(t, []string{
		"10.5.0.11 namespace=NS_CRI image=registry.k8s.io/kube-apiserver:v1.35.0",
		"10.5.0.21 namespace=NS_SYSTEM image=ghcr.io/siderolabs/kubelet:v1.35.0",
	}, got)

	o.API = pullsAnswering{API: o.API, code: codes.Unimplemented, refuse: map[string]bool{pulls[0].Image: true}}
	require.NoError(t, o.PrePull(t.Context(), pulls))
	assert.Contains(t, said, "node cp-1 (10.5.0.11): its Talos cannot pre-pull images: skipped")

	o.API = pullsAnswering{API: o.API, code: codes.NotFound, refuse: map[string]bool{pulls[0].Image: true}}
	err := o.PrePull(t.Context(), pulls)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unable to pre-pull registry.k8s.io/kube-apiserver:v1.35.0 on node cp-1 (10.5.0.11) (nothing was restarted yet)")
	assert.Len(t, c.Events("ImagePull"), 3, "the worker's pull not tried after the failure")
}
