"""The fleet page's pure view: each GPU's state (classified at ingest by the decision's own
comparisons), data freshness, class grouping and the counts per class."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.model.dra import parse_device_class, parse_resource_slice
from gpuextender.extender.model.gpu_facts import GpuFacts
from gpuextender.extender.settings import DecisionPolicy
from gpuextender.extender.state.claim_ledger import RESOURCE_CLAIM_KIND, ClaimLedger
from gpuextender.extender.state.dra_inventory import build_dra
from gpuextender.extender.state.fleet_history import Sample
from gpuextender.extender.state.gpu_summary import (
    ALLOCATION_BEFORE_0_2,
    ALLOCATION_FROM_KUBELET,
    NodeSummary,
    summarize,
)
from gpuextender.extender.ui.fleet_view import STATES, FleetInputs, build, gpu_nodes, history_sample, node_row
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import GIB, gpu, report
from tests.extender.dra_objects import allocated_claim, device_class, gpu_slice

RULE = IdleRule(max_utilization_percent=30.0, max_memory_used_percent=50.0)
STALE_AFTER = DecisionPolicy().stale_after_s
NOW = 1_000.0


def _mem(sample: pb.GpuSample, used_bytes: int) -> pb.GpuSample:
    sample.memory_total_bytes = 80 * GIB
    sample.memory_used_bytes = used_bytes
    return sample


def state_of(sample: pb.GpuSample, *, held: bool = False, rule: IdleRule = RULE) -> str:
    r = report("n", [sample])
    if held:
        r.allocation_source = pb.ALLOCATION_KUBELET
        sample = r.gpus[0]
        sample.holders.add(namespace="team-a", pod="p", container="c", device_id=sample.uuid)
    (cell,) = summarize(r, rule, NOW).gpus
    return STATES[cell[1]]


HALF = 40 * GIB  # exactly 50 % of 80 GiB


@pytest.mark.parametrize(
    ("util", "used", "held", "expected"),
    [
        (29, HALF - 1, False, "free-idle"),  # both readings just under the rule
        (30, 0, False, "free-busy"),  # utilization at the threshold: busy
        (29, HALF, False, "free-busy"),  # memory at the threshold: busy
        (0, HALF - 1, False, "free-idle"),
        (29, HALF - 1, True, "allocated-idle"),
        (30, 0, True, "allocated-busy"),
        (29, HALF, True, "allocated-busy"),
    ],
)
def test_each_gpu_is_classified_by_the_idle_rule_at_its_boundaries(
    util: int, used: int, held: bool, expected: str
) -> None:
    assert state_of(_mem(gpu(0, util, None), used), held=held) == expected


def test_the_thresholds_come_from_the_configured_rule() -> None:
    strict = IdleRule(max_utilization_percent=5.0, max_memory_used_percent=10.0)
    assert state_of(_mem(gpu(0, 4, None), 8 * GIB - 1), rule=strict) == "free-idle"
    assert state_of(_mem(gpu(0, 5, None), 0), rule=strict) == "free-busy"
    assert state_of(_mem(gpu(0, 0, None), 8 * GIB), rule=strict) == "free-busy"


def test_degraded_and_unhealthy_come_before_allocation_and_load() -> None:
    degraded = gpu(0, 95, 90)
    degraded.health = pb.HEALTH_DEGRADED
    assert state_of(degraded) == "degraded"
    assert state_of(degraded, held=True) == "degraded"
    assert state_of(gpu(0, None, None, healthy=False)) == "unhealthy"
    assert state_of(gpu(0, 0, 0, healthy=False), held=True) == "unhealthy"


def test_a_missing_reading_does_not_make_a_gpu_busy() -> None:
    assert state_of(gpu(0, None, None)) == "free-idle"  # as gpu_is_idle: the other reading decides
    assert state_of(gpu(0, None, 60)) == "free-busy"


def test_nvml_broken_on_the_node_makes_every_gpu_unhealthy() -> None:
    s = summarize(report("n", [gpu(0), gpu(1)], node_error="NVML_ERROR_DRIVER_NOT_LOADED"), RULE, NOW)
    assert [STATES[c[1]] for c in s.gpus] == ["unhealthy", "unhealthy"]


def test_the_cells_agree_with_the_counts_the_decision_uses() -> None:
    gpus = [gpu(0, 0, 1), gpu(1, 90, 80), gpu(2, 10, 5), gpu(3, None, None, healthy=False)]
    s = summarize(report("n", gpus), RULE, NOW)
    assert [(c[0], STATES[c[1]], c[2]) for c in s.gpus] == [
        (0, "free-idle", 0),
        (1, "free-busy", 90),
        (2, "free-idle", 10),
        (3, "unhealthy", None),
    ]
    assert s.idle_gpus == sum(1 for c in s.gpus if STATES[c[1]] == "free-idle")
    assert s.gpus[1][3] == pytest.approx(80.0, abs=0.01)


# -- rows, freshness, grouping, counts ------------------------------------------------------------


def inputs(
    summaries: Mapping[str, NodeSummary],
    allocatable: Mapping[str, int] | None = None,
    classes: Mapping[str, tuple[str, ...]] | None = None,
    class_names: tuple[str, ...] = (),
    now: float = NOW,
) -> FleetInputs:
    facts = {
        name: tuple(GpuFacts("NVIDIA H100 80GB HBM3", 80 * GIB, "9.0") for _ in s.gpus) for name, s in summaries.items()
    }
    return FleetInputs(summaries.get, facts.get, allocatable or {}, classes or {}, class_names, now, STALE_AFTER, RULE)


def summary(name: str, received_at: float = NOW, idle: int = 2, busy: int = 0, kubelet: bool = True) -> NodeSummary:
    """`kubelet`: the agent read allocation (nobody holds these GPUs); False: holders unknown."""
    gpus = [gpu(i, 0, 1) for i in range(idle)] + [gpu(idle + i, 90, 80) for i in range(busy)]
    r = report(name, gpus)
    if kubelet:
        r.allocation_source = pb.ALLOCATION_KUBELET
    return summarize(r, RULE, received_at)


def test_gpus_whose_holders_the_agent_cannot_read_are_drawn_apart_from_free_ones() -> None:
    """Issue 26: without the kubelet's allocation a quiet GPU may be a pod's; never painted free."""
    view = inputs({"known": summary("known", busy=1), "unknown": summary("unknown", busy=1, kubelet=False)})
    known, unknown = node_row("known", view), node_row("unknown", view)
    assert [STATES[c[1]] for c in known["gpus"]] == ["free-idle", "free-idle", "free-busy"]
    assert [STATES[c[1]] for c in unknown["gpus"]] == [
        "holder-unknown-idle",
        "holder-unknown-idle",
        "holder-unknown-busy",
    ]
    assert known["allocation"] == ALLOCATION_FROM_KUBELET and unknown["allocation"] == ALLOCATION_BEFORE_0_2


def test_a_cell_judged_by_sm_activity_carries_it_as_its_seventh_element() -> None:
    spinning, plain = gpu(0, 100, 1), gpu(1, 100, 1)
    spinning.gpm.sm_active_percent = 0.754
    r = report("n", [spinning, plain])
    r.allocation_source = pb.ALLOCATION_KUBELET
    spinning, plain = r.gpus
    plain.holders.add(namespace="team-a", pod="p", container="c", device_id=plain.uuid)
    row = node_row("n", inputs({"n": summarize(r, RULE, NOW)}))
    # GPU 0 idle by SM activity (the seventh element); GPU 1 without GPM busy by its utilization.
    assert row["gpus"] == [
        [0, STATES.index("free-idle"), 100, 1.0, None, None, 0.75],
        [1, STATES.index("allocated-busy"), 100, 1.0, None, "team-a"],
    ]


def test_data_at_the_stale_bound_is_fresh_and_past_it_unknown() -> None:
    at_bound = summary("a", received_at=NOW - STALE_AFTER)
    past = summary("b", received_at=NOW - STALE_AFTER - 0.001)
    view = inputs({"a": at_bound, "b": past})
    fresh, stale = node_row("a", view), node_row("b", view)
    assert fresh["data"] == "fresh" and [STATES[c[1]] for c in fresh["gpus"]] == ["free-idle", "free-idle"]
    assert stale["data"] == "stale" and [STATES[c[1]] for c in stale["gpus"]] == ["unknown", "unknown"]
    assert all(c[2] is None and c[3] is None for c in stale["gpus"])  # no old reading shown as current
    assert fresh["model"] == "NVIDIA H100 80GB HBM3" and fresh["gpuMemoryGiB"] == 80


def test_a_node_without_agent_data_shows_its_allocatable_gpus_as_unknown() -> None:
    row = node_row("quiet", inputs({}, allocatable={"quiet": 4}))
    assert row["data"] == "none" and row["ageSeconds"] is None
    assert [(c[0], STATES[c[1]]) for c in row["gpus"]] == [(i, "unknown") for i in range(4)]


def test_gpu_nodes_are_the_inventorys_gpu_nodes_and_the_reporting_ones() -> None:
    assert gpu_nodes({"cpu": 0, "b": 8, "a": 2}, ["z-agent-only", "b"]) == ["a", "b", "z-agent-only"]


def test_nodes_are_grouped_by_class_with_counts_and_the_unclassified_last() -> None:
    summaries = {
        "h1": summary("h1", idle=2, busy=1),
        "h2": summary("h2", idle=0, busy=2),
        "both": summary("both", idle=1),
        "loose": summary("loose", idle=1, busy=1),
    }
    classes = {"h1": ("h100",), "h2": ("h100",), "both": ("h100", "a100"), "loose": (), "silent": ("a100",)}
    doc = build(
        inputs(
            summaries, allocatable={"silent": 2, "cpu-only": 0}, classes=classes, class_names=("h100", "a100", "l40s")
        ),
        gpu_nodes({"silent": 2, "cpu-only": 0}, summaries),
    )
    groups = {g["class"]: g for g in doc["classes"]}
    assert [g["class"] for g in doc["classes"]] == ["a100", "h100", "l40s", None]
    assert [r["node"] for r in groups["h100"]["rows"]] == ["both", "h1", "h2"]
    assert [r["node"] for r in groups["a100"]["rows"]] == ["both", "silent"]
    assert [r["node"] for r in groups[None]["rows"]] == ["loose"]
    assert groups["l40s"]["nodes"] == 0 and groups["l40s"]["rows"] == []  # a class with no node still shows
    h100 = groups["h100"]
    assert (h100["nodes"], h100["gpus"]) == (3, 6)
    assert h100["counts"] == {**dict.fromkeys(STATES, 0), "free-idle": 3, "free-busy": 3}
    assert groups["a100"]["counts"]["unknown"] == 2 and groups["a100"]["counts"]["free-idle"] == 1
    # Totals count each node once, however many classes it is in.
    totals = doc["totals"]
    assert (totals["nodes"], totals["gpus"]) == (5, 10)
    assert totals["counts"] == {**dict.fromkeys(STATES, 0), "free-idle": 4, "free-busy": 4, "unknown": 2}
    assert doc["states"] == list(STATES) and len(doc["stateText"]) == len(STATES)


def test_no_class_at_all_puts_every_node_in_the_unclassified_group() -> None:
    doc = build(inputs({"a": summary("a")}), ["a"])
    assert [(g["class"], g["nodes"]) for g in doc["classes"]] == [(None, 1)]


def test_the_document_holds_nothing_about_pods_but_namespaces() -> None:
    r = report("n", [gpu(0, 0, 1)])
    r.allocation_source = pb.ALLOCATION_KUBELET
    r.gpus[0].holders.add(namespace="team-a", pod="secret-pod-name", container="c", device_id="GPU-0")
    row = node_row("n", inputs({"n": summarize(r, RULE, NOW)}))
    assert row["allocatedIdleByNamespace"] == {"team-a": 1}
    assert "secret-pod-name" not in repr(row)


def test_a_dra_node_is_drawn_as_the_decision_counts_it() -> None:
    """gpu-0 and gpu-1 are claimed (their pod not started: the agent reads them free and idle; one
    busy), gpu-2 is tainted NoSchedule, gpu-3 free: drawn allocated, allocated, unhealthy, free."""
    dra = build_dra(
        [parse_resource_slice(gpu_slice("d", 4, tainted=(2,), uuid_of=lambda m: f"GPU-{m}"))],
        [parse_device_class(device_class())],
        ("nvidia.com/gpu",),
    )
    claims = ClaimLedger()
    claims.replace_all(RESOURCE_CLAIM_KIND, [allocated_claim("c", "d", ["gpu-0", "gpu-1"])])
    r = report("d", [gpu(0, 0, 1), gpu(1, 90, 80), gpu(2, 0, 1), gpu(3, 0, 1)])
    r.allocation_source = pb.ALLOCATION_KUBELET
    view = replace(inputs({"d": summarize(r, RULE, NOW)}), dra_devices=dra.devices, claimed_on=claims.allocated_on)
    row = node_row("d", view)
    assert [STATES[c[1]] for c in row["gpus"]] == ["allocated-idle", "allocated-busy", "unhealthy", "free-idle"]
    assert row["dra"] == {"devices": 4, "claimed": 2, "tainted": 1}
    # An agent that cannot read the kubelet: the claims still say which GPUs are held.
    r.allocation_source = pb.ALLOCATION_UNAVAILABLE
    view = replace(view, summary={"d": summarize(r, RULE, NOW)}.get)
    states = [STATES[c[1]] for c in node_row("d", view)["gpus"]]
    assert states == ["allocated-idle", "allocated-busy", "unhealthy", "holder-unknown-idle"]
    # Without agent data: one unknown cell per device (its Node lists no nvidia.com/gpu).
    quiet = node_row("d", replace(inputs({}), dra_devices=dra.devices, claimed_on=claims.allocated_on))
    assert [STATES[c[1]] for c in quiet["gpus"]] == ["unknown"] * 4 and quiet["dra"]["claimed"] == 2
    assert gpu_nodes({"d": 0}, [], dra.gpu_devices) == ["d"]


def test_a_held_gpu_says_which_namespace_holds_it() -> None:
    r = report("n", [gpu(0, 0, 1), gpu(1, 90, 80), gpu(2, 0, 1)])
    r.allocation_source = pb.ALLOCATION_KUBELET
    r.gpus[0].holders.add(namespace="team-a", pod="p", container="c", device_id=r.gpus[0].uuid)
    r.gpus[1].holders.add(namespace="team-b", pod="q", container="c", device_id=r.gpus[1].uuid + "::0")
    r.gpus[1].holders.add(namespace="team-a", pod="s", container="c", device_id=r.gpus[1].uuid + "::1")
    row = node_row("n", inputs({"n": summarize(r, RULE, NOW)}))
    assert [STATES[c[1]] for c in row["gpus"]] == ["allocated-idle", "allocated-busy", "free-idle"]
    assert row["gpus"][0][4:] == [None, "team-a"] and row["gpus"][1][4:] == [None, "team-a,team-b"]
    assert len(row["gpus"][2]) == 4  # nobody holds it: no sixth element


def test_domains_count_free_idle_gpus_and_the_groups_held_there() -> None:
    summaries = {
        "a0": summary("a0", idle=8),
        "a1": summary("a1", idle=2, busy=6),
        "b0": summary("b0", idle=3),
        "x": summary("x"),
    }
    fleet = replace(
        inputs(summaries),
        domain_level="nvidia.com/gpu.clique",
        domain_of={"a0": "a", "a1": "a", "b0": "b"},
        groups_held={"nvidia.com/gpu.clique=a": [("llm/leaderworkerset/g", 2)]},
    )
    doc = build(fleet, ["a0", "a1", "b0", "x"])
    assert doc["domains"] == {
        "level": "nvidia.com/gpu.clique",
        "domains": [  # most free idle GPUs first; x carries no label: in no domain
            {
                "domain": "a",
                "nodes": 2,
                "gpus": 16,
                "freeIdleGpus": 10,
                "holderUnknownIdleGpus": 0,
                "groupsHeld": [{"group": "llm/leaderworkerset/g", "membersHeld": 2}],
            },
            {"domain": "b", "nodes": 1, "gpus": 3, "freeIdleGpus": 3, "holderUnknownIdleGpus": 0, "groupsHeld": []},
        ],
    }


def test_counters_chart_and_domains_count_idle_gpus_by_one_rule() -> None:
    """Issue 52 item 7: agents that cannot read the kubelet (no-kubelet-access), a node in no domain
    beside: every GPU idle with its holder unknown. The counters, the 24-hour chart's point and the
    domains table say the same numbers: 0 free-idle, and the holder-unknown-idle ones apart."""
    summaries = {
        "a0": summary("a0", idle=8, kubelet=False),
        "a1": summary("a1", idle=6, busy=2, kubelet=False),
        "b0": summary("b0", idle=3),
        "x": summary("x", idle=4, kubelet=False),
    }
    fleet = replace(inputs(summaries), domain_level="clique", domain_of={"a0": "a", "a1": "a", "b0": "b"})
    doc = build(fleet, ["a0", "a1", "b0", "x"])
    counts = doc["totals"]["counts"]
    assert (counts["free-idle"], counts["holder-unknown-idle"]) == (3, 18)
    assert doc["idleStates"] == ["free-idle", "holder-unknown-idle"]
    point = history_sample({**doc, "waiting": []})
    assert (point.free_idle, point.holder_unknown_idle) == (3, 18)
    rows = {d["domain"]: d for d in doc["domains"]["domains"]}
    assert (rows["a"]["freeIdleGpus"], rows["a"]["holderUnknownIdleGpus"], rows["a"]["gpus"]) == (0, 14, 16)
    assert (rows["b"]["freeIdleGpus"], rows["b"]["holderUnknownIdleGpus"]) == (3, 0)
    assert [d["domain"] for d in doc["domains"]["domains"]] == ["a", "b"]  # most idle offered first: 14 > 3


def test_domains_are_ordered_by_the_idle_gpus_a_group_is_offered_there() -> None:
    """free + holder-unknown idle: the decision offers both. 4 holder-unknown beat 3 free; a tie
    (3 and 3) goes by name."""
    summaries = {
        "a0": summary("a0", idle=3),
        "b0": summary("b0", idle=4, kubelet=False),
        "c0": summary("c0", idle=2, kubelet=False),
        "c1": summary("c1", idle=1),
    }
    fleet = replace(inputs(summaries), domain_level="clique", domain_of={"a0": "a", "b0": "b", "c0": "c", "c1": "c"})
    doc = build(fleet, list(summaries))
    assert [d["domain"] for d in doc["domains"]["domains"]] == ["b", "a", "c"]


def _doc(gpus: int, **counts: int) -> dict[str, Any]:
    return {"totals": {"gpus": gpus, "counts": {**dict.fromkeys(STATES, 0), **counts}}, "waiting": [{}, {}]}


def test_the_history_keeps_the_pages_totals_and_no_gpu_count_without_data() -> None:
    """history_sample: the page's own counts; GPU counts only when at least one GPU has data."""
    assert history_sample(_doc(0)) == Sample(None, None, None, None, 2)  # no GPU node: unknown, not 0 idle
    assert history_sample(_doc(4, unknown=4)) == Sample(None, None, None, None, 2)  # every GPU unknown
    one_known = _doc(4, unknown=3, **{"free-idle": 1})
    assert history_sample(one_known) == Sample(1, 0, 0, 0, 2)
    counted = _doc(9, unknown=1, unhealthy=2, **{"free-idle": 3, "allocated-idle": 2, "holder-unknown-idle": 1})
    assert history_sample(counted) == Sample(3, 1, 2, 2, 2)  # the holder-unknown one apart
