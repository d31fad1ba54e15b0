#!/usr/bin/env bash
# Builds gpu-agent and gpu-extender from this checkout, pushes them to YOUR registry, and writes
# a kustomize overlay that installs deploy/ with them. Until 0.1.0 is released there are no
# published images (CHANGELOG.md): this is the install's first step.
#
#   deploy/build-images.sh REGISTRY                 e.g. registry.example.com/gpu
#   kubectl apply -k deploy/overlays/my-registry/   then the rest of the install as documented
#
# One platform by default, the machine's own, with whichever builder is here (docker, podman or
# buildah; `docker login REGISTRY` or `podman login` first). --platform linux/amd64,linux/arm64
# builds one multi-platform image with `docker buildx --push`, which needs a builder that can
# (the default `docker` driver cannot: `docker buildx create --use --driver docker-container`,
# plus QEMU for a foreign architecture).
#
# Usage: build-images.sh REGISTRY [--tag TAG] [--platform LIST] [--builder NAME] [--no-push]
#                        [--base DIR] [--overlay DIR] [--dry-run]
#   --tag TAG        image tag (default: the package version, gpuextender/__init__.py)
#   --platform LIST  comma-separated platforms (default: this machine's)
#   --builder NAME   docker, podman or buildah (default: the first found, in that order)
#   --no-push        build only (the overlay is written all the same)
#   --base DIR       what the overlay installs (default: deploy; e.g. deploy/overlays/opt-in-by-namespace)
#   --overlay DIR    where the overlay goes (default: deploy/overlays/my-registry, git-ignored)
#   --dry-run        print the commands, write the overlay, build nothing
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
usage() { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "build-images.sh: $*" >&2; exit 2; }

REGISTRY=""
TAG=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$ROOT/gpuextender/__init__.py")
PLATFORM=""
BUILDER=""
PUSH=1
OVERLAY="$ROOT/deploy/overlays/my-registry"
BASE="$ROOT/deploy"
DRY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) TAG=${2:?--tag needs a value}; shift 2 ;;
    --platform) PLATFORM=${2:?--platform needs a list}; shift 2 ;;
    --builder) BUILDER=${2:?--builder needs a name}; shift 2 ;;
    --no-push) PUSH=0; shift ;;
    --overlay) OVERLAY=${2:?--overlay needs a directory}; shift 2 ;;
    --base) BASE=${2:?--base needs a directory}; shift 2 ;;
    --dry-run) DRY=1; shift ;;
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
[[ "$TAG" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "'$TAG' is not an image tag"
[ -f "$BASE/kustomization.yaml" ] || die "--base $BASE: no kustomization.yaml there"
BASE="$(cd "$BASE" && pwd)"

if [ -z "$BUILDER" ]; then
  for b in docker podman buildah; do command -v "$b" >/dev/null && { BUILDER=$b; break; }; done
  [ -n "$BUILDER" ] || [ "$DRY" = 1 ] || die "no image builder found: install docker, podman or buildah"
  BUILDER=${BUILDER:-docker}
fi
case "$BUILDER" in docker|podman|buildah) ;; *) die "--builder must be docker, podman or buildah" ;; esac
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

# The overlay: deploy/ as it is, with these images. Relative paths, so the checkout can move.
mkdir -p "$OVERLAY"
deploy_rel=$(python3 -c 'import os,sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$BASE" "$OVERLAY")
cat > "$OVERLAY/kustomization.yaml" <<EOF
# Written by deploy/build-images.sh $REGISTRY (tag $TAG): ${BASE#"$ROOT"/}/ with your images.
#   kubectl apply -k ${OVERLAY#"$ROOT"/}/
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $deploy_rel
images:
  - name: ghcr.io/kube-gpu-extender/gpu-agent
    newName: $REGISTRY/gpu-agent
    newTag: "$TAG"
  - name: ghcr.io/kube-gpu-extender/gpu-extender
    newName: $REGISTRY/gpu-extender
    newTag: "$TAG"
EOF
echo "wrote $OVERLAY/kustomization.yaml: kubectl apply -k ${OVERLAY#"$ROOT"/}/"
