"""A full report's shape (summary_refresh.shape_key, report_shape.proto): the report less its
readings. Every field of the contract's NodeReport and GpuSample is in the shape, alike, or named a
reading; nothing here reads the readings that a heartbeat does not carry; two reports of the same
shape summarize alike but for their readings; any other change is a new shape."""

from __future__ import annotations

import asyncio
import random

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from gpuextender.extender.model.gpu_facts import facts_from_report
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.gpu_summary import summarize
from gpuextender.extender.state.report_shape_pb2 import GpuShape, ReportShape
from gpuextender.extender.state.summary_codec import decode_facts, decode_readings, decode_summary
from gpuextender.extender.state.summary_refresh import (
    READING_GPU_FIELDS,
    READING_REPORT_FIELDS,
    shape_key,
)
from gpuextender.extender.workers import frames
from gpuextender.extender.workers.summary_store import SummaryStore
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.state.test_summary_refresh import RULES, random_full, random_readings

# The readings a light heartbeat carries (the rest of READING_GPU_FIELDS nothing here reads).
HEARTBEAT_GPU_FIELDS = {"utilization_gpu_percent", "memory_used_bytes", "gpm"}


def fields(message: Descriptor) -> dict[str, tuple[int, int, bool, str | None]]:
    def kind(f: FieldDescriptor) -> str | None:
        if f.message_type is not None:
            return f.message_type.full_name
        return f.enum_type.full_name if f.enum_type is not None else None

    return {f.name: (f.number, f.type, f.is_repeated, kind(f)) for f in message.fields}


@pytest.mark.parametrize(
    ("contract", "shape", "readings"),
    [
        (pb.NodeReport.DESCRIPTOR, ReportShape.DESCRIPTOR, READING_REPORT_FIELDS),
        (pb.GpuSample.DESCRIPTOR, GpuShape.DESCRIPTOR, READING_GPU_FIELDS),
    ],
)
def test_every_field_of_the_contract_is_in_the_shape_alike_or_named_a_reading(
    contract: Descriptor, shape: Descriptor, readings: tuple[str, ...]
) -> None:
    # A field added to the contract and to neither would be dropped from the shape unseen: a change
    # of it would be taken for a heartbeat's.
    theirs, ours = fields(contract), fields(shape)
    assert set(theirs) == set(ours) | set(readings) and not set(ours) & set(readings)
    for name, field in ours.items():
        if name == "gpus":
            assert field[:3] == theirs[name][:3] and field[3] == GpuShape.DESCRIPTOR.full_name
        elif name == "sharing_labels":  # a map: its entry type is named for its message
            entry, their_entry = shape.fields_by_name[name].message_type, contract.fields_by_name[name].message_type
            assert field[:3] == theirs[name][:3] and fields(entry) == fields(their_entry)
        else:
            assert field == theirs[name], name
        # Presence is compared too: an optional reading set to 0 differs from one absent.
        has_presence = shape.fields_by_name[name].has_presence
        assert has_presence == contract.fields_by_name[name].has_presence, name


def other_readings(report: pb.NodeReport, rng: random.Random) -> None:
    """New values for the readings nothing here reads (each sometimes absent), a new sequence and
    sample time."""
    report.sequence += rng.randint(1, 5)
    report.sample_time.seconds += rng.randint(1, 5)
    for g in report.gpus:
        for name in sorted(set(READING_GPU_FIELDS) - HEARTBEAT_GPU_FIELDS):
            if rng.random() < 0.2:
                g.ClearField(name)
                continue
            field = g.DESCRIPTOR.fields_by_name[name]
            if field.type == FieldDescriptor.TYPE_DOUBLE:
                setattr(g, name, rng.uniform(0, 700))
            elif name in ("utilization_memory_percent", "temperature_celsius"):
                setattr(g, name, rng.randint(0, 100))
            else:
                setattr(g, name, rng.randint(0, 2**31))
        if g.HasField("gpm"):
            g.gpm.tensor_active_percent = rng.uniform(0, 100)
            g.gpm.dram_active_percent = rng.uniform(0, 100)


