"""Headless-Service discovery: the pure target-set logic, and the resolve loop driving real
streams to two real grpc.aio extenders on loopback (127.0.0.1 and 127.0.0.2, same port,
as two pods behind one Service name)."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
from collections.abc import Iterable

import grpc
import pytest

from gpuextender.agent.export.metrics import AgentMetrics
from gpuextender.agent.report.latest import LatestReport
from gpuextender.agent.stream.stream_set import StreamSet
from gpuextender.agent.stream.streamer import ExtenderStream
from gpuextender.common.backoff import Backoff
from gpuextender.common.discovery import (
    ServiceWatch,
    TargetChange,
    diff_targets,
    resolve_interval_problem,
    resolve_with_loop,
    targets_for,
)
from gpuextender.common.netaddr import HostPort
from gpuextender.v1 import gpu_state_pb2 as pb
from gpuextender.v1 import gpu_state_pb2_grpc as pb_grpc
from tests.agent.stream.test_streamer import Recorder, value, wait_for
from tests.harness import free_port


async def serve(servicer: Recorder, host: str, port: int) -> grpc.aio.Server:
    server = grpc.aio.server()
    pb_grpc.add_GpuStateServiceServicer_to_server(servicer, server)
    assert server.add_insecure_port(f"{host}:{port}") == port
    await server.start()
    return server


def make_stream(target: str, latest: LatestReport, metrics: AgentMetrics) -> ExtenderStream:
    return ExtenderStream(
        target, latest, metrics, backoff=Backoff(0.05, 0.2), ack_timeout_s=5.0, on_requested_interval=lambda _: None
    )


def test_targets_for_formats_ipv4_and_ipv6() -> None:
    assert targets_for(["10.0.0.5", "fd00::5", "fe80::1%eth0", "10.0.0.5", ""], 9090) == frozenset(
        {"10.0.0.5:9090", "[fd00::5]:9090", "[fe80::1]:9090"}
    )


def test_diff_targets() -> None:
    assert diff_targets({"a:1", "b:1"}, {"b:1", "c:1", "d:1"}) == TargetChange(("c:1", "d:1"), ("a:1",))
    assert not diff_targets({"a:1"}, {"a:1"})
    assert diff_targets(set(), {"a:1"}) == TargetChange(("a:1",), ())
    assert diff_targets({"a:1"}, set()) == TargetChange((), ("a:1",))


def test_the_loop_resolver_uses_getaddrinfo() -> None:
    assert "127.0.0.1" in asyncio.run(resolve_with_loop("localhost", 9090))


class ScriptedDns:
    """The resolver seam: answers what the test says, or fails."""

    def __init__(self, *addresses: str) -> None:
        self.answer: list[str] | None = list(addresses)
        self.calls = 0

    async def __call__(self, host: str, port: int) -> Iterable[str]:
        assert host == "gpu-extender-agents.gpu-extender.svc"
        self.calls += 1
        if self.answer is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return list(self.answer)


def test_one_stream_per_resolved_extender_started_and_stopped_as_the_service_changes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()
    first, second = f"127.0.0.1:{port}", f"127.0.0.2:{port}"

    async def scenario() -> None:
        recorders = {first: Recorder(), second: Recorder()}
        servers = [await serve(recorders[first], "127.0.0.1", port), await serve(recorders[second], "127.0.0.2", port)]
        latest, metrics = LatestReport(), AgentMetrics("n1")
        streams = StreamSet(lambda target: make_stream(target, latest, metrics))
        dns = ScriptedDns("127.0.0.1", "127.0.0.2")
        watch = ServiceWatch(
            HostPort("gpu-extender-agents.gpu-extender.svc", port), 0.05, streams.set_resolved, resolve=dns
        )
        tasks = [asyncio.create_task(streams.run()), asyncio.create_task(watch.run())]
        try:
            latest.publish(pb.NodeReport(node_name="n1", sequence=1))
            await wait_for(lambda: recorders[first].received and recorders[second].received)
            assert streams.targets == {first, second}
            # (a stream counts as connected once its first ack is back, which may be after the
            # extender has the report)
            await wait_for(
                lambda: (
                    value(metrics, "gpu_agent_stream_connected", extender=first)
                    == value(metrics, "gpu_agent_stream_connected", extender=second)
                    == 1
                )
            )

            dns.answer = None  # DNS outage: keep both streams
            calls = dns.calls
            await wait_for(lambda: dns.calls >= calls + 3)
            assert streams.targets == {first, second}
            latest.publish(pb.NodeReport(node_name="n1", sequence=2))
            await wait_for(lambda: 2 in recorders[first].received and 2 in recorders[second].received)

            dns.answer = ["127.0.0.2"]  # the first replica went away
            await wait_for(lambda: streams.targets == {second})
            await wait_for(lambda: value(metrics, "gpu_agent_stream_connected", extender=first) is None)
            latest.publish(pb.NodeReport(node_name="n1", sequence=3))
            await wait_for(lambda: 3 in recorders[second].received)
            assert 3 not in recorders[first].received

            dns.answer = ["127.0.0.2", "127.0.0.1"]  # and came back
            await wait_for(lambda: 3 in recorders[first].received)  # the new stream sends the newest report
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for server in servers:
                await server.stop(None)

    with caplog.at_level(logging.INFO, logger="gpu_agent"):
        asyncio.run(scenario())
    messages = [r.getMessage() for r in caplog.records]
    outage = [m for m in messages if m.startswith("cannot resolve extender service")]
    assert len(outage) == 1, outage  # once per outage, not once per attempt
    assert "Name or service not known" in outage[0] and "keeping the 2 stream(s)" in outage[0]
    assert any(m.endswith("resolves again") for m in messages)
    assert any(f"gone: {first}" in m for m in messages)
    assert any(f"stopped the stream to extender {first}" in m for m in messages)


def test_fixed_extenders_are_kept_whatever_the_service_resolves_to() -> None:
    async def scenario() -> None:
        latest, metrics = LatestReport(), AgentMetrics("n1")
        streams = StreamSet(lambda target: make_stream(target, latest, metrics), static=["127.0.0.1:1"])
        task = asyncio.create_task(streams.run())
        try:
            await asyncio.sleep(0)
            streams.set_resolved(frozenset({"127.0.0.1:1", "127.0.0.3:1"}))
            assert streams.targets == {"127.0.0.1:1", "127.0.0.3:1"}
            streams.set_resolved(frozenset())
            assert streams.targets == {"127.0.0.1:1"}
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        assert streams.targets == frozenset()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("seconds", "ok"),
    [(0.1, True), (0.0999, False), (3600.0, True), (3600.001, False), (float("nan"), False), (float("inf"), False)],
)
def test_the_resolve_interval_is_bounded_exactly(seconds: float, ok: bool) -> None:
    """The agent's and the relay's --resolve-interval: a tiny one would be a busy loop of DNS queries."""
    problem = resolve_interval_problem(seconds)
    assert (problem is None) == ok
    if not ok:
        assert problem == f"--resolve-interval {seconds} must be within 0.1..3600 seconds"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("gpu-extender-agents.gpu-extender.svc", "expected HOST:PORT"),
        (":9090", "expected the Service's DNS name and gRPC port"),
        ("svc:0", "expected the Service's DNS name and gRPC port"),
        ("svc:99999", "--extender-service"),
        ("svc:port", "--extender-service"),
    ],
)
def test_an_extender_service_without_a_name_and_port_is_refused_by_one_rule(text: str, why: str) -> None:
    """common/discovery.service_address: the agent's and the relay's --extender-service alike."""
    from gpuextender.agent.settings import build_config as agent_config
    from gpuextender.common.discovery import service_address
    from gpuextender.extender.flags import ConfigError
    from gpuextender.extender.relay.relay_flags import parse as relay_parse

    problem = service_address(text)
    assert isinstance(problem, str) and problem.startswith("--extender-service") and why in problem
    with pytest.raises(ConfigError, match="^" + re.escape(problem) + "$"):
        relay_parse(["--extender-service", text])
    with pytest.raises(Exception, match=re.escape(problem)):
        agent_config(["--extender-service", text, "--node-name", "n", "--fake", "x.yaml"], {})


def test_an_extender_service_with_a_name_and_port_is_read() -> None:
    from gpuextender.common.discovery import service_address
    from gpuextender.common.netaddr import HostPort

    assert service_address("gpu-extender-agents.gpu-extender.svc:9090") == HostPort(
        "gpu-extender-agents.gpu-extender.svc", 9090
    )
