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
Each phase is the best of `--repeat` runs on one parsed request: the names' hashes cached and the
objects in the CPU's cache. TOTAL is the best of `--repeat` whole calls as the server makes them
(http_api.build_app), the collector tuned as at start-up (app._tune_gc): a new body parsed each
call, parse and decide with the cyclic collector paused, the answer encoded, and filter's record
step after it (the server runs it once the answer is sent: not in the call). Fresh names cost more
than the phases' best (hashed and fetched from memory once more per pass), and each phase's best is
its own: TOTAL is more than their sum. Then `--calls` whole calls give the min, median and p99 a
scheduler waits for, less HTTP.
Logging is set to WARNING, as in the benchmark. Then it runs cProfile over the
whole SchedulerApi call and prints the top functions by own and cumulative time.

`--candidates M` sends M names of the fleet (a random part: kube-scheduler's percentageOfNodesToScore
sends ~5 % at 20,000 nodes); `--prioritize-nodes answered` sends prioritize the names filter answered
(what kube-scheduler sends it: the shortlist).

Run: `.venv/bin/python bench/profile_extender.py [--nodes 5000] [--candidates M] [--mode names|nodes]
[--verb filter|prioritize] [--prioritize-nodes all|answered] [--calls 300]`
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import pstats
import random
import statistics
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

from gpuextender.extender.app import _tune_gc
from gpuextender.extender.decide import shortlist
from gpuextender.extender.decide.decision import Decision
from gpuextender.extender.flags import build_config
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler import wire
from gpuextender.extender.scheduler.http_api import SchedulerApi, collector_paused
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
    _tune_gc()  # as the server at start-up (the default thresholds ran full collections mid-call)
    took, _ = whole_calls(api, body, verb, repeat)
    rows += [("encode", ms_encode), ("TOTAL (whole call)", min(took))]
    return rows


def whole_calls(api: SchedulerApi, body: bytes, verb: str, calls: int) -> tuple[list[float], list[float]]:
    """Milliseconds of each whole call as the server makes it (module docstring), and of each
    record step after it (filter only)."""
    took, recorded = [], []
    for _ in range(calls):
        started = time.perf_counter()
        with collector_paused():
            args = wire.parse_extender_args(body)
        with collector_paused():
            if verb == "filter":
                answer, record = api.answer_filter(args)
            else:
                answer, record = api.prioritize(args), None
            del args
        wire.encode(answer)
        took.append((time.perf_counter() - started) * 1000)
        if record is not None:
            started = time.perf_counter()
            with collector_paused():
                record()
            recorded.append((time.perf_counter() - started) * 1000)
        del answer, record  # the decision freed here, after the answer, as in the server
    return took, recorded


def spread(ms: list[float]) -> str:
    ordered = sorted(ms)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"min {ordered[0]:6.2f}  median {statistics.median(ordered):6.2f}  p99 {p99:6.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--candidates", type=int, default=None, help="names sent (default: every node)")
    parser.add_argument("--mode", choices=("names", "nodes"), default="names")
    parser.add_argument("--verb", choices=("filter", "prioritize"), default="filter")
    parser.add_argument("--prioritize-nodes", choices=("all", "answered"), default="all")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--calls", type=int, default=300, help="whole calls timed")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    api = build_api(args.nodes)
    fleet = make_fleet(args.nodes)
    names = [n.name for n in fleet]
    random.Random(1).shuffle(names)
    names = names[: args.candidates]
    pod = load_pod()
    if args.verb == "prioritize" and args.prioritize_nodes == "answered":
        names = api.filter(wire.parse_extender_args(encode(filter_body(pod, "names", names))))["NodeNames"]
    items: list[Any] = names if args.mode == "names" else make_node_objects(names)
    body = encode(filter_body(pod, args.mode, items))
    print(
        f"{args.verb}, {args.mode} mode, {len(names)} of {args.nodes} nodes ({POD_GPUS}-GPU pod), "
        f"body {len(body) / 1024:.0f} KiB; best of {args.repeat} (ms):"
    )
    rows = phases(api, body, args.verb, args.repeat)
    for name, ms in rows:
        print(f"  {name:<20} {ms:8.2f}")
    before_answer = sum(ms for name, ms in rows if name not in ("record", "TOTAL (whole call)"))
    print(f"  {'(phases but record)':<20} {before_answer:8.2f}")
    took, recorded = whole_calls(api, body, args.verb, args.calls)
    print(f"whole call, {args.calls} calls as the server makes them (ms): {spread(took)}")
    if recorded:
        print(f"  its record step, after the answer (ms):        {spread(recorded)}")
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
