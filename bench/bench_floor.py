"""Benchmark: gpu-extender's filter+prioritize latency at 5,000 names against the floor of a
do-nothing Python extender (bench/noop_extender.py, aiohttp + orjson), side by side in one run.

What it measures: how many times the cost of the HTTP exchange alone gpu-extender's scheduling
cycle is. ratio = (gpu-extender filter p50 + prioritize p50) / (do-nothing filter p50 +
prioritize p50), and the same for p99; plus gpu-extender's filter p99 in ms, and each side's
p50/p99 per verb.

How:
1. starts the real `gpu-extender` (benchlib.extender_process, /readyz waited) and loads
   bench_extender's 5,000-node fleet over gRPC (bench_extender.load_fleet, the names-5000
   scenario's fleet and agent reports; checked with gpu_extender_nodes_with_data); starts
   bench/noop_extender.py on a free loopback port (/healthz waited). Both run for the whole bench;
2. one gpu-extender filter of the 5,000 names (the fixture's 2-GPU Pod) gives the prioritize list:
   the nodes it answered, its --shortlist (100 by default). Both sides' prioritize get that same
   list on every request. Why: kube-scheduler sends prioritize the nodes filter passed, and the
   do-nothing filter passes all 5,000, so feeding its own answer back would time a 5,000-name
   prioritize that gpu-extender never receives; with one list both sides decode, score and encode
   the same names. (The shuffled filters below may name other, equally good nodes: the shortlist's
   ties rotate with the candidate order. Same count; how many differed is in the result.)
3. R rounds (default 4), the side that goes first alternating (do-nothing, gpu-extender,
   gpu-extender, do-nothing, ...) so drift on a shared machine hits both alike. Per side and round:
   warm-up pairs (not counted), then N filter+prioritize pairs (default: names-5000's count),
   strictly sequential (one request in flight, as the scheduler's extender client does) over that
   side's own keep-alive connection. Filter sends all 5,000 names in a shuffled order (the same
   16 orders, cycled, on both sides); prioritize the list from step 2.

Timing is client-side, as in bench_extender: encoding the request, the POST, reading and decoding
the answer. Every answer is checked outside the timed region (gpu-extender's with bench_extender's
checks; the do-nothing filter must pass every name). Per round: p50 and p99 per verb and side;
reported: the medians over the rounds, and the ratios of those medians.

Run: `.venv/bin/python bench/bench_floor.py [--rounds 4] [--requests 300] [--quick] [--nodes 5000|20000]`
(`--nodes 20000`: issue 36's fleet, all 20,000 names to filter, as with percentageOfNodesToScore 100)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_extender import (
    JSON_HEADERS,
    ON_REQUEST,
    POD_GPUS,
    QUICK_ITERATIONS,
    SCENARIOS,
    SEED,
    _decode,
    check_filter,
    check_prioritize,
    encode,
    filter_body,
    load_fleet,
    load_pod,
    make_fleet,
)
from benchlib import (
    BENCH_DIR,
    LOOPBACK,
    BackgroundLoad,
    BenchError,
    ManagedProcess,
    exit_on_sigterm,
    extender_process,
    free_port,
    percentile,
    scrape,
    wait_http_ok,
)

SCENARIO = next(s for s in SCENARIOS if s.name == "names-5000")
# `--nodes 20000`: issue 36's fleet size, every name sent (percentageOfNodesToScore: 100).
SCENARIOS_BY_NODES = {s.nodes: s for s in (SCENARIO, *ON_REQUEST)}
DEFAULT_ROUNDS = 4
QUICK_ROUNDS = 2
VERBS = ("filter", "prioritize")
ORDERS = 16  # shuffled candidate orders, built before timing and cycled


@dataclass(slots=True)
class Side:
    label: str  # "do-nothing" or "gpu-extender"
    p50_ms: dict[str, list[float]] = field(default_factory=dict)  # verb -> one figure per round
    p99_ms: dict[str, list[float]] = field(default_factory=dict)
    background_cores: list[float] = field(default_factory=list)  # other processes' CPU, per round
    # gpu-extender only: its own mean time per call from its histogram (handler start to answer
    # built; not HTTP parsing and writing), per verb and round.
    server_ms: dict[str, list[float]] = field(default_factory=dict)
    # The client's own JSON work in a filter call (encode the names, decode the answer: what
    # kube-scheduler's encoding/json does too), median per round.
    filter_json_ms: list[float] = field(default_factory=list)

    def add(self, verb: str, latencies_ns: list[int]) -> None:
        ms = sorted(x / 1e6 for x in latencies_ns)
        self.p50_ms.setdefault(verb, []).append(percentile(ms, 50))
        self.p99_ms.setdefault(verb, []).append(percentile(ms, 99))

    def median(self, figure: str, verb: str) -> float:
        """The median over the rounds of one figure ("p50_ms" or "p99_ms") of one verb."""
        return statistics.median(getattr(self, figure)[verb])

    def cycle(self, figure: str) -> float:
        """filter + prioritize, each the median over the rounds."""
        return sum(self.median(figure, verb) for verb in VERBS)


@dataclass(slots=True)
class FloorResult:
    nodes: int  # candidate names sent to filter
    prioritize_nodes: int  # names sent to prioritize, both sides (gpu-extender's filter answer)
    rounds: int
    requests: int  # counted filter+prioritize pairs per side and round
    warmup: int  # uncounted pairs before them
    load_s: float
    floor: Side
    ours: Side
    # Counted gpu-extender filter answers whose names differed from the prioritize list: the shortlist's
    # ties rotate with the candidate order (decide/README.md), so a shuffled order may name other, equally
    # good nodes (always `prioritize_nodes` of them; check_filter holds the count).
    filter_answer_differs: int = 0

    @property
    def ratio_p50(self) -> float:
        return self.ours.cycle("p50_ms") / self.floor.cycle("p50_ms")

    @property
    def ratio_p99(self) -> float:
        return self.ours.cycle("p99_ms") / self.floor.cycle("p99_ms")

    @property
    def ours_filter_p99_ms(self) -> float:
        return self.ours.median("p99_ms", "filter")


@dataclass(slots=True)
class Target:
    side: Side
    process: ManagedProcess
    session: aiohttp.ClientSession
    base_url: str
    ours: bool  # gpu-extender (checked against the fleet) or the do-nothing extender


async def _post(session: aiohttp.ClientSession, url: str, verb: str, payload: Any) -> tuple[int, int, bytes, Any, int]:
    """One timed exchange: encode, POST, read, decode. Returns (ns, status, raw, decoded or None,
    the ns of it spent encoding and decoding: the client's own JSON work)."""
    t0 = time.perf_counter_ns()
    body = encode(payload)
    t1 = time.perf_counter_ns()
    async with session.post(url, data=body, headers=JSON_HEADERS) as resp:
        status = resp.status
        raw = await resp.read()
    t2 = time.perf_counter_ns()
    doc = _decode(verb, raw) if status == 200 else None
    t3 = time.perf_counter_ns()
    return t3 - t0, status, raw, doc, (t1 - t0) + (t3 - t2)


def _check_floor_filter(status: int, raw: bytes, doc: Any, sent: list[str]) -> None:
    passed = doc.get("NodeNames") if isinstance(doc, dict) else None
    if status != 200 or not isinstance(passed, list) or len(passed) != len(sent):
        snippet = raw[:300].decode(errors="replace")
        raise BenchError(f"do-nothing filter: HTTP {status}, expected all {len(sent)} names; answer: {snippet!r}")


async def _measure(
    target: Target,
    pod: dict[str, Any],
    orders: list[list[str]],
    shortlist: list[str],
    expected: dict[str, str],
    warmup: int,
    requests: int,
) -> int:
    """One side's turn in a round; adds its p50/p99 per verb. Returns how many counted gpu-extender
    filter answers passed another set than `shortlist` (0 for the do-nothing side)."""
    target.process.check_alive()
    filter_url, prioritize_url = f"{target.base_url}/filter", f"{target.base_url}/prioritize"
    prio_payload = filter_body(pod, "names", shortlist)
    wanted = set(shortlist)
    filter_ns: list[int] = []
    prioritize_ns: list[int] = []
    filter_json_ns: list[int] = []
    differs = 0
    background: BackgroundLoad | None = None
    before: dict[str, float] = {}
    for it in range(warmup + requests):
        if it == warmup:
            if target.ours:
                before = await scrape(target.session, f"{target.base_url}/metrics")
            background = BackgroundLoad(target.process.pid)
        order = orders[it % len(orders)]
        f_ns, status, raw, doc, f_json = await _post(
            target.session, filter_url, "filter", filter_body(pod, "names", order)
        )
        if target.ours:
            passed = check_filter(status, raw, doc, "names", order, expected)
            differs += it >= warmup and set(passed) != wanted
        else:
            _check_floor_filter(status, raw, doc, order)
        p_ns, p_status, p_raw, p_doc, _ = await _post(target.session, prioritize_url, "prioritize", prio_payload)
        # The shortlist holds the best nodes: they may all score the same (an empty compact answer).
        check_prioritize(p_status, p_raw, p_doc, shortlist, mixed=False)
        if it >= warmup:
            filter_ns.append(f_ns)
            prioritize_ns.append(p_ns)
            filter_json_ns.append(f_json)
    assert background is not None  # requests >= 1
    target.side.background_cores.append(background.cores())
    if target.ours:
        after = await scrape(target.session, f"{target.base_url}/metrics")
        for verb in VERBS:
            spent, calls = (
                after[key] - before[key]
                for key in (
                    f'gpu_extender_request_duration_seconds_{part}{{verb="{verb}"}}' for part in ("sum", "count")
                )
            )
            target.side.server_ms.setdefault(verb, []).append(1000 * spent / calls)
    target.side.add("filter", filter_ns)
    target.side.add("prioritize", prioritize_ns)
    target.side.filter_json_ms.append(statistics.median(filter_json_ns) / 1e6)
    return differs


async def _bench(
    ext_proc: ManagedProcess,
    ext_url: str,
    grpc_target: str,
    noop_proc: ManagedProcess,
    noop_url: str,
    rounds: int,
    requests: int,
    warmup: int,
    nodes: int,
) -> FloorResult:
    fleet = make_fleet(nodes)
    names = [n.name for n in fleet]
    expected = {n.name: n.verdict(POD_GPUS) for n in fleet}
    pod = load_pod()
    rng = random.Random(f"{SEED}-floor")
    orders = []
    for _ in range(ORDERS):
        order = list(names)
        rng.shuffle(order)
        orders.append(order)
    timeout = aiohttp.ClientTimeout(total=60)
    # One keep-alive connection per side, like the scheduler's http.Client to one extender.
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1), timeout=timeout) as ext_session,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1), timeout=timeout) as noop_session,
    ):
        await wait_http_ok(ext_session, f"{ext_url}/readyz", ext_proc)
        await wait_http_ok(noop_session, f"{noop_url}/healthz", noop_proc)
        print(f"loading {len(fleet)} nodes over gRPC...", file=sys.stderr, flush=True)
        load_s = await load_fleet(grpc_target, fleet)
        have = (await scrape(ext_session, f"{ext_url}/metrics")).get("gpu_extender_nodes_with_data")
        if have != float(len(fleet)):
            raise BenchError(f"extender reports gpu_extender_nodes_with_data {have}, expected {len(fleet)}")
        # The prioritize list for both sides: what gpu-extender's filter answers for this pod.
        _, status, raw, doc, _ = await _post(
            ext_session, f"{ext_url}/filter", "filter", filter_body(pod, "names", names)
        )
        shortlist = check_filter(status, raw, doc, "names", names, expected)
        floor, ours = Side("do-nothing"), Side("gpu-extender")
        targets = (
            Target(floor, noop_proc, noop_session, noop_url, ours=False),
            Target(ours, ext_proc, ext_session, ext_url, ours=True),
        )
        differs = 0
        # Keep this process's garbage collector out of the timings (as bench_extender does).
        gc.collect()
        gc.freeze()
        try:
            for i in range(rounds):
                for target in targets if i % 2 == 0 else targets[::-1]:
                    started = time.perf_counter()
                    differs += await _measure(target, pod, orders, shortlist, expected, warmup, requests)
                    print(
                        f"  round {i + 1}/{rounds} {target.side.label}: {warmup + requests} pairs "
                        f"in {time.perf_counter() - started:.1f}s",
                        file=sys.stderr,
                        flush=True,
                    )
        finally:
            gc.unfreeze()
    return FloorResult(
        nodes=len(names),
        prioritize_nodes=len(shortlist),
        rounds=rounds,
        requests=requests,
        warmup=warmup,
        load_s=load_s,
        floor=floor,
        ours=ours,
        filter_answer_differs=differs,
    )


