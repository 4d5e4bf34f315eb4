package talos

import (
	"context"
	"io"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go4.org/netipx"

	"github.com/fluodata/talos-pulumi/internal/kubeapi"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest"
)

// TestPoolChangeProblems: an address a Service holds from one of the
// cluster's pools must stay in the pool of that name; a Service's address
// from elsewhere (another controller's, a pool not the cluster's) is not
// ours to judge.
func TestPoolChangeProblems(t *testing.T) {
	t.Parallel()
	r := netipx.MustParseIPRange
	live := []kubeapi.IPPool{{Name: "home", Ranges: []netipx.IPRange{r("10.0.0.224-10.0.0.239")}}}
	held := []kubeapi.ServiceAddress{
		{Namespace: "web", Name: "ingress", IP: netip.MustParseAddr("10.0.0.230")},
		{Namespace: "db", Name: "pg", IP: netip.MustParseAddr("192.168.9.9")},
	}
	assert.Empty(t, poolChangeProblems(live, []guardPool{{Name: "home", Ranges: []string{"10.0.0.224-10.0.0.250"}}}, held), "grown")
	assert.Equal(t, []string{`Service web/ingress holds 10.0.0.230 of pool "home", which the new pools do not have`},
		poolChangeProblems(live, []guardPool{{Name: "other", Ranges: []string{"10.0.0.224-10.0.0.239"}}}, held), "renamed: Cilium would release the address")
	assert.Equal(t, []string{`Service web/ingress holds 10.0.0.230 of pool "home", which the new pool "home" leaves out`},
		poolChangeProblems(live, []guardPool{{Name: "home", Ranges: []string{"10.0.0.224-10.0.0.229"}}, {Name: "web", Ranges: []string{"10.0.0.230-10.0.0.231"}}}, held),
		"shrunk, the address moved to another pool")
	assert.Len(t, poolChangeProblems(live, []guardPool{}, held), 1, "removed")
	assert.Empty(t, poolChangeProblems(nil, nil, held), "the first run: no pool of ours")
}

// TestThePoolsGuardWaitsForTheCRDsThenRefuses runs the guard's hook code
// against a fake API server that answers as kube-apiserver does: 404 for
// the CRDs until cilium-operator registers them, the pool list (with the
// label selector the guard asks for) and the Services.
func TestThePoolsGuardWaitsForTheCRDsThenRefuses(t *testing.T) {
	t.Parallel()
	var crdAsks, poolAsks atomic.Int32
	var selector atomic.Value
	kubeconfig := kubeapitest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/" + lbPoolCRD, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/" + l2PolicyCRD:
			if crdAsks.Add(1) <= 2 {
				w.WriteHeader(http.StatusNotFound)
				_, _ = io.WriteString(w, `{"kind":"Status","status":"Failure","reason":"NotFound","code":404}`)
				return
			}
			_, _ = io.WriteString(w, `{"status":{"conditions":[{"type":"NamesAccepted","status":"True"},{"type":"Established","status":"True"}]}}`)
		case "/apis/cilium.io/v2/ciliumloadbalancerippools":
			if poolAsks.Add(1) == 1 {
				// As kube-apiserver answers right after the CRD is
				// Established, while the new resource's watch cache starts.
				w.WriteHeader(http.StatusTooManyRequests)
				_, _ = io.WriteString(w, `{"kind":"Status","status":"Failure","message":"storage is (re)initializing","reason":"TooManyRequests","code":429}`)
				return
			}
			selector.Store(r.URL.Query().Get("labelSelector"))
			_, _ = io.WriteString(w, `{"items":[{"metadata":{"name":"home"},"spec":{"blocks":[{"cidr":"10.0.0.224/28"},{"start":"10.0.0.240","stop":"10.0.0.245"}]}}]}`)
		case "/api/v1/services":
			_, _ = io.WriteString(w, `{"items":[
				{"metadata":{"name":"ingress","namespace":"web"},"spec":{"type":"LoadBalancer"},"status":{"loadBalancer":{"ingress":[{"ip":"10.0.0.242"}]}}},
				{"metadata":{"name":"dns","namespace":"kube-system"},"spec":{"type":"ClusterIP"},"status":{"loadBalancer":{}}}]}`)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	client, err := kubeapi.New(kubeconfig)
	require.NoError(t, err)
	defer client.Close()

	var said []string
	log := &recordLog{}
	w := kubeapi.Wait{Interval: 10 * time.Millisecond, Timeout: 5 * time.Second, Report: func(m string) { said = append(said, m) }, Every: time.Millisecond}
	err = guardPools(context.Background(), client, `[{"name":"home","ranges":["10.0.0.224-10.0.0.239"]}]`, w, log)
	require.Error(t, err, "the shrunk pool leaves out 10.0.0.242")
	assert.Contains(t, err.Error(), `Service web/ingress holds 10.0.0.242 of pool "home", which the new pool "home" leaves out`)
	assert.Contains(t, err.Error(), "nothing was changed")
	assert.Equal(t, "app.kubernetes.io/managed-by=talos-cluster", selector.Load(), "only the cluster's own pools")
	assert.Greater(t, crdAsks.Load(), int32(2), "it waited for the CRDs")
	assert.Equal(t, int32(2), poolAsks.Load(), "a 429 of the new resource's list is asked again")
	assert.Contains(t, said[0], "waiting up to 5s for cilium-operator to register the CRDs")

	require.NoError(t, guardPools(context.Background(), client, `[{"name":"home","ranges":["10.0.0.224-10.0.0.250"]}]`, w, log), "grown")
	assert.Contains(t, log.infos[len(log.infos)-1], "1 pools, 1 addresses held by Services, none taken away")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, guardPools(ctx, client, `[]`, w, log), context.Canceled, "a cancelled run stops the wait")
}

type recordLog struct{ infos []string }

func (l *recordLog) Status(string)   {}
func (l *recordLog) Info(msg string) { l.infos = append(l.infos, msg) }
