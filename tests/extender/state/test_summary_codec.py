"""What an ingest worker relays is what the extender would have made of the report itself: a
summary and facts that survive the bytes, field by field, and a GpuState fed by the relay equal
to one fed the reports (issue 36: the workers summarize, the extender stores)."""

from __future__ import annotations

import asyncio
import dataclasses
import marshal

import pytest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.model.gpu_facts import GpuFacts, facts_from_report
from gpuextender.extender.state.facts_reader import FactsReader
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.gpu_summary import GpuPositions, NodeSummary, summarize
from gpuextender.extender.state.summary_codec import (
    decode_facts,
    decode_readings,
    decode_summary,
    encode_facts,
    encode_readings,
    encode_summary,
    slot_builder,
)
from gpuextender.extender.state.summary_refresh import refreshed_fields
from gpuextender.extender.workers import frames
from gpuextender.extender.workers.summary_store import SummaryStore
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report
from tests.extender.state.test_summary_refresh import heartbeat_of

RULE = IdleRule(30.0, 50.0, 40.0)


def varied_reports() -> list[pb.NodeReport]:
    """Reports that fill every part of a summary: holders (allocation known), MIG, sharing,
    topology, degraded and unhealthy GPUs, GPM, a broken node, an old agent."""
    out = []
    whole = report("whole", [gpu(i, 5 * i, 10.0 * i) for i in range(8)], seq=4)
    for link in ((0, 1, 18), (2, 3, 18), (0, 2, 0)):
        whole.topology.links.add(a=link[0], b=link[1], nvlinks=link[2])
    for i, g in enumerate(whole.gpus):
        g.dra_device = f"gpu-{i}"
        g.compute_capability.major, g.compute_capability.minor = 9, 0
    whole.gpus[1].health = pb.HEALTH_DEGRADED
    whole.gpus[1].health_reasons.append("XID_48")
    whole.gpus[2].healthy = False
    whole.gpus[2].unhealthy_reasons.append("GpuIsLost")
    whole.gpus[3].gpm.sm_active_percent = 12.5
    whole.allocation_source = pb.ALLOCATION_KUBELET
    whole.gpus[4].holders.add(namespace="team-a", pod="p1", container="c", device_id="GPU-4")
    whole.gpus[5].holders.add(namespace="team-b", pod="p2", container="c", device_id="GPU-5")
    whole.gpus[5].holders.add(namespace="team-a", pod="p3", container="c", device_id="GPU-5")
    out.append(whole)
    mig = report("mig", [gpu(0, None, 1.0)], seq=2)
    mig.gpus[0].sharing.mode = pb.SHARING_MIG
    mig.gpus[0].mig_instances.add(uuid="MIG-1", profile="1g.10gb", memory_total_bytes=10, memory_used_bytes=1)
    mig.gpus[0].mig_instances.add(uuid="MIG-2", profile="3g.40gb", memory_total_bytes=40, memory_used_bytes=39)
    out.append(mig)
    shared = report("shared", [gpu(0), gpu(1, 90)], seq=3)
    for g in shared.gpus:
        g.sharing.mode, g.sharing.replicas = pb.SHARING_TIME_SLICING, 4
    out.append(shared)
    out.append(report("broken", [gpu(0), gpu(1)], node_error="NVML_ERROR_DRIVER_NOT_LOADED", seq=9))
    out.append(report("old-agent", [gpu(0, 2, 3.0), gpu(1, 95, 3.0)], seq=1))
    out.append(report("unknown-sharing", [gpu(0), gpu(1)], seq=1))
    out.append(report("no-gpus", [], seq=1))
    return out


@pytest.mark.parametrize("r", varied_reports(), ids=lambda r: r.node_name)
def test_a_summary_and_its_facts_survive_the_bytes(r: pb.NodeReport) -> None:
    summary = summarize(r, RULE, 12.5)
    assert decode_summary(encode_summary(summary)) == summary
    assert decode_facts(encode_facts(facts_from_report(r))) == facts_from_report(r)


