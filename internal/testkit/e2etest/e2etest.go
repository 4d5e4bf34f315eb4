// Package e2etest sets up what the e2e tests (build tag e2e, run by make
// e2e in a network namespace) share around the real Pulumi CLI and
// plugins: the real Helm charts behind an HTTPS proxy under their public
// repositories' names, the CAs the plugins trust, a local backend.
package e2etest

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest/realapiserver"
	"github.com/fluodata/talos-pulumi/internal/testkit/charttest"
)

// ApproverMirror is where the harness's fetch puts the kubelet-csr-approver
// repository (its chart is not in any Go module the proxy serves).
const ApproverMirror = "/work/.mirror/postfinance+kubelet-csr-approver/repo"

// ArgoHelmMirror and RedisHAMirror are where the harness's fetch puts the
// argo-helm repository (the argo-cd chart) and DandyDeveloper/charts (the
// redis-ha chart the argo-cd chart depends on).
const (
	ArgoHelmMirror = "/work/.mirror/argoproj+argo-helm/repo"
	RedisHAMirror  = "/work/.mirror/DandyDeveloper+charts/repo"
)

// World is what Charts set up.
type World struct {
	// Dir is the test's folder: the backend and the CA file live in it.
	Dir string
	// CAFile is the bundle SSL_CERT_FILE names; Trust adds to it.
	CAFile string
}

// Repo is one more chart served under a public host's name (its Helm
// repository and OCI registry at once).
type Repo struct {
	Host  string
	Chart charttest.Chart
}

// Charts skips the test, saying why, without the pulumi CLI or the charts;
// otherwise it serves the real Cilium chart (of ciliumVersion, from the
// github.com/cilium/cilium module) and the approver's chart (of
// approverVersion, from its repository at the release tag) under
// helm.cilium.io and postfinance.github.io through an HTTPS proxy
// (HTTPS_PROXY), trusted through SSL_CERT_FILE, and points the CLI at a
// local backend in the test's folder. More repositories are served the same
// way.
func Charts(t *testing.T, ciliumVersion, approverVersion string, more ...Repo) *World {
	t.Helper()
	if _, err := exec.LookPath("pulumi"); err != nil {
		t.Skip("SKIPPED: the pulumi CLI is not on PATH (../shared/harness)")
	}
	ciliumDir := filepath.Join(GoModCache(t), "github.com/cilium/cilium@v"+ciliumVersion, "install/kubernetes/cilium")
	if _, err := os.Stat(filepath.Join(ciliumDir, "Chart.yaml")); err != nil {
		t.Skipf("SKIPPED: no Cilium chart at %s (make e2e downloads the module: go mod download github.com/cilium/cilium@v%s)", ciliumDir, ciliumVersion)
	}
	approverDir := filepath.Join(t.TempDir(), "approver")
	if out, err := exec.Command("sh", "-c", "mkdir -p "+approverDir+" && git --git-dir="+ApproverMirror+" archive v"+approverVersion+" charts/kubelet-csr-approver | tar -x -C "+approverDir).CombinedOutput(); err != nil { //nolint:gosec // the test's own folder and the pinned version
		t.Skipf("SKIPPED: the kubelet-csr-approver chart (fetch github:postfinance/kubelet-csr-approver into %s): %v: %s", ApproverMirror, err, out)
	}
	ciliumRepo := charttest.New(t, []string{"helm.cilium.io"}, charttest.Chart{Dir: ciliumDir})
	approverRepo := charttest.New(t, []string{"postfinance.github.io"},
		charttest.Chart{Dir: filepath.Join(approverDir, "charts/kubelet-csr-approver"), Version: approverVersion})
	routes := map[string]string{
		"helm.cilium.io:443":        ciliumRepo.Listener.Addr().String(),
		"postfinance.github.io:443": approverRepo.Listener.Addr().String(),
	}
	cas := append(append([]byte{}, ciliumRepo.CA...), approverRepo.CA...)
	for _, r := range more {
		repo := charttest.New(t, []string{r.Host}, r.Chart)
		routes[r.Host+":443"] = repo.Listener.Addr().String()
		cas = append(cas, repo.CA...)
	}
	proxy := charttest.Proxy(t, routes)
	w := &World{Dir: t.TempDir()}
	w.CAFile = filepath.Join(w.Dir, "repos-ca.pem")
	require.NoError(t, os.WriteFile(w.CAFile, cas, 0o600))
	t.Setenv("SSL_CERT_FILE", w.CAFile)
	t.Setenv("HTTPS_PROXY", proxy)
	t.Setenv("PULUMI_CONFIG_PASSPHRASE", "e2e-test")
	t.Setenv("PULUMI_BACKEND_URL", "file://"+w.Dir)
	return w
}

// ArgoCD skips the test, saying why, without the mirrors; otherwise it is
// the argo-cd chart of argoCDVersion (argo-helm tag argo-cd-<version>) with
// its redis-ha dependency of redisHAVersion vendored into charts/redis-ha,
// as `helm dependency build` leaves it (Helm refuses a chart whose
// dependency is missing, even a disabled one), served under
// argoproj.github.io: its repository, https://argoproj.github.io/argo-helm,
// sits under a path, which charttest serves by the files' names.
func ArgoCD(t *testing.T, argoCDVersion, redisHAVersion string) Repo {
	t.Helper()
	dir := t.TempDir()
	chart := filepath.Join(dir, "charts/argo-cd")
	redis := filepath.Join(dir, "redis")
	steps := []struct{ mirror, tag, path, into string }{
		{ArgoHelmMirror, "argo-cd-" + argoCDVersion, "charts/argo-cd", dir},
		{RedisHAMirror, "redis-ha-" + redisHAVersion, "charts/redis-ha", redis},
	}
	for _, s := range steps {
		cmd := exec.Command("sh", "-c", `mkdir -p "$3" && git --git-dir="$0" archive "$1" "$2" | tar -x -C "$3"`, s.mirror, s.tag, s.path, s.into) //nolint:gosec // the test's own folder and the pinned tags
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Skipf("SKIPPED: the %s chart (fetch its repository into %s): %v: %s", s.path, s.mirror, err, out)
		}
	}
	require.NoError(t, os.MkdirAll(filepath.Join(chart, "charts"), 0o750))
	require.NoError(t, os.Rename(filepath.Join(redis, "charts/redis-ha"), filepath.Join(chart, "charts/redis-ha")))
	return Repo{Host: "argoproj.github.io", Chart: charttest.Chart{Dir: chart, Version: argoCDVersion}}
}

// Trust adds a CA certificate (PEM) to the bundle the plugins trust.
func (w *World) Trust(t *testing.T, caPEM []byte) {
	t.Helper()
	f, err := os.OpenFile(w.CAFile, os.O_APPEND|os.O_WRONLY, 0o600)
	require.NoError(t, err)
	_, err = f.Write(caPEM)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// GoModCache is the Go module cache's folder.
func GoModCache(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	require.NoError(t, err)
	return strings.TrimSpace(string(out))
}

// SimClient is an admin client of the API server for kubesim.
func SimClient(t *testing.T, api *realapiserver.Server, ca realapiserver.CA) *http.Client {
	t.Helper()
	cert, key := ca.ClientCert(t, "kubesim", "system:masters")
	pair, err := tls.X509KeyPair(cert, key)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(api.CA()))
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}
