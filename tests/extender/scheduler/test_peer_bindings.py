"""Replicas tell each other of their open bindings (issue 54 item 3; scheduler/peer_wire.py,
peer_sender.py, binding_gate.opened_at_peers): the message and its bounds at exactly their values,
the gate holding a filter for a peer's binding, and two replicas on loopback, real aiohttp servers
and the real sender: kube-scheduler's calls moving from A to B between two pods no longer count
A's last GPU twice (B passed it before)."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp import web

from gpuextender.common.idle_rule import IdleRule
from gpuextender.common.netaddr import HostPort
from gpuextender.extender.flags import ConfigError, build_config
from gpuextender.extender.model.untrusted import InvalidInput
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler.binding_gate import (
    MAX_PEER_NAMES,
    MAX_PEER_OPEN,
    OVERFLOW,
    TAKEN,
    WIDENED,
    BindingGate,
)
from gpuextender.extender.scheduler.cluster_sources import ClusterSources
from gpuextender.extender.scheduler.http_api import SchedulerApi, build_app
from gpuextender.extender.scheduler.peer_sender import MAX_PENDING, PeerSender
from gpuextender.extender.scheduler.peer_wire import (
    MAX_ENTRIES,
    MAX_GANG_CHARS,
    MAX_ID_CHARS,
    MAX_NAME_CHARS,
    MAX_NEED,
    MAX_NODES_PER_ENTRY,
    MAX_UID_CHARS,
    PEER_PATH,
    OpenBinding,
    encode,
    node_set,
    parse,
)
from gpuextender.extender.scheduler.wire import ExtenderArgs
from gpuextender.extender.settings import ApiSettings, DecisionPolicy
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.inventory_view import InventoryView
from gpuextender.extender.state.pod_ledger import POD_KIND, PodLedger
from tests.extender.builders import gpu, report
from tests.harness import free_port, metric, parse_metrics

HOLD = 0.5


def entry(**fields: Any) -> dict[str, Any]:
    return {"uid": "u", "need": 1, "nodes": ["n1"], "gang": "", "holdS": 0.4} | fields


def message(*entries: dict[str, Any], sender: Any = "peer-a") -> bytes:
    return orjson.dumps({"from": sender, "open": list(entries)})


# -- the message ------------------------------------------------------------------------------------


def test_a_message_reads_back_as_it_was_written() -> None:
    sent = [OpenBinding("u1", 2, frozenset({"n1", "n2"}), "ns/lws/g", 0.25), OpenBinding("u2", 0, None, "", 0.5)]
    assert parse(encode("peer-a", sent), HOLD) == ("peer-a", sent)


def test_a_peer_holds_a_filter_no_longer_than_this_replicas_own_hold() -> None:
    _, (got,) = parse(message(entry(holdS=30)), HOLD)
    assert got.hold_s == HOLD


@pytest.mark.parametrize(
    ("field", "at_bound", "over"),
    [
        ("uid", "u" * MAX_UID_CHARS, "u" * (MAX_UID_CHARS + 1)),
        ("gang", "g" * MAX_GANG_CHARS, "g" * (MAX_GANG_CHARS + 1)),
        ("need", MAX_NEED, MAX_NEED + 1),
        ("need", 0, -1),
        ("nodes", ["n"] * MAX_NODES_PER_ENTRY, ["n"] * (MAX_NODES_PER_ENTRY + 1)),
        ("nodes", ["n" * MAX_NAME_CHARS], ["n" * (MAX_NAME_CHARS + 1)]),
        ("holdS", 0, -0.001),
    ],
)
def test_each_field_is_bounded_exactly(field: str, at_bound: Any, over: Any) -> None:
    parse(message(entry(**{field: at_bound})), HOLD)
    with pytest.raises(InvalidInput, match=field):
        parse(message(entry(**{field: over})), HOLD)


def test_entries_and_the_senders_id_are_bounded_exactly() -> None:
    parse(message(*[entry(uid=f"u{i}") for i in range(MAX_ENTRIES)]), HOLD)
    with pytest.raises(InvalidInput, match="open"):
        parse(message(*[entry(uid=f"u{i}") for i in range(MAX_ENTRIES + 1)]), HOLD)
    parse(message(entry(), sender="i" * MAX_ID_CHARS), HOLD)
    with pytest.raises(InvalidInput, match="from"):
        parse(message(entry(), sender="i" * (MAX_ID_CHARS + 1)), HOLD)


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        message(entry(), sender=""),
        message(entry(), sender=7),
        orjson.dumps({"from": "a", "open": {"uid": "u"}}),
        message("not an object"),  # type: ignore[arg-type]
        message(entry(uid="")),
        message(entry(need=True)),
        message(entry(need=1.5)),
        message(entry(holdS="1")),
        message(entry(nodes="n1")),
        message(entry(nodes=[3])),
        message(entry(nodes=["n1", None])),
        message(entry(nodes=[""])),  # (an empty name: the fast check's lower bound)
        message(entry(nodes=["n1", "n" * (MAX_NAME_CHARS + 1)])),
        b'{"from": "a", "open": [{"uid": "u", "need": 1, "nodes": null, "gang": "", "holdS": Infinity}]}',
    ],
)
def test_a_bad_message_is_refused_whole_with_why(raw: bytes) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse(raw, HOLD)
    assert refused.value.code == "invalid_peer_message" and refused.value.message


def test_more_passed_nodes_than_a_message_names_is_anywhere() -> None:
    names = frozenset(f"n{i}" for i in range(MAX_NODES_PER_ENTRY))
    assert node_set(names) == names
    assert node_set(names | {"one-more"}) is None


# -- the gate ---------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def told(gate: BindingGate, uid: str, need: int, nodes: frozenset[str] | None, gang: str, hold_s: float) -> str:
    """One peer's binding given to `gate`: what became of it ("" where not taken nor refused)."""
    results = gate.opened_at_peers([OpenBinding(uid, need, nodes, gang, hold_s)])
    assert sum(results.values()) <= 1
    return next(iter(results), "")


