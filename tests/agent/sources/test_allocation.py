"""allocation.apply_allocation: the kubelet's device IDs onto GPUs and MIG instances, sharing modes."""

from __future__ import annotations

import pytest

from gpuextender.agent.model.readings import (
    ALLOCATION_KUBELET,
    ALLOCATION_UNAVAILABLE,
    EXCLUSIVE,
    MIG,
    MPS,
    TIME_SLICING,
    GpuReading,
    Holder,
    MigReading,
    NodeSample,
)
from gpuextender.agent.sources.allocation import (
    LABEL_REPLICAS,
    LABEL_SHARING_STRATEGY,
    MAX_HOLDERS_PER_DEVICE,
    MAX_REPLICAS,
    PROBLEM_TOO_MANY_HOLDERS,
    DeviceAssignment,
    GpuResourceNames,
    KubeletAllocations,
    apply_allocation,
    split_device_id,
)

U0 = "GPU-00000000-0000-4000-8000-000000000000"
U1 = "GPU-11111111-1111-4111-8111-111111111111"
MIG_A = "MIG-aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
MIG_B = "MIG-bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb"
GPU = "nvidia.com/gpu"


def node(*, mig: bool = False, labels: dict[str, str] | None = None) -> NodeSample:
    gpus = [GpuReading(index=0, uuid=U0, memory_used_bytes=7), GpuReading(index=1, uuid=U1)]
    if mig:
        gpus[1].mig_instances = [MigReading(MIG_A, "3g.40gb", 1, 0), MigReading(MIG_B, "3g.40gb", 2, 0)]
    return NodeSample(sample_time=1.0, duration_s=0.01, gpus=gpus, sharing_labels=labels or {})


def held(pod: str, *ids: str, resource: str = GPU, container: str = "main", namespace: str = "ml") -> DeviceAssignment:
    return DeviceAssignment(namespace, pod, container, resource, ids)


def test_exclusive_gpus_get_one_holder_per_container() -> None:
    sample = node()
    answer = KubeletAllocations((held("a", U1),), {GPU: (U0, U1)})
    result = apply_allocation(sample, answer)
    assert result.unmatched_device_ids == ()
    assert (sample.allocation_source, sample.allocation_problem) == (ALLOCATION_KUBELET, "")
    assert sample.gpus[0].holders == []
    assert sample.gpus[1].holders == [Holder("ml", "a", "main", GPU, U1)]
    assert [(g.sharing_mode, g.replicas) for g in sample.gpus] == [(EXCLUSIVE, 1), (EXCLUSIVE, 1)]
    assert sample.gpus[0].memory_used_bytes == 7  # NVML's readings untouched


def test_time_slicing_replicas_are_counted_from_the_allocatable_ids() -> None:
    sample = node()
    replicas = tuple(f"{U0}::{r}" for r in range(4))
    answer = KubeletAllocations(
        (held("a", f"{U0}::1"), held("b", f"{U0}::3", container="side")),
        {GPU: (*replicas, U1)},
    )
    apply_allocation(sample, answer)
    gpu0, gpu1 = sample.gpus
    assert [(h.pod, h.container, h.device_id) for h in gpu0.holders] == [
        ("a", "main", f"{U0}::1"),
        ("b", "side", f"{U0}::3"),
    ]
    assert (gpu0.sharing_mode, gpu0.replicas) == (TIME_SLICING, 4)
    assert (gpu1.sharing_mode, gpu1.replicas) == (EXCLUSIVE, 1)


def test_mps_is_known_only_from_the_gfd_label() -> None:
    answer = KubeletAllocations((), {GPU: (f"{U0}::0", f"{U0}::1")})
    sample = node(labels={LABEL_SHARING_STRATEGY: "mps", LABEL_REPLICAS: "2"})
    apply_allocation(sample, answer)
    assert (sample.gpus[0].sharing_mode, sample.gpus[0].replicas) == (MPS, 2)
    sample = node(labels={LABEL_SHARING_STRATEGY: "time-slicing", LABEL_REPLICAS: "9"})
    apply_allocation(sample, answer)
    assert (sample.gpus[0].sharing_mode, sample.gpus[0].replicas) == (TIME_SLICING, 2)  # the kubelet's IDs win


@pytest.mark.parametrize(("replicas", "reported"), [(MAX_REPLICAS, MAX_REPLICAS), (MAX_REPLICAS + 1, 0)])
def test_replicas_past_the_extenders_bound_are_reported_unknown(replicas: int, reported: int) -> None:
    sample = node()
    apply_allocation(sample, KubeletAllocations((), {GPU: tuple(f"{U0}::{r}" for r in range(replicas))}))
    assert (sample.gpus[0].sharing_mode, sample.gpus[0].replicas) == (TIME_SLICING, reported)
    labelled = node(labels={LABEL_SHARING_STRATEGY: "time-slicing", LABEL_REPLICAS: str(replicas)})
    apply_allocation(labelled, KubeletAllocations((), {}))
    assert (labelled.gpus[0].sharing_mode, labelled.gpus[0].replicas) == (TIME_SLICING, reported)


