#!/usr/bin/env bash
# Builds gpu-agent and gpu-extender from this checkout, pushes them to YOUR registry, and writes
# deploy/components/images/kustomization.yaml, the component that deploy/, every overlay under
# deploy/overlays/ and your own overlays list: each of them then installs these images. Until 0.1.0
# is released there are no published images (CHANGELOG.md): this is the install's first step.
#
#   deploy/build-images.sh REGISTRY     e.g. registry.example.com/gpu
#   kubectl apply -k deploy/            then the rest of the install as documented
#   (or helm install gpu-extender deploy/ ... --set images.tag=$(deploy/build-images.sh --print-tag))
#
# The tag is new for every commit (VERSION-gCOMMIT, plus -dirty.HASH for uncommitted changes to
# what the images hold), so an upgrade changes the pod templates and every node pulls it, and a
# registry with immutable tags takes each push. One platform by default, the machine's own, with
# whichever builder is here (docker, podman or buildah; `docker login REGISTRY` or `podman login`
# first). --platform linux/amd64,linux/arm64 builds one multi-platform image with
# `docker buildx --push`, which needs a builder that can (the default `docker` driver cannot:
# `docker buildx create --use --driver docker-container`, plus QEMU for a foreign architecture).
#
# Usage: build-images.sh REGISTRY [--tag TAG] [--platform LIST] [--builder NAME] [--no-push]
#                        [--no-build] [--pull-secret NAME] [--dry-run]
#   --tag TAG          image tag (default: VERSION-gCOMMIT[-dirty.HASH], VERSION-TIME outside git)
#   --platform LIST    comma-separated platforms (default: this machine's)
#   --builder NAME     docker, podman or buildah (default: the first found, in that order)
#   --no-push          build only (the component is written all the same: push them yourself)
#   --no-build         write the component only: images mirrored or built elsewhere (with --tag)
#   --pull-secret NAME the pods pull with this Secret of the gpu-extender namespace (a private
#                      registry: `kubectl -n gpu-extender create secret docker-registry NAME ...`)
#   --dry-run          print the commands and the component, build and write nothing
#   --print-tag        print the default tag of this checkout and exit (no REGISTRY needed)
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
COMPONENT="$ROOT/deploy/components/images/kustomization.yaml"
usage() { sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "build-images.sh: $*" >&2; exit 2; }

# What the images hold (.dockerignore admits these): a change to any of them is a new image.
IMAGE_INPUTS=(gpuextender pyproject.toml README.md Dockerfile.agent Dockerfile.extender .dockerignore)
default_tag() {
  local version commit dirty
  version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$ROOT/gpuextender/__init__.py")
  if commit=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null); then
    if [ -z "$(cd "$ROOT" && git status --porcelain -- "${IMAGE_INPUTS[@]}")" ]; then
      echo "$version-g$commit"
    else  # the uncommitted changes' own hash: the same changes, the same tag
      dirty=$(cd "$ROOT" && { git diff HEAD -- "${IMAGE_INPUTS[@]}"; git ls-files --others --exclude-standard -z -- "${IMAGE_INPUTS[@]}" | xargs -0r sha256sum; } | sha256sum | cut -c1-8)
      echo "$version-g$commit-dirty.$dirty"
    fi
  else
    echo "$version-$(date -u +%Y%m%d%H%M%S)"
  fi
}

REGISTRY=""
TAG=""
PLATFORM=""
BUILDER=""
PUSH=1
BUILD=1
PULL_SECRET=""
DRY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) TAG=${2:?--tag needs a value}; shift 2 ;;
    --platform) PLATFORM=${2:?--platform needs a list}; shift 2 ;;
    --builder) BUILDER=${2:?--builder needs a name}; shift 2 ;;
    --no-push) PUSH=0; shift ;;
    --no-build) BUILD=0; PUSH=0; shift ;;
    --pull-secret) PULL_SECRET=${2:?--pull-secret needs a Secret name}; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    --print-tag) default_tag; exit 0 ;;
    --overlay|--base) die "$1 is gone: the script writes deploy/components/images/, which deploy/ and every overlay list (deploy/README.md, Images)" ;;
    -h|--help) usage; exit 0 ;;
    -*) die "unknown option $1 (--help)" ;;
    *) [ -z "$REGISTRY" ] || die "one REGISTRY only (got '$REGISTRY' and '$1')"; REGISTRY=$1; shift ;;
  esac
