package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/exitcode"
	"github.com/fluodata/talos-pulumi/internal/kubeapi/kubeapitest"
)

// rootAppPath is where the API server serves the root Application.
const rootAppPath = "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/root"

// argoAPI is a fake Kubernetes API server with Argo CD's
// CustomResourceDefinition (or without it): it serves the root Application
// as Argo CD v3 writes it, to a client certificate of its CA only.
type argoAPI struct {
	kubeconfig []byte
	calls      atomic.Int32
}

// startArgoAPI serves app (JSON) at the root Application's path; with app
// empty, the Application is absent, and without crd Argo CD's group is
// unknown to the server: both answer 404 as kube-apiserver does.
func startArgoAPI(t *testing.T, crd bool, app string) *argoAPI {
	t.Helper()
	a := &argoAPI{}
	a.kubeconfig = kubeapitest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == rootAppPath && crd && app != "":
			_, _ = io.WriteString(w, app)
		case r.Method == http.MethodGet && r.URL.Path == rootAppPath && crd:
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"applications.argoproj.io \"root\" not found","reason":"NotFound","details":{"name":"root","group":"argoproj.io","kind":"applications"},"code":404}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}`)
		}
	}))
	return a
}

// runGitopsStatus runs `stackctl gitops-status` on stack homelab whose
// outputs are outs, with a pulumi CLI that does not exist: only
// --outputs-json is read.
func runGitopsStatus(t *testing.T, outs map[string]any) (code int, stdout, stderr string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "outputs.json")
	b, err := json.Marshal(outs)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, b, 0o600))
	var out, errOut bytes.Buffer
	code = Main(t.Context(), []string{"gitops-status", "--stack", "homelab", "--outputs-json", file, "--pulumi", "/nonexistent/pulumi"}, nil, &out, &errOut)
	return code, out.String(), errOut.String()
}

// rootApp is the root Application as Argo CD v3 writes it (kubectl get
// -o json), with its sync and health, its last operation's phase and
// message, and its resources' statuses.
func rootApp(sync, health, phase, opMessage, resources string) string {
	return `{
  "apiVersion": "argoproj.io/v1alpha1",
  "kind": "Application",
  "metadata": {
    "name": "root",
    "namespace": "argocd",
    "finalizers": ["resources-finalizer.argocd.argoproj.io"],
    "generation": 42,
    "resourceVersion": "181234",
    "uid": "6c1f6a2e-9f34-4a59-9a8b-0d1c5b0e7a11"
  },
  "spec": {
    "destination": {"namespace": "argocd", "server": "https://kubernetes.default.svc"},
    "project": "default",
    "source": {
      "path": "clusters/homelab",
      "repoURL": "https://github.com/fluodata/homelab-gitops.git",
      "targetRevision": "main"
    },
    "syncPolicy": {"automated": {"prune": true, "selfHeal": true}, "syncOptions": ["CreateNamespace=true"]}
  },
  "status": {
    "controllerNamespace": "argocd",
    "health": {"lastTransitionTime": "2026-08-20T09:12:44Z", "status": "` + health + `"},
    "history": [{
      "deployStartedAt": "2026-08-20T09:12:30Z",
      "deployedAt": "2026-08-20T09:12:41Z",
      "id": 3,
      "initiatedBy": {"automated": true},
      "revision": "5b0c3e1f9a7d2c4b8e6f1a3d5c7b9e0f2a4c6d8e",
      "source": {"path": "clusters/homelab", "repoURL": "https://github.com/fluodata/homelab-gitops.git", "targetRevision": "main"}
    }],
    "operationState": {
      "finishedAt": "2026-08-20T09:12:41Z",
      "message": "` + opMessage + `",
      "operation": {
        "initiatedBy": {"automated": true},
        "retry": {"limit": 5},
        "sync": {"revision": "5b0c3e1f9a7d2c4b8e6f1a3d5c7b9e0f2a4c6d8e", "syncOptions": ["CreateNamespace=true"]}
      },
      "phase": "` + phase + `",
      "startedAt": "2026-08-20T09:12:30Z",
      "syncResult": {
        "resources": [],
        "revision": "5b0c3e1f9a7d2c4b8e6f1a3d5c7b9e0f2a4c6d8e",
        "source": {"path": "clusters/homelab", "repoURL": "https://github.com/fluodata/homelab-gitops.git", "targetRevision": "main"}
      }
    },
    "reconciledAt": "2026-08-20T09:30:02Z",
    "resources": ` + resources + `,
    "sourceHydrator": {},
    "sourceType": "Directory",
    "summary": {},
    "sync": {
      "comparedTo": {
        "destination": {"namespace": "argocd", "server": "https://kubernetes.default.svc"},
        "source": {"path": "clusters/homelab", "repoURL": "https://github.com/fluodata/homelab-gitops.git", "targetRevision": "main"}
      },
      "revision": "5b0c3e1f9a7d2c4b8e6f1a3d5c7b9e0f2a4c6d8e",
      "status": "` + sync + `"
    }
  }
}`
}

// The resources of a settled root: child Applications and a ConfigMap,
// which has no health check.
const settledResources = `[
  {"group": "argoproj.io", "health": {"status": "Healthy"}, "kind": "Application", "name": "cert-manager", "namespace": "argocd", "status": "Synced", "version": "v1alpha1"},
  {"group": "argoproj.io", "health": {"status": "Healthy"}, "kind": "Application", "name": "web", "namespace": "argocd", "status": "Synced", "version": "v1alpha1"},
  {"kind": "ConfigMap", "name": "cluster-info", "namespace": "argocd", "status": "Synced", "version": "v1"}
]`

// A synced and healthy root Application: where Argo CD syncs from, the
// revision it synced, its health and last operation; exit code OK, nothing
// on stderr.
func TestGitopsStatusSyncedAndHealthy(t *testing.T) {
	t.Parallel()
	api := startArgoAPI(t, true, rootApp("Synced", "Healthy", "Succeeded", "successfully synced (all tasks run)", settledResources))
	code, stdout, stderr := runGitopsStatus(t, map[string]any{"kubeconfig": string(api.kubeconfig), "talosconfig": "context: homelab\n"})
	require.Equal(t, exitcode.OK, code, stdout+stderr)
	assert.Equal(t, `Argo CD Application argocd/root