def run(
    rounds: int | None = None, requests: int | None = None, *, quick: bool = False, nodes: int = SCENARIO.nodes
) -> FloorResult:
    """Start both extenders, measure them alternately, stop both (always)."""
    scenario = SCENARIOS_BY_NODES[nodes]
    quick_requests, quick_warmup = QUICK_ITERATIONS[scenario.name]
    rounds = rounds if rounds is not None else (QUICK_ROUNDS if quick else DEFAULT_ROUNDS)
    requests = requests if requests is not None else (quick_requests if quick else scenario.iterations)
    warmup = quick_warmup if quick else scenario.warmup
    if rounds < 1 or requests < 1:
        raise BenchError(f"--rounds ({rounds}) and --requests ({requests}) must be at least 1")
    ext_proc, addrs = extender_process("extender-floor")
    noop_port = free_port()
    noop_argv = [sys.executable, str(BENCH_DIR / "noop_extender.py"), "--addr", f"{LOOPBACK}:{noop_port}"]
    with ext_proc, ManagedProcess("noop-extender-floor", noop_argv) as noop_proc:
        return asyncio.run(
            _bench(
                ext_proc,
                addrs.base_url,
                addrs.grpc_target,
                noop_proc,
                f"http://{LOOPBACK}:{noop_port}",
                rounds,
                requests,
                warmup,
                nodes,
            )
        )


