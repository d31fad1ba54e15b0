"""Rules of a device-plugin node's GPUsUsable condition (state/node_gpu_status.py) that mutation
testing found no test holding: each Unknown condition (no agent data, NVML unusable, no GPU
reported) says its own reason and message, NVML's error cut at 200 characters; a usable node's
reason is GPUsUsable, and an agent that does not read the kubelet is said so; GPUs not known by
position (reported out of index order) are still marked unhealthy by report position, never busy;
and a mark key is split back to its node at its last slash."""

from __future__ import annotations

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.state.gpu_summary import summarize
from gpuextender.extender.state.node_gpu_status import (
    NodeGpuStatus,
    count_by_node,
    mark_key,
    marks,
    node_of,
    node_status,
)
from tests.extender.builders import gpu, node, report
from tests.extender.state.test_publication_rules import summary

NODE, HOLD = "dp-1", 60.0


def test_a_node_without_agent_data_says_so() -> None:
    assert node_status(None, 0, 0, HOLD) == NodeGpuStatus("Unknown", "NoAgentData", "no gpu-agent report for this node")


def test_nvml_unusable_says_the_agents_error_cut_at_200_characters() -> None:
    broken = summarize(report(NODE, [gpu(0)], node_error="E" * 201), IdleRule(), 0.0)
    want = NodeGpuStatus("Unknown", "NVMLUnusable", "the gpu-agent cannot read NVML: " + "E" * 200)
    assert node_status(broken, 0, 0, HOLD) == want


def test_an_agent_reporting_no_gpu_says_so() -> None:
    empty = summarize(report(NODE, []), IdleRule(), 0.0)
    want = NodeGpuStatus("Unknown", "NoGPUsReported", "the gpu-agent reports no GPU on this node")
    assert node_status(empty, 0, 0, HOLD) == want


def test_a_usable_node_has_reason_gpus_usable() -> None:
    assert node_status(summary(), 0, 0, HOLD) == NodeGpuStatus("True", "GPUsUsable", "4 of 4 GPUs usable")


def test_holders_unknown_are_said_in_the_message() -> None:
    unknown = node(NODE, 2)  # an agent that does not read the kubelet
    want = "2 of 2 GPUs usable; holders unknown (the agent does not read the kubelet): busy GPUs are not counted"
    assert node_status(unknown, 0, 0, HOLD) == NodeGpuStatus("True", "GPUsUsable", want)


def test_gpus_out_of_index_order_are_marked_unhealthy_by_report_position_never_busy() -> None:
    """Index 1 reported first, then an unhealthy index 0, then a busy index 2: no positions, so
    only the cells' health counts, at each GPU's place in the report."""
    out_of_order = report(NODE, [gpu(1), gpu(0, healthy=False), gpu(2, 90, 80)])
    assert marks(NODE, summarize(out_of_order, IdleRule(), 0.0)) == ([f"{NODE}/1"], [])


def test_a_mark_key_is_split_back_to_its_node_at_the_last_slash() -> None:
    key = mark_key("a/b", 3)
    assert key == "a/b/3" and node_of(key) == "a/b"
    assert count_by_node([key, mark_key("a/b", 4), mark_key("a/c", 0)]) == {"a/b": 2, "a/c": 1}
