// Package drainparity holds internal/kubeapi's drain to kubectl's
// (k8s.io/kubectl/pkg/drain) on the real kube-apiserver: its test, build
// tag e2e, runs under `make e2e-kube`.
package drainparity
