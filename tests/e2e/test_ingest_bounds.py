"""The real gpu-extender process bounds what agents may send: the gRPC message size (exactly
MAX_REPORT_BYTES passes the transport, one byte more ends the stream), what a client that never
reads acks can make it buffer, reports of nodes its inventory does not know (--max-unknown-nodes),
and sample times off its clock (--max-clock-skew)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import grpc
import pytest

from gpuextender.extender.ingest.limits import MAX_REPORT_BYTES, REPORT_BURST
from gpuextender.v1 import gpu_state_pb2 as pb
from gpuextender.v1 import gpu_state_pb2_grpc as pb_grpc
from tests.extender.builders import gpu
from tests.harness import Proc, cluster, metric, scrape, url

ACCEPTED, REJECTED = pb.ReportAck.ACCEPTED, pb.ReportAck.REJECTED


def now_report(node: str, seq: int = 1, offset_s: float = 0.0) -> pb.NodeReport:
    r = pb.NodeReport(node_name=node, sequence=seq, agent_version="test", gpus=[gpu(0), gpu(1)])
    r.sample_time.FromNanoseconds(int((time.time() + offset_s) * 1e9))
    return r


def send(ext: Proc, *reports: pb.NodeReport) -> list[pb.ReportAck]:
    """One stream over a real channel: the acks in order (grpc.RpcError if the stream fails)."""
    with grpc.insecure_channel(f"127.0.0.1:{ext.ports['grpc']}") as channel:
        return list(pb_grpc.GpuStateServiceStub(channel).StreamNodeReports(iter(reports), timeout=10))


def sized(total: int) -> pb.NodeReport:
    """A report of exactly `total` bytes on the wire (its node_error padded)."""
    r = now_report("gpu-node-1")
    r.node_error = "x" * (total - r.ByteSize())
    while r.ByteSize() != total:  # the length prefix grew by a byte or two
        r.node_error = r.node_error[: len(r.node_error) - (r.ByteSize() - total)]
    assert r.ByteSize() == total
    return r


def write_nodes(directory: Path, *names: str) -> Path:
    directory.mkdir(exist_ok=True)
    docs = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": n},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}},
        }
        for n in names
    ]
    (directory / "nodes.yaml").write_text("\n---\n".join(json.dumps(d) for d in docs))
    return directory


def test_with_an_inventory_unknown_nodes_are_bounded_and_skew_is_refused(tmp_path: Path) -> None:
    inventory = write_nodes(tmp_path / "inventory", "gpu-node-1")
    with cluster(tmp_path) as c:
        ext = c.extender(
            "--inventory", str(inventory), "--readiness-grace", "0", "--max-unknown-nodes", "1", "--max-clock-skew", "5"
        )
        assert [a.status for a in send(ext, now_report("gpu-node-1"))] == [ACCEPTED]
        assert [a.status for a in send(ext, now_report("made-up-1"))] == [ACCEPTED]
        refused = send(ext, now_report("made-up-2"))
        assert refused[0].status == REJECTED and "--max-unknown-nodes 1" in refused[0].reason

        acks = send(
            ext, now_report("gpu-node-1", 1), now_report("gpu-node-1", 2, offset_s=45), now_report("gpu-node-1", 3)
        )
        assert [a.status for a in acks] == [ACCEPTED, REJECTED, ACCEPTED]
        assert "ahead of the extender's clock, more than --max-clock-skew 5s" in acks[1].reason

        samples = scrape(url(ext, "/metrics"))
        assert metric(samples, "gpu_extender_unknown_nodes") == 1
        assert metric(samples, "gpu_extender_reports_rejected_total", reason="unknown_node_limit") == 1
        assert metric(samples, "gpu_extender_reports_rejected_total", reason="clock_skew") == 1
        assert metric(samples, "gpu_extender_nodes_with_data") == 2
        assert "rejected report 1 for node 'made-up-2'" in ext.log()


def test_without_an_inventory_every_node_is_kept(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        ext = c.extender("--readiness-grace", "0", "--max-unknown-nodes", "0")
        for i in range(3):
            assert [a.status for a in send(ext, now_report(f"made-up-{i}"))] == [ACCEPTED]
        assert metric(scrape(url(ext, "/metrics")), "gpu_extender_nodes_with_data") == 3


def test_the_grpc_message_bound_is_exact(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        ext = c.extender("--readiness-grace", "0")
        at_bound = send(ext, sized(MAX_REPORT_BYTES))  # through the transport; too long a node_error
        assert at_bound[0].status == REJECTED and "node_error is" in at_bound[0].reason
        with pytest.raises(grpc.RpcError) as over:
            send(ext, sized(MAX_REPORT_BYTES + 1))
        assert over.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
        assert ext.alive()


def test_a_client_that_never_reads_acks_is_held_back_by_flow_control(tmp_path: Path) -> None:
    """The ingest paces each stream; what the client writes meanwhile waits in HTTP/2 flow control
    (one stream window, 64 KiB), not in the extender's memory."""
    template = now_report("gpu-node-1")
    template.gpus.extend(gpu(i) for i in range(2, 16))
    size = template.ByteSize()
    window_reports = 2 * 65_536 // size  # the stream's window, plus as much again for buffers on the way

    async def flood(ext: Proc) -> tuple[int, float]:
        sent = 0
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ext.ports['grpc']}") as channel:
            call = pb_grpc.GpuStateServiceStub(channel).StreamNodeReports()

            async def write_forever() -> None:
                nonlocal sent
                while True:  # never reads an ack
                    template.sequence = sent + 1
                    await call.write(template)
                    sent += 1

            writer = asyncio.create_task(write_forever())
            try:
                async with asyncio.timeout(60):  # a hang guard: processing goes on at the paced rate
                    while (processed := _accepted(ext)) < 3 * REPORT_BURST:
                        await asyncio.sleep(0.2)
                        assert not writer.done()
                return sent, processed
            finally:
                writer.cancel()
                call.cancel()

    with cluster(tmp_path) as c:
        ext = c.extender("--readiness-grace", "0")
        sent, processed = asyncio.run(flood(ext))
    assert sent - processed <= window_reports + REPORT_BURST, (sent, processed, size)


def _accepted(ext: Proc) -> float:
    return metric(scrape(url(ext, "/metrics")), "gpu_extender_reports_total", result="accepted") or 0.0
