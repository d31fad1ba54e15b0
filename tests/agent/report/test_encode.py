"""The 0.2 facts of a sample on the wire: every one round-trips through real protobuf bytes, an
unknown one stays absent (never zero, never "healthy"), and an extender's view of a 0.1 report is
unchanged."""

from __future__ import annotations

from gpuextender.agent.model import readings as r
from gpuextender.agent.report.encode import sample_to_report
from gpuextender.v1 import gpu_state_pb2 as pb

HOLDER = r.Holder("llm", "vllm-0", "engine", "nvidia.com/gpu", "GPU-1111::2")


def _full_sample() -> r.NodeSample:
    gpu = r.GpuReading(
        index=0,
        uuid="GPU-1111",
        name="NVIDIA H100 80GB HBM3",
        healthy=False,
        unhealthy_reasons=["XidCritical"],
        health=r.UNHEALTHY,
        health_reasons=["XidCritical", "ThermalSlowdown"],
        errors=r.ErrorCounters(ecc_uncorrected_volatile=0, remapped_rows_correctable=3, remap_pending=False),
        xids=[r.XidEvent(79, 1_700_000_000.25)],
        clock_event_reasons=0x40,
        sm_clock_mhz=1980,
        memory_clock_mhz=2619,
        energy_millijoules=123_456_789,
        numa_node=0,
        holders=[HOLDER],
        sharing_mode=r.TIME_SLICING,
        replicas=4,
        mig_instances=[r.MigReading("MIG-2222", "1g.10gb", 7, 0, memory_total_bytes=10 << 30, holders=[HOLDER])],
    )
    return r.NodeSample(
        sample_time=1_700_000_001.5,
        duration_s=0.001,
        gpus=[gpu],
        allocation_source=r.ALLOCATION_KUBELET,
        topology=[r.GpuLink(0, 1, 18, "single")],
        sharing_labels={"nvidia.com/gpu.replicas": "4"},
    )


def _wire(sample: r.NodeSample) -> pb.NodeReport:
    return pb.NodeReport.FromString(
        sample_to_report(sample, node_name="n1", sequence=1, agent_version="0.2.0").SerializeToString()
    )


def test_every_new_fact_round_trips() -> None:
    report = _wire(_full_sample())
    gpu = report.gpus[0]
    assert report.allocation_source == pb.ALLOCATION_KUBELET and report.allocation_problem == ""
    assert [(link.a, link.b, link.nvlinks, link.pcie) for link in report.topology.links] == [(0, 1, 18, pb.PCIE_SINGLE)]
    assert dict(report.sharing_labels) == {"nvidia.com/gpu.replicas": "4"}
    assert gpu.health == pb.HEALTH_UNHEALTHY and list(gpu.health_reasons) == ["XidCritical", "ThermalSlowdown"]
    assert not gpu.healthy and list(gpu.unhealthy_reasons) == ["XidCritical"]
    assert [(x.xid, x.time.seconds, x.time.nanos) for x in gpu.xids] == [(79, 1_700_000_000, 250_000_000)]
    assert (gpu.clock_event_reasons, gpu.sm_clock_mhz, gpu.memory_clock_mhz) == (0x40, 1980, 2619)
    assert gpu.energy_millijoules == 123_456_789 and gpu.HasField("numa_node") and gpu.numa_node == 0
    assert gpu.sharing.mode == pb.SHARING_TIME_SLICING and gpu.sharing.replicas == 4
    assert [(h.namespace, h.pod, h.container, h.resource_name, h.device_id) for h in gpu.holders] == [
        ("llm", "vllm-0", "engine", "nvidia.com/gpu", "GPU-1111::2")
    ]
    # Zero and False are facts, sent as such; what was not read is absent.
    assert gpu.errors.HasField("ecc_uncorrected_volatile") and gpu.errors.ecc_uncorrected_volatile == 0
    assert gpu.errors.HasField("remap_pending") and gpu.errors.remap_pending is False
    assert not gpu.errors.HasField("remap_failure") and not gpu.errors.HasField("ecc_corrected_volatile")
    mig = gpu.mig_instances[0]
    assert (mig.uuid, mig.profile, mig.gpu_instance_id, mig.compute_instance_id) == ("MIG-2222", "1g.10gb", 7, 0)
    assert mig.memory_total_bytes == 10 << 30 and not mig.HasField("memory_used_bytes") and len(mig.holders) == 1


