"""The 0.2 facts an agent may send are bounded like the rest of a report: each bound accepted at
exactly its value and refused one above, with a reason naming the field."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from gpuextender.extender.ingest import report_checks as v
from gpuextender.extender.ingest.report_checks import report_problem
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report


def _holder(**over: str) -> pb.Holder:
    fields = {
        "namespace": "llm",
        "pod": "vllm-0",
        "container": "engine",
        "resource_name": "nvidia.com/gpu",
        "device_id": "GPU-0::1",
        **over,
    }
    return pb.Holder(**fields)


def _two_gpus() -> pb.NodeReport:
    return report("n", [gpu(0), gpu(1)])


def _with(edit: Callable[[pb.NodeReport], None]) -> str | None:
    r = _two_gpus()
    edit(r)
    return report_problem(r, None)


COUNTED: list[tuple[str, int, Callable[[pb.NodeReport, int], None], str]] = [
    ("holders", v.MAX_HOLDERS_PER_GPU, lambda r, n: r.gpus[0].holders.extend([_holder()] * n), "holders"),
    ("health_reasons", v.MAX_HEALTH_REASONS, lambda r, n: r.gpus[0].health_reasons.extend(["R"] * n), "health_reasons"),
    ("xids", v.MAX_XIDS_PER_GPU, lambda r, n: r.gpus[0].xids.extend([pb.XidEvent(xid=79)] * n), "xids"),
    (
        "mig_instances",
        v.MAX_MIG_INSTANCES,
        lambda r, n: r.gpus[0].mig_instances.extend([pb.MigInstance(uuid="MIG-1", profile="1g.10gb")] * n),
        "mig_instances",
    ),
    (
        "mig_holders",
        v.MAX_HOLDERS_PER_GPU,
        lambda r, n: r.gpus[0].mig_instances.add(uuid="MIG-1").holders.extend([_holder()] * n),
        "holders",
    ),
    (
        "sharing_labels",
        v.MAX_SHARING_LABELS,
        lambda r, n: r.sharing_labels.update({f"nvidia.com/l{i}": "1" for i in range(n)}),
        "sharing_labels",
    ),
]


@pytest.mark.parametrize(("name", "limit", "fill", "words"), COUNTED, ids=[c[0] for c in COUNTED])
def test_counts_are_bounded_exactly(
    name: str, limit: int, fill: Callable[[pb.NodeReport, int], None], words: str
) -> None:
    assert _with(lambda r: fill(r, limit)) is None
    problem = _with(lambda r: fill(r, limit + 1))
    assert problem is not None and f"{limit + 1} {words}, more than the {limit} allowed" in problem


HOLDER_STRINGS = [
    ("namespace", v.MAX_NAMESPACE_CHARS),
    ("pod", v.MAX_POD_NAME_CHARS),
    ("container", v.MAX_CONTAINER_NAME_CHARS),
    ("resource_name", v.MAX_RESOURCE_NAME_CHARS),
    ("device_id", v.MAX_DEVICE_ID_CHARS),
]


@pytest.mark.parametrize(("field", "limit"), HOLDER_STRINGS, ids=[h[0] for h in HOLDER_STRINGS])
def test_holder_strings_are_bounded_exactly(field: str, limit: int) -> None:
    assert _with(lambda r: r.gpus[0].holders.append(_holder(**{field: "x" * limit}))) is None
    problem = _with(lambda r: r.gpus[0].holders.append(_holder(**{field: "x" * (limit + 1)})))
    assert problem is not None and f"a holder's {field} is {limit + 1} characters, more than the {limit}" in problem


def test_other_strings_are_bounded_exactly() -> None:
    def reason(n: int) -> Callable[[pb.NodeReport], None]:
        return lambda r: r.gpus[0].health_reasons.append("R" * n)

    def profile(n: int) -> Callable[[pb.NodeReport], None]:
        return lambda r: r.gpus[0].mig_instances.add(uuid="MIG-1", profile="p" * n) and None

    def label(key: int, value: int) -> Callable[[pb.NodeReport], None]:
        return lambda r: r.sharing_labels.update({"k" * key: "v" * value})

    def problem(n: int) -> Callable[[pb.NodeReport], None]:
        return lambda r: setattr(r, "allocation_problem", "p" * n)

    for ok, over in [
        (reason(v.MAX_UNHEALTHY_REASON_CHARS), reason(v.MAX_UNHEALTHY_REASON_CHARS + 1)),
        (profile(v.MAX_MIG_PROFILE_CHARS), profile(v.MAX_MIG_PROFILE_CHARS + 1)),
        (label(v.MAX_LABEL_KEY_CHARS, 1), label(v.MAX_LABEL_KEY_CHARS + 1, 1)),
        (label(1, v.MAX_LABEL_VALUE_CHARS), label(1, v.MAX_LABEL_VALUE_CHARS + 1)),
        (problem(v.MAX_ALLOCATION_PROBLEM_CHARS), problem(v.MAX_ALLOCATION_PROBLEM_CHARS + 1)),
    ]:
        assert _with(ok) is None
        assert _with(over) is not None


def test_topology_links_join_two_reported_gpus_once() -> None:
    def link(a: int, b: int, nvlinks: int = 0, twice: bool = False) -> Callable[[pb.NodeReport], None]:
        def edit(r: pb.NodeReport) -> None:
            for _ in range(2 if twice else 1):
                r.topology.links.add(a=a, b=b, nvlinks=nvlinks, pcie=pb.PCIE_SYSTEM)

        return edit

    assert _with(link(0, 1, v.MAX_NVLINKS)) is None
    assert "19 NVLinks, more than 18" in str(_with(link(0, 1, v.MAX_NVLINKS + 1)))
    assert "does not join two reported GPUs" in str(_with(link(1, 0)))
    assert "does not join two reported GPUs" in str(_with(link(0, 0)))
    assert "does not join two reported GPUs" in str(_with(link(0, 2)))  # GPU 2 is not in the report
    assert "appears twice" in str(_with(link(0, 1, twice=True)))


def test_a_mig_instance_cannot_use_more_memory_than_it_has() -> None:
    def mig(used: int) -> Callable[[pb.NodeReport], None]:
        return lambda r: (
            r.gpus[0].mig_instances.add(uuid="MIG-1", memory_total_bytes=10, memory_used_bytes=used) and None
        )

    assert _with(mig(10)) is None
    assert "memory_used_bytes is above memory_total_bytes" in str(_with(mig(11)))


@pytest.mark.parametrize("field", list(pb.GpmReadings.DESCRIPTOR.fields_by_name))
def test_gpm_percentages_are_bounded_exactly_on_gpus_and_mig_instances(field: str) -> None:
    """A NaN SM activity would compare as below any idle bound: idle whatever the GPU runs."""

    def on_gpu(value: float) -> Callable[[pb.NodeReport], None]:
        return lambda r: setattr(r.gpus[0].gpm, field, value)

    def on_mig(value: float) -> Callable[[pb.NodeReport], None]:
        return lambda r: setattr(r.gpus[0].mig_instances.add(uuid="MIG-1", profile="1g.10gb").gpm, field, value)

    for edit in (on_gpu, on_mig):
        assert _with(edit(0.0)) is None and _with(edit(100.0)) is None
        for bad in (100.0001, -0.0001, float("nan"), float("inf")):
            problem = _with(edit(bad))
            assert problem is not None and f"gpm.{field}=" in problem and "is outside 0..100" in problem, bad


def test_unknown_enum_values_from_a_newer_agent_are_accepted() -> None:
    """proto3 enums are open: a value this extender does not know is kept and read as unknown."""
    r = _two_gpus()
    r.allocation_source = 7  # type: ignore[assignment]
    r.gpus[0].health = 9  # type: ignore[assignment]
    r.gpus[0].sharing.mode = 42  # type: ignore[assignment]
    parsed = pb.NodeReport.FromString(r.SerializeToString())
    assert report_problem(parsed, None) is None and parsed.gpus[0].health == 9


def test_sharing_replicas_are_bounded_exactly() -> None:
    """The extender counts capacity in replicas: an unbounded count would be unbounded capacity."""

    def replicas(n: int) -> Callable[[pb.NodeReport], None]:
        def edit(r: pb.NodeReport) -> None:
            r.gpus[0].sharing.mode, r.gpus[0].sharing.replicas = pb.SHARING_TIME_SLICING, n

        return edit

    assert _with(replicas(v.MAX_SHARING_REPLICAS)) is None
    problem = _with(replicas(v.MAX_SHARING_REPLICAS + 1))
    assert problem is not None and f"sharing.replicas {v.MAX_SHARING_REPLICAS + 1} is more than the" in problem


def test_the_fast_check_never_passes_a_gpu_the_full_checks_refuse() -> None:
    """report_problem runs the full per-GPU checks only for a GPU `_gpu_suspect` flags: random GPUs
    with every field near its bound (both sides) must never pass the fast check and fail the full one."""
    import random

    rng = random.Random(20261123)

    def near(limit: int) -> int:
        return rng.choice([0, 1, limit - 1, limit, limit + 1])

    def text(limit: int) -> str:
        return "x" * near(limit)

    refused = 0
    for _ in range(3000):
        g = pb.GpuSample(
            index=0,
            uuid=text(v.MAX_UUID_CHARS),
            name=text(v.MAX_GPU_NAME_CHARS),
            pci_bus_id=text(v.MAX_PCI_BUS_ID_CHARS),
            healthy=rng.random() < 0.5,
        )
        if rng.random() < 0.5:
            g.utilization_gpu_percent = near(100)
        if rng.random() < 0.3:
            g.utilization_memory_percent = near(100)
        if rng.random() < 0.7:
            g.memory_total_bytes = rng.choice([0, 1, 80])
        if rng.random() < 0.7:
            g.memory_used_bytes = rng.choice([0, 1, 80, 81])
        if rng.random() < 0.2:
            g.unhealthy_reasons.extend(["R" * near(v.MAX_UNHEALTHY_REASON_CHARS)] * rng.choice([1, near(8)]))
        if rng.random() < 0.2:
            g.health_reasons.extend(["H" * near(v.MAX_UNHEALTHY_REASON_CHARS)] * rng.choice([1, near(16)]))
        if rng.random() < 0.2:
            g.sharing.replicas = near(v.MAX_SHARING_REPLICAS)
        if rng.random() < 0.3:
            g.holders.extend(
                [_holder(**{field: "h" * near(limit)}) for field, limit in HOLDER_STRINGS if rng.random() < 0.5]
                * rng.choice([1, 2, 33])
            )
        if rng.random() < 0.1:
            g.xids.extend([pb.XidEvent(xid=79)] * near(v.MAX_XIDS_PER_GPU))
        if rng.random() < 0.1:
            g.mig_instances.add(uuid=text(v.MAX_UUID_CHARS), profile=text(v.MAX_MIG_PROFILE_CHARS))
        if rng.random() < 0.3:
            field = rng.choice(list(pb.GpmReadings.DESCRIPTOR.fields_by_name))
            setattr(g.gpm, field, rng.choice([0.0, 100.0, 100.5, -0.5, float("nan"), float("inf")]))
        full = v._gpu_problem(g)
        refused += full is not None
        assert full is None or v._gpu_suspect(g), (full, g)
    assert refused > 500  # the draw did reach past the bounds


def test_only_small_topologies_are_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The link checks are cached per topology, and the cache keeps its keys: a topology larger
    than MAX_CACHED_TOPOLOGY_BYTES is checked every time and never kept."""
    r = _two_gpus()
    r.topology.links.add(a=0, b=1, nvlinks=12, pcie=pb.PCIE_SYSTEM)
    size = len(r.topology.SerializeToString())
    for bound, kept in ((size, True), (size - 1, False)):
        monkeypatch.setattr(v, "MAX_CACHED_TOPOLOGY_BYTES", bound)
        v._links_problem.cache_clear()
        assert report_problem(r, None) is None
        assert v._links_problem.cache_info().currsize == (1 if kept else 0)
    r.topology.links.add(a=0, b=1)  # the checks still run on the uncached path
    assert "appears twice" in str(report_problem(r, None))


