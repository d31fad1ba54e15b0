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
if command -v helm >/dev/null; then
  pass "helm: $(helm version --short 2>/dev/null) (helm install gpu-extender deploy/; tested with v4.1.4)"
else
  warn "helm is not installed" "optional: the Quickstart's helm install; kubectl apply -k deploy/ installs the same objects without it"
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
# kubectl's skew policy: within one minor of the server. An older one may not read the server's
# OpenAPI, and `kubectl apply` then refuses before sending anything.
client=$(kubectl version --client -o json 2>/dev/null | sed -n 's/.*"minor": *"\([0-9]*\).*/\1/p' | head -1)
if [ -n "$client" ] && [ $((client - server)) -le 1 ] && [ $((server - client)) -le 1 ]; then
  pass "kubectl 1.$client is within one minor of the cluster's 1.$server"
elif [ -n "$client" ]; then
  fail "kubectl 1.$client is more than one minor from the cluster's 1.$server" "install kubectl 1.$server (kubectl's version skew policy); kubectl version"
fi
# gpu-scheduler's kube-scheduler: never newer than the API server, at most one minor older.
pin=deploy/components/images/kube-scheduler.yaml
sched=$(sed -n 's/^ *newTag: *"\{0,1\}v1\.\([0-9]*\)\..*/\1/p' "$pin" 2>/dev/null | head -1)
if [ -z "$sched" ]; then
  fail "no kube-scheduler version in $pin" "it pins gpu-scheduler's image: newTag: v1.$server.x (deploy/README.md, The scheduler's version and feature gates)"
elif [ "$sched" = "$server" ]; then
  pass "gpu-scheduler runs kube-scheduler 1.$sched, the cluster's minor ($pin)"
elif [ "$sched" -gt "$server" ] || [ $((server - sched)) -gt 1 ]; then
  fail "gpu-scheduler's kube-scheduler 1.$sched does not fit the cluster's 1.$server" "set newTag: v1.$server.x in $pin (a scheduler newer than the API server, or two minors older, is outside Kubernetes' skew policy)"
else
  warn "gpu-scheduler's kube-scheduler 1.$sched is one minor older than the cluster's 1.$server" "allowed by the skew policy; set newTag: v1.$server.x in $pin for the cluster's scheduling features"
fi
# kube-scheduler v1.36 with DRADeviceTaintRules=true panics on the first DeviceTaintRule, which the
# extender writes by default (components/device-taints): deploy/README.md, GPU health and DRA.
if kubectl api-resources --api-group=resource.k8s.io -o name 2>/dev/null | grep -q '^devicetaintrules\.'; then
  schedulers=$(kubectl -n kube-system get pods -l component=kube-scheduler -o jsonpath='{range .items[*]}{.spec.containers[0].image}{" "}{.spec.containers[0].command}{"\n"}{end}' 2>/dev/null)
  if printf '%s\n' "$schedulers" | grep -q 'kube-scheduler:v1\.36\..*DRADeviceTaintRules=true'; then
    fail "the cluster's kube-scheduler v1.36 runs with DRADeviceTaintRules=true" "it panics on the first DeviceTaintRule the extender writes: turn that gate off on it, or set --device-taints off (deploy/README.md, GPU health and DRA)"
  elif [ -z "$schedulers" ] && [ "$server" = 36 ]; then
    warn "the cluster serves DeviceTaintRules and its kube-scheduler cannot be seen" "kube-scheduler v1.36 with DRADeviceTaintRules=true panics on the first rule the extender writes: check its flags, or set --device-taints off"
  else
    pass "DeviceTaintRules served; no kube-scheduler v1.36 with DRADeviceTaintRules=true seen"
  fi
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