def test_a_peers_binding_holds_a_filter_it_could_change_until_it_is_bound() -> None:
    clock = Clock()
    gate = BindingGate(HOLD, clock)
    assert told(gate, "a", 1, frozenset({"n1"}), "", 0.3)

    async def scenario() -> None:
        async def bound_later() -> None:
            await asyncio.sleep(0.01)
            gate.bound("a")

        later = asyncio.create_task(bound_later())
        await gate.settle("b", 1, {"n1": 1}.get)
        await later

    asyncio.run(scenario())
    assert gate.waited == 1 and gate.open_count() == 0 and gate.expired == 0


def test_a_peers_binding_is_open_for_its_hold_at_most_the_gates() -> None:
    clock = Clock()
    gate = BindingGate(HOLD, clock)
    told(gate, "short", 1, frozenset({"n1"}), "", 0.2)
    told(gate, "long", 1, frozenset({"n2"}), "", 30.0)
    clock.now += 0.2  # "short" is over; "long" has HOLD - 0.2 left, not 29.8
    assert asyncio.run(gate.settle("x", 1, {"n1": 1, "n2": 8}.get)) == 0.0
    assert gate.open_count() == 1
    clock.now += HOLD - 0.2
    assert gate.open_count() == 1  # at its deadline: still open
    clock.now += 0.001
    assert gate.open_count() == 0


def test_a_peers_binding_of_too_many_nodes_holds_every_filter() -> None:
    clock = Clock()
    gate = BindingGate(HOLD, clock)
    told(gate, "a", 1, None, "", HOLD)

    async def scenario() -> None:
        async def bound_later() -> None:
            await asyncio.sleep(0.01)
            gate.bound("a")

        later = asyncio.create_task(bound_later())
        await gate.settle("b", 1, {"n9": 8}.get)  # a roomy node: only "anywhere" makes it wait
        await later

    asyncio.run(scenario())
    assert gate.waited == 1