repo:      https://github.com/fluodata/homelab-gitops.git
revision:  main
path:      clusters/homelab
sync:      Synced to 5b0c3e1f9a7d2c4b8e6f1a3d5c7b9e0f2a4c6d8e
health:    Healthy
operation: Succeeded: successfully synced (all tasks run)
`, stdout)
	assert.Empty(t, stderr)
	assert.EqualValues(t, 1, api.calls.Load(), "one GET of the Application")
}

// An Application out of sync, or synced but not healthy, is a failure:
// each resource not synced or not healthy has its line, with its health's
// message; the settled ones, and one without a health check, have none.
func TestGitopsStatusNotSyncedOrNotHealthy(t *testing.T) {
	t.Parallel()
	outOfSync := `[
  {"group": "apps", "health": {"message": "Deployment \"web\" exceeded its progress deadline", "status": "Degraded"}, "kind": "Deployment", "name": "web", "namespace": "apps", "status": "OutOfSync", "version": "v1"},
  {"group": "apps", "health": {"status": "Healthy"}, "kind": "Deployment", "name": "api", "namespace": "apps", "status": "Synced", "version": "v1"},
  {"health": {"status": "Missing"}, "kind": "Namespace", "name": "monitoring", "status": "OutOfSync", "version": "v1"},
  {"kind": "ConfigMap", "name": "web-config", "namespace": "apps", "status": "Synced", "version": "v1"}
]`
	api := startArgoAPI(t, true, rootApp("OutOfSync", "Degraded", "Failed", "one or more objects failed to apply, reason: Deployment.apps \\\"web\\\" is invalid", outOfSync))
	code, stdout, stderr := runGitopsStatus(t, map[string]any{"kubeconfig": string(api.kubeconfig)})
	assert.Equal(t, exitcode.Failed, code)
	assert.Contains(t, stdout, "sync:      OutOfSync to 5b0c3e1f9a7d2c4b8e6f1a3d5c7b9e0f2a4c6d8e\n")
	assert.Contains(t, stdout, "health:    Degraded\n")
	assert.Contains(t, stdout, "operation: Failed: one or more objects failed to apply, reason: Deployment.apps \"web\" is invalid\n")
	assert.Contains(t, stdout, "\n2 of 4 resources not synced or not healthy:\n"+
		"  Deployment apps/web: sync=OutOfSync, health=Degraded (Deployment \"web\" exceeded its progress deadline)\n"+
		"  Namespace monitoring: sync=OutOfSync, health=Missing\n")
	assert.NotContains(t, stdout, "api")
	assert.NotContains(t, stdout, "web-config")
	assert.Equal(t, "stackctl gitops-status: Application argocd/root is not synced and healthy: sync OutOfSync, health Degraded (2 resources listed above)\n", stderr)

	// Synced, but a child still progressing: not yet healthy.
	progressing := `[
  {"group": "argoproj.io", "health": {"status": "Progressing"}, "kind": "Application", "name": "web", "namespace": "argocd", "status": "Synced", "version": "v1alpha1"}
]`
	api = startArgoAPI(t, true, rootApp("Synced", "Progressing", "Succeeded", "successfully synced (all tasks run)", progressing))
	code, stdout, stderr = runGitopsStatus(t, map[string]any{"kubeconfig": string(api.kubeconfig)})
	assert.Equal(t, exitcode.Failed, code)
	assert.Contains(t, stdout, "  Application argocd/web: sync=Synced, health=Progressing\n")
	assert.Contains(t, stderr, "sync Synced, health Progressing (1 resource listed above)")
}

// Without the root Application, or without Argo CD's
// CustomResourceDefinition, the stack has no GitOps hand-off: the command
// says so and what to do, and fails.
func TestGitopsStatusNoApplication(t *testing.T) {
	t.Parallel()
	for name, crd := range map[string]bool{"no Application": true, "no Argo CD": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			api := startArgoAPI(t, crd, "")
			code, stdout, stderr := runGitopsStatus(t, map[string]any{"kubeconfig": string(api.kubeconfig)})
			assert.Equal(t, exitcode.Failed, code)
			assert.Empty(t, stdout)
			assert.Equal(t, "stackctl gitops-status: stack homelab has no GitOps hand-off: its cluster has no Argo CD Application argocd/root "+
				"(the stack has no `gitops` section, or Argo CD is not installed yet); add a gitops section to Pulumi.homelab.yaml and run `make up STACK=homelab`\n", stderr)
			assert.EqualValues(t, 1, api.calls.Load())
		})
	}
}

// A stack whose outputs have no kubeconfig has no cluster yet: `make up`
// first. Nothing else is read.
func TestGitopsStatusNoKubeconfigOutput(t *testing.T) {
	t.Parallel()
	for name, outs := range map[string]map[string]any{
		"no outputs":    {},
		"no kubeconfig": {"talosconfig": "context: homelab\n"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runGitopsStatus(t, outs)
			assert.Equal(t, exitcode.Failed, code)
			assert.Empty(t, stdout)
			assert.Equal(t, "stackctl gitops-status: stack homelab has no kubeconfig output: its cluster is not made yet (or was destroyed); run `make up STACK=homelab` first\n", stderr)
		})
	}
}
