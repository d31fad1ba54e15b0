"""Issue 37, item 10: held time-slicing replicas are counted per distinct device ID, not per holder.
The kubelet lists a device for every container given it: a pod whose init and app containers both
got GPU-0::0 holds one replica, not two."""

from __future__ import annotations

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.decide.whole_gpus import fresh_reason
from gpuextender.extender.state.gpu_summary import summarize
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report


def time_sliced(*device_ids: tuple[str, str]) -> pb.NodeReport:
    """One GPU time-sliced into 4 replicas; holders (container, device id) of pod a/p."""
    g = gpu(0, 0, 1)
    g.sharing.mode, g.sharing.replicas = pb.SHARING_TIME_SLICING, 4
    for container, device_id in device_ids:
        g.holders.add(namespace="a", pod="p", container=container, resource_name="nvidia.com/gpu", device_id=device_id)
    r = report("n", [g])
    r.allocation_source = pb.ALLOCATION_KUBELET
    return r


def test_one_replica_listed_for_two_containers_of_a_pod_is_one_held() -> None:
    s = summarize(time_sliced(("init", "GPU-0::0"), ("app", "GPU-0::0")), IdleRule(), 100.0)
    assert (s.gpu_count, s.free_gpus, s.idle_gpus) == (4, 3, 3)
    assert fresh_reason(s, 3) is None  # a 3-replica pod fits
    assert fresh_reason(s, 4) is not None


def test_two_distinct_replicas_are_two_held() -> None:
    s = summarize(time_sliced(("app", "GPU-0::0"), ("side", "GPU-0::1")), IdleRule(), 100.0)
    assert (s.free_gpus, s.idle_gpus) == (2, 2)