def test_one_replica_is_exclusive() -> None:
    sample = node()
    apply_allocation(sample, KubeletAllocations((held("a", f"{U0}::0"),), {GPU: (f"{U0}::0",)}))
    assert (sample.gpus[0].sharing_mode, sample.gpus[0].replicas) == (EXCLUSIVE, 1)
    assert [h.device_id for h in sample.gpus[0].holders] == [f"{U0}::0"]


def test_mig_holders_go_to_their_instance_and_the_gpu_is_in_mig_mode() -> None:
    sample = node(mig=True)
    answer = KubeletAllocations(
        (held("a", MIG_B, resource="nvidia.com/mig-3g.40gb"), held("b", U0)),
        {"nvidia.com/mig-3g.40gb": (MIG_A, MIG_B), GPU: (U0,)},
    )
    apply_allocation(sample, answer)
    gpu0, gpu1 = sample.gpus
    assert gpu1.holders == [] and gpu1.mig_instances[0].holders == []
    assert gpu1.mig_instances[1].holders == [Holder("ml", "a", "main", "nvidia.com/mig-3g.40gb", MIG_B)]
    assert (gpu1.sharing_mode, gpu1.replicas) == (MIG, 0)
    assert (gpu0.sharing_mode, [h.pod for h in gpu0.holders]) == (EXCLUSIVE, ["b"])


def test_time_sliced_mig_devices_are_held_by_their_instance() -> None:
    sample = node(mig=True)
    apply_allocation(sample, KubeletAllocations((held("a", f"{MIG_A}::2", resource="nvidia.com/mig-3g.40gb.shared"),)))
    assert [h.device_id for h in sample.gpus[1].mig_instances[0].holders] == [f"{MIG_A}::2"]


def test_only_gpu_resources_count_and_renamed_ones_can_be_added() -> None:
    sample = node()
    answer = KubeletAllocations(
        (
            held("nic", U0, resource="example.com/sriov"),  # not a GPU resource: ignored, even with a GPU's ID
            held("shared", f"{U1}::0", resource="nvidia.com/gpu.shared"),
            held("custom", U0, resource="acme.io/big-gpu"),
        )
    )
    apply_allocation(sample, answer)
    assert sample.gpus[0].holders == [] and [h.pod for h in sample.gpus[1].holders] == ["shared"]
    apply_allocation(sample, answer, is_gpu_resource=GpuResourceNames(["nvidia.com/*", "acme.io/big-gpu"]))
    assert [h.pod for h in sample.gpus[0].holders] == ["custom"]


def test_ids_that_name_no_gpu_are_returned_once_each_sorted() -> None:
    sample = node()
    answer = KubeletAllocations((held("a", "GPU-gone", U0, "GPU-gone::1"), held("b", "GPU-gone", "0:1")))
    result = apply_allocation(sample, answer)
    assert result.unmatched_device_ids == ("0:1", "GPU-gone", "GPU-gone::1")
    assert [h.pod for h in sample.gpus[0].holders] == ["a"]


def test_index_device_ids_name_gpus_by_nvml_index() -> None:
    sample = node()
    result = apply_allocation(sample, KubeletAllocations((held("a", "1"), held("b", "7"))))
    assert [h.device_id for h in sample.gpus[1].holders] == ["1"]
    assert result.unmatched_device_ids == ("7",)


def test_a_container_listed_twice_holds_each_device_once() -> None:
    sample = node()
    apply_allocation(sample, KubeletAllocations((held("a", U0, U0), held("a", U0))))
    assert len(sample.gpus[0].holders) == 1


def test_a_problem_leaves_holders_empty_and_sharing_from_what_is_known() -> None:
    sample = node(labels={LABEL_SHARING_STRATEGY: "time-slicing", LABEL_REPLICAS: "4"})
    apply_allocation(sample, KubeletAllocations((held("a", U0),), {GPU: (U0, U1)}))
    assert sample.gpus[0].holders
    apply_allocation(sample, KubeletAllocations((), {GPU: (U0,)}, problem="socket_missing"))
    assert (sample.allocation_source, sample.allocation_problem) == (ALLOCATION_UNAVAILABLE, "socket_missing")
    assert all(g.holders == [] for g in sample.gpus)  # replaced, not kept from the earlier call
    # GPU 0 from the last allocatable answer; GPU 1 not in it: GFD's labels.
    assert [(g.sharing_mode, g.replicas) for g in sample.gpus] == [(EXCLUSIVE, 1), (TIME_SLICING, 4)]


