#!/usr/bin/env bash
# Makes the certificates kube-gpu-extender needs, with openssl only:
#
#   ca.crt, ca.key                 a private CA (kept here, never in the cluster)
#   gpu-extender-tls/              the extender's serving certificate (HTTPS for kube-scheduler,
#     tls.crt tls.key ca.crt         TLS for the agents' gRPC), SANs for both Services + loopback
#   gpu-agent-tls/                 the agents' client certificate (mTLS on gRPC)
#     tls.crt tls.key ca.crt
#
# Each directory holds exactly the keys of the Secret of the same name. Then either
#   kubectl apply --server-side -k deploy/tls/        (when OUTDIR is the default deploy/tls/out)
# or run the `kubectl create secret` commands this script prints.
#
# Re-running keeps an existing CA (out/ca.crt + out/ca.key) and issues new leaf certificates,
# so renewal needs no kube-scheduler restart; --new-ca replaces the CA as well.
#
# Usage: make-certs.sh [-o OUTDIR] [--days N] [--ca-days N] [--new-ca]
#   -o OUTDIR     where to write (default: out/ next to this script)
#   --days N      leaf certificate lifetime (default 365)
#   --ca-days N   CA lifetime (default 3650)
#   --new-ca      make a new CA even if OUTDIR has one
# Environment: CLUSTER_DOMAIN (default cluster.local) for the *.svc.CLUSTER_DOMAIN SANs.
set -euo pipefail

NAMESPACE=gpu-extender          # fixed: it is part of every DNS name below and in deploy/
SERVICES=(gpu-extender gpu-extender-agents)
CLUSTER_DOMAIN=${CLUSTER_DOMAIN:-cluster.local}
OUTDIR="$(cd "$(dirname "$0")" && pwd)/out"
DAYS=365
CA_DAYS=3650
NEW_CA=0

usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    -o) OUTDIR=${2:?-o needs a directory}; shift 2 ;;
    --days) DAYS=${2:?}; shift 2 ;;
    --ca-days) CA_DAYS=${2:?}; shift 2 ;;
    --new-ca) NEW_CA=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "make-certs.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
command -v openssl >/dev/null || { echo "make-certs.sh: openssl not found" >&2; exit 2; }

umask 077
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# EC P-256 keys in the traditional "EC PRIVATE KEY" form: read by Go (kube-scheduler), Python's
# ssl and gRPC alike, and by OpenSSL 1.1, 3.x and LibreSSL.
new_key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1"; }
serial() { echo "0x01$(openssl rand -hex 15)"; }

# --- CA ---------------------------------------------------------------------------------------
if [ "$NEW_CA" = 1 ] || [ ! -s "$OUTDIR/ca.crt" ] || [ ! -s "$OUTDIR/ca.key" ]; then
  new_key "$OUTDIR/ca.key"
  cat > "$WORK/ca.cnf" <<EOF
[req]
distinguished_name = dn
prompt = no
[dn]
CN = gpu-extender-ca
O = kube-gpu-extender
[v3_ca]
basicConstraints = critical,CA:TRUE,pathlen:0
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
EOF
  openssl req -x509 -new -sha256 -key "$OUTDIR/ca.key" -days "$CA_DAYS" -set_serial "$(serial)" \
    -config "$WORK/ca.cnf" -extensions v3_ca -out "$OUTDIR/ca.crt"
  echo "made a new CA: $OUTDIR/ca.crt (keep ca.key private; it is not needed in the cluster)"
else
  echo "reusing the CA in $OUTDIR (pass --new-ca to replace it)"
fi

# --- leaf certificates ------------------------------------------------------------------------
# issue NAME CN EXTENDED_KEY_USAGE [SAN]
issue() {
  local name=$1 cn=$2 eku=$3 san=${4:-}
  local dir="$OUTDIR/$name"
  mkdir -p "$dir"
  new_key "$WORK/tls.key"
  openssl req -new -sha256 -key "$WORK/tls.key" -subj "/CN=$cn/O=kube-gpu-extender" -out "$WORK/tls.csr"
  {
    echo "[v3]"
    echo "basicConstraints = critical,CA:FALSE"
    echo "keyUsage = critical,digitalSignature"
    echo "extendedKeyUsage = $eku"
    echo "subjectKeyIdentifier = hash"
    echo "authorityKeyIdentifier = keyid,issuer"
    if [ -n "$san" ]; then echo "subjectAltName = $san"; fi
  } > "$WORK/v3.cnf"
  openssl x509 -req -sha256 -in "$WORK/tls.csr" -CA "$OUTDIR/ca.crt" -CAkey "$OUTDIR/ca.key" \
    -set_serial "$(serial)" -days "$DAYS" -extfile "$WORK/v3.cnf" -extensions v3 -out "$WORK/tls.crt"
  openssl verify -CAfile "$OUTDIR/ca.crt" "$WORK/tls.crt" >/dev/null
  mv "$WORK/tls.key" "$dir/tls.key"
  mv "$WORK/tls.crt" "$dir/tls.crt"
  cp "$OUTDIR/ca.crt" "$dir/ca.crt"
  chmod 600 "$dir/tls.key"
  chmod 644 "$dir/tls.crt" "$dir/ca.crt"
  echo "issued $dir/tls.crt (CN=$cn, $eku)"
}

# kube-scheduler dials https://gpu-extender.gpu-extender.svc (serverName in its tlsConfig); the
# agents dial pod IPs and verify gpu-extender-agents.gpu-extender.svc (--tls-server-name).
# localhost/127.0.0.1: `gpu-extender explain --url https://127.0.0.1:8888 --cacert ca.crt` through
# `kubectl port-forward` (or kubectl exec) verifies too.
SANS=()
for svc in "${SERVICES[@]}"; do
  SANS+=("DNS:$svc" "DNS:$svc.$NAMESPACE" "DNS:$svc.$NAMESPACE.svc" "DNS:$svc.$NAMESPACE.svc.$CLUSTER_DOMAIN")
done
SANS+=("DNS:localhost" "IP:127.0.0.1")
issue gpu-extender-tls gpu-extender serverAuth "$(IFS=,; echo "${SANS[*]}")"
issue gpu-agent-tls gpu-agent clientAuth
chmod 644 "$OUTDIR/ca.crt"
chmod 600 "$OUTDIR/ca.key"

cat <<EOF

Next: create the Secrets in namespace $NAMESPACE, which the install's step 1 (kubectl apply -k
deploy/, or an overlay) made with its Pod Security levels: apply that first. Either
  kubectl apply --server-side -k deploy/tls/      # only with the default OUTDIR (deploy/tls/out)
or
EOF
for secret in gpu-extender-tls gpu-agent-tls; do
  echo "  kubectl -n $NAMESPACE create secret generic $secret --type=kubernetes.io/tls \\"
  echo "    --from-file=$OUTDIR/$secret/tls.crt --from-file=$OUTDIR/$secret/tls.key \\"
  echo "    --from-file=$OUTDIR/$secret/ca.crt --dry-run=client -o yaml | kubectl apply --server-side -f -"
done
