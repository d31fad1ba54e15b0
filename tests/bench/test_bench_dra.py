"""Smoke test of the DRA fleet benchmark (bench/bench_dra.py) on a tiny fleet: no processes, no
network. The fleet is what was built, and the claim pod's filter answer is what the fleet says."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

import bench_dra as bd  # noqa: E402

from gpuextender.extender.scheduler.wire import parse_extender_args  # noqa: E402

NODES = 48


def test_tiny_run_counts_what_it_built_and_the_answers_match_the_fleet() -> None:
    claims = bd.fleet_claims(NODES)
    held = {n: len(h) for n, h in bd.holders_per_node(claims).items()}
    full = sum(1 for n in range(NODES) if held.get(bd.node_name(n), 0) == bd.GPUS)
    out = bd.run(nodes=NODES, calls=3, rounds=1, write=False, profile=False)
    assert out["devices"] == NODES * bd.GPUS
    assert out["claims"] == NODES * bd.CLAIMS_PER_NODE + 1  # and the claim pod's own, pending
    assert out["claims_allocated"] == NODES * bd.CLAIMS_PER_NODE
    assert out["claimed_devices"] == sum(held.values())
    assert out["answer"] == {"passed": NODES - full, "failed": full, "answered": NODES - full}
    assert 0 < full < NODES  # both kinds of node in the fleet
    assert set(out["latency_ms"]) == {"(a) device-plugin pod", "(b) claim pod", "(c) claim pod, claim churn"}
    for verbs in out["latency_ms"].values():
        assert all(0 < v["p50"] <= v["p99"] for v in verbs.values())
    assert out["memory_mib"]["slices"] > 0 and out["memory_mib"]["claims"] > 0
    assert out["claim_event_cpu_us_mean"] > 0 and out["slice_event_cpu_ms"] > 0
    assert "## DRA at fleet scale (issue 24)" in bd.markdown(out)[0]


def test_a_claim_that_lets_go_of_a_full_node_makes_it_pass_the_claim_pod() -> None:
    claims = bd.fleet_claims(NODES)
    w = bd.world(NODES, dra=True, claims=claims)
    names = [bd.node_name(n) for n in range(NODES)]
    body = bd.request(bd.pod(True), names)
    answer = w.api.filter(parse_extender_args(body))
    bd.check_answer(w, names, answer, shortlist=100)
    node = next(n for n in names if w.held.get(n) == bd.GPUS)
    assert node in answer["FailedNodes"] or node in answer["FailedAndUnresolvableNodes"]
    # Its last claim's pod is done: its GPUs (the node's last ones: claims are packed from gpu-0)
    # idle and held by no one in the agent's next report; while the claim still holds the devices
    # the node fails, once the claim is deallocated (a watch event) it passes.
    name, ns, _, devices = [c for c in claims if c[2] == node][-1]
    holders = bd.holders_per_node(claims)[node][: bd.GPUS - len(devices)]
    w.state.ingest(bd.agent_report(node, holders, dra=True), bd.NOW)
    held = w.api.filter(parse_extender_args(body))
    assert node in {**held["FailedNodes"], **held["FailedAndUnresolvableNodes"]}
    w.claim_watch._handle_line(bd.event("MODIFIED", bd.claim_obj(name, ns, node, devices, 1, "deallocated")))
    again = w.api.filter(parse_extender_args(body))
    assert node not in {**again["FailedNodes"], **again["FailedAndUnresolvableNodes"]}
    assert node in again["NodeNames"]
    # A device-plugin pod on the device-plugin fleet fails the same nodes the claim pod did.
    plugin = bd.world(NODES, dra=False, claims=claims)
    dp = plugin.api.filter(parse_extender_args(orjson.dumps({"Pod": bd.pod(False), "NodeNames": names})))
    assert bd.check_answer(plugin, names, dp) == bd.check_answer(w, names, answer)
