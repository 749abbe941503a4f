#!/usr/bin/env bash
# deploy/kubernetes/tlsrum.yaml is the Helm chart rendered with its default
# values (one source, agent/tests/deploy_k8s.rs checks they agree): rerun
# this (`make k8s-manifest`) after changing deploy/helm/tlsrum.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
export PATH="$(go env GOPATH)/bin:$PATH"
{
  cat <<'HEAD'
# tlsrum as a DaemonSet, for clusters without Helm: deploy/helm/tlsrum
# rendered with its default values by scripts/k8s-manifest.sh (edit the
# chart, not this file). Set the image and the interfaces, then
#   kubectl create namespace monitoring
#   kubectl apply -f deploy/kubernetes/tlsrum.yaml
# See docs/running.md, "Kubernetes".
HEAD
  helm template tlsrum "$root/deploy/helm/tlsrum" --namespace monitoring
} >"$root/deploy/kubernetes/tlsrum.yaml"