def test_reports_of_one_shape_relayed_as_readings_store_what_their_summaries_would() -> None:
    """The same full reports, received at the same times: one GpuState ingests them, the other
    stores what an ingest worker's SummaryStore relays: the second of each shape as its readings,
    unless they turn a GPU busy or idle (then summarized)."""

    async def go() -> tuple[int, int]:
        rng = random.Random(37)
        taken = {frames.FULL: 0, frames.READINGS: 0}
        for round_ in range(600):
            rule = RULES[round_ % len(RULES)]
            here, there, relay = GpuState(rule), GpuState(rule), SummaryStore(rule)
            full = random_full(rng, 1)
            now = pb.NodeReport()
            now.CopyFrom(full)
            other_readings(now, rng)
            for g in now.gpus:
                if rng.random() < 0.5:
                    random_readings(g, rng)
            assert shape_key(now) == shape_key(full)
            for report, at in ((full, 5.0), (now, 6.0)):
                here.ingest(report, at)
                relay.ingest(report, at)
                for tag, first, facts in frames.summary_entries(relay.take()):
                    taken[tag] += 1
                    if tag == frames.READINGS:
                        assert there.store_readings(*decode_readings(first))
                    else:
                        there.store(decode_summary(first), decode_facts(facts))
            assert there.reported("node-a") == here.reported("node-a")
            assert there.facts("node-a") == here.facts("node-a")
        return taken[frames.FULL] - 600, taken[frames.READINGS]

    summarized, as_readings = asyncio.run(go())
    assert as_readings > 300 and summarized > 30  # both roads taken, most as readings


def test_readings_nothing_reads_change_no_summary() -> None:
    rng = random.Random(38)
    for round_ in range(600):
        rule = RULES[round_ % len(RULES)]
        full = random_full(rng, 1)
        now = pb.NodeReport()
        now.CopyFrom(full)
        other_readings(now, rng)
        now.sequence, now.sample_time.seconds = full.sequence, full.sample_time.seconds
        assert summarize(now, rule, 5.0) == summarize(full, rule, 5.0)
        assert facts_from_report(now) == facts_from_report(full)


@pytest.mark.parametrize(
    "change",
    [
        lambda r: setattr(r, "node_error", "NVML_ERROR_UNKNOWN"),
        lambda r: setattr(r, "agent_version", "0.5.1"),
        lambda r: setattr(r, "allocation_problem", "kubelet socket gone"),
        lambda r: r.sharing_labels.__setitem__("nvidia.com/gpu.replicas", "2"),
        lambda r: r.topology.links.add(a=0, b=1, nvlinks=18),
        lambda r: r.gpus.add(index=1, uuid="GPU-1"),
        lambda r: setattr(r.gpus[0], "uuid", "GPU-other"),
        lambda r: setattr(r.gpus[0], "memory_total_bytes", 2**30),
        lambda r: setattr(r.gpus[0], "healthy", False),
        lambda r: setattr(r.gpus[0], "health", pb.HEALTH_DEGRADED),
        lambda r: r.gpus[0].holders.add(namespace="ns", pod="p", container="c", device_id="GPU-0"),
        lambda r: setattr(r.gpus[0].sharing, "replicas", 4),
        lambda r: r.gpus[0].xids.add(xid=79),
        lambda r: setattr(r.gpus[0].errors, "ecc_uncorrected_volatile", 1),
        lambda r: r.gpus[0].mig_instances.add(uuid="MIG-1", profile="1g.10gb"),
        lambda r: setattr(r.gpus[0].mig_instances[0] if r.gpus[0].mig_instances else r.gpus[0], "dra_device", "gpu-9"),
        lambda r: setattr(r.gpus[0].compute_capability, "major", 8),
        lambda r: setattr(r.gpus[0], "numa_node", 0),  # (absent before: 0 is a value)
    ],
)
def test_any_other_change_is_a_new_shape(change) -> None:  # type: ignore[no-untyped-def]
    full = pb.NodeReport(node_name="n", sequence=1, agent_version="0.6.0")
    full.gpus.add(index=0, uuid="GPU-0", name="NVIDIA H100", memory_total_bytes=80 * 2**30, healthy=True)
    full.gpus[0].utilization_gpu_percent = 0
    now = pb.NodeReport()
    now.CopyFrom(full)
    change(now)
    assert shape_key(now) != shape_key(full)