def test_with_the_gate_off_or_without_a_uid_a_peers_binding_is_not_taken() -> None:
    assert not told(BindingGate(0.0, Clock()), "a", 1, frozenset({"n1"}), "", HOLD)
    gate = BindingGate(HOLD, Clock())
    assert not told(gate, "", 1, frozenset({"n1"}), "", HOLD)
    assert gate.open_count() == 0


def test_the_peers_bindings_open_at_once_are_bounded_at_exactly_max_peer_open() -> None:
    clock = Clock()
    gate = BindingGate(HOLD, clock)
    gate.decided("mine", 1, frozenset({"n1"}))  # this replica's own count toward no peer bound
    first = [OpenBinding(f"p{i}", 1, frozenset({"n1"}), "", HOLD) for i in range(MAX_PEER_OPEN - 1)]
    assert gate.opened_at_peers(first) == {TAKEN: MAX_PEER_OPEN - 1}
    last = [OpenBinding(f"q{i}", 1, frozenset({"n1"}), "", HOLD) for i in range(2)]
    assert gate.opened_at_peers(last) == {TAKEN: 1, OVERFLOW: 1}  # the bound's binding taken, the next not
    assert gate.open_count() == MAX_PEER_OPEN + 1
    assert told(gate, "p0", 2, frozenset({"n2"}), "", HOLD) == TAKEN  # told again: replaces its own entry
    assert told(gate, "q9", 1, frozenset({"n1"}), "", HOLD) == OVERFLOW
    clock.now += HOLD + 0.001  # past their deadline they count no more, before any filter closes them
    assert told(gate, "q9", 1, frozenset({"n1"}), "", HOLD) == TAKEN


def test_a_peer_bound_binding_told_again_over_the_bound_is_kept_as_it_was() -> None:
    gate = BindingGate(HOLD, Clock())
    full = [OpenBinding(f"p{i}", 1, frozenset({"n1"}), "", HOLD) for i in range(MAX_PEER_OPEN)]
    assert gate.opened_at_peers(full) == {TAKEN: MAX_PEER_OPEN}
    # at the bound, one told again replaces itself (its count freed first), and a new one still overflows
    assert gate.opened_at_peers([full[0], OpenBinding("new", 1, None, "", HOLD)]) == {TAKEN: 1, OVERFLOW: 1}
    assert gate.open_count() == MAX_PEER_OPEN


def test_the_node_names_the_peers_bindings_hold_are_bounded_at_exactly_max_peer_names() -> None:
    gate = BindingGate(HOLD, Clock())
    names = [f"n{i}" for i in range(MAX_PEER_NAMES)]
    per = MAX_NODES_PER_ENTRY
    full = MAX_PEER_NAMES // per - 1
    assert full * per + per == MAX_PEER_NAMES  # (the bound is whole entries)
    entries = [OpenBinding(f"p{i}", 1, frozenset(names[i * per : (i + 1) * per]), "", HOLD) for i in range(full)]
    assert gate.opened_at_peers(entries) == {TAKEN: full}
    rest = frozenset(names[full * per :])  # 1,000 more: exactly the bound
    assert told(gate, "at", 1, rest, "", HOLD) == TAKEN
    assert told(gate, "over", 1, frozenset({"x"}), "", HOLD) == WIDENED  # one name past it: anywhere
    assert told(gate, "none", 1, frozenset(), "", HOLD) == TAKEN  # (no name: within)
    assert told(gate, "at", 1, frozenset({"y"}), "", HOLD) == TAKEN  # told again: its 1,000 names freed first

    async def scenario() -> None:
        await gate.settle("z", 1, lambda _n: 8)  # a roomy node anywhere: the widened binding holds it

    gate.hold_s = 0.0  # (decide at once, and mark what raced)
    asyncio.run(scenario())
    assert gate._open["over"].overlapped and not gate._open["p0"].overlapped


