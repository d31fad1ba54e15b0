#!/usr/bin/env bash
# Checks, before the first `kubectl apply`, what the install needs of this machine and of the
# cluster kubectl points at (deploy/README.md, "Preflight"). Reads only; changes nothing.
#
#   deploy/preflight.sh            from the repository root
#
# Each line: PASS, WARN (works, with the limit said) or FAIL (the install will not work as
# documented), then how to check it by hand. Exits 1 when anything FAILs, else 0.
# Usage: preflight.sh [--cert-manager]
#   --cert-manager   certificates come from cert-manager (its CRDs are checked, openssl is not)
set -uo pipefail

usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; }
CERT_MANAGER=0
while [ $# -gt 0 ]; do
  case "$1" in
    --cert-manager) CERT_MANAGER=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "preflight.sh: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
done

FAILED=0
pass() { printf 'PASS  %s\n' "$1"; }
warn() { printf 'WARN  %s\n      %s\n' "$1" "$2"; }
fail() { printf 'FAIL  %s\n      %s\n' "$1" "$2"; FAILED=1; }

# -- this machine -------------------------------------------------------------------------------
if [ -f deploy/kustomization.yaml ] && [ -f deploy/tls/make-certs.sh ]; then
  pass "run from the repository root (deploy/ and deploy/tls/ are here)"
else
  fail "not run from the repository root" "cd into the kube-gpu-extender checkout: every -k deploy/... path is relative to it"
fi
if command -v kubectl >/dev/null; then
  pass "kubectl: $(kubectl version --client 2>/dev/null | head -1)"
else
  fail "kubectl is not installed" "install kubectl (kustomize is built in): https://kubernetes.io/docs/tasks/tools/"
  exit 1
fi
if [ "$CERT_MANAGER" = 0 ]; then
  if command -v openssl >/dev/null; then pass "openssl (deploy/tls/make-certs.sh)"; else
    fail "openssl is not installed" "deploy/tls/make-certs.sh needs it (or pass --cert-manager and use deploy/overlays/cert-manager)"
  fi
fi
if command -v docker >/dev/null || command -v podman >/dev/null || command -v buildah >/dev/null; then
  pass "an image builder (deploy/build-images.sh: docker, podman or buildah)"
else
  warn "no image builder (docker, podman, buildah)" "deploy/build-images.sh needs one, here or on another machine: no image is released yet"
fi

# -- the cluster ----------------------------------------------------------------------------------
server=$(kubectl get --raw /version 2>/dev/null | sed -n 's/.*"minor": *"\([0-9]*\).*/\1/p')
if [ -z "$server" ]; then
  fail "cannot reach the cluster" "kubectl version (check the current context: kubectl config current-context)"
  exit 1
fi
if [ "$server" -ge 34 ]; then
  pass "Kubernetes 1.$server (DRA resource.k8s.io/v1 needs >= 1.34); set gpu-scheduler's image to v1.$server.x (deploy/README.md, Supported Kubernetes versions)"
else
  warn "Kubernetes 1.$server is older than 1.34" "DRA's resource.k8s.io/v1 is missing: device-plugin GPUs work, DRA and device taints do not; gpu-scheduler's image must be v1.$server.x"
fi
allowed=1
for verb_resource in "create clusterroles" "create clusterrolebindings" "create namespaces" "create daemonsets -n gpu-extender"; do
  # shellcheck disable=SC2086
  if [ "$(kubectl auth can-i $verb_resource 2>/dev/null)" != yes ]; then
    allowed=0
    fail "you may not $verb_resource" "kubectl auth can-i $verb_resource (the install creates cluster-wide RBAC: a cluster admin runs it)"
  fi
done
[ "$allowed" = 0 ] || pass "you may create the cluster-wide RBAC, the namespace and its workloads"
if kubectl get runtimeclass nvidia >/dev/null 2>&1; then
  pass "RuntimeClass nvidia"
else
  fail "no RuntimeClass nvidia" "kubectl get runtimeclass nvidia (the GPU Operator makes it; by hand: deploy/README.md, Prerequisites). Without it the agent DaemonSet's pods are refused (FailedCreate)"
fi
gpu_nodes=$(kubectl get nodes -l nvidia.com/gpu.present=true -o name 2>/dev/null | wc -l)
if [ "$gpu_nodes" -gt 0 ]; then
  pass "$gpu_nodes GPU node(s) labelled nvidia.com/gpu.present=true (an agent each)"
else
  fail "no node labelled nvidia.com/gpu.present=true" "kubectl get nodes -l nvidia.com/gpu.present=true (GPU Feature Discovery sets it; without it the agent DaemonSet rolls out zero pods)"
fi
# The extender's 2 replicas: required anti-affinity on the hostname, no tolerations.
free=$(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name}{"|"}{.spec.unschedulable}{"|"}{range .spec.taints[*]}{.effect}{","}{end}{"\n"}{end}' 2>/dev/null \
  | awk -F'|' '$2 != "true" && $3 !~ /NoSchedule|NoExecute/' | wc -l)
if [ "$free" -ge 2 ]; then
  pass "$free schedulable node(s) without NoSchedule/NoExecute taints (the extender's 2 replicas need 2)"
else
  fail "$free schedulable node(s) without NoSchedule/NoExecute taints" "the extender's 2 replicas need 2 (one per node, no tolerations): kubectl get nodes -o custom-columns=NAME:.metadata.name,TAINTS:.spec.taints"
fi
if [ "$CERT_MANAGER" = 1 ]; then
  if kubectl get crd certificates.cert-manager.io issuers.cert-manager.io >/dev/null 2>&1; then
    pass "cert-manager's CRDs"
  else
    fail "cert-manager is not installed" "kubectl get crd certificates.cert-manager.io (install cert-manager first, or use deploy/tls/make-certs.sh)"
  fi
fi
if kubectl get crd acceleratorclasses.ome.io >/dev/null 2>&1; then
  pass "OME's AcceleratorClass CRD (classes and runtimes are read)"
else
  warn "no OME" "optional: without it the extender places by GPU state alone (deploy/README.md, Prerequisites)"
fi

[ "$FAILED" = 0 ] && echo "preflight: ready to install" || echo "preflight: fix the FAIL lines above first"
exit "$FAILED"
