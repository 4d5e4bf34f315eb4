#!/usr/bin/env bash
# `make smoke STACK=local`: the local cluster's life with the real Talos image, as CI's
# local-cluster workflow runs it and any user with Docker, network and kubectl can: make local
# at SMOKE_FROM (a Talos release before the example's), every node Ready, Cilium rolled out, a
# LoadBalancer Service answering on an address of the pool, a preview without changes, the example's release rolled through the containers (every node on it,
# Ready), make destroy, nothing left. The cluster is destroyed on failure too (SMOKE_KEEP=1 keeps
# it to look at).
set -euo pipefail
cd "$(dirname "$0")/.."
make=${MAKE:-make}
if [ "${STACK:-}" != local ]; then
  echo "make smoke: only STACK=local (the cluster in Docker on this machine)" >&2
  exit 2
fi
command -v kubectl >/dev/null 2>&1 || { echo "make smoke needs kubectl: https://kubernetes.io/docs/tasks/tools/" >&2; exit 1; }
started=$(date +%s)
step() { echo "=== smoke ($(($(date +%s) - started))s): $*"; }

destroyed=
teardown() {
  local rc=$?
  if [ -z "$destroyed" ] && [ -z "${SMOKE_KEEP:-}" ] && [ -f Pulumi.local.yaml ]; then
    step "destroying after a failure"
    "$make" --no-print-directory destroy STACK=local YES=1 || true
  fi
  exit "$rc"
}
trap teardown EXIT

# The stack file from the example, at the release the smoke starts from.
[ -f Pulumi.local.yaml ] || cp Pulumi.local.yaml.example Pulumi.local.yaml
to=$(sed -nE 's/^[[:space:]]+talosVersion:[[:space:]]*(v[0-9.]+).*/\1/p' Pulumi.local.yaml)
from=${SMOKE_FROM:-v1.13.8}
[ -n "$to" ] || { echo "make smoke: no cluster.talosVersion in Pulumi.local.yaml" >&2; exit 1; }
set_release() { sed -i -E "s/^([[:space:]]+talosVersion:[[:space:]]*)v[0-9.]+/\1$1/" Pulumi.local.yaml; }
set_release "$from"

nodes=$(grep -cE '^[[:space:]]+ip:' Pulumi.local.yaml)
# healthy RELEASE: every node Ready and on RELEASE, Cilium rolled out.
healthy() {
  step "every node Ready ($nodes) on Talos $1"
  kubectl wait --for=condition=Ready nodes --all --timeout=10m
  ready=$(kubectl get nodes --no-headers | grep -c ' Ready ')
  [ "$ready" -eq "$nodes" ] || { echo "make smoke: $ready nodes Ready, the stack has $nodes" >&2; exit 1; }
  images=$(kubectl get nodes -o jsonpath='{range .items[*]}{.status.nodeInfo.osImage}{"\n"}{end}')
  on=$(printf '%s\n' "$images" | grep -c "($1)" || true)
  [ "$on" -eq "$nodes" ] || { echo "make smoke: $on of $nodes nodes run Talos $1: $images" >&2; exit 1; }
  step "Cilium rolled out"
  kubectl -n kube-system rollout status daemonset/cilium --timeout=10m
}

step "make local at Talos $from"
"$make" --no-print-directory local
export KUBECONFIG=$PWD/.access/local/kubeconfig
healthy "$from"

# A Service of type LoadBalancer gets an address of the example's pool (Cilium's IPAM) and
# answers there from this machine (Cilium's L2 announcement on the Docker network).
step "a LoadBalancer Service answers on an address of the pool"
kubectl create deployment smoke-lb --image=registry.k8s.io/e2e-test-images/agnhost:2.53 -- /agnhost netexec --http-port=8080
kubectl expose deployment smoke-lb --type=LoadBalancer --port=80 --target-port=8080
kubectl wait --for=jsonpath='{.status.loadBalancer.ingress[0].ip}' service/smoke-lb --timeout=3m
lb=$(kubectl get service smoke-lb -o jsonpath='{.status.loadBalancer.ingress[0].ip}')
case "$lb" in
  10.5.0.2[0-1][0-9] | 10.5.0.220) ;;
  *) echo "make smoke: the Service got $lb, not an address of the pool 10.5.0.200-10.5.0.220" >&2; exit 1 ;;
esac
kubectl rollout status deployment/smoke-lb --timeout=5m
curl -fsS --max-time 5 --retry 24 --retry-delay 5 --retry-all-errors "http://$lb/" >/dev/null
kubectl delete service/smoke-lb deployment/smoke-lb --wait=true

step "a preview without changes"
"$make" --no-print-directory preview STACK=local EXPECT_NO_CHANGES=1

step "Talos $from to $to through the containers"
set_release "$to"
"$make" --no-print-directory up STACK=local YES=1
healthy "$to"

step "make destroy"
"$make" --no-print-directory destroy STACK=local YES=1
destroyed=1

step "nothing of the stack left"
left=
for kind in container volume network; do
  found=$(docker "$kind" ls -q --filter label=io.fluodata.talos.stack=talos-cluster/local)
  [ -z "$found" ] || left+="$kind: $found "
done
[ -z "$left" ] || { echo "make smoke: left after destroy: $left" >&2; exit 1; }
step "passed"
