"""RelayNodeReports (contract 0.7) over a real grpc.aio channel: each relayed report is taken as
from its agent's own stream (the same checks, sequences, light heartbeats, store), answered per
batch with what was refused and why; each agent stream is held to its rate; and where agents are
authenticated, only the relays' service account may relay (TokenReview against an in-test API
server)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import grpc
import pytest
from prometheus_client import generate_latest

from gpuextender.common.idle_rule import IdleRule
from gpuextender.extender.ingest.limits import (
    RELAY_REFUSAL_BURST,
    RELAY_REFUSALS_PER_SECOND,
    REPORT_BURST,
    REPORTS_PER_SECOND,
)
from gpuextender.extender.ingest.service import (
    MAX_PACED_UNSTORED,
    MAX_REFUSALS_LISTED,
    Gate,
    IngestService,
    _RelayedStreams,
    _Stream,
    add_to_server,
)
from gpuextender.extender.ingest.token_review import TokenReviewer
from gpuextender.extender.observe.ingest_metrics import IngestMetrics
from gpuextender.extender.relay.forward_store import ForwardStore
from gpuextender.extender.settings import ServiceAccountRef
from gpuextender.extender.workers.summary_store import SummaryStore
from gpuextender.v1 import gpu_state_pb2 as pb
from tests.extender.builders import gpu, report
from tests.extender.state.test_summary_refresh import heartbeat_of
from tests.harness import metric, parse_metrics
from tests.kube_apiserver import KubeApiServer

RULE = IdleRule(30.0, 50.0, None)
AGENTS, RELAYS = ServiceAccountRef("gpu-extender", "gpu-agent"), ServiceAccountRef("gpu-extender", "gpu-relay")
METHOD = "/gpuextender.v1.GpuStateService/RelayNodeReports"


def full(node: str, seq: int, util: int = 0) -> pb.NodeReport:
    return report(node, [gpu(0, util, 10), gpu(1, 0, 10)], seq=seq, seconds=1000)


def item(stream: int, r: pb.NodeReport | bytes | None) -> pb.RelayedReport:
    if r is None:
        return pb.RelayedReport(stream=stream, closed=True)
    return pb.RelayedReport(stream=stream, report=r if isinstance(r, bytes) else r.SerializeToString())


class Rig:
    def __init__(
        self, service_kwargs: dict[str, object] | None = None, clock: Callable[[], float] = lambda: 50.0
    ) -> None:
        self.store, self.metrics = SummaryStore(RULE), IngestMetrics()
        self.service = IngestService(
            self.store, self.metrics, clock=clock, wall_clock=lambda: 1000.0, **(service_kwargs or {})
        )
        self.server = grpc.aio.server()
        add_to_server(self.service, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    async def relay(self, *batches: Sequence[pb.RelayedReport], token: str | None = None) -> list[pb.RelayAck]:
        metadata = (("authorization", f"Bearer {token}"),) if token else None
        async with grpc.aio.insecure_channel(f"127.0.0.1:{self.port}") as channel:
            call = channel.stream_stream(
                METHOD, request_serializer=pb.RelayBatch.SerializeToString, response_deserializer=pb.RelayAck.FromString
            )(metadata=metadata)
            acks = []
            for batch in batches:
                await call.write(pb.RelayBatch(reports=batch))
                ack = await call.read()
                if ack is grpc.aio.EOF:
                    raise grpc.aio.AioRpcError(await call.code(), None, None, await call.details())
                acks.append(ack)
            await call.done_writing()
            assert await call.read() is grpc.aio.EOF
            return acks

    async def refusal(self, token: str | None) -> tuple[grpc.StatusCode, str]:
        """A relay stream that sends nothing: how the server ended it (a write racing a refusal at
        open can end the call INTERNAL on the client, grpc/grpc#36066)."""
        metadata = (("authorization", f"Bearer {token}"),) if token else None
        async with grpc.aio.insecure_channel(f"127.0.0.1:{self.port}") as channel:
            call = channel.stream_stream(
                METHOD, request_serializer=pb.RelayBatch.SerializeToString, response_deserializer=pb.RelayAck.FromString
            )(metadata=metadata)
            try:
                assert await call.read() is grpc.aio.EOF
            except grpc.aio.AioRpcError as exc:
                return exc.code(), exc.details() or ""
            return await call.code(), await call.details() or ""

    def metric(self, name: str, **labels: str) -> float | None:
        return metric(parse_metrics(generate_latest(self.metrics.registry).decode()), name, **labels)


def run(test: Callable[[Rig], Awaitable[None]]) -> None:
    async def scenario() -> None:
        rig = Rig()  # its server on this loop
        await rig.server.start()
        try:
            await test(rig)
        finally:
            await rig.server.stop(None)

    asyncio.run(scenario())


def test_each_relayed_report_is_taken_as_from_its_agents_own_stream() -> None:
    first, now = full("n1", 1), full("n1", 2, util=3)

    async def test(rig: Rig) -> None:
        acks = await rig.relay(
            [item(1, first), item(1, heartbeat_of(first, now, 2)), item(1, full("n1", 2)), item(1, b"\xff\xff")],
            [item(2, full("n2", 5)), item(1, full("n1", 3))],
        )
        assert [a.accepted for a in acks] == [2, 2]
        refused = acks[0].refused
        assert [(r.stream, r.node_name, r.sequence) for r in refused] == [(1, "n1", 2), (1, "", 0)]
        assert "sequence 2 does not increase" in refused[0].reason and refused[1].reason == "not a NodeReport"
        # What the extender would tell an agent of its own: the relay tells its agents.
        assert acks[0].agent_ack.light_heartbeats and acks[0].agent_ack.idle_max_utilization_percent == 30.0
        assert rig.store.has_data("n1") and rig.store.has_data("n2")
        assert rig.metric("gpu_extender_reports_total", result="accepted") == 4
        assert rig.metric("gpu_extender_reports_rejected_total", reason="invalid") == 1
        assert rig.metric("gpu_extender_connected_agents") == 0  # the relay's stream ended: its agents with it

    run(test)


def test_a_nodes_new_stream_replaces_its_old_one_and_a_closed_one_is_counted_out() -> None:
    async def test(rig: Rig) -> None:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{rig.port}") as channel:
            call = channel.stream_stream(
                METHOD, request_serializer=pb.RelayBatch.SerializeToString, response_deserializer=pb.RelayAck.FromString
            )()

            async def send(*items: pb.RelayedReport) -> pb.RelayAck:
                await call.write(pb.RelayBatch(reports=items))
                return await call.read()  # type: ignore[no-any-return]

            await send(item(1, full("n1", 9)), item(2, full("n2", 1)))
            assert rig.metric("gpu_extender_connected_agents") == 2
            # n1's agent reconnected at the relay: sequences start again on its new stream.
            ack = await send(item(3, full("n1", 1)))
            assert ack.accepted == 1 and rig.metric("gpu_extender_connected_agents") == 2
            await send(item(1, None))  # the old stream's end: already replaced, nothing more
            assert rig.metric("gpu_extender_connected_agents") == 2
            await send(item(2, None), item(2, None))
            assert rig.metric("gpu_extender_connected_agents") == 1
            await call.done_writing()

    run(test)


def test_each_relayed_agent_stream_is_held_to_its_rate_exactly() -> None:
    async def test(rig: Rig) -> None:
        burst = [item(1, full("n1", seq)) for seq in range(1, REPORT_BURST + 1)]
        (ack,) = await rig.relay([*burst, item(1, full("n1", REPORT_BURST + 1)), item(2, full("n2", 1))])
        assert ack.accepted == REPORT_BURST + 1  # the burst, and another stream's report
        assert [(r.stream, r.sequence) for r in ack.refused] == [(1, REPORT_BURST + 1)]
        assert "over 10 reports a second for one agent stream" in ack.refused[0].reason
        assert rig.metric("gpu_extender_reports_rejected_total", reason="paced") == 1

    run(test)


@pytest.mark.parametrize(
    ("token", "relay_account", "code", "reason", "words"),
    [
        ("t-relay", None, grpc.StatusCode.PERMISSION_DENIED, "relay_not_allowed", "--relay-service-account"),
        (
            "t-agent",
            RELAYS,
            grpc.StatusCode.PERMISSION_DENIED,
            "wrong_service_account",
            "not to the relays' service account",
        ),
        (None, RELAYS, grpc.StatusCode.UNAUTHENTICATED, "missing_token", "no `authorization: Bearer <token>`"),
        ("t-relay", RELAYS, None, "", ""),
    ],
)
def test_where_agents_are_authenticated_only_the_relays_account_may_relay(
    token: str | None, relay_account: ServiceAccountRef | None, code: grpc.StatusCode | None, reason: str, words: str
) -> None:
    async def scenario() -> None:
        async with KubeApiServer() as api:
            api.add_token("t-agent", AGENTS.username, extra={"authentication.kubernetes.io/node-name": ["n1"]})
            api.add_token("t-relay", RELAYS.username)  # a Deployment's pod: bound to no node of its own
            reviewer = TokenReviewer(api.configuration(), AGENTS, "gpu-extender")
            relays = reviewer.for_relays(relay_account) if relay_account is not None else None
            rig = Rig({"gate": Gate(reviewer, relays)})
            await rig.server.start()
            try:
                if code is None:
                    (ack,) = await rig.relay([item(1, full("n1", 1)), item(2, full("n2", 1))], token=token)
                    assert ack.accepted == 2  # a relay speaks for any node
                else:
                    got, details = await rig.refusal(token)
                    assert got == code and words in details
                    assert rig.metric("gpu_extender_agent_auth_failures_total", reason=reason) == 1
            finally:
                await rig.server.stop(None)
                await reviewer.close()

    asyncio.run(scenario())


def test_pacers_of_streams_that_stored_nothing_are_bounded_exactly() -> None:
    """A relay that names ever new agent streams whose reports are refused cannot grow the pacers
    kept: past MAX_PACED_UNSTORED beyond the stored streams, the unstored ones' are dropped."""
    relayed = _RelayedStreams("ipv4:10.0.0.9:1", lambda: 0.0)
    relayed.streams[-1] = _Stream("p", None)  # one stored stream: its pacer is kept through the pruning
    kept = relayed.pacer(-1)
    for key in range(MAX_PACED_UNSTORED):
        relayed.pacer(key)
    assert len(relayed.pacers) == MAX_PACED_UNSTORED + 1  # at the bound: all kept
    relayed.pacer(MAX_PACED_UNSTORED)
    assert len(relayed.pacers) == MAX_PACED_UNSTORED + 2  # one over it: still added ...
    relayed.pacer(MAX_PACED_UNSTORED + 1)  # ... and the next finds it over: the unstored are dropped
    assert set(relayed.pacers) == {-1, MAX_PACED_UNSTORED + 1} and relayed.pacers[-1] is kept


@pytest.mark.parametrize("refusals", [MAX_REFUSALS_LISTED, MAX_REFUSALS_LISTED + 1])
def test_an_answer_lists_at_most_its_bound_of_refusals_and_counts_the_rest(refusals: int) -> None:
    """A relay's message of items that are all refused (empty, or not a NodeReport) gets an answer
    of bounded size: the first MAX_REFUSALS_LISTED refusals, the rest told by `accepted`."""

    async def test(rig: Rig) -> None:
        items = [item(k, b"\xff\xff" if k % 2 else b"") for k in range(1, refusals + 1)]
        (ack,) = await rig.relay([*items, item(refusals + 1, full("n1", 1))])
        assert ack.accepted == 1 and len(ack.refused) == MAX_REFUSALS_LISTED
        assert [r.stream for r in ack.refused] == list(range(1, MAX_REFUSALS_LISTED + 1))
        assert rig.metric("gpu_extender_reports_total", result="rejected") == refusals  # each one counted

    run(test)


@pytest.mark.parametrize(
    ("held", "excess"),
    [(0, 0), (0, 1), (0, 100), (100, 100), (101, 101)],
)
def test_a_relay_streams_refusals_past_its_budget_are_waited_off_exactly(
    held: int, excess: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A relay stream's refused reports cost it RELAY_REFUSAL_BURST at once, then
    RELAY_REFUSALS_PER_SECOND (or 10 a second per agent stream it holds, where that is more: 100
    streams make exactly 1,000, 101 make 1,010): the stream waits off the rest before it is read
    on, and its accepted reports are still taken."""
    now = [50.0]
    slept: list[float] = []
    rig: Rig

    async def sleep(seconds: float) -> None:  # time passes as the stream waits
        if seconds > 0:
            assert rig.metric("gpu_extender_paced_streams") == 1  # counted while it waits
            slept.append(seconds)
            now[0] += seconds

    async def scenario() -> None:
        nonlocal rig
        rig = Rig(clock=lambda: now[0])
        rig.service._sleep = sleep
        await rig.server.start()
        try:
            holding = [item(k, full(f"n{k}", 1)) for k in range(1, held + 1)]
            empties = [item(1000 + k, b"") for k in range(RELAY_REFUSAL_BURST + excess)]
            acks = await rig.relay(holding, empties, [item(999, full("n-last", 1))])
            assert [a.accepted for a in acks] == [held, 0, 1]  # the stream is read on after the wait
            assert rig.metric("gpu_extender_reports_rejected_total", reason="invalid") == len(empties)
            assert rig.metric("gpu_extender_paced_streams") == 0  # no longer waiting
        finally:
            await rig.server.stop(None)

    asyncio.run(scenario())
    rate = max(RELAY_REFUSALS_PER_SECOND, REPORTS_PER_SECOND * held)
    assert sum(slept) == pytest.approx(excess / rate)
    assert (excess == 0) == (not slept)
    said = [r.getMessage() for r in caplog.records if "reading it slower" in r.getMessage()]
    assert len(said) == (1 if excess else 0)  # once a minute per relay, only when it waits
    assert all(f"refused faster than {rate:g} a second" in line for line in said)


def test_a_relay_clients_new_stream_finds_the_budget_its_last_one_spent() -> None:
    """The refusal budget is the client's (its address), not the stream's: a client that spent its
    burst on one stream and opens another waits for its next refusal (it got a fresh burst of
    RELAY_REFUSAL_BURST on each)."""
    slept: list[float] = []
    now = [50.0]

    async def sleep(seconds: float) -> None:
        if seconds > 0:
            slept.append(seconds)
            now[0] += seconds

    async def scenario() -> None:
        rig = Rig(clock=lambda: now[0])
        rig.service._sleep = sleep
        await rig.server.start()
        try:
            await rig.relay([item(1000 + k, b"") for k in range(RELAY_REFUSAL_BURST)])
            assert slept == []  # exactly the burst: nothing owed
            await rig.relay([item(1, b"")])  # a new connection, the same client
            assert slept == [pytest.approx(1 / RELAY_REFUSALS_PER_SECOND)]
        finally:
            await rig.server.stop(None)

    asyncio.run(scenario())


def test_the_survivor_of_two_agents_of_a_node_at_one_relay_is_taken_after_the_other_ends() -> None:
    """Two agents of one node stream to the same relay for a moment: their sequences mix on the
    node's relayed stream. When the long-running one ends, the survivor's reports (lower
    sequences) go out on a new relayed stream and are taken, where before the replica refused them
    for good ("sequence")."""

    async def test(rig: Rig) -> None:
        relay = ForwardStore(RULE)
        pending = relay.replica_opened("replica")

        def batch() -> list[pb.RelayedReport]:
            return [i for message in pending.take(1 << 20) for i in pb.RelayBatch.FromString(message).reports]

        relay.stream_opened("n1")
        assert relay.ingest(full("n1", 900), 0.0)  # the old agent
        relay.stream_opened("n1")  # the new one, before the old one's stream ended
        assert relay.ingest(full("n1", 1), 0.0)  # the new one's first ...
        assert relay.ingest(full("n1", 901), 0.0)  # ... and the old one's next: the newest goes out
        first = batch()
        relay.stream_closed("n1")  # the old agent's stream ends
        problem = relay.refresh(heartbeat_of(full("n1", 1), full("n1", 1), 2), 0.0)
        assert problem is not None  # the survivor is asked for a full report ...
        assert relay.ingest(full("n1", 3, util=80), 0.0)  # ... and sends it
        acks = await rig.relay(first, batch())
        assert [a.accepted for a in acks] == [1, 1] and not acks[1].refused
        assert rig.store.has_data("n1")
        assert rig.metric("gpu_extender_reports_rejected_total", reason="sequence") in (None, 0.0)

    run(test)
