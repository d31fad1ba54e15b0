"""Rules of the idle claims (state/idle_allocated.idle_claims) that mutation testing (mutmut) found
no test holding; each test fails on a one-line change to the module: a node whose GPUs are not known
by position has no idle claim, a device no claim holds does not stop the ones after it, a device
without a UUID is found by its DRA name, a GPU the cells do not cover is not idle, and a GPU busy by
its memory alone (utilization 0) is busy. And of the windows (IdleWindows): `version` moves by
exactly one when a key stands or a standing key's value changes, not when it is asked for again
unchanged; a key due but no longer asked for does not hold back the keys due after it; and a key no
longer asked for leaves nothing held."""

from __future__ import annotations

import dataclasses

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.model.dra import DeviceRef, DraDevice
from gpuextender.extender.state.gpu_summary import NodeSummary, summarize
from gpuextender.extender.state.idle_allocated import IdleWindows, idle_claims
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report

NODE = "dra-1"


def summary() -> NodeSummary:
    """GPU 0 idle, GPU 1 busy by its memory only (0 % utilization)."""
    gpus: list[pb.GpuSample] = [gpu(0, 0, 1), gpu(1, 0, 80)]
    for i, g in enumerate(gpus):
        g.dra_device = f"gpu-{i}"
    return summarize(report(NODE, gpus), IdleRule(), 0.0)


def ref(i: int) -> DeviceRef:
    return ("gpu.nvidia.com", NODE, f"gpu-{i}")


def device(i: int, uuid: str | None = None) -> DraDevice:
    return DraDevice(f"gpu-{i}", "gpu", f"GPU-{i}" if uuid is None else uuid, "H100", None)


def test_a_node_whose_gpus_are_not_known_by_position_has_no_idle_claim() -> None:
    unplaced = dataclasses.replace(summary(), positions=None)
    assert idle_claims(NODE, unplaced, ((ref(0), device(0)),), {ref(0): "ns/c"}) == ([], {})


def test_a_device_no_claim_holds_does_not_stop_the_ones_after_it() -> None:
    devices = ((ref(1), device(1)), (ref(0), device(0)))
    assert idle_claims(NODE, summary(), devices, {ref(0): "ns/c"}) == ([f"{NODE}/0"], {"ns/c": 1})


def test_a_device_without_a_uuid_is_found_by_its_dra_name() -> None:
    devices = ((ref(0), device(0, uuid="")),)
    assert idle_claims(NODE, summary(), devices, {ref(0): "ns/c"}) == ([f"{NODE}/0"], {"ns/c": 1})


def test_a_gpu_the_cells_do_not_cover_is_not_idle() -> None:
    short = dataclasses.replace(summary(), gpus=summary().gpus[:1])
    devices = ((ref(0), device(0)), (ref(1), device(1)))
    assert idle_claims(NODE, short, devices, {ref(0): "ns/a", ref(1): "ns/b"}) == ([f"{NODE}/0"], {"ns/a": 1})


def test_a_gpu_busy_by_its_memory_alone_is_busy() -> None:
    devices = ((ref(0), device(0)), (ref(1), device(1)))
    assert idle_claims(NODE, summary(), devices, {ref(0): "ns/c", ref(1): "ns/c"}) == ([f"{NODE}/0"], {})


WINDOW = 60.0


def test_the_version_moves_by_one_when_a_key_stands_or_its_value_changes_only() -> None:
    w = IdleWindows(WINDOW)
    w.set_node("n", {"ns/c": 2}, 0.0)
    version = w.version
    w.promote(WINDOW)
    assert w.version == version + 1
    version = w.version
    w.set_node("n", {"ns/c": 2}, WINDOW + 1)
    assert w.version == version
    w.set_node("n", {"ns/c": 3}, WINDOW + 2)
    assert w.version == version + 1 and w.standing == {"ns/c": 3}


def test_a_key_due_but_no_longer_asked_for_does_not_hold_back_the_next() -> None:
    w = IdleWindows(WINDOW)
    w.set_node("a", {"a/0": 1}, 0.0)
    w.set_node("b", {"b/0": 1}, 1.0)
    w.set_node("a", {}, 2.0)
    w.promote(WINDOW + 1.0)
    assert w.standing == {"b/0": 1}


def test_a_key_no_longer_asked_for_leaves_nothing_held() -> None:
    w = IdleWindows(WINDOW)
    w.set_node("n", {"ns/c": 2}, 0.0)
    w.set_node("n", {}, 1.0)
    assert (w._since, w._values, w._by_node) == ({}, {}, {})