@pytest.mark.parametrize(
    ("labels", "held_ids", "expected"),
    [
        ({}, (), ("", 0)),
        ({LABEL_SHARING_STRATEGY: "none", LABEL_REPLICAS: "0"}, (), (EXCLUSIVE, 1)),
        ({LABEL_SHARING_STRATEGY: "time-slicing", LABEL_REPLICAS: "4"}, (), (TIME_SLICING, 4)),
        ({LABEL_SHARING_STRATEGY: "mps", LABEL_REPLICAS: "2"}, (), (MPS, 2)),
        ({LABEL_SHARING_STRATEGY: "mps", LABEL_REPLICAS: "1"}, (), ("", 0)),  # 2 is the least sharing
        ({LABEL_SHARING_STRATEGY: "time-slicing", LABEL_REPLICAS: "x"}, (), ("", 0)),
        ({}, (U0,), (EXCLUSIVE, 1)),  # a plain ID held: the plugin does not replicate this GPU
        ({}, (f"{U0}::3",), (TIME_SLICING, 0)),  # replicated, count unknown
        ({LABEL_SHARING_STRATEGY: "time-slicing", LABEL_REPLICAS: "8"}, (f"{U0}::3",), (TIME_SLICING, 8)),
        ({LABEL_SHARING_STRATEGY: "none"}, (f"{U0}::3",), (TIME_SLICING, 0)),  # held IDs beat stale labels
    ],
)
def test_without_allocatable_ids_held_ids_then_labels_decide(
    labels: dict[str, str], held_ids: tuple[str, ...], expected: tuple[str, int]
) -> None:
    sample = node(labels=labels)
    apply_allocation(sample, KubeletAllocations((held("a", *held_ids),) if held_ids else ()))
    assert (sample.gpus[0].sharing_mode, sample.gpus[0].replicas) == expected


def test_holders_per_gpu_at_the_bound_are_kept_and_one_more_makes_allocation_unknown() -> None:
    ids = [f"{U0}::{r}" for r in range(MAX_HOLDERS_PER_DEVICE + 1)]
    holders = [held(f"p{r}", ids[r]) for r in range(MAX_HOLDERS_PER_DEVICE + 1)]
    at_bound = KubeletAllocations(tuple(holders[:MAX_HOLDERS_PER_DEVICE]), {GPU: tuple(ids)})
    sample = node()
    apply_allocation(sample, at_bound)
    assert len(sample.gpus[0].holders) == MAX_HOLDERS_PER_DEVICE and sample.allocation_source == ALLOCATION_KUBELET

    over = KubeletAllocations(tuple(holders), {GPU: tuple(ids)})
    apply_allocation(sample, over)
    assert (sample.allocation_source, sample.allocation_problem) == (ALLOCATION_UNAVAILABLE, PROBLEM_TOO_MANY_HOLDERS)
    assert sample.gpus[0].holders == []
    # 65 advertised replicas: past MAX_REPLICAS, so reported as unknown (0), which the extender takes.
    assert (sample.gpus[0].sharing_mode, sample.gpus[0].replicas) == (TIME_SLICING, 0)


def test_the_holder_bound_applies_to_mig_instances_too() -> None:
    resource = "nvidia.com/mig-3g.40gb.shared"
    over = tuple(held(f"p{r}", f"{MIG_A}::{r}", resource=resource) for r in range(MAX_HOLDERS_PER_DEVICE + 1))
    sample = node(mig=True)
    apply_allocation(sample, KubeletAllocations(over[:-1]))
    assert len(sample.gpus[1].mig_instances[0].holders) == MAX_HOLDERS_PER_DEVICE
    apply_allocation(sample, KubeletAllocations(over))
    assert sample.allocation_problem == PROBLEM_TOO_MANY_HOLDERS
    assert sample.gpus[1].mig_instances[0].holders == []


def test_agent_bounds_equal_the_extenders() -> None:
    from gpuextender.agent.sources import pod_resources
    from gpuextender.extender.ingest import report_checks as extender

    assert MAX_HOLDERS_PER_DEVICE == extender.MAX_HOLDERS_PER_GPU
    assert MAX_REPLICAS == extender.MAX_SHARING_REPLICAS
    assert pod_resources.PodResourcesLimits().max_device_id_chars == extender.MAX_DEVICE_ID_CHARS
    assert pod_resources.MAX_NAMESPACE_CHARS == extender.MAX_NAMESPACE_CHARS
    assert pod_resources.MAX_POD_NAME_CHARS == extender.MAX_POD_NAME_CHARS
    assert pod_resources.MAX_CONTAINER_NAME_CHARS == extender.MAX_CONTAINER_NAME_CHARS
    assert pod_resources.MAX_RESOURCE_NAME_CHARS == extender.MAX_RESOURCE_NAME_CHARS
    problems = [v for k, v in vars(pod_resources).items() if k.startswith("PROBLEM_")] + [PROBLEM_TOO_MANY_HOLDERS]
    assert all(0 < len(p) <= extender.MAX_ALLOCATION_PROBLEM_CHARS for p in problems)


@pytest.mark.parametrize(
    ("device_id", "expected"),
    [(U0, (U0, None)), (f"{U0}::12", (U0, "12")), (f"{U0}::x::y", (U0, "x::y")), ("0:1", ("0:1", None))],
)
def test_split_device_id_like_the_plugin(device_id: str, expected: tuple[str, str | None]) -> None:
    assert split_device_id(device_id) == expected


def test_default_gpu_resources() -> None:
    names = GpuResourceNames()
    accepted = ["nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-1g.10gb.shared"]
    assert all(names(n) for n in accepted)
    assert not any(names(n) for n in ["nvidia.com/gpumem", "NVIDIA.com/gpu", "example.com/gpu", "nvidia.com/gpu.x"])