def test_every_field_travels() -> None:
    """A summary with no field at its default: a field the codec dropped or shifted shows."""
    positions = GpuPositions(("GPU-0",), ("gpu-0",), 1, 0, 1, b"\x01\x02", ((0, True, "lost"),))
    base = NodeSummary("n", 8, 7, 6, 12.5, "", 3, 1700000000.25, 42.0)
    values: dict[str, object] = {
        "free_gpus": 5,
        "degraded_idle_gpus": 1,
        "allocated_idle_gpus": 2,
        "idle_by_namespace": (("a", 1),),
        "allocation": "kubelet",
        "set_tiers": (0, 1, 2),
        "mig_gpus": 1,
        "mig_instances": (("1g.10gb", 2),),
        "mig_free": (("1g.10gb", 1),),
        "quality": (0, 1),
        "gpus": ((0, 1, 5, 2.5), (1, 0, None, None)),
        "sm_active": (0.75, None),
        "held_by": ((0, "a"),),
        "holder_pods": frozenset({"a/p"}),
        "bound_pod_units": 1,
        "pod_units": (("a/p", 2, 1),),
        "positions": positions,
        "sharing_unknown": True,
        "inferred_replicas": 4,
    }
    defaults = {f.name for f in dataclasses.fields(NodeSummary) if f.default is not dataclasses.MISSING}
    assert set(values) == defaults  # a new field with a default is listed here too
    full = dataclasses.replace(base, **values)  # type: ignore[arg-type]
    assert decode_summary(encode_summary(full)) == full
    assert dataclasses.replace(full, node_error="x") != full  # equality sees a field's change


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        marshal.dumps((1, 2)),
        marshal.dumps("not a tuple"),
        encode_summary(summarize(report("n", [gpu(0)]), RULE, 1.0))[:-3],
    ],
)
def test_bytes_the_codec_did_not_make_raise(data: bytes) -> None:
    with pytest.raises((ValueError, EOFError, TypeError)):
        decode_summary(data)


def test_a_state_fed_by_the_relay_equals_one_fed_the_reports() -> None:
    """The same reports, received at the same times: one GpuState ingests them, the other stores
    what a worker's SummaryStore relays (frames included). Summaries and facts are equal, and facts
    listeners hear the same nodes."""

    async def go() -> None:
        here, there = GpuState(RULE), GpuState(RULE)
        heard: dict[str, list[str]] = {"here": [], "there": []}
        here.on_facts_change(heard["here"].append)
        there.on_facts_change(heard["there"].append)
        worker = SummaryStore(RULE)
        for t, r in enumerate(varied_reports() * 2, 1):  # the second round: facts unchanged
            here.ingest(r, float(t))
            worker.ingest(r, float(t))
            for tag, first, facts in frames.summary_entries(worker.take()):
                if tag == frames.READINGS:  # the second round: the same shapes, relayed as readings
                    assert there.store_readings(*decode_readings(first))
                else:
                    there.store(decode_summary(first), decode_facts(facts))
        assert {s.node: s for s in there.summaries()} == {s.node: s for s in here.summaries()}
        for node in here.node_names():
            assert there.facts(node) == here.facts(node)
            assert there.summary(node) == here.summary(node)
        assert heard["there"] == heard["here"] and len(heard["here"]) == len(varied_reports())

    asyncio.run(go())


def test_facts_of_one_hardware_type_are_one_tuple() -> None:
    state = GpuState(RULE)
    a, b = report("a", [gpu(0), gpu(1)]), report("b", [gpu(0), gpu(1)])
    state.ingest(a, 1.0)
    state.ingest(b, 1.0)
    assert state.facts("a") is state.facts("b")
    assert isinstance(state.facts("a"), tuple) and all(isinstance(f, GpuFacts) for f in state.facts("a") or ())


