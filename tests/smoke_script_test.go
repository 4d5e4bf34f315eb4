package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/testkit/scripttest"
)

// smokeScript runs scripts/smoke.sh in a folder of its own with the local
// example as the stack file and the given tools as small scripts; make,
// kubectl and docker log their arguments to calls.log.
func smokeScript(t *testing.T, tools map[string]string, env ...string) (calls []string, out string, err error) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "scripts"), 0o700))
	require.NoError(t, os.MkdirAll(bin, 0o700))
	for from, to := range map[string]string{"scripts/smoke.sh": "scripts/smoke.sh", "Pulumi.local.yaml.example": "Pulumi.local.yaml.example"} {
		b, err := os.ReadFile(filepath.Join("..", from))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, to), b, 0o600))
	}
	for _, tool := range []string{"bash", "cat", "grep", "date", "dirname", "sed", "cp"} {
		p, err := exec.LookPath(tool)
		require.NoError(t, err)
		require.NoError(t, os.Symlink(p, filepath.Join(bin, tool)))
	}
	log := filepath.Join(dir, "calls.log")
	for _, name := range []string{"make", "kubectl", "docker", "curl"} {
		body := tools[name]
		scripttest.Write(t, filepath.Join(bin, name), "#!"+bashPath(t)+"\necho \""+name+" $*\" >> "+log+"\n"+body+"\n")
	}
	cmd := exec.Command(bashPath(t), filepath.Join(dir, "scripts/smoke.sh"))
	cmd.Env = append([]string{"PATH=" + bin, "MAKE=" + filepath.Join(bin, "make"), "STACK=local", "UPGRADED=" + filepath.Join(dir, "upgraded")}, env...)
	b, err := cmd.CombinedOutput()
	raw, _ := os.ReadFile(log)
	return strings.Split(strings.TrimSpace(string(raw)), "\n"), string(b), err
}

// readyNodes is kubectl answering as a two-node cluster that runs Talos
// v1.13.8 until make up ran ($UPGRADED), v1.13.9 after.
const readyNodes = `if [ "$2" = service ]; then echo "${LB_IP:-10.5.0.200}"; exit 0; fi
if [ "$3" = -o ]; then v=v1.13.8; [ -f "$UPGRADED" ] && v=v1.13.9; printf 'Talos (%s)\nTalos (%s)\n' $v $v; exit 0; fi
[ "$1" = get ] && printf 'cp1   Ready   control-plane   1m   v1.36.3\nw1   Ready   <none>   1m   v1.36.3\n'; exit 0`

// make smoke: make local at the release before the example's, the checks,
// a preview that must show no change, the example's release rolled out
// and checked, make destroy, and the Docker objects of the stack gone, in
// that order.
func TestMakeSmokeWalksTheLocalClustersLife(t *testing.T) {
	t.Parallel()
	calls, out, err := smokeScript(t, map[string]string{
		"kubectl": readyNodes,
		"make":    `if [ "$2" = up ]; then grep -q 'talosVersion: v1.13.9' Pulumi.local.yaml && : > "$UPGRADED"; fi; exit 0`,
	})
	require.NoError(t, err, out)
	checks := []string{
		"kubectl wait --for=condition=Ready nodes --all --timeout=10m",
		"kubectl get nodes --no-headers",
		"kubectl get nodes -o jsonpath={range .items[*]}{.status.nodeInfo.osImage}{\"\\n\"}{end}",
		"kubectl -n kube-system rollout status daemonset/cilium --timeout=10m",
	}
	want := slices.Concat([]string{"make --no-print-directory local"}, checks, []string{
		"make --no-print-directory preview STACK=local EXPECT_NO_CHANGES=1",
		"make --no-print-directory up STACK=local YES=1",
	}, checks, []string{
		"make --no-print-directory destroy STACK=local YES=1",
		"docker container ls -q --filter label=io.fluodata.talos.stack=talos-cluster/local",
		"docker volume ls -q --filter label=io.fluodata.talos.stack=talos-cluster/local",
		"docker network ls -q --filter label=io.fluodata.talos.stack=talos-cluster/local",
	})
	lb := []string{
		"kubectl create deployment smoke-lb --image=registry.k8s.io/e2e-test-images/agnhost:2.53 -- /agnhost netexec --http-port=8080",
		"kubectl expose deployment smoke-lb --type=LoadBalancer --port=80 --target-port=8080",
		"kubectl wait --for=jsonpath={.status.loadBalancer.ingress[0].ip} service/smoke-lb --timeout=3m",
		"kubectl get service smoke-lb -o jsonpath={.status.loadBalancer.ingress[0].ip}",
		"kubectl rollout status deployment/smoke-lb --timeout=5m",
		"curl -fsS --max-time 5 --retry 24 --retry-delay 5 --retry-all-errors http://10.5.0.200/",
		"kubectl delete service/smoke-lb deployment/smoke-lb --wait=true",
	}
	want = slices.Insert(want, 1+len(checks), lb...)
	assert.Equal(t, want, calls)
	assert.Contains(t, out, "=== smoke")
	assert.Contains(t, out, "passed")
}

// A failed check destroys the cluster all the same (unless SMOKE_KEEP),
// and fails; a node not Ready, or anything left after destroy, fails.
func TestMakeSmokeFailsAndCleansUp(t *testing.T) {
	t.Parallel()
	calls, out, err := smokeScript(t, map[string]string{
		"kubectl": `[ "$1" = get ] && printf 'cp1   Ready   control-plane   1m   v1.36.3\nw1   NotReady   <none>   1m   v1.36.3\n'; exit 0`,
	})
	require.Error(t, err)
	assert.Contains(t, out, "1 nodes Ready, the stack has 2")
	assert.Equal(t, "make --no-print-directory destroy STACK=local YES=1", calls[len(calls)-1], "destroyed after the failure")

	calls, _, err = smokeScript(t, map[string]string{"kubectl": "exit 1"}, "SMOKE_KEEP=1")
	require.Error(t, err)
	assert.NotContains(t, strings.Join(calls, "\n"), "destroy", "SMOKE_KEEP keeps the cluster")

	_, out, err = smokeScript(t, map[string]string{
		"kubectl": readyNodes,
		"make":    `if [ "$2" = up ]; then : > "$UPGRADED"; fi; exit 0`,
		"docker":  `[ "$1" = volume ] && echo local-cp1-var; exit 0`,
	})
	require.Error(t, err)
	assert.Contains(t, out, "left after destroy: volume: local-cp1-var")

	// The upgrade that leaves a node on the old release fails.
	_, out, err = smokeScript(t, map[string]string{"kubectl": readyNodes})
	require.Error(t, err)
	assert.Contains(t, out, "0 of 2 nodes run Talos v1.13.9")

	// A LoadBalancer address outside the pool fails.
	_, out, err = smokeScript(t, map[string]string{"kubectl": readyNodes}, "LB_IP=10.5.0.3")
	require.Error(t, err)
	assert.Contains(t, out, "the Service got 10.5.0.3, not an address of the pool")

	_, out, err = smokeScript(t, nil, "STACK=prod")
	require.Error(t, err)
	assert.Contains(t, out, "only STACK=local")
}
