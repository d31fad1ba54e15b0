"""Profile: where gpu-extender's filter/prioritize time goes, in-process (no HTTP).

What it measures: the handler path of one scheduler call, split into its phases,
for the same fleet and Pod as bench_extender.py (NodeNames mode by default):
  parse    = wire.parse_extender_args (json.loads + checks)
  question = SchedulerApi.decide: read_pod + candidates + snapshot + class plan
  decide   = Decision.filtered / Decision.scores (for this class-neutral pod: the verdicts kept by
             decide/fit_index.py; otherwise whole_gpus.py per node)
  shortlist = decide/shortlist.best: the passing nodes cut to the --shortlist best (after `decide`;
             the index's ranking walked down to the cut)
  record   = verb_log.record_filter (metrics + the decision log line)
  answer = filter_result / prioritize_result
  encode = wire.encode (json.dumps)
Logging is set to WARNING, as in the benchmark. Then it runs cProfile over the
whole SchedulerApi call and prints the top functions by own and cumulative time.

Run: `.venv/bin/python bench/profile_extender.py [--nodes 5000] [--mode names|nodes] [--verb filter|prioritize]`
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import pstats
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_extender import (
    POD_GPUS,
    encode,
    filter_body,
    load_pod,
    make_fleet,
    make_node_objects,
    node_report,
)

from gpuextender.extender.decide import shortlist
from gpuextender.extender.decide.decision import Decision
from gpuextender.extender.flags import build_config
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler import wire
from gpuextender.extender.scheduler.http_api import SchedulerApi
from gpuextender.extender.scheduler.verb_log import record_filter
from gpuextender.extender.state.gpu_state import GpuState


def build_api(nodes: int) -> SchedulerApi:
    config = build_config(["--stale-after", "100000", "--forget-after", "200000", "--log-level", "warning"])
    state = GpuState(config.idle_rule)
    now_wall, now_mono = time.time(), time.monotonic()
    for node in make_fleet(nodes):
        state.ingest(node_report(node, now_wall), now_mono)
    return SchedulerApi(state, ExtenderMetrics(state), config.api)


def _time(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best = float("inf")
    out = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1000, out


def phases(api: SchedulerApi, body: bytes, verb: str, repeat: int) -> list[tuple[str, float]]:
    """Best-of-`repeat` milliseconds per phase."""
    settings = api.settings
    ms_parse, args = _time(lambda: wire.parse_extender_args(body), repeat)
    ms_question, d = _time(lambda: api.decisions.decide(args), repeat)

    def fresh() -> Decision:  # its parts are computed once: time each on a new Decision
        return Decision(d.pod, d.plan, d.candidates, d.known, d.shortlist)

    rows = [("parse", ms_parse), ("question", ms_question)]
    if verb == "filter":
        ms_decide, outcome = _time(lambda: fresh().filtered, repeat)
        passed, keep = outcome.passed, d.shortlist
        ms_answered, _ = _time(lambda: shortlist.best(d.pod, passed, keep, d.candidates, d.known, d.plan), repeat)
        ms_record, _ = _time(lambda: record_filter(api.metrics, d), repeat)
        ms_answer, answer = _time(lambda: wire.filter_result(args, outcome), repeat)
        rows += [("decide", ms_decide), ("shortlist", ms_answered), ("record", ms_record), ("answer", ms_answer)]
    else:
        ms_decide, scores = _time(lambda: fresh().scores, repeat)
        ms_answer, answer = _time(lambda: wire.prioritize_result(scores, compact=settings.compact_priorities), repeat)
        rows += [("decide", ms_decide), ("answer", ms_answer)]
    ms_encode, _ = _time(lambda: wire.encode(answer), repeat)
    ms_total, _ = _time(lambda: wire.encode(getattr(api, verb)(wire.parse_extender_args(body))), repeat)
    rows += [("encode", ms_encode), ("TOTAL (whole call)", ms_total)]
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--mode", choices=("names", "nodes"), default="names")
    parser.add_argument("--verb", choices=("filter", "prioritize"), default="filter")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    api = build_api(args.nodes)
    fleet = make_fleet(args.nodes)
    names = [n.name for n in fleet]
    items: list[Any] = names if args.mode == "names" else make_node_objects(names)
    random.Random(1).shuffle(items)
    body = encode(filter_body(load_pod(), args.mode, items))
    print(
        f"{args.verb}, {args.mode} mode, {args.nodes} nodes ({POD_GPUS}-GPU pod), body {len(body) / 1024:.0f} KiB; "
        f"best of {args.repeat} (ms):"
    )
    for name, ms in phases(api, body, args.verb, args.repeat):
        print(f"  {name:<20} {ms:8.2f}")
    call = getattr(api, args.verb)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(args.repeat):
        wire.encode(call(wire.parse_extender_args(body)))
    profiler.disable()
    stats = pstats.Stats(profiler, stream=sys.stdout).strip_dirs()
    print(f"\ncProfile, {args.repeat} calls, by own time:")
    stats.sort_stats("tottime").print_stats(args.top)
    print("by cumulative time:")
    stats.sort_stats("cumulative").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
