"""Benchmark: what the peers' messages (`--peers`, scheduler/peer_wire.py) cost a replica at their
bounds, in-process.

- the worst message: the largest body the scheduler API takes (--max-body-bytes' default) filled
  with bindings of MAX_NODES_PER_ENTRY node names each: its parse (the event loop held meanwhile);
- the bounds on what all messages hold open at once (binding_gate.MAX_PEER_OPEN, MAX_PEER_NAMES):
  the gate filled to both by such messages, then what one more message costs (every binding past
  the bound refused or widened), and one pass of the gate over what is open (what each filter's
  wait runs, `_at_risk`, every node roomy so that the pass reads every name), with the RSS the
  open bindings take.

Run: `.venv/bin/python bench/bench_peer_message.py` (prints one table; raw figures in
bench/out/peer_message.json; exits 1 where the gate holds more than its bounds).
"""

from __future__ import annotations

import gc
import json
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from gpuextender.extender.scheduler import peer_wire
from gpuextender.extender.scheduler.binding_gate import MAX_PEER_NAMES, MAX_PEER_OPEN, BindingGate
from gpuextender.extender.settings import DEFAULT_MAX_BODY_BYTES

OUT_DIR = Path(__file__).resolve().parent / "out"
HOLD_S = 0.5  # --binding-wait's default


def message(sender: str, first: int, count: int, names: int) -> bytes:
    nodes = frozenset(f"n{i:05d}" for i in range(names))
    entries = [
        peer_wire.OpenBinding(f"{first + i:08d}-5f1c-4b7e-9a3d-0242ac120002", 8, nodes, "", HOLD_S)
        for i in range(count)
    ]
    return peer_wire.encode(sender, entries)


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    limit = DEFAULT_MAX_BODY_BYTES
    per = peer_wire.MAX_NODES_PER_ENTRY
    one = len(message("x", 0, 1, per))
    count = min(peer_wire.MAX_ENTRIES, (limit - 64) // one)
    worst = message("peer-b", 0, count, per)
    parse_ms = timed(lambda: peer_wire.parse(worst, HOLD_S), 20)
    gate = BindingGate(HOLD_S, lambda: 1000.0)
    gc.collect()
    before = rss_mib()
    taken_ms: list[float] = []
    messages = 0

    def take(body: bytes) -> dict[str, int]:
        nonlocal messages
        _, entries = peer_wire.parse(body, HOLD_S)
        t = time.perf_counter()
        results = gate.opened_at_peers(entries)
        taken_ms.append((time.perf_counter() - t) * 1000)
        messages += 1
        return results

    while not take(message("peer-b", messages * count, count, per)).get("widened"):
        pass  # the names' bound first, with the worst messages
    while not take(message("peer-b", 10**7 + messages * 1024, peer_wire.MAX_ENTRIES, 1)).get("overflow"):
        pass  # then the count's, with messages of many bindings
    _, more = peer_wire.parse(message("peer-b", 10**8, count, per), HOLD_S)
    past_ms = timed(lambda: gate.opened_at_peers(more), 20)
    named = sum(len(e.nodes) for e in gate._open.values())
    pass_ms = timed(lambda: gate._at_risk(1, lambda _n: 1_000_000), 10)
    result = {
        "body_bytes": len(worst),
        "bindings_per_message": count,
        "names_per_binding": per,
        "parse_ms_median": round(statistics.median(parse_ms), 1),
        "parse_ms_max": round(max(parse_ms), 1),
        "open": gate.open_count(),
        "names_open": named,
        "bounds": {"MAX_PEER_OPEN": MAX_PEER_OPEN, "MAX_PEER_NAMES": MAX_PEER_NAMES},
        "messages_to_fill": messages,
        "take_ms_max": round(max(taken_ms), 1),
        "past_bound_ms_median": round(statistics.median(past_ms), 2),
        "gate_pass_ms_median": round(statistics.median(pass_ms), 1),
        "rss_mib_added": round(rss_mib() - before, 1),
    }
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; Python {sys.version.split()[0]}")
    for key, value in result.items():
        print(f"  {key:24} {value}")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "peer_message.json").write_text(json.dumps(result, indent=1))
    if gate.open_count() != MAX_PEER_OPEN or named > MAX_PEER_NAMES:
        print(f"FAIL: {gate.open_count()} open naming {named} nodes, past the gate's bounds")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
