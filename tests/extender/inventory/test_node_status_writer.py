"""The node-status writer's bookkeeping (inventory/node_status_writer.py): what a Node already
says is read from the watched object, and a write just sent is not sent again for RESEND_S while
the watch catches up. The writes on the real API server: tests/kube/test_publish.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gpuextender.extender.inventory.node_status_writer import RESEND_S, NodeStatusWriter, condition_of, has_taint
from gpuextender.extender.state.device_taints import TaintWriterStatus
from gpuextender.extender.state.node_gpu_status import NodeGpuStatus


def writer(taint: bool) -> NodeStatusWriter:
    return NodeStatusWriter(
        lambda _n: None,
        TaintWriterStatus(),
        taint=taint,
        taint_key="gpu-extender.io/no-usable-gpu",
        taint_effect="NoSchedule",
    )


@pytest.mark.parametrize(("after", "due"), [(RESEND_S, False), (RESEND_S + 0.001, True)])
def test_a_write_is_sent_again_only_past_resend(after: float, due: bool) -> None:
    w = writer(True)
    w._sent[("n", "condition")] = (("False", "NoUsableGPU", "m"), 100.0)
    assert w._due("n", "condition", ("False", "NoUsableGPU", "m"), 100.0 + after) is due
    assert w._due("n", "condition", ("True", "GPUsUsable", "m"), 100.0)  # another value: at once
    assert w._due("other", "condition", ("True", "GPUsUsable", "m"), 100.0)


def test_the_taint_is_wanted_only_when_on_and_no_gpu_is_usable() -> None:
    none_usable = NodeGpuStatus("False", "NoUsableGPU", "0 of 8", no_usable_gpu=True)
    some = NodeGpuStatus("True", "GPUsUsable", "1 of 8")
    assert writer(True).wanted_taint(none_usable) and not writer(True).wanted_taint(some)
    assert not writer(False).wanted_taint(none_usable)  # off: a taint of ours is removed


def test_what_a_node_says_is_read_from_its_condition_and_its_taints() -> None:
    node: dict[str, Any] = {
        "spec": {"taints": [{"key": "other", "effect": "NoSchedule"}, {"key": "gpu-extender.io/no-usable-gpu"}]},
        "status": {"conditions": [{"type": "Ready"}, {"type": "GPUsUsable", "status": "False"}]},
    }
    assert has_taint(node, "gpu-extender.io/no-usable-gpu") and not has_taint(node, "missing")
    assert condition_of(node) == {"type": "GPUsUsable", "status": "False"}
    assert condition_of({"status": {"conditions": [{"type": "Ready"}]}}) is None and condition_of(None) is None
    assert not has_taint(None, "x")


class _Answer:
    status = 200

    async def read(self) -> bytes:
        return b"{}"

    def release(self) -> None:
        pass


class _CoreThatChangesTheFleet:
    """A CoreV1Api whose every patch lets the tracker run meanwhile (as the event loop does): it
    adds a node and drops another from the conditions being written."""

    def __init__(self, nodes: dict[str, NodeGpuStatus]) -> None:
        self.nodes, self.patched = nodes, []

    def patch_node_status(self, name: str, body: Any, **_: Any) -> Any:
        self.patched.append(name)
        self.nodes.pop("b", None)
        self.nodes["c"] = NodeGpuStatus("True", "GPUsUsable", "8 of 8 GPUs usable")

        async def answer() -> _Answer:
            return _Answer()

        return answer()


def test_conditions_changing_while_a_write_waits_do_not_end_the_pass() -> None:
    """A leader whose pass died on `dictionary changed size during iteration` kept the Lease and
    wrote nothing more (found by bench/bench_publish.py): the pass goes over a copy."""
    fine = NodeGpuStatus("True", "GPUsUsable", "8 of 8 GPUs usable")
    nodes = {"a": fine, "b": fine}
    w = NodeStatusWriter(
        lambda _n: {},
        TaintWriterStatus(),
        taint=False,
        taint_key="gpu-extender.io/no-usable-gpu",
        taint_effect="NoSchedule",
    )
    w._pending = {"a", "b"}
    core = _CoreThatChangesTheFleet(nodes)
    asyncio.run(w._pass(core, nodes, lambda: True, 0.0))  # type: ignore[arg-type]
    assert core.patched == ["a"]  # b went meanwhile: not written; c is the next pass's
    assert w._pending == {"a"}  # written, waiting for the watch to bring the Node back
