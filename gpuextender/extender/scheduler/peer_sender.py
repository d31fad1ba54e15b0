"""Telling the other replicas of this one's open bindings (binding_gate.py; `--peers`).

kube-scheduler keeps its calls on one replica until its connection ends; the replica that takes
over then knew only the bindings its own filters opened, and counted a GPU twice where the other
replica's last filter had just given it away. Each filter's open binding is now pushed to every
peer, which holds its own filters for it as for one of its own (peer_wire.py has the message).

Each `--peers` entry (HOST:PORT: the replicas' headless Service and the scheduler API port, or one
replica) is resolved every RESOLVE_S to all its addresses. Each address gets a task that POSTs
the bindings opened since its last message at once: one message in flight per peer, what opens
meanwhile goes in the next, so a burst costs one message per round trip, not one per pod. Its first
message goes at once (empty if nothing is open): an address that answers with this replica's own
id is this replica, and gets nothing more. A peer that fails or is slow loses that message (an open
binding lives --binding-wait, 0.5 s: a retry would come too late) and the next waits a backoff; its
bindings wait for it at most MAX_PENDING, the oldest dropped past that. At most MAX_PEERS addresses
are followed (a name that resolves to more: the first, sorted). Counted in
`gpu_extender_peer_bindings_total`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import aiohttp
import orjson

from gpuextender.common.backoff import Backoff
from gpuextender.common.discovery import DEFAULT_RESOLVE_INTERVAL_S, Resolver, resolve_with_loop, targets_for
from gpuextender.common.log_once import OncePer
from gpuextender.common.netaddr import HostPort
from gpuextender.extender.scheduler.peer_wire import MAX_ENTRIES, MAX_ID_CHARS, PEER_PATH, OpenBinding, encode, node_set

log = logging.getLogger("gpu_extender.peers")

RESOLVE_S = DEFAULT_RESOLVE_INTERVAL_S  # as the agents find the replicas
SEND_TIMEOUT_S = 2.0  # one message; a binding it carries is closed or expired by then anyway
MAX_PENDING = 4096  # bindings waiting to be sent to one peer (binding.MAX_REMEMBERED: one scheduler's in flight)
MAX_ANSWER_BYTES = 1024
REPEAT_S = 60.0  # a failing peer's warning, at most this often
MAX_PEERS = 64  # addresses followed: replicas of one extender, many times over


@dataclass
class _Peer:
    target: str  # host:port of one address
    pending: dict[str, tuple[OpenBinding, float]] = field(default_factory=dict)  # uid -> (binding, deadline)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    is_self: bool = False


class PeerSender:
    def __init__(
        self,
        peers: tuple[HostPort, ...],
        instance_id: str,
        *,
        ssl_context: ssl.SSLContext | None = None,
        resolve: Resolver = resolve_with_loop,
        clock: Callable[[], float] = time.monotonic,
        resolve_s: float = RESOLVE_S,
    ) -> None:
        """`ssl_context`: HTTPS to every peer, checked for the name of its --peers entry; None: HTTP."""
        self._entries = peers
        self.instance_id = instance_id
        self._ssl = ssl_context
        self._resolve = resolve
        self._clock = clock
        self._resolve_s = resolve_s
        self._peers: dict[str, _Peer] = {}
        self._names: dict[str, str] = {}  # target -> the --peers host it was found under (the TLS name)
        self._session: aiohttp.ClientSession | None = None
        self._say = OncePer(REPEAT_S, clock)
        self.counts = {"sent": 0, "failed": 0, "dropped": 0}

    def peers(self) -> int:
        """Peers known now, not counting this replica."""
        return sum(1 for p in self._peers.values() if not p.is_self)

    def push(self, uid: str, need: int, nodes: frozenset[str], gang: str, hold_s: float) -> None:
        """Filter answered pod `uid`: its binding, open for `hold_s`, goes to every peer."""
        if not uid:
            return
        binding = OpenBinding(uid, need, node_set(nodes), gang, hold_s)
        deadline = self._clock() + hold_s
        for peer in self._peers.values():
            if peer.is_self:
                continue
            pending = peer.pending
            pending.pop(uid, None)  # a retry's binding replaces its earlier one
            if len(pending) >= MAX_PENDING:
                del pending[next(iter(pending))]
                self.counts["dropped"] += 1
            pending[uid] = (binding, deadline)
            peer.wake.set()

    async def run(self) -> None:
        """Resolve the --peers entries every RESOLVE_S and keep one sender task per address."""
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=SEND_TIMEOUT_S)) as session:
            self._session = session
            try:
                while True:
                    self._follow(await self._targets())
                    await asyncio.sleep(self._resolve_s)
            finally:
                for peer in self._peers.values():
                    if peer.task is not None:
                        peer.task.cancel()
                await asyncio.gather(
                    *(p.task for p in self._peers.values() if p.task is not None), return_exceptions=True
                )
                self._session = None

    async def _targets(self) -> dict[str, str]:
        """Every address of every entry (target -> its entry's host); an entry that does not resolve
        keeps the addresses it had (a DNS hiccup cuts no peer)."""
        found: dict[str, str] = {}
        for entry in self._entries:
            try:
                addresses: Iterable[str] = await self._resolve(entry.host, entry.port)
            except (OSError, UnicodeError) as exc:
                if self._say("resolve", entry.host):
                    log.warning("--peers %s does not resolve (%s); keeping its peers, retrying", entry, exc)
                found |= {t: h for t, h in self._names.items() if h == entry.host}
                continue
            found |= dict.fromkeys(targets_for(addresses, entry.port), entry.host)
        if len(found) > MAX_PEERS:
            if self._say("too many", ""):
                log.warning("--peers resolves to %d addresses; following the first %d", len(found), MAX_PEERS)
            found = {t: found[t] for t in sorted(found)[:MAX_PEERS]}
        return found

    def _follow(self, targets: dict[str, str]) -> None:
        for target in [t for t in self._peers if t not in targets]:
            peer = self._peers.pop(target)
            if peer.task is not None:
                peer.task.cancel()
            if not peer.is_self:
                log.info("peer %s gone", target)
        self._names = targets
        for target in targets:
            if target not in self._peers:
                log.info("peer %s found (--peers %s): telling it of open bindings", target, targets[target])
                peer = self._peers[target] = _Peer(target)
                peer.task = asyncio.create_task(self._send_loop(peer), name=f"peer {target}")

    async def _send_loop(self, peer: _Peer) -> None:
        backoff = Backoff()
        scheme = "https" if self._ssl is not None else "http"
        url = f"{scheme}://{peer.target}{PEER_PATH}"
        known = False  # the first message goes at once, empty if need be: it tells who answers
        while True:
            if known:
                await peer.wake.wait()
            peer.wake.clear()
            batch = self._take(peer)
            if known and not batch:
                continue
            try:
                answer = await self._post(url, self._names.get(peer.target, ""), batch)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                self.counts["failed"] += len(batch)
                if self._say("send", peer.target):
                    log.warning(
                        "peer %s does not answer (%s): %d open binding(s) not told (it learns them from its "
                        "pod watch); trying again, a warning a minute",
                        peer.target,
                        str(exc) or type(exc).__name__,
                        len(batch),
                    )
                await asyncio.sleep(backoff.next_delay())
                if peer.pending:
                    peer.wake.set()
                continue
            backoff.reset()
            known = True
            if answer == self.instance_id:
                peer.is_self, peer.pending = True, {}
                log.info("peer %s is this replica: skipped", peer.target)
                return
            self.counts["sent"] += len(batch)
            if peer.pending:
                peer.wake.set()

    def _take(self, peer: _Peer) -> list[OpenBinding]:
        """Up to MAX_ENTRIES of the peer's pending bindings still open, each with the hold it has left."""
        now = self._clock()
        batch: list[OpenBinding] = []
        pending = peer.pending
        while pending and len(batch) < MAX_ENTRIES:
            uid = next(iter(pending))
            binding, deadline = pending.pop(uid)
            if deadline > now:
                batch.append(OpenBinding(binding.uid, binding.need, binding.nodes, binding.gang, deadline - now))
        return batch

    async def _post(self, url: str, name: str, batch: list[OpenBinding]) -> str:
        """POST one message; the id the peer answered with."""
        session = self._session
        if session is None:
            raise aiohttp.ClientError("not running")
        options: dict[str, object] = {}
        if self._ssl is not None:
            options = {"ssl": self._ssl, "server_hostname": name}
        body = encode(self.instance_id, batch)
        headers = {"Content-Type": "application/json"}
        async with session.post(url, data=body, headers=headers, **options) as response:  # type: ignore[arg-type]
            raw = await response.content.read(MAX_ANSWER_BYTES)
            if response.status != 200:
                raise aiohttp.ClientError(f"HTTP {response.status}: {raw[:200].decode(errors='replace')}")
        answer = orjson.loads(raw)
        sender = answer.get("from") if isinstance(answer, dict) else None
        if not isinstance(sender, str) or len(sender) > MAX_ID_CHARS:
            raise ValueError("its answer names no instance id")
        return sender
