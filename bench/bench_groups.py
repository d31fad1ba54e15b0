"""Benchmark: a multi-pod group member's filter against a single pod's, at 5,000 names, side by
side in one run (issue 34, item 10), and what the group book holds in memory.

What it measures:
1. the real `gpu-extender` (benchlib.extender_process) with `--inventory` of 5,000 Nodes in 300
   `nvidia.com/gpu.clique` domains (16-17 nodes each) and bench_extender's 5,000-node fleet loaded
   over gRPC (a third of the nodes busy, a third partly busy, a third idle);
2. 200 LeaderWorkerSet groups in flight (2-4 members of 2 GPUs; each group's first member filtered,
   so its domain is chosen and its room held);
3. R rounds (default 3), the order of the variants rotating per round; per round and variant N
   filter calls of all 5,000 names, shuffled (the same 16 orders on every side), one in flight,
   over one keep-alive connection, timed client-side (encode, POST, read, decode):
   - `single`: the fixture's 2-GPU pod (no group: the fit index's road);
   - `member`: a later member of a group in flight (its domain's 16 nodes judged, the rest failed
     GroupInOtherDomain);
   - `first`: the first member of a new group (every candidate judged, the domains' room counted,
     one chosen and held): each call a group of its own, so the book grows by N per round.
   Every answer is checked outside the timed region (single: passes; member: only nodes of its
   domain pass; first: its passes lie in one domain).
4. the group book's memory: tracemalloc around 10,000 plans of 4 members over 2 nodes each
   (MAX_GROUPS), in this process.
Reported: p50 and p99 per variant (medians over rounds), and member/single, first/single.

Run: `.venv/bin/python bench/bench_groups.py [--rounds 3] [--requests 300] [--quick]`
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import statistics
import sys
import tempfile
import time
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import aiohttp
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_extender import JSON_HEADERS, SEED, encode, load_fleet, load_pod, make_fleet
from benchlib import BenchError, extender_process, machine_facts, percentile, scrape, wait_http_ok

from gpuextender.extender.settings import MAX_GROUPS
from gpuextender.extender.state.group_book import GroupBook

NODES = 5_000
DOMAINS = 300
GROUPS_IN_FLIGHT = 200
NAMESPACES = 50  # the groups' teams: ~22 groups each after 3 rounds of new groups, under the bound of 100
CLIQUE = "nvidia.com/gpu.clique"
ORDERS = 16
VARIANTS = ("single", "member", "first")


def clique_of(i: int) -> str:
    return f"cluster-0.{i % DOMAINS}"


def group_pod(base: dict[str, Any], group: str, index: int, size: int) -> dict[str, Any]:
    pod = json.loads(json.dumps(base))
    meta = pod["metadata"]
    meta["name"] = f"{group}-{index}"
    meta["uid"] = f"uid-{group}-{index}"
    # Teams of their own: --group-holds-per-namespace (100) bounds one namespace's groups held.
    meta["namespace"] = f"team-{zlib.crc32(group.encode()) % NAMESPACES}"
    meta.setdefault("labels", {})["leaderworkerset.sigs.k8s.io/group-key"] = group
    meta.setdefault("annotations", {})["leaderworkerset.sigs.k8s.io/size"] = str(size)
    return pod


async def _post(session: aiohttp.ClientSession, url: str, payload: Any) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter_ns()
    body = encode(payload)
    async with session.post(url, data=body, headers=JSON_HEADERS) as resp:
        status = resp.status
        raw = await resp.read()
    elapsed = (time.perf_counter_ns() - t0) / 1e6
    if status != 200:
        raise BenchError(f"filter: HTTP {status}: {raw[:300]!r}")
    return elapsed, json.loads(raw)


def _check(variant: str, answer: dict[str, Any], domain_of: dict[str, str]) -> None:
    passed = answer.get("NodeNames") or []
    if not passed:
        raise BenchError(f"{variant}: no node passed: {str(answer)[:300]}")
    if variant != "single" and len({domain_of[n] for n in passed}) != 1:
        raise BenchError(f"{variant}: passes in more than one domain: {passed[:10]}")


async def _bench(rounds: int, requests: int) -> dict[str, Any]:
    fleet = make_fleet(NODES)
    names = [n.name for n in fleet]
    domain_of = {name: clique_of(i) for i, name in enumerate(names)}
    # Slim Node objects (name, clique label, 8 allocatable GPUs): the file inventory parses YAML in
    # Python, and 5,000 full Node objects take a minute to read.
    nodes = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, CLIQUE: domain_of[name]}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}, "capacity": {"nvidia.com/gpu": "8"}},
        }
        for name in names
    ]
    rng = random.Random(f"{SEED}-groups")
    orders = []
    for _ in range(ORDERS):
        order = list(names)
        rng.shuffle(order)
        orders.append(order)
    base = load_pod()
    with tempfile.TemporaryDirectory() as tmp:
        inventory = Path(tmp) / "nodes.yaml"
        inventory.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": nodes}))
        proc, addrs = extender_process("extender-groups", ["--inventory", str(inventory)])
        with proc:
            timeout = aiohttp.ClientTimeout(total=60)
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1), timeout=timeout) as session:
                await wait_http_ok(session, f"{addrs.base_url}/readyz", proc, timeout_s=60)
                print(f"loading {NODES} nodes over gRPC...", file=sys.stderr, flush=True)
                await load_fleet(addrs.grpc_target, fleet)
                url = f"{addrs.base_url}/filter"
                sizes = [2 + i % 3 for i in range(GROUPS_IN_FLIGHT)]
                for g, size in enumerate(sizes):  # the groups in flight: domain chosen, room held
                    _, answer = await _post(
                        session, url, {"Pod": group_pod(base, f"g{g}", 0, size), "NodeNames": names}
                    )
                    _check("first", answer, domain_of)
                held = (await scrape(session, f"{addrs.base_url}/metrics")).get("gpu_extender_groups_held")
                if held != float(GROUPS_IN_FLIGHT):
                    raise BenchError(f"gpu_extender_groups_held {held}, expected {GROUPS_IN_FLIGHT}")
                times: dict[str, list[list[float]]] = {v: [] for v in VARIANTS}
                new_groups = 0
                gc.collect()
                gc.freeze()
                try:
                    for r in range(rounds):
                        for variant in VARIANTS[r % 3 :] + VARIANTS[: r % 3]:
                            samples: list[float] = []
                            for i in range(requests):
                                if variant == "single":
                                    pod = base
                                elif variant == "member":
                                    g = i % GROUPS_IN_FLIGHT
                                    pod = group_pod(base, f"g{g}", 1, sizes[g])
                                else:
                                    new_groups += 1
                                    pod = group_pod(base, f"new{new_groups}", 0, 2)
                                ms, answer = await _post(session, url, {"Pod": pod, "NodeNames": orders[i % ORDERS]})
                                samples.append(ms)
                                _check(variant, answer, domain_of)
                            times[variant].append(sorted(samples))
                            print(f"  round {r + 1}/{rounds} {variant}: {requests} calls", file=sys.stderr, flush=True)
                finally:
                    gc.unfreeze()
                metrics = await scrape(session, f"{addrs.base_url}/metrics")
    stats = {
        v: {
            "p50": statistics.median(percentile(s, 50) for s in runs),
            "p99": statistics.median(percentile(s, 99) for s in runs),
        }
        for v, runs in times.items()
    }
    return {
        "stats": stats,
        "groups_held_at_end": metrics.get("gpu_extender_groups_held"),
        "memory": book_memory(),
        "rounds": rounds,
        "requests": requests,
    }


def book_memory(plans: int = MAX_GROUPS) -> dict[str, float]:
    """Bytes the group book holds for `plans` plans of 4 members over 2 nodes each."""
    clock = [0.0]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    book = GroupBook(300.0, lambda: clock[0], max_groups=plans, per_namespace=plans)  # (the bound in all)
    for g in range(plans):
        key = f"namespace-{g % 50}/leaderworkerset/{g:040x}"
        book.hold(
            key,
            "leaderworkerset",
            4,
            8,
            (CLIQUE, f"c{g % 300}", f"{CLIQUE}=c{g % 300}"),
            {f"node-{2 * g:05d}": 2, f"node-{2 * g + 1:05d}": 2},
            "chosen",
        )
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(book) == plans
    return {"plans": plans, "mib": used / 1024**2, "bytes_per_plan": used / plans}


def format_markdown(result: dict[str, Any]) -> list[str]:
    s = result["stats"]
    facts = machine_facts()
    lines = [
        f"Machine: {facts['cpu']}, {facts['cores']} cores; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"{result['rounds']} rounds x {result['requests']} filter calls per variant, 5,000 names, "
        f"{DOMAINS} domains, {GROUPS_IN_FLIGHT} groups in flight.",
        "",
        "| variant | filter p50 (ms) | filter p99 (ms) | p50 / single | p99 / single |",
        "|---|---|---|---|---|",
    ]
    for v in VARIANTS:
        lines.append(
            f"| {v} | {s[v]['p50']:.2f} | {s[v]['p99']:.2f} | {s[v]['p50'] / s['single']['p50']:.2f}x "
            f"| {s[v]['p99'] / s['single']['p99']:.2f}x |"
        )
    m = result["memory"]
    lines += [
        "",
        f"Group book memory: {m['plans']:,} plans (the bound) hold {m['mib']:.1f} MiB "
        f"({m['bytes_per_plan']:.0f} bytes per plan of 4 members over 2 nodes); groups held at the end: "
        f"{result['groups_held_at_end']:.0f}.",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--quick", action="store_true", help="1 round of 30 calls per variant")
    args = p.parse_args(argv)
    rounds, requests = (1, 30) if args.quick else (args.rounds, args.requests)
    result = asyncio.run(_bench(rounds, requests))
    print("\n".join(format_markdown(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
