"""What the gpu-agent's RSS is made of: the memory each component's imports add.

The agent's steady-state RSS (bench/bench_agent.py) is mostly code loaded at start: the
interpreter, the libraries and our modules. This measures it layer by layer, each case in a fresh
interpreter (best of --repeat, VmRSS/RssAnon/RssFile from /proc/self/status after gc.collect()):

- layers: cumulative, in dependency order (interpreter, stdlib runtime, gRPC, protobuf and our
  messages, pynvml, prometheus_client, our agent modules, what only `--fake` loads (PyYAML, the
  scenario parser, the fake driver), then the C-heap trim the agent does once it is set up
  (gpuextender.common.heap)); each row is what that layer adds on top of the rows above it (the
  trim's is negative), so the rows add up to the total;
- alternatives: what the agent's module set would weigh with something it no longer loads: aiohttp
  for its three GET routes (the agent serves them with gpuextender.agent.export.http_get_server), and
  importlib.metadata for its version (gpuextender.__version__ is a literal that pyproject.toml
  reads); and what leaving prometheus_client out would save;
- one-shot: what `gpu-agent --clear-xid N` loads (`import gpuextender.agent.cli` only), which
  runs beside the agent inside its container's memory limit.

What the agent holds is every gpuextender.agent module except the fakes, plus grpc._channel (the
sync channel of the kubelet client, imported at its first call). File-backed pages of shared
libraries (cygrpc, libpython, libcrypto) count in RSS; the running agent touches more of cygrpc's
code than an import does (~4 MiB more, see bench_agent's anon/file split).

Run: `.venv/bin/python bench/agent_imports.py [--repeat 3] [--json PATH]`.
"""

from __future__ import annotations

import argparse
import json
import pkgutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import gpuextender.agent  # noqa: E402

FAKE_ONLY = (
    "gpuextender.agent.fakes.nvml",
    "gpuextender.agent.fakes.scenario",
    "gpuextender.agent.fakes.kubelet",
    "yaml",
)
AGENT_MODULES = [
    *sorted(
        f"gpuextender.agent.{m.name}"
        for m in pkgutil.iter_modules(gpuextender.agent.__path__)
        if f"gpuextender.agent.{m.name}" not in FAKE_ONLY and m.name != "__main__"
    ),
    "grpc._channel",
]
TRIM = "!trim"  # not a module: the probe calls gpuextender.common.heap.trim_c_heap() here

# (name, modules imported at this layer); later layers import on top of the earlier ones.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "stdlib runtime (asyncio, ssl, logging, json, ctypes...)",
        (
            "asyncio",
            "ssl",
            "logging",
            "argparse",
            "json",
            "ctypes",
            "dataclasses",
            "pathlib",
            "concurrent.futures",
            "platform",
            "socket",
        ),
    ),
    ("grpc + grpc.aio (cygrpc)", ("grpc", "grpc.aio", "grpc._channel")),
    (
        "protobuf + our messages",
        (
            "google.protobuf",
            "gpuextender.v1.gpu_state_pb2",
            "gpuextender.v1.gpu_state_pb2_grpc",
            "gpuextender.podresources.v1.api_pb2",
            "gpuextender.podresources.v1.api_pb2_grpc",
        ),
    ),
    ("pynvml (nvidia-ml-py)", ("pynvml",)),
    ("prometheus_client", ("prometheus_client",)),
    ("gpuextender.agent modules", tuple(AGENT_MODULES)),
    (
        "--fake only: PyYAML, fakes.scenario, fakes.nvml",
        ("yaml", "gpuextender.agent.fakes.scenario", "gpuextender.agent.fakes.nvml"),
    ),
    # Last, as in the agent: main() loads the fake before _serve() trims.
    ("C heap trimmed once set up (malloc_trim)", (TRIM,)),
]
FAKE_LAYER = 6  # index in LAYERS (the interpreter is row 0 of the table, so row 7 there)
AGENT_SET = tuple(m for _, mods in LAYERS[:FAKE_LAYER] for m in mods)
# (name, modules added to AGENT_SET, prefixes left out of it): what the set weighs with the
# additions and without the left-out modules, as a difference to the set itself.
ALTERNATIVES: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = [
    ("+ aiohttp (+ aiohttp.web) to serve the GET routes", ("aiohttp", "aiohttp.web"), ()),
    ("+ importlib.metadata to read the version", ("importlib.metadata",), ()),
    (
        "- prometheus_client and the modules that use it",
        (),
        (
            "prometheus_client",
            "gpuextender.agent.export.metrics",
            "gpuextender.agent.export.dcgm_metrics",
            "gpuextender.agent.export.http_routes",
            "gpuextender.agent.sampling.sample_loop",
            "gpuextender.agent.stream.streamer",
            "gpuextender.agent.stream.stream_set",
            "gpuextender.agent.cli",
        ),
    ),
]

