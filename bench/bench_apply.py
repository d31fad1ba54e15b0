"""Benchmark: what one accepted report costs the extender's main process, and both processes (issue 36).

The main process answers kube-scheduler; every microsecond it spends storing reports is taken from
that. Two paths, side by side in one run, same reports (bench_extender's fleet: 8-GPU nodes with
holders and topology, 4 versions of each node's readings so no two consecutive reports are equal):

  in-process  what --ingest-in-process does, and what the main process did before issue 36 with
              a worker: parse the serialized report, GpuState.ingest (summarize, facts, store);
              the worker's share was re-serializing the parsed report.
  relayed     what it does now: the worker summarizes (SummaryStore.ingest: summarize, facts,
              encode), the main process decodes and stores (the real IngestProcess.apply over
              real frames, its yields to the loop included).

Per path: the main process's CPU per report and reports/s per core (goal: >= 50,000 for the
relayed summaries), the worker's CPU per report, and both together. Thread CPU time
(time.thread_time), best of --repeat, with the garbage collector tuned as gpu-extender tunes it.
Then a worker's CPU per report from bytes to a queued summary, a full report against a light
heartbeat (contract 0.6) of the same readings. Then the state each process keeps per node
(tracemalloc, Python allocations): the main process's GpuState (summary, what decisions read,
facts) and a worker's SummaryStore (which nodes it holds, their facts, each one's last full report
as its encoded summary); the gRPC stream of each agent comes on top (bench_grpc_floor.py).

Run: `.venv/bin/python bench/bench_apply.py [--nodes 5000] [--repeat 5]`
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_extender as bx

from gpuextender.agent.report.light import light_heartbeat
from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.ingest.report_checks import heartbeat_problem, readings_problem, report_problem
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.workers import frames
from gpuextender.extender.workers.summary_store import SummaryStore
from gpuextender.extender.workers.supervisor import IngestProcess
from gpuextender.extender.workers.worker_args import Worker
from gpuextender.v1 import gpu_state_pb2 as pb

VERSIONS = 4
RULE = IdleRule()


@dataclass
class PathCost:
    name: str
    main_us: float  # main process CPU per report
    worker_us: float  # worker CPU per report

    @property
    def main_per_core(self) -> float:
        return 1e6 / self.main_us

    @property
    def total_us(self) -> float:
        return self.main_us + self.worker_us


def report_rounds(nodes: int, seed: int = 7) -> list[list[pb.NodeReport]]:
    """VERSIONS rounds of one report per node; readings move a little each round (never across the
    idle rule), sequences and sample times advance."""
    fleet = bx.make_fleet(nodes)
    rng = random.Random(seed)
    rounds = []
    now = time.time()
    for version in range(VERSIONS):
        batch = []
        for node in fleet:
            r = bx.node_report(node, now + version)
            r.sequence = version + 1
            for g in r.gpus:
                if g.HasField("utilization_gpu_percent"):
                    g.temperature_celsius += rng.randint(0, 3)
                    g.power_watts += rng.uniform(0, 5)
            batch.append(r)
        rounds.append(batch)
    return rounds


def _best(repeat: int, run: Callable[[int], float]) -> float:
    """Least CPU seconds of `run(round)` over `repeat` tries (each a new round of reports)."""
    best = float("inf")
    for i in range(repeat):
        best = min(best, run(i))
    return best


def measure(nodes: int, repeat: int) -> list[PathCost]:
    rounds = report_rounds(nodes)
    serialized = [[r.SerializeToString() for r in batch] for batch in rounds]
    clock = [0.0]

    # -- in-process: the main process parses and ingests; the worker used to re-serialize.
    state = GpuState(RULE)

    def main_in_process(i: int) -> float:
        parse, ingest = pb.NodeReport.FromString, state.ingest
        clock[0] += 1.0
        start = time.thread_time()
        for raw in serialized[i % VERSIONS]:
            ingest(parse(raw), clock[0])
        return time.thread_time() - start

    def worker_serialize(i: int) -> float:
        start = time.thread_time()
        for r in rounds[i % VERSIONS]:
            frames.summary_entry(r.SerializeToString(), b"")
        return time.thread_time() - start

    # -- relayed: the worker summarizes and encodes; the main process decodes and stores. Each
    # try relays a new round (newer than what is stored: an older one would be refused at once).
    relay_state = GpuState(RULE)
    store = SummaryStore(RULE)
    process = IngestProcess([], Worker(0, 1, 1), relay_state, lambda _i, _t: None)
    worker_s: list[float] = []

    def main_relayed(i: int) -> float:
        clock[0] += 1.0
        start = time.thread_time()
        for r in rounds[i % VERSIONS]:
            store.ingest(r, clock[0])
        payload = store.take()
        worker_s.append(time.thread_time() - start)

        async def go() -> float:
            start = time.thread_time()
            await process.apply(payload)
            return time.thread_time() - start

        return asyncio.run(go())

    for i in range(VERSIONS):  # warm: every node known, facts read, pools filled
        main_in_process(i)
        main_relayed(i)
    results = {}
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 10, 10)
    results["in-process"] = (_best(repeat, main_in_process), _best(repeat, worker_serialize))
    worker_s.clear()
    results["relayed"] = (_best(repeat, main_relayed), min(worker_s))
    assert len(relay_state) == len(state) == nodes
    for node in state.node_names()[:50]:  # the two paths agree (the version each stored last may differ)
        assert relay_state.facts(node) == state.facts(node)
    return [PathCost(name, 1e6 * main / nodes, 1e6 * worker / nodes) for name, (main, worker) in results.items()]


def worker_per_report(nodes: int, repeat: int) -> tuple[dict[str, float], dict[str, float]]:
    """A worker's CPU per report (us, best of `repeat`) from bytes to a queued summary: a full
    report (parse, report_problem, SummaryStore.ingest) against a light heartbeat of the same
    readings (contract 0.6: parse, heartbeat_problem, SummaryStore.refresh), same nodes, one run;
    then the main process's CPU per light heartbeat relayed (the real IngestProcess.apply of the
    batches the light path queued, on a GpuState holding the full reports they repeat); and the
    mean bytes of each on the wire."""
    rounds = report_rounds(nodes)
    full = [[r.SerializeToString() for r in batch] for batch in rounds]
    light = [
        [light_heartbeat(r, rounds[0][n].sequence).SerializeToString() for n, r in enumerate(batch)] for batch in rounds
    ]

    base: list[bytes] = []  # the batch of the full reports the heartbeats repeat
    batches: list[bytes] = []  # the light path's

    async def go() -> dict[str, float]:
        store, parse = SummaryStore(RULE), pb.NodeReport.FromString
        for r in rounds[0]:  # the full reports the heartbeats repeat
            store.ingest(r, 1.0)
        store.take()

        def full_path(i: int, opened: Callable[[str], None] | None = None) -> float:
            """`opened`: store.stream_opened, each report the first of its stream (summarized);
            None: of the shape before it (relayed as its readings, as a heartbeat of an agent
            before 0.6 is)."""
            start = time.thread_time()
            for raw in full[i % VERSIONS]:
                r = parse(raw)
                if opened is not None:  # the first of its stream: every field checked, summarized
                    opened(r.node_name)
                    problem = report_problem(r, None)
                else:  # as IngestService does (known_shape: then only its readings are checked)
                    problem = readings_problem(r, r.node_name) if store.known_shape(r) else report_problem(r, None)
                if problem is None:
                    store.ingest(r, 2.0)
            store.take()
            return time.thread_time() - start

        refused = 0

        def light_path(i: int) -> float:
            nonlocal refused
            start = time.thread_time()
            for raw in light[i % VERSIONS]:
                r = parse(raw)
                if heartbeat_problem(r, r.node_name) is not None or store.refresh(r, 2.0) is not None:
                    refused += 1
            batch = store.take()
            spent = time.thread_time() - start
            batches.append(batch)
            return spent

        out = {
            "full report": _best(repeat, lambda i: full_path(i, store.stream_opened)),
            "full report, only readings changed": _best(repeat, full_path),
        }
        for r in rounds[0]:  # the base again, summarized: full_path stored newer full reports
            store.stream_opened(r.node_name)
            store.ingest(r, 1.0)
        base.append(store.take())
        out["light heartbeat"] = _best(repeat, light_path)
        assert refused == 0, f"{refused} light heartbeats refused"
        return {name: 1e6 * seconds / nodes for name, seconds in out.items()}

    async def main_light() -> float:
        state = GpuState(RULE)
        process = IngestProcess([], Worker(0, 1, 1), state, lambda _i, _t: None)
        await process.apply(base[0])
        best = float("inf")
        for batch in batches:
            start = time.thread_time()
            await process.apply(batch)
            best = min(best, time.thread_time() - start)
        assert all(state.reported(r.node_name).sequence == r.sequence for r in rounds[(len(batches) - 1) % VERSIONS])  # type: ignore[union-attr]
        return 1e6 * best / nodes

    sizes = {"full report": sum(map(len, full[1])) / nodes, "light heartbeat": sum(map(len, light[1])) / nodes}
    worker = asyncio.run(go())
    gc.collect()
    worker["main, light heartbeat relayed"] = asyncio.run(main_light())
    return worker, sizes


def state_bytes_per_node(nodes: int) -> dict[str, float]:
    """Python bytes per node held by the main process's GpuState and by a worker's SummaryStore,
    once every node reported (the relayed path), new allocations only."""
    import tracemalloc

    (batch, *_) = report_rounds(nodes)
    out: dict[str, float] = {}
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    store = SummaryStore(RULE)
    for r in batch:
        store.ingest(r, 1.0)
    payload = store.take()
    worker = tracemalloc.take_snapshot()
    out["worker SummaryStore"] = sum(s.size_diff for s in worker.compare_to(before, "filename")) / nodes
    state = GpuState(RULE)
    process = IngestProcess([], Worker(0, 1, 1), state, lambda _i, _t: None)
    del batch
    before_main = tracemalloc.take_snapshot()
    asyncio.run(process.apply(payload))
    del payload
    after = tracemalloc.take_snapshot()
    out["main GpuState"] = sum(s.size_diff for s in after.compare_to(before_main, "filename")) / nodes
    tracemalloc.stop()
    return out


def format_rows(rows: list[PathCost], nodes: int, repeat: int) -> str:
    lines = [
        f"{nodes} nodes (8 GPUs, holders, topology), {VERSIONS} reading versions; CPU per report, best of {repeat}",
        f"{'path':<11} {'main us':>8} {'main reports/s/core':>20} {'worker us':>10} {'both us':>8}",
    ]
    for r in rows:
        lines.append(
            f"{r.name:<11} {r.main_us:>8.1f} {r.main_per_core:>20,.0f} {r.worker_us:>10.1f} {r.total_us:>8.1f}"
        )
    old, new = rows
    lines.append(
        f"main process: {old.main_us / new.main_us:.1f}x less per report relayed "
        f"({new.main_per_core:,.0f} reports/s per core; goal >= 50,000); both processes: "
        f"{new.total_us / old.total_us:.2f}x the in-process path's CPU"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    print(format_rows(measure(args.nodes, args.repeat), args.nodes, args.repeat))
    worker, sizes = worker_per_report(args.nodes, args.repeat)
    main_light = worker.pop("main, light heartbeat relayed")
    print(
        "worker CPU per report, bytes to a queued summary: "
        + ", ".join(f"{k} {v:.1f} us ({sizes[k.split(',')[0]]:,.0f} bytes)" for k, v in worker.items())
        + f" ({worker['full report'] / worker['light heartbeat']:.1f}x less light); the main process "
        f"stores a relayed light heartbeat in {main_light:.1f} us"
    )
    per_node = state_bytes_per_node(args.nodes)
    print("state per node (Python allocations): " + ", ".join(f"{k} {v / 1024:.1f} KiB" for k, v in per_node.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
