package kubeapi_test

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/kubeapi"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest"
)

// newClient is an admin client of the fake with a short call timeout.
func newClient(t *testing.T, s *kubeapitest.Server) *kubeapi.Client {
	t.Helper()
	c, err := kubeapi.New(s.Kubeconfig(), kubeapi.WithTimeout(2*time.Second))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestNewReadsKubeconfig(t *testing.T) {
	t.Parallel()
	s := kubeapitest.Start(t)
	s.SetVersion("v1.33.5")

	c := newClient(t, s)
	v, err := c.ServerVersion(ctxT(t))
	require.NoError(t, err)
	assert.Equal(t, "v1.33.5", v)

	// The server of the kubeconfig is replaced: 127.0.0.2 does not listen.
	cert, key := s.AdminCert()
	kc := kubeapitest.Kubeconfig("https://127.0.0.2:1/", s.CA(), cert, key)
	c, err = kubeapi.New(kc, kubeapi.WithServer(s.URL()+"/"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	_, err = c.ServerVersion(ctxT(t))
	require.NoError(t, err)

	// A server given only by WithServer.
	noServer := strings.Replace(string(kc), "server: https://127.0.0.2:1/", "", 1)
	_, err = kubeapi.New([]byte(noServer), kubeapi.WithServer(s.URL()))
	require.NoError(t, err)
}

func TestNewNamesWhatIsMissing(t *testing.T) {
	t.Parallel()
	s := kubeapitest.Start(t)
	good := string(s.Kubeconfig())
	b64 := base64.StdEncoding.EncodeToString
	cert, _ := s.AdminCert()
	// edit replaces the line of a field.
	edit := func(field, line string) string {
		var out []string
		for l := range strings.SplitSeq(good, "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), field+":") {
				if line == "" {
					continue
				}
				l = l[:len(l)-len(strings.TrimLeft(l, " "))] + line
			}
			out = append(out, l)
		}
		return strings.Join(out, "\n")
	}
	for name, tc := range map[string]struct{ text, want string }{
		"not YAML":           {"clusters: [", "unable to parse kubeconfig: yaml"},
		"empty":              {"", "unable to parse kubeconfig: current-context is empty"},
		"no current context": {edit("current-context", ""), "current-context is empty"},
		"unknown context":    {edit("current-context", "current-context: other"), `current-context "other" is not among its contexts`},
		"unknown cluster":    {strings.Replace(good, "cluster: lab\n", "cluster: other\n", 1), `cluster "other" of context "admin@lab" is not among its clusters`},
		"unknown user":       {strings.Replace(good, "user: admin@lab\n", "user: other\n", 1), `user "other" of context "admin@lab" is not among its users`},
		"no server":          {edit("server", ""), `cluster "lab" has no server`},
		"http server":        {edit("server", "server: http://127.0.0.1:6443"), `unable to use server "http://127.0.0.1:6443": not an https:// URL`},
		"no CA":              {edit("certificate-authority-data", ""), `cluster "lab" has no certificate-authority-data`},
		"CA file":            {edit("certificate-authority-data", "certificate-authority: /etc/ca.crt"), `cluster "lab" has no certificate-authority-data (only inline, base64 credentials are read)`},
		"no client cert":     {edit("client-certificate-data", ""), `user "admin@lab" has no client-certificate-data`},
		"no client key":      {edit("client-key-data", ""), `user "admin@lab" has no client-key-data`},
		"CA not base64":      {edit("certificate-authority-data", "certificate-authority-data: '%%%'"), `cluster "lab": certificate-authority-data is not base64`},
		"CA not PEM":         {edit("certificate-authority-data", "certificate-authority-data: "+b64([]byte("junk"))), "certificate-authority-data holds no PEM certificate"},
		"key of another":     {edit("client-certificate-data", "client-certificate-data: "+b64(s.CA())), "client-certificate-data and client-key-data: tls: private key does not match public key"},
		"key is a cert":      {edit("client-key-data", "client-key-data: "+b64(cert)), "client-certificate-data and client-key-data: tls:"},
	} {
		_, err := kubeapi.New([]byte(tc.text))
		if assert.Error(t, err, name) {
			assert.Contains(t, err.Error(), tc.want, name)
		}
	}
}

func TestServerVersion(t *testing.T) {
	t.Parallel()
	s := kubeapitest.Start(t)
	v, err := newClient(t, s).ServerVersion(ctxT(t))
	require.NoError(t, err)
	assert.Equal(t, kubeapitest.DefaultVersion, v)
}

func TestNodes(t *testing.T) {
	t.Parallel()
	s := kubeapitest.Start(t)
	s.AddNode(kubeapitest.NodeSpec{Name: "worker-2", InternalIP: "10.5.0.22", KubeletVersion: "v1.33.5", NotReady: true})
	s.AddNode(kubeapitest.NodeSpec{Name: "cp-1", InternalIP: "10.5.0.11"})
	s.AddNode(kubeapitest.NodeSpec{Name: "worker-1", Unschedulable: true})
	nodes, err := newClient(t, s).Nodes(ctxT(t))
	require.NoError(t, err)
	notReady := []kubeapi.Taint{kubeapitest.NotReadyTaint} // the API server's, at creation
	assert.Equal(t, []kubeapi.Node{
		{Name: "cp-1", KubeletVersion: "v1.34.1", Ready: true, InternalIP: "10.5.0.11", Taints: notReady},
		{Name: "worker-1", KubeletVersion: "v1.34.1", Ready: true, Unschedulable: true, Taints: notReady},
		{Name: "worker-2", KubeletVersion: "v1.33.5", InternalIP: "10.5.0.22", Taints: notReady},
	}, nodes)
}

func TestCordon(t *testing.T) {
	t.Parallel()
	s := kubeapitest.Start(t)
	s.AddNode(kubeapitest.NodeSpec{Name: "worker-1"})
	c := newClient(t, s)
	require.NoError(t, c.Cordon(ctxT(t), "worker-1"))
	require.NoError(t, c.Cordon(ctxT(t), "worker-1"), "cordoning twice")
	n, _ := s.Node("worker-1")
	assert.True(t, n.Unschedulable)

	err := c.Cordon(ctxT(t), "worker-9")
	require.ErrorIs(t, err, kubeapi.ErrNotFound)
	assert.ErrorContains(t, err, `unable to cordon node "worker-9": kubernetes API PATCH /api/v1/nodes/worker-9: 404 nodes "worker-9" not found`)
	assert.NotErrorIs(t, err, kubeapi.ErrUnauthorized)

	require.ErrorContains(t, c.Cordon(ctxT(t), ""), `unable to cordon node "": no node name given`)
	assert.Equal(t, []string{"cordon worker-1 200", "cordon worker-1 200", "cordon worker-9 404"}, events(s))
}

func TestDeleteNodeTwice(t *testing.T) {
	t.Parallel()
	s := kubeapitest.Start(t)
	s.AddNode(kubeapitest.NodeSpec{Name: "worker-1"})
	s.AddNode(kubeapitest.NodeSpec{Name: "worker-2"})
	c := newClient(t, s)
	require.NoError(t, c.DeleteNode(ctxT(t), "worker-1"))
	require.NoError(t, c.DeleteNode(ctxT(t), "worker-1"), "a node already gone")
	_, there := s.Node("worker-1")
	assert.False(t, there)
	nodes, err := c.Nodes(ctxT(t))
	require.NoError(t, err)
	require.Len(t, nodes, 1)
	assert.Equal(t, "worker-2", nodes[0].Name)
	assert.Equal(t, []string{"delete-node worker-1 200", "delete-node worker-1 404"}, events(s))
}

func TestWrongClientCertificate(t *testing.T) {
	t.Parallel()
	s := kubeapitest.Start(t)
	s.AddNode(kubeapitest.NodeSpec{Name: "worker-1"})
	other := kubeapitest.Start(t)
	// The right CA and server, a client certificate of another CA (a
	// kubeconfig from before the cluster's CA was rotated): the server
	// takes the handshake and answers 401, as kube-apiserver does.
	cert, key := other.AdminCert()
	c, err := kubeapi.New(kubeapitest.Kubeconfig(s.URL(), s.CA(), cert, key), kubeapi.WithTimeout(2*time.Second))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	_, err = c.Nodes(ctxT(t))
	require.ErrorIs(t, err, kubeapi.ErrUnauthorized)
	require.EqualError(t, err, "unable to list nodes: kubernetes API GET /api/v1/nodes: 401 Unauthorized")
	require.ErrorIs(t, c.Cordon(ctxT(t), "worker-1"), kubeapi.ErrUnauthorized)
	_, err = c.ServerVersion(ctxT(t))
	require.ErrorIs(t, err, kubeapi.ErrUnauthorized, "not even /version without a certificate of the CA")
	// Waiting would not change it: both waits stop at once, saying why.
	for name, wait := range map[string]func() error{
		"ready": func() error {
			return c.WaitReady(ctxT(t), 1, kubeapi.Wait{Interval: 10 * time.Millisecond, Timeout: time.Minute})
		},
		"nodes": func() error {
			return c.WaitNodesReady(ctxT(t), 1, kubeapi.Wait{Interval: 10 * time.Millisecond, Timeout: time.Minute})
		},
	} {
		start := time.Now()
		err := wait()
		require.ErrorIs(t, err, kubeapi.ErrUnauthorized, name)
		assert.Contains(t, err.Error(), "does not take the kubeconfig's client certificate", name)
		assert.Less(t, time.Since(start), 3*time.Second, name)
	}
	n, _ := s.Node("worker-1")
	assert.False(t, n.Unschedulable)

	// The other server's whole kubeconfig against this server: its CA does
	// not vouch for this server's certificate.
	c, err = kubeapi.New(other.Kubeconfig(), kubeapi.WithServer(s.URL()))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	_, err = c.Nodes(ctxT(t))
	require.ErrorContains(t, err, "certificate signed by unknown authority")
	assert.Empty(t, s.Events())
}

func TestForbiddenUser(t *testing.T) {
	t.Parallel()
	s := kubeapitest.Start(t)
	s.AddNode(kubeapitest.NodeSpec{Name: "worker-1"})
	c, err := kubeapi.New(s.KubeconfigFor("viewer", "developers"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	_, err = c.Nodes(ctxT(t))
	require.ErrorIs(t, err, kubeapi.ErrUnauthorized)
	assert.ErrorContains(t, err, `unable to list nodes: kubernetes API GET /api/v1/nodes: 403 nodes is forbidden: User "viewer" cannot list resource "nodes" in API group "" at the cluster scope`)
	require.ErrorIs(t, c.DeleteNode(ctxT(t), "worker-1"), kubeapi.ErrUnauthorized, "a refusal is no success")
	_, there := s.Node("worker-1")
	assert.True(t, there)
}

func TestCallTimeout(t *testing.T) {
	t.Parallel()
	s := kubeapitest.Start(t)
	s.SetLatency(time.Minute)
	c, err := kubeapi.New(s.Kubeconfig(), kubeapi.WithTimeout(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	start := time.Now()
	_, err = c.ServerVersion(t.Context())
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, "unable to read server version: ")
	assert.Less(t, time.Since(start), time.Second)
}

// events is the fake's log as "action object code" lines.
func events(s *kubeapitest.Server) []string {
	var out []string
	for _, e := range s.Events() {
		out = append(out, e.String())
	}
	return out
}

func TestStaticPodsAreTheMirrorPodsOfTheNode(t *testing.T) {
	t.Parallel()
	s := kubeapitest.Start(t)
	s.AddNode(kubeapitest.NodeSpec{Name: "cp-1"})
	s.AddPod(kubeapitest.PodSpec{Namespace: "kube-system", Name: "kube-apiserver-cp-1", Node: "cp-1", Mirror: true, Image: "registry.k8s.io/kube-apiserver:v1.35.0"})
	s.AddPod(kubeapitest.PodSpec{Namespace: "kube-system", Name: "kube-scheduler-cp-1", Node: "cp-1", Mirror: true, NotReady: true})
	s.AddPod(kubeapitest.PodSpec{Namespace: "kube-system", Name: "cilium-abc", Node: "cp-1", OwnerKind: "DaemonSet"})
	s.AddPod(kubeapitest.PodSpec{Namespace: "kube-system", Name: "kube-apiserver-cp-2", Node: "cp-2", Mirror: true})
	c, err := kubeapi.New(s.Kubeconfig())
	require.NoError(t, err)
	pods, err := c.StaticPods(context.Background(), "cp-1")
	require.NoError(t, err)
	assert.ElementsMatch(t, []kubeapi.StaticPod{
		{Namespace: "kube-system", Name: "kube-apiserver-cp-1", Images: []string{"registry.k8s.io/kube-apiserver:v1.35.0"}, Ready: true},
		{Namespace: "kube-system", Name: "kube-scheduler-cp-1", Images: []string{"registry.k8s.io/pause:3.10"}, Ready: false},
	}, pods)
	s.SetPodImage("kube-system", "kube-scheduler-cp-1", "registry.k8s.io/kube-scheduler:v1.35.0")
	pods, err = c.StaticPods(context.Background(), "cp-1")
	require.NoError(t, err)
	assert.Contains(t, pods, kubeapi.StaticPod{Namespace: "kube-system", Name: "kube-scheduler-cp-1", Images: []string{"registry.k8s.io/kube-scheduler:v1.35.0"}})
}

// A read answered 429 (kube-apiserver's "storage is (re)initializing"
// right after a CRD is Established) is asked again after Retry-After,
// within the call's timeout; a write answered 429 is not (an eviction's
// 429 is a PodDisruptionBudget's refusal, which the drain reads).
func TestReadsAnswered429AreAskedAgain(t *testing.T) {
	t.Parallel()
	var reads, writes atomic.Int32
	kubeconfig := kubeapitest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		tooMany := func() {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"kind":"Status","status":"Failure","message":"storage is (re)initializing","reason":"TooManyRequests","code":429}`)
		}
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes":
			if reads.Add(1) <= 2 {
				tooMany()
				return
			}
			_, _ = io.WriteString(w, `{"items":[{"metadata":{"name":"cp-0"}}]}`)
		case r.Method == http.MethodPatch:
			writes.Add(1)
			tooMany()
		case r.Method == http.MethodGet && r.URL.Path == "/version":
			tooMany()
		}
	}))
	c, err := kubeapi.New(kubeconfig, kubeapi.WithTimeout(5*time.Second))
	require.NoError(t, err)
	t.Cleanup(c.Close)

	nodes, err := c.Nodes(t.Context())
	require.NoError(t, err)
	assert.Len(t, nodes, 1)
	assert.Equal(t, int32(3), reads.Load(), "asked until it answered")

	err = c.Cordon(t.Context(), "cp-0")
	require.Error(t, err)
	assert.Equal(t, int32(1), writes.Load(), "a write is asked once")

	short, err := kubeapi.New(kubeconfig, kubeapi.WithTimeout(300*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(short.Close)
	start := time.Now()
	_, err = short.ServerVersion(t.Context())
	require.Error(t, err, "a 429 that lasts ends with the call's timeout")
	assert.Contains(t, err.Error(), "429")
	assert.Less(t, time.Since(start), 2*time.Second)
}

func TestSetTaints(t *testing.T) {
	t.Parallel()
	s := kubeapitest.Start(t)
	other := kubeapi.Taint{Key: "node.kubernetes.io/unreachable", Effect: "NoExecute"}
	s.AddNode(kubeapitest.NodeSpec{Name: "worker-1", Taints: []kubeapi.Taint{
		{Key: "example.com/pool", Value: "old", Effect: "NoSchedule"}, other, {Key: "example.com/gone", Effect: "NoSchedule"},
	}})
	c := newClient(t, s)
	want := []kubeapi.Taint{{Key: "example.com/pool", Value: "gpu", Effect: "NoSchedule"}, {Key: "example.com/new", Effect: "PreferNoSchedule"}}
	require.NoError(t, c.SetTaints(ctxT(t), "worker-1", want, []string{"example.com/gone"}))
	n, _ := s.Node("worker-1")
	notReady := kubeapitest.NotReadyTaint
	assert.Equal(t, []kubeapi.Taint{want[0], other, notReady, want[1]}, n.Taints, "in place, the other owners' kept, the dropped one gone")
	require.NoError(t, c.SetTaints(ctxT(t), "worker-1", want, []string{"example.com/gone"}), "again: nothing to write")

	// Another writer changes the Node between each read and write: the
	// write is refused and made again on a new read, a bounded number of
	// times.
	s.RaceNodeWrites("worker-1", 2)
	require.NoError(t, c.SetTaints(ctxT(t), "worker-1", nil, []string{"example.com/new"}))
	n, _ = s.Node("worker-1")
	assert.Equal(t, []kubeapi.Taint{want[0], other, notReady}, n.Taints)
	s.RaceNodeWrites("worker-1", 100)
	err := c.SetTaints(ctxT(t), "worker-1", nil, []string{"example.com/pool"})
	assert.ErrorContains(t, err, `unable to set the taints of node "worker-1": kubernetes API PATCH /api/v1/nodes/worker-1: 409 Operation cannot be fulfilled`)

	err = c.SetTaints(ctxT(t), "worker-9", want, nil)
	assert.ErrorIs(t, err, kubeapi.ErrNotFound)
	assert.Equal(t, []string{"taint worker-1 200", "taint worker-1 409", "taint worker-1 409", "taint worker-1 200",
		"taint worker-1 409", "taint worker-1 409", "taint worker-1 409", "taint worker-1 409", "taint worker-1 409"}, events(s))
}
