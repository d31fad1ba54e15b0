#!/bin/bash
# Issue 36's 20,000-node fleet run on a lent 16-core device machine, as one command that fits one
# device call (10 minutes at most; ~5 expected): bench_fleet_scale.py with the extender (its main
# process and 8 ingest workers) on CPUs 0-8 and the simulated agents on 9-15, the floors measured
# in the same run, light and gated agents, one ingest round and one latency round. The accelerator
# is not used.
#
# That machine has no network, and its python3 (3.12) lacks orjson and kubernetes-asyncio and may
# hold grpcio / protobuf older than the generated code needs. Before the call, in the repository
# root here (.whl/ is ignored by git):
#
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl grpcio==1.85.3 protobuf==7.36.2 orjson==3.13.0 kubernetes-asyncio==36.1.0
#
# (the versions of .venv: `.venv/bin/pip list`), then the device tool's run with command
# "GPUEXT_COMMIT=<this checkout's commit> bash bench/device_fleet_scale.sh" (the copy there may carry
# an older .git than the code), carry [".whl"], timeout_s 600. What comes back under $OUT:
# fleet_scale-20000.json (commit it as bench/fleet_scale-20000-<machine>.json and put its table in
# bench/RESULTS.md, the machine named) and the run's log. On an H200 machine (16 Xeon CPUs) it took
# 191 s, 2026-11-28. That machine runs under gVisor (.library's device KINDS.md):
# where the CPU affinity does not hold there, the log's "CPUs had" lines and the load's and the
# extender's CPU columns say so; read the ratios with that in mind.
#
# Rehearsed on 2 cores with Python 3.12.1, the four wheels installed from .whl/ as here, the rest as
# the device image holds them (aiohttp, prometheus-client, pyyaml, nvidia-ml-py, python-dateutil).
#
# Here, to see the command without running it: bash bench/device_fleet_scale.sh --print
# FLEET_SIZES (default 20000), FLEET_WORKERS (8), FLEET_EXTENDER_CPUS (0-8), FLEET_LOAD_CPUS (9-15),
# FLEET_SERVERS (floor,floor-xopts,extender), FLEET_MODES (light,gated), FLEET_TIMEOUT (570 s) and
# FLEET_PYTHON (python3) change what is run. Two runs in one call (the done-when's 5,000 gated agents
# and every-second ones after the 20,000): FLEET_TIMEOUT=330 bash bench/device_fleet_scale.sh; \
#   FLEET_SIZES=5000 FLEET_MODES=gated,paced FLEET_SERVERS=floor,extender FLEET_TIMEOUT=200 \
#   bash bench/device_fleet_scale.sh
# Relays in front (docs/relay.md; FLEET_RELAYS relays, 4 by default, on FLEET_RELAY_CPUS, the load's
# by default): FLEET_SERVERS=extender,relayed FLEET_MODES=light,gated FLEET_WORKERS=2 \
#   FLEET_EXTENDER_CPUS=0-2 FLEET_RELAY_CPUS=3-8 bash bench/device_fleet_scale.sh
# (the extender's memory behind relays at 20,000 agents is measured on the 2-core VM already,
# bench/RESULTS.md "20,000 agents behind relays on the 2-core VM": 242 MiB; what this run adds is
# the full report rate and scheduling under it with the extender on cores of its own)
# A rehearsal on 2 cores is
#   FLEET_SIZES=300 FLEET_WORKERS=1 FLEET_EXTENDER_CPUS=0 FLEET_LOAD_CPUS=1 FLEET_PYTHON=.venv/bin/python \
#     OUT=/tmp/fleet bash bench/device_fleet_scale.sh
set -euo pipefail

sizes=${FLEET_SIZES:-20000}
python=${FLEET_PYTHON:-python3}
out=${OUT:-bench/out}
set -- "${1:-}" bench/bench_fleet_scale.py --sizes "$sizes" --servers "${FLEET_SERVERS:-floor,floor-xopts,extender}" \
    --modes "${FLEET_MODES:-light,gated}" --ingest-rounds 1 --rounds 1 --window 8 --ingest-workers "${FLEET_WORKERS:-8}" \
    --extender-cpus "${FLEET_EXTENDER_CPUS:-0-8}" --load-cpus "${FLEET_LOAD_CPUS:-9-15}" --json "$out/fleet_scale-$sizes.json" \
    --relays "${FLEET_RELAYS:-4}" --relay-cpus="${FLEET_RELAY_CPUS:-}"
if [ "$1" = --print ]; then
    shift
    echo "$python $*"
    exit 0
fi
shift

if ls .whl/*.whl >/dev/null 2>&1; then
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# The extender and the floors start as `python -m MODULE` from this tree (no installed scripts).
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" BENCH_RUN_MODULES=1 PYTHONUNBUFFERED=1
mkdir -p "$out"
{
    echo "device_fleet_scale: $(date -u +%FT%TZ), $(nproc) CPUs, $("$python" --version 2>&1), commit ${GPUEXT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
    "$python" -c 'import grpc, google.protobuf, orjson; print("grpcio", grpc.__version__, "protobuf", google.protobuf.__version__)'
} 2>&1 | tee "$out/fleet_scale-$sizes.log"
# 570 s: the tool's limit is 600, and what the bench wrote by then still comes back.
timeout "${FLEET_TIMEOUT:-570}" "$python" "$@" 2>&1 | tee -a "$out/fleet_scale-$sizes.log"
