"""agent.rules.idle_tracker: idle time per GPU and allocated-but-idle GPUs per pod, on a stepped clock,
each rule tested on both sides of its bound (threshold, window), and the gauges it feeds."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuextender.agent.export.metrics import AgentMetrics
from gpuextender.agent.model.readings import (
    ALLOCATION_KUBELET,
    ALLOCATION_UNAVAILABLE,
    GpuReading,
    Holder,
    MigReading,
    NodeSample,
)
from gpuextender.agent.rules.idle_tracker import IdleTracker

WINDOW_S = 600.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def holder(pod: str, device: str, namespace: str = "team", container: str = "main") -> Holder:
    return Holder(namespace, pod, container, "nvidia.com/gpu", device)


def gpu(index: int, util: int | None, *holders: Holder) -> GpuReading:
    return GpuReading(
        index=index,
        uuid=f"GPU-{index}",
        name="NVIDIA A100-SXM4-80GB",
        utilization_gpu_percent=util,
        holders=list(holders),
    )


def sample(*gpus: GpuReading, allocation: str = ALLOCATION_KUBELET) -> NodeSample:
    return NodeSample(sample_time=0.0, duration_s=0.001, gpus=list(gpus), allocation_source=allocation)


def tracker(clock: Clock, threshold: float = 1.0) -> IdleTracker:
    return IdleTracker(threshold_percent=threshold, window_s=WINDOW_S, clock=clock)


def idle_seconds(t: IdleTracker) -> dict[str, float]:
    return {g.uuid: g.idle_s for g in t.gpu_idle()}


def test_utilization_at_the_threshold_is_idle_one_above_is_not() -> None:
    clock = Clock()
    t = tracker(clock, threshold=1.0)
    t.observe(sample(gpu(0, 1), gpu(1, 2)))
    clock.now += 30
    t.observe(sample(gpu(0, 1), gpu(1, 2)))
    assert idle_seconds(t) == {"GPU-0": 30.0, "GPU-1": 0.0}


def test_threshold_zero_means_exactly_zero() -> None:
    clock = Clock()
    t = tracker(clock, threshold=0.0)
    t.observe(sample(gpu(0, 0), gpu(1, 1)))
    clock.now += 5
    assert idle_seconds(t) == {"GPU-0": 5.0, "GPU-1": 0.0}


def test_unknown_utilization_is_never_idle_and_ends_an_idle_period() -> None:
    clock = Clock()
    t = tracker(clock)
    t.observe(sample(gpu(0, 0, holder("a", "GPU-0"))))
    clock.now += 500
    t.observe(sample(gpu(0, None, holder("a", "GPU-0"))))  # NVML could not say
    assert idle_seconds(t) == {}  # no figure at all: not "0 s idle", not "500 s idle"
    assert t.pod_idle_gpus() == {("team", "a"): 0}
    t.observe(sample(gpu(0, 0, holder("a", "GPU-0"))))
    clock.now += WINDOW_S - 1
    assert t.pod_idle_gpus() == {("team", "a"): 0}  # the period restarted after the unknown sample
    clock.now += 1
    assert t.pod_idle_gpus() == {("team", "a"): 1}


def test_a_pod_counts_a_gpu_idle_for_exactly_the_window_not_a_moment_less() -> None:
    clock = Clock()
    t = tracker(clock)
    held = sample(gpu(0, 0, holder("a", "GPU-0")), gpu(1, 0, holder("a", "GPU-1")), gpu(2, 80, holder("a", "GPU-2")))
    t.observe(held)
    clock.now += WINDOW_S - 0.001
    t.observe(held)
    assert t.pod_idle_gpus() == {("team", "a"): 0}
    clock.now += 0.001
    assert t.pod_idle_gpus() == {("team", "a"): 2}  # GPU 2 is busy


def test_a_busy_sample_restarts_the_window() -> None:
    clock = Clock()
    t = tracker(clock)
    t.observe(sample(gpu(0, 0, holder("a", "GPU-0"))))
    clock.now += 400
    t.observe(sample(gpu(0, 50, holder("a", "GPU-0"))))
    clock.now += 1
    t.observe(sample(gpu(0, 0, holder("a", "GPU-0"))))
    clock.now += 400
    assert t.pod_idle_gpus() == {("team", "a"): 0}
    assert idle_seconds(t) == {"GPU-0": 400.0}


def test_idle_before_the_pod_got_the_gpu_is_not_the_pods() -> None:
    clock = Clock()
    t = tracker(clock)
    t.observe(sample(gpu(0, 0)))  # idle and free
    clock.now += 3600
    t.observe(sample(gpu(0, 0, holder("late", "GPU-0"))))
    assert idle_seconds(t) == {"GPU-0": 3600.0}
    assert t.pod_idle_gpus() == {("team", "late"): 0}
    clock.now += WINDOW_S
    assert t.pod_idle_gpus() == {("team", "late"): 1}


def test_a_time_sliced_gpu_counts_for_each_holder_pod_once() -> None:
    clock = Clock()
    t = tracker(clock)
    shared = gpu(
        0,
        0,
        holder("a", "GPU-0::0"),
        holder("a", "GPU-0::1", container="sidecar"),
        holder("b", "GPU-0::2"),
        holder("b", "GPU-0::3", namespace="other"),
    )
    t.observe(sample(shared))
    clock.now += WINDOW_S
    assert t.pod_idle_gpus() == {("team", "a"): 1, ("team", "b"): 1, ("other", "b"): 1}


def test_mig_instances_are_not_counted() -> None:
    clock = Clock()
    t = tracker(clock)
    mig_holder = Holder("team", "m", "main", "nvidia.com/mig-1g.10gb", "MIG-1")
    mig_gpu = GpuReading(
        index=0,
        uuid="GPU-0",
        utilization_gpu_percent=None,
        mig_instances=[MigReading("MIG-1", "1g.10gb", 1, 0, holders=[mig_holder])],
    )
    t.observe(sample(mig_gpu))
    clock.now += WINDOW_S
    assert t.pod_idle_gpus() == {}
    assert idle_seconds(t) == {}


def test_allocation_unavailable_gives_no_pod_figures_and_keeps_hold_times() -> None:
    clock = Clock()
    t = tracker(clock)
    t.observe(sample(gpu(0, 0, holder("a", "GPU-0"))))
    clock.now += 300
    t.observe(sample(gpu(0, 0), allocation=ALLOCATION_UNAVAILABLE))  # kubelet blip
    assert t.pod_idle_gpus() is None
    assert idle_seconds(t) == {"GPU-0": 300.0}  # GPU idle time does not need the kubelet
    clock.now += 300
    t.observe(sample(gpu(0, 0, holder("a", "GPU-0"))))
    assert t.pod_idle_gpus() == {("team", "a"): 1}  # the hold began before the blip


def test_a_pod_that_lets_go_is_forgotten_and_a_gpu_that_vanishes_too() -> None:
    clock = Clock()
    t = tracker(clock)
    t.observe(sample(gpu(0, 0, holder("a", "GPU-0")), gpu(1, 0)))
    clock.now += WINDOW_S
    t.observe(sample(gpu(0, 0)))
    assert t.pod_idle_gpus() == {}
    assert idle_seconds(t) == {"GPU-0": WINDOW_S}
    t.observe(sample(gpu(0, 0, holder("a", "GPU-0")), gpu(1, 0)))
    assert t.pod_idle_gpus() == {("team", "a"): 0}  # holding again: a new hold
    assert idle_seconds(t) == {"GPU-0": WINDOW_S, "GPU-1": 0.0}  # GPU 1 came back: a new idle period


def test_the_gauges_on_the_agents_registry() -> None:
    clock = Clock()
    metrics = AgentMetrics("node-a", idle_threshold_percent=1.0, idle_window_s=WINDOW_S, clock=clock)
    metrics.observe_sample(
        sample(gpu(0, 0, holder("a", "GPU-0")), gpu(1, 90, holder("a", "GPU-1")), gpu(2, 0, holder("b", "GPU-2")))
    )
    clock.now += WINDOW_S
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(metrics.registry).decode())}
    pods = {(s.labels["namespace"], s.labels["pod"]): s.value for s in families["gpu_agent_pod_idle_gpus"].samples}
    assert pods == {("team", "a"): 1.0, ("team", "b"): 1.0}
    label_sets = {tuple(sorted(s.labels)) for s in families["gpu_agent_pod_idle_gpus"].samples}
    assert label_sets == {("namespace", "node", "pod")}
    assert "600s" in families["gpu_agent_pod_idle_gpus"].documentation
    assert "each pod holding it" in families["gpu_agent_pod_idle_gpus"].documentation
    seconds = {s.labels["uuid"]: s.value for s in families["gpu_agent_gpu_idle_seconds"].samples}
    assert seconds == {"GPU-0": WINDOW_S, "GPU-1": 0.0, "GPU-2": WINDOW_S}
    assert all(s.labels["node"] == "node-a" for s in families["gpu_agent_gpu_idle_seconds"].samples)