def test_a_heartbeats_readings_apply_only_to_the_full_report_they_name() -> None:
    """GpuState.store_readings: the readings of a light heartbeat (relayed by a worker) change the
    stored summary only where it is of the full report they name, received before them."""
    first = report("n", [gpu(0, 0, 10), gpu(1, 2, 20)], seq=1, seconds=1000)
    now = report("n", [gpu(0, 3, 12), gpu(1, 4, 22)], seq=2, seconds=1001)
    base = summarize(first, RULE, 5.0)
    facts = FactsReader().read(first)
    changes = refreshed_fields(
        base.gpus, base.sm_active, base.node_error, facts, heartbeat_of(first, now, 2), RULE, 6.0
    )
    assert isinstance(changes, dict)

    def fresh() -> GpuState:
        state = GpuState(RULE)
        state.store(base, facts)
        return state

    node, named, readings = decode_readings(encode_readings("n", (1, 5.0), changes))
    assert (node, named) == ("n", (1, 5.0))
    state = fresh()
    assert state.store_readings(node, named, readings) is True
    assert state.reported("n") == summarize(now, RULE, 6.0) and state.facts("n") is facts
    for other in [(2, 5.0), (1, 5.5)]:  # another full report of the node: nothing changes
        state = fresh()
        assert state.store_readings("n", other, readings) is False
        assert state.reported("n") == base
    state = fresh()
    assert state.store_readings("elsewhere", (1, 5.0), readings) is False
    state.forget_older_than(5.0 + 1e-9)  # forgotten: the readings have no summary to apply to
    assert state.store_readings("n", (1, 5.0), readings) is False
    state = fresh()
    late = dict(changes, received_at=5.0 - 1e-9)  # received before the summary it applies to
    assert state.store_readings("n", (1, 5.0), tuple(late.items())) is False
    assert state.store_readings("n", (1, 5.0), tuple(dict(changes, received_at=5.0).items())) is True  # at it: taken


@pytest.mark.parametrize("data", [b"", marshal.dumps((1, 2)), marshal.dumps("n"), marshal.dumps(("n", 1, 2.0))])
def test_readings_bytes_the_codec_did_not_make_raise(data: bytes) -> None:
    with pytest.raises((ValueError, EOFError, TypeError)):
        decode_readings(data)


def test_readings_change_reading_fields_only() -> None:
    """A readings entry that names a field a heartbeat never changes (idle_gpus: a decision's) is a
    bug of the worker: refused, the stored summary as it was."""
    base = summarize(report("n", [gpu(0, 0, 10)], seq=1, seconds=1000), RULE, 5.0)
    state = GpuState(RULE)
    state.store(base, FactsReader().read(report("n", [gpu(0, 0, 10)], seq=1, seconds=1000)))
    with pytest.raises(KeyError):
        state.store_readings("n", (1, 5.0), (("received_at", 6.0), ("idle_gpus", 0)))
    assert state.reported("n") == base
    assert state.store_readings("n", (1, 5.0), (("received_at", 6.0), ("sequence", 2))) is True


def test_the_slot_builder_makes_what_the_init_makes_and_keeps_it_frozen() -> None:
    summaries = [summarize(r, RULE, 1.0) for r in varied_reports()]
    build = slot_builder(NodeSummary)
    for summary in summaries:
        values = [getattr(summary, f.name) for f in dataclasses.fields(NodeSummary)]
        built = build(values)
        assert built == NodeSummary(*values) == summary and type(built) is NodeSummary
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.node_error = "x"  # type: ignore[misc]
    for wrong in (values[:-1], [*values, None]):  # one value short, one too many
        with pytest.raises(TypeError, match=f"NodeSummary takes {len(values)} values, not {len(wrong)}"):
            build(wrong)


@dataclasses.dataclass(frozen=True, slots=True)
class _Checked:
    a: int

    def __post_init__(self) -> None:
        if self.a < 0:
            raise ValueError("a < 0")


@dataclasses.dataclass(frozen=True, slots=True)
class _Derived:
    a: int
    b: int = dataclasses.field(init=False, default=0)


@dataclasses.dataclass(frozen=True)
class _NoSlots:
    a: int


@dataclasses.dataclass(slots=True)
class _Mutable:
    a: int


@pytest.mark.parametrize(
    ("cls", "why"),
    [
        (_Checked, "without __post_init__"),  # its checks would be skipped
        (_Derived, "a field its __init__ does not take"),
        (_NoSlots, "not a frozen slots dataclass"),
        (_Mutable, "not a frozen slots dataclass"),
        (GpuFacts, "not a frozen slots dataclass"),  # a NamedTuple: not a dataclass at all
    ],
)
def test_the_slot_builder_refuses_a_class_whose_init_does_more(cls: type, why: str) -> None:
    with pytest.raises(TypeError, match=why):
        slot_builder(cls)