def _with_readings(rng: random.Random, base: pb.NodeReport) -> pb.NodeReport:
    """`base` with new readings on its GPUs (each near its bound, both sides, or absent)."""
    now = pb.NodeReport()
    now.CopyFrom(base)
    now.sample_time.nanos = rng.choice([0, 999_999_999, 1_000_000_000, -1])
    for g in now.gpus:
        for field in ("utilization_gpu_percent", "utilization_memory_percent"):
            if rng.random() < 0.2:
                g.ClearField(field)
            else:
                setattr(g, field, rng.choice([0, 99, 100, 101]))
        if rng.random() < 0.1:
            g.ClearField("memory_used_bytes")
        else:
            g.memory_used_bytes = rng.choice([0, g.memory_total_bytes, g.memory_total_bytes + 1])
        if rng.random() < 0.3:
            g.ClearField("gpm")
        else:
            field = rng.choice(list(pb.GpmReadings.DESCRIPTOR.fields_by_name))
            setattr(g.gpm, field, rng.choice([0.0, 100.0, 100.5, -0.5, float("nan")]))
        g.temperature_celsius, g.power_watts = rng.randint(0, 2**31), rng.uniform(-1e9, 1e9)
    return now


def test_readings_problem_refuses_exactly_what_report_problem_refuses_of_a_report_of_a_known_shape() -> None:
    """A full report of the shape of one report_problem passed (only readings differ): the two
    checks agree on every draw, with the same reason."""
    import random

    rng = random.Random(36)
    refused = 0
    for _ in range(2000):
        gpus = [gpu(i, 0, 10.0) for i in range(rng.randint(1, 8))]
        for g in gpus:
            if rng.random() < 0.3:
                g.holders.add(namespace="ns", pod="p", container="c", device_id=g.uuid)
        base = report("node-a", gpus)
        assert report_problem(base, "node-a") is None
        now = _with_readings(rng, base)
        full, readings = report_problem(now, "node-a"), v.readings_problem(now, "node-a")
        assert readings == full, now
        refused += full is not None
    assert refused > 500


def test_readings_problem_checks_the_streams_node() -> None:
    other = report("node-b", [gpu(0)])
    assert v.readings_problem(other, "node-a") == report_problem(other, "node-a") is not None
