"""What the gpu-agent's RSS is made of: the memory each component's imports add.

The agent's steady-state RSS (bench/bench_agent.py) is mostly code loaded at start: the
interpreter, the libraries and our modules. This measures it layer by layer, each case in a fresh
interpreter (best of --repeat, VmRSS/RssAnon/RssFile from /proc/self/status after gc.collect()):

- layers: cumulative, in dependency order (interpreter, stdlib runtime, importlib.metadata for
  the version, gRPC, protobuf and our messages, pynvml, prometheus_client, aiohttp, our agent
  modules, then what only `--fake` loads: PyYAML, the scenario parser, the fake driver); each row
  is what that layer adds on top of the rows above it, so the rows add up to the total;
- leave-one-out: the whole agent module set without one component (its dependents stubbed out of
  the list, not out of the code), i.e. what dropping that component alone would save;
- one-shot: what `gpu-agent --clear-xid N` loads (`import gpuextender.agent.main` only), which
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

FAKE_ONLY = ("gpuextender.agent.fake_nvml", "gpuextender.agent.fake_scenario", "gpuextender.agent.fake_kubelet",
             "yaml")  # fmt: skip
AGENT_MODULES = sorted(
    f"gpuextender.agent.{m.name}" for m in pkgutil.iter_modules(gpuextender.agent.__path__)
    if f"gpuextender.agent.{m.name}" not in FAKE_ONLY and m.name != "__main__"
) + ["grpc._channel"]  # fmt: skip

# (name, modules imported at this layer); later layers import on top of the earlier ones.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("stdlib runtime (asyncio, ssl, logging, json, ctypes...)",
     ("asyncio", "ssl", "logging", "argparse", "json", "ctypes", "dataclasses", "pathlib", "concurrent.futures",
      "platform", "uuid", "socket")),
    ("importlib.metadata (gpuextender.__version__)", ("importlib.metadata", "gpuextender")),
    ("grpc + grpc.aio (cygrpc)", ("grpc", "grpc.aio", "grpc._channel")),
    ("protobuf + our messages", ("google.protobuf", "gpuextender.v1.gpu_state_pb2", "gpuextender.v1.gpu_state_pb2_grpc",
                                 "gpuextender.podresources.v1.api_pb2", "gpuextender.podresources.v1.api_pb2_grpc")),
    ("pynvml (nvidia-ml-py)", ("pynvml",)),
    ("prometheus_client", ("prometheus_client",)),
    ("aiohttp (+ aiohttp.web)", ("aiohttp", "aiohttp.web")),
    ("gpuextender.agent modules", tuple(AGENT_MODULES)),
    ("--fake only: PyYAML, fake_scenario, fake_nvml", ("yaml", "gpuextender.agent.fake_scenario",
                                                       "gpuextender.agent.fake_nvml")),
]  # fmt: skip
AGENT_SET = tuple(m for _, mods in LAYERS[:-1] for m in mods)
# Leave-one-out: (name, prefixes left out of AGENT_SET, stubbed modules). A stub stands in for a
# module some other one imports (importlib.metadata for gpuextender.__version__).
LEAVE_OUT: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = [
    ("aiohttp (and http_server, main)",
     ("aiohttp", "gpuextender.agent.http_server", "gpuextender.agent.main"), ()),
    ("importlib.metadata (a stub version())", (), ("importlib.metadata",)),
    ("prometheus_client and the modules that use it",
     ("prometheus_client", "gpuextender.agent.metrics", "gpuextender.agent.dcgm_metrics",
      "gpuextender.agent.http_server", "gpuextender.agent.sample_loop", "gpuextender.agent.streamer",
      "gpuextender.agent.stream_set", "gpuextender.agent.main"), ()),
]  # fmt: skip

_PROBE = r"""
import gc, importlib, json, sys, types
stubs, skip, mods = sys.argv[1], sys.argv[2], sys.argv[3:]
for name in filter(None, stubs.split(",")):
    stub = types.ModuleType(name)
    class PackageNotFoundError(ModuleNotFoundError):
        pass
    stub.PackageNotFoundError = PackageNotFoundError
    stub.version = lambda _name: "0+stub"
    sys.modules[name] = stub
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
        continue
    if not out(group):
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


def _probe(groups: list[tuple[str, ...]], *, skip: tuple[str, ...] = (), stubs: tuple[str, ...] = (),
           repeat: int = 3) -> list[dict[str, int]]:  # fmt: skip
    """Status after the bare interpreter and after each group, best (lowest final RSS) of `repeat`."""
    argv = [m for g in groups for m in (*g, "|")][:-1] if groups else []
    best: dict | None = None
    for _ in range(repeat):
        proc = subprocess.run([sys.executable, "-c", _PROBE, ",".join(stubs), ",".join(skip), *argv],
                              capture_output=True, text=True, check=True, cwd=REPO_ROOT)  # fmt: skip
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
    rows = [Row("interpreter (python, site)", _mib(points[0]["VmRSS"]),
                _mib(points[0]["RssAnon"]), _mib(points[0]["RssFile"]), points[0]["modules"])]  # fmt: skip
    for (name, _), before, after in zip(LAYERS, points, points[1:]):
        rows.append(Row(name, _mib(after["VmRSS"] - before["VmRSS"]), _mib(after["RssAnon"] - before["RssAnon"]),
                        _mib(after["RssFile"] - before["RssFile"]), after["modules"] - before["modules"]))  # fmt: skip
    return rows


def leave_one_out(repeat: int) -> tuple[Row, list[Row]]:
    full = _probe([AGENT_SET], repeat=repeat)[-1]
    base = Row("the agent's module set (no fake)", _mib(full["VmRSS"]), _mib(full["RssAnon"]), _mib(full["RssFile"]),
               full["modules"])  # fmt: skip
    rows = []
    for name, skip, stubs in LEAVE_OUT:
        got = _probe([AGENT_SET], skip=skip, stubs=stubs, repeat=repeat)[-1]
        rows.append(Row(name, _mib(full["VmRSS"] - got["VmRSS"]), _mib(full["RssAnon"] - got["RssAnon"]),
                        _mib(full["RssFile"] - got["RssFile"]), full["modules"] - got["modules"]))  # fmt: skip
    return base, rows


def one_shot(repeat: int) -> Row:
    got = _probe([("gpuextender.agent.main",)], repeat=repeat)[-1]
    return Row("gpu-agent --clear-xid (import gpuextender.agent.main)", _mib(got["VmRSS"]), _mib(got["RssAnon"]),
               _mib(got["RssFile"]), got["modules"])  # fmt: skip


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
    base, loo = leave_one_out(args.repeat)
    shot = one_shot(args.repeat)
    total = sum(r.rss_mib for r in lay)
    agent_total = sum(r.rss_mib for r in lay[:-1])
    lines = ["gpu-agent imports, VmRSS after each layer (cumulative order; each row adds to the ones above):"]
    lines += _table(lay, "layer")
    lines.append(f"  = {agent_total:.1f} MiB for what the agent imports on a node, {total:.1f} MiB with --fake's modules")
    lines.append(f"leave one out (the agent's module set is {base.rss_mib:.1f} MiB; each row: what leaving it out saves):")
    lines += _table(loo, "left out")
    lines.append("one-shot mode:")
    lines += _table([shot], "process")
    print("\n".join(lines))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"layers": [asdict(r) for r in lay], "agent_set": asdict(base),
                                         "leave_one_out": [asdict(r) for r in loo], "one_shot": asdict(shot)},
                                        indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