def test_a_message_past_the_bounds_is_counted_by_result_in_the_metric() -> None:
    async def test(a: Replica, b: Replica) -> None:
        full = [OpenBinding(f"p{i}", 1, frozenset({"n1"}), "", HOLD) for i in range(MAX_PEER_OPEN)]
        b.api.bindings.gate.opened_at_peers(full)
        body = encode("peer-x", [OpenBinding("late", 1, frozenset({"n1"}), "", HOLD)])
        status, answer = await post(b.port, body)
        assert status == 200 and answer == {"from": b.api.instance_id}  # well formed: taken, what fits
        assert b.scraped("gpu_extender_peer_bindings_total", result="overflow") == 1
        assert b.scraped("gpu_extender_peer_bindings_total", result="received") == 0
        assert b.scraped("gpu_extender_peer_bindings_total", result="widened") == 0

    two_replicas(test)


# -- the flags --------------------------------------------------------------------------------------


def test_peers_are_read_and_what_they_need_is_checked() -> None:
    got = build_config(["--kubernetes", "--peers", "gpu-extender-agents.gpu-extender.svc:8888, 10.0.0.5:8888"], env={})
    assert got.peers == (HostPort("gpu-extender-agents.gpu-extender.svc", 8888), HostPort("10.0.0.5", 8888))
    assert build_config(["--kubernetes"], env={}).peers == ()
    needs = [
        ("--kubernetes", ["--peers", "a:1"]),
        ("--binding-wait", ["--kubernetes", "--binding-wait", "0", "--peers", "a:1"]),
        ("HOST:PORT", ["--kubernetes", "--peers", "a"]),
        ("HOST:PORT", ["--kubernetes", "--peers", "a:0"]),
        ("at most 16", ["--kubernetes", "--peers", ",".join(f"h{i}:1" for i in range(17))]),
    ]
    for words, argv in needs:
        with pytest.raises(ConfigError, match=words):
            build_config(argv, env={})
    assert len(build_config(["--kubernetes", "--peers", ",".join(f"h{i}:1" for i in range(16))], env={}).peers) == 16


def test_peers_over_https_need_a_ca_and_take_the_agents_one_by_default(tmp_path: Any) -> None:
    cert, key, ca, other = (tmp_path / n for n in ("tls.crt", "tls.key", "ca.crt", "peers.crt"))
    for f in (cert, key, ca, other):
        f.write_text("x")
    https = ["--kubernetes", "--tls-cert", str(cert), "--tls-key", str(key), "--peers", "a:1"]
    with pytest.raises(ConfigError, match="--peers-ca or --tls-ca"):
        build_config(https, env={})
    assert build_config([*https, "--tls-ca", str(ca)], env={}).peers_ca == ca
    assert build_config([*https, "--tls-ca", str(ca), "--peers-ca", str(other)], env={}).peers_ca == other
    with pytest.raises(ConfigError, match=r"--peers-ca .*no such file"):
        build_config([*https, "--peers-ca", str(tmp_path / "missing")], env={})
    assert build_config(["--kubernetes", "--peers", "a:1"], env={}).peers_ca is None  # HTTP: nothing to check


# -- two replicas on loopback -----------------------------------------------------------------------