_PROBE = r"""
import gc, importlib, json, sys
skip, mods = sys.argv[1], sys.argv[2:]
left_out = tuple(filter(None, skip.split(",")))
def out(m):
    return any(m == p or m.startswith(p + ".") for p in left_out)
points = []
def status():
    gc.collect()
    d = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "RssAnon", "RssFile"):
                d[k] = int(v.split()[0])
    d["modules"] = len(sys.modules)
    return d
points.append(status())
for group in mods:
    if group == "|":
        points.append(status())
    elif group == "!trim":
        gc.collect()
        importlib.import_module("gpuextender.common.heap").trim_c_heap()
    elif not out(group):
        importlib.import_module(group)
points.append(status())
leaked = sorted({m for m in sys.modules if out(m)})
print(json.dumps({"points": points, "leaked": leaked}))
"""


@dataclass(slots=True)
class Row:
    name: str
    rss_mib: float  # added by this row (layers) or saved (leave-one-out); total for the base rows
    anon_mib: float
    file_mib: float
    modules: int


def _probe(groups: list[tuple[str, ...]], *, skip: tuple[str, ...] = (), repeat: int = 3) -> list[dict[str, int]]:
    """Status after the bare interpreter and after each group, best (lowest final RSS) of `repeat`."""
    argv = [m for g in groups for m in (*g, "|")][:-1] if groups else []
    best: dict | None = None
    for _ in range(repeat):
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE, ",".join(skip), *argv],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO_ROOT,
        )
        got = json.loads(proc.stdout)
        if got["leaked"]:
            raise SystemExit(f"left out {skip} but still imported: {got['leaked']}")
        if best is None or got["points"][-1]["VmRSS"] < best["points"][-1]["VmRSS"]:
            best = got
    assert best is not None
    return best["points"]


def _mib(kib: int) -> float:
    return kib / 1024


def layers(repeat: int) -> list[Row]:
    points = _probe([mods for _, mods in LAYERS], repeat=repeat)
    rows = [
        Row(
            "interpreter (python, site)",
            _mib(points[0]["VmRSS"]),
            _mib(points[0]["RssAnon"]),
            _mib(points[0]["RssFile"]),
            points[0]["modules"],
        )
    ]
    for (name, _), before, after in zip(LAYERS, points, points[1:], strict=False):
        rows.append(
            Row(
                name,
                _mib(after["VmRSS"] - before["VmRSS"]),
                _mib(after["RssAnon"] - before["RssAnon"]),
                _mib(after["RssFile"] - before["RssFile"]),
                after["modules"] - before["modules"],
            )
        )
    return rows


def alternatives(repeat: int) -> tuple[Row, list[Row]]:
    full = _probe([AGENT_SET], repeat=repeat)[-1]
    base = Row(
        "the agent's module set (no fake)",
        _mib(full["VmRSS"]),
        _mib(full["RssAnon"]),
        _mib(full["RssFile"]),
        full["modules"],
    )
    rows = []
    for name, added, skip in ALTERNATIVES:
        got = _probe([AGENT_SET + added], skip=skip, repeat=repeat)[-1]
        rows.append(
            Row(
                name,
                _mib(got["VmRSS"] - full["VmRSS"]),
                _mib(got["RssAnon"] - full["RssAnon"]),
                _mib(got["RssFile"] - full["RssFile"]),
                got["modules"] - full["modules"],
            )
        )
    return base, rows


def one_shot(repeat: int) -> Row:
    got = _probe([("gpuextender.agent.cli",)], repeat=repeat)[-1]
    return Row(
        "gpu-agent --clear-xid (import gpuextender.agent.cli)",
        _mib(got["VmRSS"]),
        _mib(got["RssAnon"]),
        _mib(got["RssFile"]),
        got["modules"],
    )


def _table(rows: list[Row], head: str) -> list[str]:
    out = [f"  {head:56s} {'MiB':>6s} {'anon':>6s} {'file':>6s} {'modules':>7s}"]
    out += [f"  {r.name:56s} {r.rss_mib:6.2f} {r.anon_mib:6.2f} {r.file_mib:6.2f} {r.modules:7d}" for r in rows]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="fresh interpreters per case (the lowest RSS is kept)")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    lay = layers(args.repeat)
    base, alt = alternatives(args.repeat)
    shot = one_shot(args.repeat)
    total = sum(r.rss_mib for r in lay)
    agent_total = total - lay[FAKE_LAYER + 1].rss_mib
    lines = ["gpu-agent imports, VmRSS after each layer (cumulative order; each row adds to the ones above):"]
    lines += _table(lay, "layer")
    lines.append(
        f"  = {agent_total:.1f} MiB for what the agent imports on a node, {total:.1f} MiB with --fake's modules"
    )
    lines.append(
        f"alternatives (the agent's module set is {base.rss_mib:.1f} MiB untrimmed; each row: what it adds, "
        "negative: saves):"
    )
    lines += _table(alt, "the set, with or without")
    lines.append("one-shot mode:")
    lines += _table([shot], "process")
    print("\n".join(lines))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "layers": [asdict(r) for r in lay],
                    "agent_set": asdict(base),
                    "alternatives": [asdict(r) for r in alt],
                    "one_shot": asdict(shot),
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
