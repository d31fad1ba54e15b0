"""The soak's fleet and its simulated agents (bench/soak.py, issue 54).

The fleet: `nodes` device-plugin nodes of 8 GPUs in NVLink cliques of 4 (nvidia.com/gpu.clique),
each GPU seeded one of: idle, busy outside Kubernetes, unhealthy (XID 79, quarantined by its
agent) or flapping (busy and idle in turns of `flap_s`, each GPU its own phase); `make_fleet` says
how many of each. A few nodes have no usable GPU at all (their GPUsUsable must say so).
kube-scheduler counts 8 free GPUs everywhere; only the agents' reports say which are good.

The agents: one asyncio task per node and relay, in a thread of their own, streaming a full
NodeReport a second to the relay's address (a forwarder the harness can cut), reconnecting with a
backoff as the real agent does, and reading the acks. A node's clock can be stepped (`step`): its
sample times are then off by that much, as an agent on a host whose clock jumped.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from dataclasses import dataclass, field

import grpc

from gpuextender.v1 import gpu_state_pb2 as pb
from gpuextender.v1 import gpu_state_pb2_grpc as pb_grpc
from tests.kube import groups as G

GPUS = G.GPUS_PER_NODE
IDLE, BUSY, SICK, FLAP = G.IDLE, G.BUSY, G.SICK, "flapping"
CLIQUE = G.CLIQUE
PRODUCT_LABEL = "NVIDIA-H100-80GB-HBM3"  # GFD's (the reports name NVML's: tests/kube/groups.py)
REPORT_EVERY_S = 1.0


@dataclass(frozen=True)
class Node:
    name: str
    clique: str
    gpus: tuple[str, ...]  # per GPU: IDLE, BUSY, SICK or FLAP
    phase: tuple[float, ...]  # per GPU: its flapping's offset, seconds

    def sure(self) -> int:
        """GPUs a pod may always be given: idle and healthy, never flapping."""
        return self.gpus.count(IDLE)

    def at_most(self) -> int:
        """GPUs a pod may have been given at some moment: the idle and the flapping ones."""
        return self.gpus.count(IDLE) + self.gpus.count(FLAP)

    def busy_now(self, index: int, now: float, flap_s: float) -> bool:
        state = self.gpus[index]
        if state == BUSY:
            return True
        if state == FLAP:
            return int((now + self.phase[index]) // flap_s) % 2 == 0
        return False


def make_fleet(prefix: str, nodes: int, rng: random.Random) -> list[Node]:
    """tests/kube/groups.make_fleet's cliques of 4 (55 % of nodes all idle, 25 % with 1-4 GPUs busy,
    12 % with 1-2 unhealthy, 8 % all busy), then one node in ten with 1-2 of its idle GPUs flapping
    and one in twenty with every GPU unhealthy (no usable GPU: its GPUsUsable must say so)."""
    fleet = []
    for n in G.make_fleet(prefix, max(1, nodes // 4), 4, rng).nodes[:nodes]:
        states = list(n.gpus)
        roll = rng.random()
        if roll < 0.10 and IDLE in states:
            for g in rng.sample([i for i, s in enumerate(states) if s == IDLE], min(2, states.count(IDLE))):
                states[g] = FLAP
        elif roll < 0.15:
            states = [SICK] * GPUS
        phase = tuple(rng.uniform(0, 60) for _ in range(GPUS))
        fleet.append(Node(n.name, n.clique, tuple(states), phase))
    return fleet


def report(
    node: Node, sequence: int, now: float, flap_s: float, step_s: float = 0.0, sick: frozenset[int] = frozenset()
) -> pb.NodeReport:
    """The agent's report now (tests/kube/groups.node_report's GPUs, a flapping one busy or idle by
    its turn, an unhealthy one quarantined for XID 79; `sick`: GPUs unhealthy for now), its clock off
    by `step_s`."""
    states = tuple(
        SICK if i in sick else BUSY if node.busy_now(i, now, flap_s) else IDLE if s == FLAP else s
        for i, s in enumerate(node.gpus)
    )
    r = G.node_report(G.FleetNode(node.name, node.clique, states))
    r.sequence, r.agent_version = sequence, "soak"
    r.sample_time.seconds = int(now + step_s)
    for g, state in zip(r.gpus, states, strict=True):
        if state == SICK:
            g.health = pb.HEALTH_UNHEALTHY
            g.health_reasons.append("XidCritical")
            g.xids.add(xid=79)
    return r


@dataclass
class Agents:
    """Every node's agent, streaming to every relay address; started and stopped with the harness."""

    fleet: list[Node]
    relays: list[int]  # the ports agents dial (forwarders in front of the relays)
    flap_s: float
    steps: dict[str, float] = field(default_factory=dict)  # node -> seconds its clock is off
    sick: set[tuple[str, int]] = field(default_factory=set)  # (node, GPU) made unhealthy for a while
    killed: set[str] = field(default_factory=set)  # nodes whose agent is gone (its streams closed)
    stopped: set[str] = field(default_factory=set)  # nodes whose agent is stopped (streams open, silent)
    accepted: int = 0
    refused: int = 0
    reconnects: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _stop: asyncio.Event | None = None

    def start(self) -> None:
        ready = threading.Event()

        def run() -> None:
            loop = self._loop = asyncio.new_event_loop()
            self._stop = asyncio.Event()
            ready.set()
            loop.run_until_complete(self._main())
            loop.close()

        self._thread = threading.Thread(target=run, name="soak-agents", daemon=True)
        self._thread.start()
        ready.wait(10)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(15)

    def sicken(self, node: str, index: int, sick: bool) -> None:
        """The node's GPU `index` reports unhealthy (XID 79) from now on, or no longer."""
        (self.sick.add if sick else self.sick.discard)((node, index))

    def kill(self, node: str, gone: bool) -> None:
        """The node's agent is killed (its streams end at once, none opened) or started again."""
        (self.killed.add if gone else self.killed.discard)(node)

    def pause(self, node: str, paused: bool) -> None:
        """The node's agent is stopped (its streams stay open and send nothing) or goes on."""
        (self.stopped.add if paused else self.stopped.discard)(node)

    def step(self, node: str, seconds: float) -> None:
        """The node's agent's clock is off by `seconds` from now on (0: back in step)."""
        if seconds:
            self.steps[node] = seconds
        else:
            self.steps.pop(node, None)

    async def _main(self) -> None:
        assert self._stop is not None
        tasks = [asyncio.create_task(self._stream(n, port)) for n in self.fleet for port in self.relays]
        await self._stop.wait()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _stream(self, node: Node, port: int) -> None:
        delay = 0.2
        while True:
            while node.name in self.killed:  # dead: a restart opens new streams, its sequence anew
                await asyncio.sleep(0.05)
            try:
                async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                    call = pb_grpc.GpuStateServiceStub(channel).StreamNodeReports()
                    reader = asyncio.create_task(self._acks(call))
                    sequence = 0
                    try:
                        while not reader.done() and node.name not in self.killed:
                            if node.name in self.stopped:  # SIGSTOPped: the connection held, nothing sent
                                await asyncio.sleep(0.05)
                                continue
                            sequence += 1
                            now = time.time()
                            step = self.steps.get(node.name, 0.0)
                            sick = frozenset(i for n, i in self.sick if n == node.name)
                            await call.write(report(node, sequence, now, self.flap_s, step, sick))
                            delay = 0.2
                            await asyncio.sleep(REPORT_EVERY_S)
                        if reader.done():
                            reader.result()
                    finally:
                        reader.cancel()
            except asyncio.CancelledError:
                raise
            except Exception:  # the relay gone, cut or refusing: reconnect as an agent does
                pass
            self.reconnects += 1
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, 2.0)

    async def _acks(self, call: grpc.aio.StreamStreamCall) -> None:
        async for ack in call:
            if ack.status == pb.ReportAck.ACCEPTED:
                self.accepted += 1
            else:
                self.refused += 1
        raise ConnectionError("the stream ended")


def cliques(fleet: list[Node]) -> dict[str, list[Node]]:
    found: dict[str, list[Node]] = {}
    for n in fleet:
        found.setdefault(n.clique, []).append(n)
    return found


def by_name(fleet: list[Node]) -> dict[str, Node]:
    return {n.name: n for n in fleet}