def gpu_pod(name: str, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    if node is not None:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"}, "spec": spec, "status": {}}


class Replica:
    """A SchedulerApi over two nodes of one idle GPU each, its ledger fed by hand (its pod watch),
    served on loopback by the real aiohttp app, with the real PeerSender (None: without --peers)."""

    def __init__(self, sender: PeerSender | None) -> None:
        self.state = GpuState(IdleRule())
        for n in ("n1", "n2"):
            self.state.ingest(report(n, [gpu(0, 0, 1)]), 1000.0)
        self.ledger = PodLedger(("nvidia.com/gpu",))
        self.ledger.replace_all(POD_KIND, [])
        view = InventoryView(node_labels={"n1": {}, "n2": {}}, allocatable_gpus={"n1": 1, "n2": 1})
        self.metrics = ExtenderMetrics(self.state)
        self.api = SchedulerApi(
            self.state,
            self.metrics,
            ApiSettings(DecisionPolicy(stale_after_s=1e9), shortlist=0, binding_wait_s=30.0),
            inventory=lambda: view,
            sources=ClusterSources(ledger=self.ledger),
            peers=sender,
        )
        self.sender = sender
        self.port = 0

    async def filter(self, pod: dict[str, Any]) -> list[str]:
        """What filter answers, after the wait for open bindings (as the route runs them)."""
        await self.api.settle(ExtenderArgs(pod, ["n1", "n2"], None))
        return sorted(self.api.filter(ExtenderArgs(pod, ["n1", "n2"], None))["NodeNames"])

    def scraped(self, name: str, **labels: str) -> float | None:
        from prometheus_client import generate_latest

        return metric(parse_metrics(generate_latest(self.metrics.registry).decode()), name, **labels)


@contextlib.asynccontextmanager
async def served(replica: Replica, port: int = 0) -> AsyncIterator[None]:
    runner = web.AppRunner(build_app(replica.api))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    replica.port = runner.addresses[0][1]
    try:
        yield
    finally:
        await runner.cleanup()


async def until(what: str, check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def static(host: str, port: int) -> list[str]:
    return [host]


def two_replicas(test: Callable[[Replica, Replica], Awaitable[None]], *, peers: bool = True) -> None:
    """A and B on loopback; with `peers`, A tells B (--peers naming B, and A itself: found and skipped)."""

    async def scenario() -> None:
        b = Replica(None)
        async with served(b):
            sender = None
            a_port = free_port()
            if peers:
                entries = (HostPort("127.0.0.1", b.port), HostPort("127.0.0.1", a_port))
                sender = PeerSender(entries, "replica-a", resolve=static)
            a = Replica(sender)
            async with served(a, a_port):
                run = None
                if sender is not None:
                    run = asyncio.create_task(sender.run())
                    await until("A's peers found", lambda: sender.peers() == 1 and len(sender._peers) == 2)
                try:
                    await test(a, b)
                finally:
                    if run is not None:
                        run.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await run

    asyncio.run(scenario())


def test_calls_moving_to_another_replica_wait_for_the_binding_the_first_one_opened() -> None:
    """Pod p1 filtered at A (both nodes pass: one idle GPU each); kube-scheduler's calls then move to
    B, whose filter for p2 waits for p1's binding instead of counting its GPU idle; p1 bound to n1
    (B's pod watch): p2 passes n2 alone."""

    async def test(a: Replica, b: Replica) -> None:
        assert await a.filter(gpu_pod("p1")) == ["n1", "n2"]
        await until("B hears of p1", lambda: b.api.bindings.peer_counts["received"] == 1)
        second = asyncio.create_task(b.filter(gpu_pod("p2")))
        await until("B's filter waiting", lambda: b.api.bindings.gate.waited == 1)
        assert not second.done()
        b.ledger.upsert(POD_KIND, gpu_pod("p1", node="n1"))
        assert await second == ["n2"]
        assert b.scraped("gpu_extender_peer_bindings_total", result="received") == 1
        assert a.scraped("gpu_extender_peer_bindings_total", result="sent") == 1
        assert a.scraped("gpu_extender_peers") == 1  # B; A found itself and skipped it

    two_replicas(test)


def test_without_peers_the_replica_taking_over_counts_the_gpu_twice() -> None:
    """What --peers closes: B knows nothing of p1 and passes n1 too (a GPU counted twice)."""

    async def test(a: Replica, b: Replica) -> None:
        assert await a.filter(gpu_pod("p1")) == ["n1", "n2"]
        assert await b.filter(gpu_pod("p2")) == ["n1", "n2"]

    two_replicas(test, peers=False)


def test_a_replica_that_reaches_itself_takes_nothing_and_says_who_it_is() -> None:
    async def test(a: Replica, b: Replica) -> None:
        status, answer = await post(a.port, message(entry(), sender=a.api.instance_id))
        assert (status, answer) == (200, {"from": a.api.instance_id})
        assert a.api.bindings.gate.open_count() == 0
        status, answer = await post(a.port, message(entry(), sender="someone-else"))
        assert status == 200 and a.api.bindings.gate.open_count() == 1
        status, refused = await post(a.port, b"{}")
        assert status == 400 and refused["reason"] == "invalid_peer_message"
        assert a.scraped("gpu_extender_bad_requests_total", verb="peers", reason="invalid_peer_message") == 1

    two_replicas(test, peers=False)


async def post(port: int, body: bytes) -> tuple[int, Any]:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with session.post(f"http://127.0.0.1:{port}{PEER_PATH}", data=body) as response:
            return response.status, await response.json()


def test_a_slow_peers_backlog_is_bounded_exactly_and_expired_bindings_are_not_sent() -> None:
    clock = Clock()
    sender = PeerSender((), "me", clock=clock)
    from gpuextender.extender.scheduler.peer_sender import _Peer

    async def scenario() -> None:
        peer = sender._peers["10.0.0.9:8888"] = _Peer("10.0.0.9:8888")
        for i in range(MAX_PENDING):
            sender.push(f"u{i}", 1, frozenset({"n1"}), "", HOLD)
        assert len(peer.pending) == MAX_PENDING and sender.counts["dropped"] == 0
        sender.push("one-more", 1, frozenset({"n1"}), "", HOLD)
        assert len(peer.pending) == MAX_PENDING and sender.counts["dropped"] == 1
        assert "u0" not in peer.pending and "one-more" in peer.pending
        sender.push("u1", 1, frozenset({"n2"}), "", HOLD)  # a retry replaces its earlier one, at the end
        assert list(peer.pending)[-1] == "u1" and len(peer.pending) == MAX_PENDING
        clock.now += HOLD / 2
        first = sender._take(peer)
        assert len(first) == MAX_ENTRIES and all(math.isclose(b.hold_s, HOLD / 2) for b in first)
        clock.now += HOLD / 2  # every binding left is over: none is sent
        assert sender._take(peer) == [] and peer.pending == {}

    asyncio.run(scenario())


def test_over_https_a_peer_is_checked_for_the_name_of_its_entry(tmp_path: Any) -> None:
    """The sender resolves the --peers name to addresses and checks each peer's certificate for that
    name (the headless Service's, in the extender's certificate): a peer whose certificate names
    another is not told anything."""
    import ssl

    import trustme

    ca = trustme.CA()
    service = "gpu-extender-agents.gpu-extender.svc"

    async def scenario(cert_name: str) -> tuple[int, dict[str, int]]:
        b = Replica(None)
        server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert(cert_name).configure_cert(server)
        runner = web.AppRunner(build_app(b.api))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server).start()
        port = runner.addresses[0][1]
        client = ssl.create_default_context()
        ca.configure_trust(client)
        sender = PeerSender((HostPort(service, port),), "replica-a", ssl_context=client, resolve=static_loopback)
        run = asyncio.create_task(sender.run())
        try:
            await until("the peer found", lambda: sender.peers() == 1)
            sender.push("p1", 1, frozenset({"n1"}), "", 30.0)
            await until("p1 told or not", lambda: sender.counts["sent"] + sender.counts["failed"] > 0)
            return b.api.bindings.peer_counts["received"], dict(sender.counts)
        finally:
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await run
            await runner.cleanup()

    assert asyncio.run(scenario(service)) == (1, {"sent": 1, "failed": 0, "dropped": 0})
    received, counts = asyncio.run(scenario("someone-else.example"))
    assert received == 0 and counts["sent"] == 0 and counts["failed"] >= 1


async def static_loopback(host: str, port: int) -> list[str]:
    return ["127.0.0.1"]


def test_a_name_that_stops_resolving_keeps_its_peers_and_a_peer_gone_from_it_is_dropped() -> None:
    """Resolved again every resolve_s: a DNS failure cuts no peer; an address no longer listed goes."""
    answers: list[list[str] | None] = [["10.0.0.1", "10.0.0.2"], None, ["10.0.0.2"]]
    held: list[set[str]] = []  # the peers held at each resolution, each set once
    senders: list[PeerSender] = []

    async def resolve(host: str, port: int) -> list[str]:
        now = set(senders[0]._peers)
        if (held or now) and (not held or held[-1] != now):  # from the first peers on, every change
            held.append(now)
        answer = answers[0] if len(answers) == 1 else answers.pop(0)
        if answer is None:
            raise OSError("no such host")
        return answer

    async def scenario() -> None:
        sender = PeerSender((HostPort("peers.example", 9),), "me", resolve=resolve, resolve_s=0.01)
        senders.append(sender)
        run = asyncio.create_task(sender.run())
        try:
            await until("the last answer taken", lambda: len(held) == 2)
        finally:
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await run

    asyncio.run(scenario())
    assert held == [{"10.0.0.1:9", "10.0.0.2:9"}, {"10.0.0.2:9"}]  # the failure in between changed nothing


def test_an_open_binding_past_its_deadline_is_not_counted_open_with_no_filter_to_come() -> None:
    """Found by the soak (issue 54): after the last pod, a binding whose pod never bound stayed in
    `gpu_extender_bindings_open` for ever, closed only by a next filter."""
    clock = Clock()
    gate = BindingGate(HOLD, clock)
    gate.decided("a", 1, frozenset({"n1"}))
    told(gate, "b", 1, frozenset({"n1"}), "", HOLD)
    clock.now += HOLD
    assert gate.open_count() == 2  # at the deadline: open still
    clock.now += 0.001
    assert gate.open_count() == 0 and gate.expired == 0  # past it: not open; reading closed nothing
    asyncio.run(gate.settle("c", 1, {"n1": 8}.get))  # the next filter closes them
    assert gate.expired == 1  # the peer's is the peer's to count


def test_a_peers_binding_that_expires_and_then_binds_is_no_race_here() -> None:
    """Races and expiries are counted where the filter decided (the alert GPUExtenderBindingRaces
    would fire on every replica for one replica's slow binding otherwise)."""
    clock = Clock()
    gate = BindingGate(HOLD, clock)
    told(gate, "b", 1, frozenset({"n1"}), "", HOLD)
    gate.decided("a", 1, frozenset({"n1"}))
    clock.now += HOLD + 0.001
    asyncio.run(gate.settle("c", 1, {"n1": 8}.get))  # a filter after both deadlines closes them
    gate.bound("b")
    gate.bound("a")
    assert (gate.expired, gate.races) == (1, 1)  # this replica's own binding only


def test_a_peers_binding_for_a_pod_this_replica_already_sees_bound_is_not_opened() -> None:
    """B's pod watch showed p1 bound before A's message came: B's filters must not wait for it."""

    async def test(a: Replica, b: Replica) -> None:
        b.ledger.upsert(POD_KIND, gpu_pod("p1", node="n1"))
        assert await a.filter(gpu_pod("p1")) == ["n1", "n2"]  # (a retried filter of a bound pod, say)
        await until("A's message answered", lambda: a.api.bindings.peer_counts["sent"] == 1)
        assert b.api.bindings.peer_counts["received"] == 0 and b.api.bindings.gate.open_count() == 0

    two_replicas(test)


def test_at_most_max_peers_addresses_are_followed() -> None:
    """A name resolving to more addresses than MAX_PEERS: the first MAX_PEERS, sorted, and no more."""
    from gpuextender.extender.scheduler.peer_sender import MAX_PEERS

    async def scenario(count: int) -> set[str]:
        async def resolve(host: str, port: int) -> list[str]:
            return [f"10.0.{i // 256}.{i % 256}" for i in range(count)]

        sender = PeerSender((HostPort("peers.example", 9),), "me", resolve=resolve)
        return set(await sender._targets())

    assert len(asyncio.run(scenario(MAX_PEERS))) == MAX_PEERS
    every = sorted(f"10.0.{i // 256}.{i % 256}:9" for i in range(MAX_PEERS + 1))
    assert asyncio.run(scenario(MAX_PEERS + 1)) == set(every[:MAX_PEERS])  # the last, sorted, left out