def format_markdown(r: FloorResult) -> list[str]:
    lines = [
        f"names-{r.nodes}: {r.nodes:,} names to filter, the {r.prioritize_nodes} names gpu-extender's filter "
        f"answered to prioritize (both sides); {r.rounds} round(s) x {r.requests} pairs per side "
        f"({r.warmup} warm-up); medians over the rounds, ms",
        "",
        "| side | filter p50 | filter p99 | prioritize p50 | prioritize p99 | cycle p50 | cycle p99 | bg cores |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for side in (r.floor, r.ours):
        cells = [f"{side.median(fig, verb):.2f}" for verb in VERBS for fig in ("p50_ms", "p99_ms")]
        cells += [f"{side.cycle('p50_ms'):.2f}", f"{side.cycle('p99_ms'):.2f}"]
        cells.append(f"{statistics.median(side.background_cores):.2f}")
        lines.append(f"| {side.label} | {' | '.join(cells)} |")
    ratios = [
        f"{r.ours.median(fig, verb) / r.floor.median(fig, verb):.1f}x" for verb in VERBS for fig in ("p50_ms", "p99_ms")
    ]
    lines.append(f"| ratio | {' | '.join(ratios)} | **{r.ratio_p50:.1f}x** | **{r.ratio_p99:.1f}x** | |")
    lines += [
        "",
        f"ratio (filter+prioritize, gpu-extender / do-nothing): p50 {r.ratio_p50:.2f}x, p99 {r.ratio_p99:.2f}x; "
        f"gpu-extender filter p99 {r.ours_filter_p99_ms:.2f} ms",
        "gpu-extender's own mean time per call (its request-duration histogram: handler start to answer built, "
        "without HTTP parsing and writing): "
        + ", ".join(f"{verb} {statistics.median(r.ours.server_ms[verb]):.2f} ms" for verb in VERBS),
        "of each filter, the client's own JSON work (encoding the names, decoding the answer; stdlib json, "
        f"median): do-nothing {statistics.median(r.floor.filter_json_ms):.2f} ms, "
        f"gpu-extender {statistics.median(r.ours.filter_json_ms):.2f} ms",
    ]
    if r.filter_answer_differs:
        lines.append(
            f"note: {r.filter_answer_differs} of {r.rounds * r.requests} counted gpu-extender filter answers named "
            f"another {r.prioritize_nodes} than the prioritize list (ties among equally good nodes rotate with the "
            "candidate order); prioritize got the fixed list regardless"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, help=f"rounds, the first side alternating (default {DEFAULT_ROUNDS})")
    parser.add_argument(
        "--requests", type=int, help=f"filter+prioritize pairs per side and round (default {SCENARIO.iterations})"
    )
    parser.add_argument("--quick", action="store_true", help="few rounds and requests: a smoke check")
    parser.add_argument(
        "--nodes",
        type=int,
        choices=sorted(SCENARIOS_BY_NODES),
        default=SCENARIO.nodes,
        help=f"fleet size, every name sent to filter (default {SCENARIO.nodes:,}; 20,000 loads for ~15 s more)",
    )
    args = parser.parse_args(argv)
    exit_on_sigterm()
    try:
        result = run(args.rounds, args.requests, quick=args.quick, nodes=args.nodes)
    except BenchError as exc:
        print(f"bench_floor: FAILED: {exc}", file=sys.stderr)
        return 1
    print("\n".join(format_markdown(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