done
[ -n "$REGISTRY" ] || { usage >&2; die "REGISTRY is required, e.g. registry.example.com/gpu"; }
REGISTRY=${REGISTRY%/}
# An image reference: lower-case registry/path, a tag of [A-Za-z0-9_.-] (128 at most).
[[ "$REGISTRY" =~ ^[a-z0-9]([a-z0-9._:-]*[a-z0-9])?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*$ ]] \
  || die "'$REGISTRY' is not a registry path (lower case, e.g. registry.example.com/gpu)"
[ -n "$TAG" ] || TAG=$(default_tag)
[[ "$TAG" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "'$TAG' is not an image tag"
# A Secret's name: a DNS subdomain.
[ -z "$PULL_SECRET" ] || [[ "$PULL_SECRET" =~ ^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$ ]] \
  || die "'$PULL_SECRET' is not a Secret name (lower case, digits, '-' and '.')"

if [ "$BUILD" = 0 ]; then
  BUILDER=${BUILDER:-none}
elif [ -z "$BUILDER" ]; then
  for b in docker podman buildah; do command -v "$b" >/dev/null && { BUILDER=$b; break; }; done
  [ -n "$BUILDER" ] || [ "$DRY" = 1 ] || die "no image builder found: install docker, podman or buildah"
  BUILDER=${BUILDER:-docker}
fi
case "$BUILD$BUILDER" in 1docker|1podman|1buildah|0*) ;; *) die "--builder must be docker, podman or buildah" ;; esac
MULTI=0
case "$PLATFORM" in *,*) MULTI=1 ;; esac
if [ "$MULTI" = 1 ]; then
  [ "$BUILDER" = docker ] || die "a multi-platform image needs docker buildx (--builder docker); build one platform per run otherwise"
  [ "$PUSH" = 1 ] || die "a multi-platform image can only be pushed (buildx keeps none locally): drop --no-push"
fi

run() {
  printf '+'; printf ' %q' "$@"; printf '\n'
  [ "$DRY" = 1 ] || "$@"
}

for i in agent extender; do
  [ "$BUILD" = 1 ] || break
  image="$REGISTRY/gpu-$i:$TAG"
  if [ "$MULTI" = 1 ]; then
    run docker buildx build --platform "$PLATFORM" -f "$ROOT/Dockerfile.$i" -t "$image" --push "$ROOT"
    continue
  fi
  platform=()
  [ -z "$PLATFORM" ] || platform=(--platform "$PLATFORM")
  case "$BUILDER" in
    docker|podman) run "$BUILDER" build "${platform[@]}" -f "$ROOT/Dockerfile.$i" -t "$image" "$ROOT" ;;
    buildah) run buildah bud "${platform[@]}" -f "$ROOT/Dockerfile.$i" -t "$image" "$ROOT" ;;
  esac
  if [ "$PUSH" = 1 ]; then
    run "$BUILDER" push "$image"
  fi
done

component() {
  cat <<EOF
# Written by deploy/build-images.sh $REGISTRY (tag $TAG): the images deploy/, every overlay under
# deploy/overlays/ and your own overlays install (deploy/README.md, "Images"). The script writes
# this file whole on each run; kube-scheduler's version is kube-scheduler.yaml beside it, yours to set.
apiVersion: kustomize.config.k8s.io/v1alpha1
kind: Component
images:
  - name: ghcr.io/kube-gpu-extender/gpu-agent
    newName: $REGISTRY/gpu-agent
    newTag: "$TAG"
  - name: ghcr.io/kube-gpu-extender/gpu-extender
    newName: $REGISTRY/gpu-extender
    newTag: "$TAG"
transformers:
  - kube-scheduler.yaml
EOF
  [ -n "$PULL_SECRET" ] || return 0
  local kind
  cat <<EOF
# Every pod of ours pulls with the Secret $PULL_SECRET of the gpu-extender namespace.
patches:
EOF
  for kind in Deployment DaemonSet; do
    cat <<EOF
  - target:
      kind: $kind
      labelSelector: app.kubernetes.io/part-of=kube-gpu-extender
    patch: |-
      - op: add
        path: /spec/template/spec/imagePullSecrets
        value: [{name: $PULL_SECRET}]
EOF
  done
}

if [ "$DRY" = 1 ]; then
  echo "would write ${COMPONENT#"$ROOT"/}:"
  component
  exit 0
fi
tmp=$(mktemp "$COMPONENT.XXXXXX")
component > "$tmp"
mv "$tmp" "$COMPONENT"  # whole or not at all: a kustomization never reads a half-written file
echo "wrote ${COMPONENT#"$ROOT"/} (tag $TAG): kubectl apply -k deploy/ (or any overlay) installs these images"
