"""Benchmark: what one scheduler request can cost the extender's event loop.

The HTTP handler parses, decides and encodes in one synchronous step, so that step's
time is how long the event loop (and with it /healthz, gRPC ingest and every other
call) is held. This measures that step in-process, best of `--repeat`, with the
garbage collector tuned as gpuextender.extender.app does, for:

1. cost per candidate name: N names no agent reports (the dearest case) through
   filter, prioritize and explain, N up to 100,000 (--max-candidates lifted);
2. the captured full Node object: its size and parse cost per MiB;
3. the dearest bodies the default limits let through (tests/hostile_bodies.py):
   at --max-body-bytes, at --max-candidates, at the container bounds;
4. one hostile quantity ("1e999999"), which used to take ~26 s per request.

Run: `.venv/bin/python bench/bench_hostile_http.py [--repeat 5]`
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gpuextender.extender.flags import build_config
from gpuextender.extender.model.pod_gpus import parse_count
from gpuextender.extender.model.untrusted import InvalidInput
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler import wire
from gpuextender.extender.scheduler.http_api import SchedulerApi
from gpuextender.extender.settings import ApiSettings
from gpuextender.extender.state.gpu_state import GpuState
from tests.hostile_bodies import compact, full_nodes_request, names_request, unknown_names, worst_bodies

VERBS = ("filter", "prioritize", "explain")


def build_api(**overrides: Any) -> SchedulerApi:
    """The defaults of `gpu-extender`, with some ApiSettings lifted (max_candidates=...)."""
    config = build_config(["--log-level", "warning"])
    fields = {f: getattr(config.api, f) for f in config.api.__dataclass_fields__}
    settings = ApiSettings(**{**fields, **overrides})
    state = GpuState(config.idle_rule)
    return SchedulerApi(state, ExtenderMetrics(state), settings)


def candidate_bound(api: SchedulerApi, verb: str) -> int:
    """--max-candidates, or /explain's own lower bound (as extender.scheduler.http_api.build_app)."""
    bound = api.settings.max_candidates
    return min(bound, wire.EXPLAIN_MAX_CANDIDATES) if verb == "explain" else bound


def loop_hold_ms(api: SchedulerApi, verb: str, body: bytes, repeat: int) -> tuple[float, str]:
    """Best-of-`repeat` ms of the handler's synchronous step, and its outcome (200 or the reason)."""
    settings = api.settings
    decide: Callable[[Any], Any] = getattr(api, verb)
    best, outcome = float("inf"), ""
    for _ in range(repeat):
        t0 = time.perf_counter()
        try:
            args = wire.parse_extender_args(
                body,
                max_candidates=candidate_bound(api, verb),
                max_containers=settings.max_body_bytes // wire.BYTES_PER_CONTAINER,
            )
            wire.encode(decide(args))
            outcome = "200"
        except InvalidInput as exc:
            outcome = f"400 {exc.code}"
        best = min(best, time.perf_counter() - t0)
    return best * 1000, outcome


def report(repeat: int = 5) -> list[str]:
    """The four measurements as text lines (printed by main, quoted in RESULTS.md by run_all)."""
    logging.getLogger().setLevel(logging.WARNING)  # no decision lines from the handlers
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 10, 10)  # as gpuextender.extender.app._tune_gc
    lines: list[str] = []
    print = lines.append

    print("1. cost per candidate name (unknown names; ms for the whole synchronous step)")
    wide = build_api(max_candidates=100_000)
    for count in (1_000, 5_000, 10_000, 25_000, 100_000):
        body = compact(names_request(unknown_names(count)))
        row = [f"{count:>7,} names ({len(body) / 1024:7.0f} KiB)"]
        for verb in VERBS:
            if count > candidate_bound(wide, verb):
                continue  # /explain takes at most EXPLAIN_MAX_CANDIDATES names
            ms, _ = loop_hold_ms(wide, verb, body, repeat if count < 100_000 else 1)
            row.append(f"{verb} {ms:7.1f} ms ({ms * 1000 / count:4.1f} us/name)")
        print("  " + "  ".join(row))

    print("2. the captured full Node object (nodeCacheCapable: false)")
    one = full_nodes_request(1)
    node_bytes = len(compact(one["Nodes"]["items"][0]))
    pod_bytes = len(compact(one["Pod"]))
    print(
        f"  one Node: {node_bytes:,} B compact; the Pod: {pod_bytes:,} B; 5,000 Nodes: "
        f"{(5000 * (node_bytes + 1) + pod_bytes) / 2**20:.1f} MiB"
    )
    for count in (100, 500, 5_000):
        body = compact(full_nodes_request(count))
        ms, outcome = loop_hold_ms(build_api(max_body_bytes=32 * 2**20), "filter", body, repeat)
        print(
            f"  filter, {count:>5,} Nodes ({len(body) / 2**20:5.2f} MiB): {ms:7.1f} ms "
            f"({ms / (len(body) / 2**20):5.1f} ms/MiB) -> {outcome}"
        )

    api = build_api()
    settings = api.settings
    print(
        f"3. dearest bodies within the defaults (--max-body-bytes {settings.max_body_bytes:,}, "
        f"--max-candidates {settings.max_candidates:,})"
    )
    containers = settings.max_body_bytes // wire.BYTES_PER_CONTAINER
    per_verb = {verb: worst_bodies(settings.max_body_bytes, candidate_bound(api, verb), containers) for verb in VERBS}
    worst = 0.0
    for name, body in per_verb["filter"].items():
        cells = []
        for verb in VERBS:
            ms, outcome = loop_hold_ms(api, verb, per_verb[verb][name], repeat)
            worst = max(worst, ms)
            cells.append(f"{verb} {ms:6.1f} ms -> {outcome:<22}")
        print(f"  {name:<50} {len(body) / 2**20:5.2f} MiB  " + " ".join(cells))
    print(f"  worst: {worst:.1f} ms (explain at its own bound of {candidate_bound(api, 'explain'):,} names)")

    print("4. one hostile quantity")
    for value in ("1e999999", "1e999999Ei", "9" * 5000):
        t0 = time.perf_counter()
        try:
            parse_count(value, "x")
        except InvalidInput as exc:
            outcome = exc.code
        print(f"  {value[:12]!r:<16} {1e6 * (time.perf_counter() - t0):8.1f} us -> {outcome}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    for line in report(args.repeat):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
