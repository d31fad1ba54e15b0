"""`--agent-auth tokenreview`: the real ingest service on a grpc.aio server, checking agent tokens
with the in-test API server's TokenReview; plus the pure rules behind it."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest
from prometheus_client import generate_latest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.ingest.agent_identity import (
    NODE_NAME_EXTRA,
    AgentIdentity,
    Refusal,
    bearer_token,
    judge_review,
    token_expiry,
)
from gpuextender.extender.ingest.service import Gate, IngestService, add_to_server
from gpuextender.extender.ingest.token_review import TokenReviewer
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.settings import ServiceAccountRef, parse_service_account
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.v1 import gpu_state_pb2 as pb
from gpuextender.v1 import gpu_state_pb2_grpc as pb_grpc
from tests.extender.builders import gpu, report
from tests.harness import metric, parse_metrics
from tests.kube_apiserver import KubeApiServer, TokenReviewRequest

SA = ServiceAccountRef("gpu-extender", "gpu-agent")


def bound_to(node: str) -> dict[str, list[str]]:
    return {NODE_NAME_EXTRA: [node]}


class Rig:
    """An IngestService with a TokenReviewer against the in-test API server, on loopback."""

    def __init__(self, api: KubeApiServer, clock: Callable[[], float]) -> None:
        self.api = api
        self.state = GpuState(IdleRule())
        self.metrics = ExtenderMetrics(self.state)
        self.reviewer = TokenReviewer(api.configuration(), SA, "gpu-extender", clock=clock)
        self.server = grpc.aio.server()
        add_to_server(
            # The reports are stamped 1000 + seq (builders.report): the wall clock says so too.
            IngestService(self.state, self.metrics.ingest, gate=Gate(self.reviewer), wall_clock=lambda: 1000.0),
            self.server,
        )
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    async def stream(self, token: str | None, *nodes: str) -> list[pb.ReportAck]:
        """Send one report per node on one stream; the acks, or the AioRpcError that ended the stream."""
        metadata = (("authorization", f"Bearer {token}"),) if token is not None else None
        async with grpc.aio.insecure_channel(f"127.0.0.1:{self.port}") as channel:
            call = pb_grpc.GpuStateServiceStub(channel).StreamNodeReports(metadata=metadata)
            acks = []
            for seq, node in enumerate(nodes, 1):
                await call.write(report(node, [gpu(0), gpu(1)], seconds=1000 + seq, seq=seq))
                ack = await call.read()
                if ack is grpc.aio.EOF:  # ended by the server: its status says why
                    raise grpc.aio.AioRpcError(await call.code(), None, None, await call.details())
                acks.append(ack)
            await call.done_writing()
            return acks

    def metric(self, name: str, **labels: str) -> float | None:
        return metric(parse_metrics(generate_latest(self.metrics.registry).decode()), name, **labels)


def run(test: Callable[[KubeApiServer, Rig], Awaitable[None]], clock: Callable[[], float] = time.monotonic) -> None:
    async def scenario() -> None:
        async with KubeApiServer() as api:
            rig = Rig(api, clock)
            await rig.server.start()
            try:
                await test(api, rig)
            finally:
                await rig.server.stop(None)
                await rig.reviewer.close()

    asyncio.run(scenario())


def test_a_token_bound_to_the_node_may_report_for_it() -> None:
    async def test(api: KubeApiServer, rig: Rig) -> None:
        api.add_token("t-node-1", SA.username, extra=bound_to("gpu-node-1"))
        acks = await rig.stream("t-node-1", "gpu-node-1", "gpu-node-1")
        assert [a.status for a in acks] == [pb.ReportAck.ACCEPTED] * 2
        assert rig.state.summary("gpu-node-1").idle_gpus == 2
        # Reviewed once, at stream open, for our audience.
        assert api.token_reviews == [TokenReviewRequest("t-node-1", ("gpu-extender",))]

    run(test)


def test_a_report_for_another_node_is_rejected_and_not_stored(caplog: pytest.LogCaptureFixture) -> None:
    async def test(api: KubeApiServer, rig: Rig) -> None:
        api.add_token("t-node-1", SA.username, extra=bound_to("gpu-node-1"))
        acks = await rig.stream("t-node-1", "gpu-node-2", "gpu-node-2", "gpu-node-1")
        assert [a.status for a in acks] == [pb.ReportAck.REJECTED, pb.ReportAck.REJECTED, pb.ReportAck.ACCEPTED]
        assert "bound to node 'gpu-node-1'" in acks[0].reason and "'gpu-node-2'" in acks[0].reason
        assert rig.state.summary("gpu-node-2") is None
        assert rig.state.summary("gpu-node-1") is not None
        assert rig.metric("gpu_extender_agent_auth_failures_total", reason="node_mismatch") == 2
        assert rig.metric("gpu_extender_reports_total", result="rejected") == 2

    with caplog.at_level(logging.WARNING, logger="gpu_extender.ingest"):
        run(test)
    lines = [r.getMessage() for r in caplog.records if "bound to node" in r.getMessage()]
    assert len(lines) == 1  # once per stream, not once per report


@pytest.mark.parametrize(
    ("setup", "token", "code", "reason", "words"),
    [
        (lambda api: None, None, grpc.StatusCode.UNAUTHENTICATED, "missing_token", "--token-file"),
        (lambda api: None, "forged", grpc.StatusCode.UNAUTHENTICATED, "invalid_token", "invalid bearer token"),
        (
            lambda api: api.add_token("t", SA.username, extra=bound_to("gpu-node-1"), authenticated=False),
            "t",
            grpc.StatusCode.UNAUTHENTICATED,
            "invalid_token",
            "not authenticated",
        ),
        (
            lambda api: api.add_token("t", SA.username, extra=bound_to("gpu-node-1"), audiences=["https://kubernetes"]),
            "t",
            grpc.StatusCode.UNAUTHENTICATED,
            "invalid_token",
            "target audiences ['gpu-extender']",
        ),
        (
            lambda api: api.add_token("t", "system:serviceaccount:default:default", extra=bound_to("gpu-node-1")),
            "t",
            grpc.StatusCode.PERMISSION_DENIED,
            "wrong_service_account",
            "not to the agents' service account",
        ),
        (
            lambda api: api.add_token("t", SA.username),
            "t",
            grpc.StatusCode.PERMISSION_DENIED,
            "no_node_name",
            "Kubernetes >= 1.30",
        ),
        (lambda api: api.fail_with(503), "t", grpc.StatusCode.UNAVAILABLE, "review_failed", "HTTP 503"),
    ],
    ids=["missing", "unknown", "revoked", "audience", "service-account", "no-node-name", "api-down"],
)
def test_refused_streams_store_nothing_and_are_counted(
    setup: Callable[[KubeApiServer], Any],
    token: str | None,
    code: grpc.StatusCode,
    reason: str,
    words: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def test(api: KubeApiServer, rig: Rig) -> None:
        setup(api)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await rig.stream(token, "gpu-node-1")
        assert refused.value.code() == code
        assert words in (refused.value.details() or "")
        assert rig.state.summary("gpu-node-1") is None
        assert rig.metric("gpu_extender_agent_auth_failures_total", reason=reason) == 1
        assert rig.metric("gpu_extender_connected_agents") == 0

    with caplog.at_level(logging.WARNING, logger="gpu_extender.ingest"):
        run(test)
    assert any(
        "refused agent stream from ipv4:127.0.0.1" in r.getMessage() and code.name in r.getMessage()
        for r in caplog.records
    )


def test_answers_are_cached_per_token_until_the_ttl_and_errors_are_not() -> None:
    now = [1000.0]

    async def test(api: KubeApiServer, rig: Rig) -> None:
        api.add_token("good", SA.username, extra=bound_to("gpu-node-1"))
        api.add_token("other-sa", "system:serviceaccount:x:y", extra=bound_to("gpu-node-1"))
        for _ in range(3):
            await rig.stream("good", "gpu-node-1")
            with pytest.raises(grpc.aio.AioRpcError):
                await rig.stream("other-sa", "gpu-node-1")
        assert [r.token for r in api.token_reviews] == ["good", "other-sa"]

        now[0] += 6  # past the refusal TTL (5 s), within the answer TTL (60 s)
        await rig.stream("good", "gpu-node-1")
        with pytest.raises(grpc.aio.AioRpcError):
            await rig.stream("other-sa", "gpu-node-1")
        assert [r.token for r in api.token_reviews] == ["good", "other-sa", "other-sa"]

        now[0] += 60  # past the answer TTL: a revoked token stops working
        api.add_token("good", SA.username, extra=bound_to("gpu-node-1"), authenticated=False)
        with pytest.raises(grpc.aio.AioRpcError) as revoked:
            await rig.stream("good", "gpu-node-1")
        assert revoked.value.code() == grpc.StatusCode.UNAUTHENTICATED

        # An API server error is not an answer: the next stream asks again.
        api.add_token("fresh", SA.username, extra=bound_to("gpu-node-1"))
        before = rig.reviewer.reviews
        api.fail_with(503)
        with pytest.raises(grpc.aio.AioRpcError):
            await rig.stream("fresh", "gpu-node-1")
        api.fail_with(None)
        assert [a.status for a in await rig.stream("fresh", "gpu-node-1")] == [pb.ReportAck.ACCEPTED]
        assert rig.reviewer.reviews == before + 2 and api.token_reviews[-1].token == "fresh"

    run(test, clock=lambda: now[0])


def test_a_fleet_reconnecting_at_once_costs_one_review_per_token() -> None:
    """Streams opening together queue for the reviewer; those behind the first find its answer."""

    async def test(api: KubeApiServer, rig: Rig) -> None:
        api.add_token("shared", SA.username, extra=bound_to("gpu-node-1"))
        acks = await asyncio.gather(*(rig.stream("shared", "gpu-node-1") for _ in range(20)))
        assert all([a.status for a in answer] == [pb.ReportAck.ACCEPTED] for answer in acks)
        assert [r.token for r in api.token_reviews] == ["shared"]

    run(test)


def jwt(claims: dict[str, Any]) -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2ln"


def test_a_cached_answer_never_outlives_the_token() -> None:
    expiring = jwt({"exp": int(time.time()) + 3})  # expires within the cache's safety margin

    async def test(api: KubeApiServer, rig: Rig) -> None:
        api.add_token(expiring, SA.username, extra=bound_to("gpu-node-1"))
        await rig.stream(expiring, "gpu-node-1")
        await rig.stream(expiring, "gpu-node-1")
        assert len(api.token_reviews) == 2

    run(test)


def test_judge_review() -> None:
    user = {"username": SA.username, "extra": bound_to("n1")}
    assert judge_review({"authenticated": True, "user": user, "audiences": ["aud"]}, SA, "aud") == AgentIdentity(
        SA.username, "n1"
    )
    for missing in ({}, {"audiences": []}, {"audiences": None}):  # the API server's own audience: not ours
        refused = judge_review({"authenticated": True, "user": user, **missing}, SA, "aud")
        assert isinstance(refused, Refusal) and refused.reason == "wrong_audience"
    wrong_aud = judge_review({"authenticated": True, "user": user, "audiences": ["api"]}, SA, "aud")
    assert isinstance(wrong_aud, Refusal) and wrong_aud.reason == "wrong_audience"
    two_nodes = judge_review(
        {"authenticated": True, "user": {**user, "extra": {NODE_NAME_EXTRA: ["a", "b"]}}, "audiences": ["x"]}, SA, "x"
    )
    assert isinstance(two_nodes, Refusal) and two_nodes.reason == "no_node_name"
    assert judge_review({"authenticated": False}, SA, "x").reason == "invalid_token"  # type: ignore[union-attr]


def test_bearer_token_expiry_and_service_account_parsing() -> None:
    assert bearer_token([("authorization", "Bearer abc")]) == "abc"
    assert bearer_token([("x", "y"), ("authorization", "bearer  abc ")]) == "abc"
    assert bearer_token([("authorization", "Basic abc")]) is None
    assert bearer_token([("authorization", "Bearer ")]) is None
    assert bearer_token([]) is None
    assert token_expiry(jwt({"exp": 1700000000})) == 1700000000.0
    assert token_expiry(jwt({"sub": "x"})) is None
    assert token_expiry("not-a-jwt") is None and token_expiry("a.!!!.c") is None
    assert token_expiry(jwt({"exp": 10**400})) is None  # forged: would overflow a float
    assert parse_service_account("gpu-extender/gpu-agent") == SA
    assert str(SA) == "gpu-extender/gpu-agent" and SA.username == "system:serviceaccount:gpu-extender:gpu-agent"
    for bad in ("gpu-agent", "/x", "ns/", "NS/x", "a/b/c"):
        with pytest.raises(ValueError, match="NAMESPACE/NAME"):
            parse_service_account(bad)