def test_unknown_stays_unknown() -> None:
    sample = r.NodeSample(sample_time=1.0, duration_s=0.0, gpus=[r.GpuReading(index=0, health="")])
    report = _wire(sample)
    gpu = report.gpus[0]
    assert report.allocation_source == pb.ALLOCATION_SOURCE_UNSPECIFIED and not report.HasField("topology")
    assert gpu.health == pb.HEALTH_STATE_UNSPECIFIED and not gpu.HasField("sharing") and not gpu.HasField("errors")
    for name in ("clock_event_reasons", "sm_clock_mhz", "memory_clock_mhz", "energy_millijoules", "numa_node"):
        assert not gpu.HasField(name), name
    # A node known to have no GPU links: the topology is present and empty, not unknown.
    sample.topology = []
    assert _wire(sample).HasField("topology")
    sample.allocation_source, sample.allocation_problem = r.ALLOCATION_UNAVAILABLE, "socket_missing"
    report = _wire(sample)
    assert report.allocation_source == pb.ALLOCATION_UNAVAILABLE and report.allocation_problem == "socket_missing"


def test_a_0_1_report_parses_with_every_new_fact_unknown() -> None:
    """What an older agent sends: the 0.1 fields only."""
    old = pb.NodeReport(node_name="n1", sequence=1, gpus=[pb.GpuSample(index=0, uuid="GPU-1", healthy=True)])
    parsed = pb.NodeReport.FromString(old.SerializeToString())
    assert parsed.allocation_source == pb.ALLOCATION_SOURCE_UNSPECIFIED and not parsed.HasField("topology")
    assert parsed.gpus[0].health == pb.HEALTH_STATE_UNSPECIFIED and parsed.gpus[0].healthy
    assert not parsed.gpus[0].HasField("sharing") and len(parsed.gpus[0].holders) == 0


def test_the_most_reasons_the_agent_can_give_pass_every_extenders_bounds() -> None:
    """Every NVML error name the reader may list, and every code the classifier sets, at once: the
    report still passes this extender's validation and a 0.1 extender's (8 unhealthy reasons)."""
    from gpuextender.agent.rules import health
    from gpuextender.agent.sources.nvml_errors import known_error_names
    from gpuextender.extender.ingest import report_checks as v

    reading = r.GpuReading(
        index=0,
        uuid="GPU-1",
        unhealthy_reasons=[*known_error_names(), "NoHandle"],
        errors=r.ErrorCounters(
            ecc_uncorrected_volatile=1,
            remap_failure=True,
            remap_pending=True,
            retired_pages_pending=True,
            remapped_rows_correctable=99,
        ),
        clock_event_reasons=0xFF,
    )
    events = health.GpuEvents(
        xids=tuple([r.XidEvent(79, 1.0)] * 40), double_bit_ecc=1, gpu_unavailable=True, recovery_action=2
    )
    health.apply(reading, events, health.HealthPolicy())
    assert not reading.healthy and reading.health == r.UNHEALTHY
    assert len(reading.unhealthy_reasons) == health.MAX_UNHEALTHY_REASONS == 8  # a 0.1 extender's bound
    assert len(reading.health_reasons) == health.MAX_HEALTH_REASONS == v.MAX_HEALTH_REASONS
    assert health.MAX_UNHEALTHY_REASONS <= v.MAX_UNHEALTHY_REASONS
    assert len(reading.xids) == v.MAX_XIDS_PER_GPU
    sample = r.NodeSample(sample_time=1_700_000_000.0, duration_s=0.0, gpus=[reading])
    report = _wire(sample)
    assert v.report_problem(report, None) is None
