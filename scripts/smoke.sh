#!/usr/bin/env bash
# `make smoke STACK=local`: the local cluster's life with the real Talos image, as CI's
# local-cluster workflow runs it and any user with Docker, network and kubectl can: make local,
# every node Ready, Cilium rolled out, a preview without changes, make destroy, nothing left.
# The cluster is destroyed on failure too (SMOKE_KEEP=1 keeps it to look at).
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

step "make local"
"$make" --no-print-directory local
export KUBECONFIG=$PWD/.access/local/kubeconfig

nodes=$(grep -cE '^[[:space:]]+ip:' Pulumi.local.yaml)
step "every node Ready ($nodes)"
kubectl wait --for=condition=Ready nodes --all --timeout=10m
ready=$(kubectl get nodes --no-headers | grep -c ' Ready ')
[ "$ready" -eq "$nodes" ] || { echo "make smoke: $ready nodes Ready, the stack has $nodes" >&2; exit 1; }

step "Cilium rolled out"
kubectl -n kube-system rollout status daemonset/cilium --timeout=10m

step "a preview without changes"
"$make" --no-print-directory preview STACK=local EXPECT_NO_CHANGES=1

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
