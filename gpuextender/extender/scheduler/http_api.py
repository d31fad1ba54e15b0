"""The extender's HTTP side: kube-scheduler's `filter`, `prioritize`, `preempt` and (optional) `bind`
verbs, plus /explain, /healthz, /readyz, /metrics and the fleet page (/ui: fleet_page.py).

Handlers only parse, look up in-memory state, call the pure decision functions
and encode: no API server, no NVML, no other I/O on the request path. Two exceptions,
both bounded: a filter may first wait for an earlier pod's binding (binding_gate.py,
--binding-wait), and `bind` creates the pod's Binding through the API server (pod_binder.py).
Refused input gets a 4xx with a JSON reason and a log line; the server goes on.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpuextender.extender.decide import preempt_group, preempt_victims
from gpuextender.extender.decide.decision import Decision
from gpuextender.extender.decide.explain import explain as explain_decision
from gpuextender.extender.model.dra import pod_claims
from gpuextender.extender.model.pod_gpus import whole_gpu_resources
from gpuextender.extender.model.untrusted import InvalidInput, pod_uid
from gpuextender.extender.model.untrusted import shown as shown_value
from gpuextender.extender.observe.bindings import BindingsCollector
from gpuextender.extender.observe.bound_pods_metrics import BoundPodsCollector
from gpuextender.extender.observe.groups import GroupsCollector
from gpuextender.extender.observe.live_classes_metrics import LiveClassesCollector
from gpuextender.extender.observe.metrics import ExtenderMetrics
from gpuextender.extender.scheduler.binding import Bindings
from gpuextender.extender.scheduler.binding_gate import BindingGate
from gpuextender.extender.scheduler.cluster_sources import NO_CLUSTER, ClusterSources
from gpuextender.extender.scheduler.decision_inputs import DecisionInputs
from gpuextender.extender.scheduler.group_record import record_group, record_group_preemption
from gpuextender.extender.scheduler.peer_wire import PEER_PATH, new_instance_id
from gpuextender.extender.scheduler.preempt_facts import Lookup, PreemptFacts
from gpuextender.extender.scheduler.preemption_record import RecentPreemptions, explained, record_preemption
from gpuextender.extender.scheduler.readiness import Readiness
from gpuextender.extender.scheduler.verb_log import log_prioritize, record_filter, record_plan
from gpuextender.extender.scheduler.wire import (
    BYTES_PER_CONTAINER,
    EXPLAIN_MAX_CANDIDATES,
    PREEMPT_MAX_CANDIDATES,
    ExtenderArgs,
    PreemptionArgs,
    encode,
    filter_result,
    parse_binding_args,
    parse_extender_args,
    parse_preemption_args,
    preemption_result,
    prioritize_result,
)
from gpuextender.extender.settings import ApiSettings
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.group_book import GroupBook
from gpuextender.extender.state.inventory_view import InventoryView
from gpuextender.extender.state.live_classes import LiveClasses
from gpuextender.extender.state.pod_ledger import BoundPod, PodLedger
from gpuextender.extender.state.waiting_pods import WaitingPods

if TYPE_CHECKING:  # app.py builds it with --peers
    from gpuextender.extender.scheduler.peer_sender import PeerSender

log = logging.getLogger("gpu_extender.http")


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection inside one synchronous step of a call. A body's own objects
    (up to one JSON container per BYTES_PER_CONTAINER bytes) are young while the decision
    allocates its own: every collection that allocation triggered walked all of them again,
    which doubled the loop time of /explain's dearest body. Both are freed by reference counts
    before the collector runs again; cycles made meanwhile wait for its next run."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


CLAIM_POLL_S = 0.01  # how often a filter looks for the pod's claims not seen yet


class SchedulerApi:
    """The verbs over the extender's pieces: readiness (readiness.py), the decision for a call
    (decision_inputs.py), the wait for earlier bindings and the bind verb (binding.py), and what each
    verb records (verb_log.py). It holds no rule of its own."""

    def __init__(
        self,
        state: GpuState,
        metrics: ExtenderMetrics,
        settings: ApiSettings,
        inventory: Callable[[], InventoryView] = InventoryView,
        clock: Callable[[], float] = time.monotonic,
        sources: ClusterSources = NO_CLUSTER,
        peers: PeerSender | None = None,
    ) -> None:
        """`peers`: the other replicas, told of this one's open bindings (--peers)."""
        self.state = state
        self.metrics = metrics
        self.settings = settings
        self._inventory = inventory  # the current inventory snapshot (never I/O)
        self._clock = clock
        self.sources = sources
        self.readiness = Readiness(state, inventory, settings.readiness_grace_s, clock, sources.inventory_ready)
        self.classes = LiveClasses(state)
        # Multi-pod groups: the domain chosen per group and the room held for its members.
        self.groups = GroupBook(settings.group_hold_s, clock, per_namespace=settings.groups_per_namespace)
        self.groups.on_change(state.bound_pods_changed)
        self.decisions = DecisionInputs(state, settings, inventory, self.classes, clock, self.groups, sources)
        gate = BindingGate(settings.binding_wait_s, clock)
        self.bindings = Bindings(gate, clock, sources.binder, sources.ledger, peers)
        # What this replica answers its peers with: one that reached itself reads its own id.
        self.instance_id = peers.instance_id if peers is not None else new_instance_id()
        self.waiting = WaitingPods()  # GPU pods the latest filter found no place for (the fleet page)
        self.preemptions = RecentPreemptions()  # each preemptor's latest preempt plan (explain)
        # What the preempt verb read per node, kept; it follows each node's new summaries.
        self._preempt_facts = PreemptFacts(sources.ledger) if sources.ledger is not None else None
        if self._preempt_facts is not None:
            state.on_offered_change(self._preempt_facts.follower(state.summary, state.reported))
        metrics.add(GroupsCollector(self.groups))
        self._whole_resources = whole_gpu_resources(settings.gpu_resources)
        metrics.add(BindingsCollector(self.bindings))
        metrics.add(LiveClassesCollector(self.classes, inventory))
        if sources.ledger is not None:
            self._count_bound_pods(sources.ledger)

    def set_serving(self, serving: bool) -> None:
        """app.py: True once every port is up, False from shutdown on."""
        self.readiness.set_serving(serving)

    def not_ready_reason(self) -> str | None:
        return self.readiness.not_ready_reason()

    def _count_bound_pods(self, ledger: PodLedger) -> None:
        """Decide with the ledger's bound pods taken off what their nodes offer (bound_pods.py)."""
        self.state.count_bound_pods(self.pods_on)
        ledger.on_change(self.state.bound_pods_changed)
        ledger.on_bound(self.bindings.gate.bound)
        ledger.on_bound(lambda uid: self.waiting.forget((uid,)))
        ledger.on_bound(self._member_bound)
        self.metrics.add(BoundPodsCollector(self.state, ledger, self._clock))

    def pods_on(self, node: str) -> Iterable[BoundPod]:
        """What a node's offered summary takes off: its ledger pods and the groups' holds there."""
        ledger = self.sources.ledger
        pods = ledger.pods_on(node) if ledger is not None else ()
        held = self.groups.holds_on(node)
        return (*pods, *held) if held else pods

    def _member_bound(self, uid: str) -> None:
        ledger = self.sources.ledger
        pod = ledger.get(uid) if ledger is not None else None
        if pod is not None and pod.group and ledger is not None:
            self.groups.member_bound(pod, sum(1 for _ in ledger.members(pod.group)))

    async def settle(self, args: ExtenderArgs) -> None:
        """Before a filter decides: wait for earlier pods' bindings that could change its verdicts,
        and for the pod's ResourceClaims to reach the claim ledger."""
        await self.bindings.settle(
            args.pod, self._whole_resources, self.state.summary, self._clock(), self.settings.policy.stale_after_s
        )
        await self._claims_seen(args.pod)

    async def _claims_seen(self, pod: Any) -> None:
        """kube-scheduler filters a claim pod once its claims exist, which the claim watch may not
        have delivered yet: a claim not seen would read as asking for no GPU (unknown is never zero).
        Wait for them at most --binding-wait (a watch delivers in milliseconds); then decide on what
        is known (a pod whose claims are unknown needs what its extended resources say)."""
        claims, wait = self.sources.claims, self.settings.binding_wait_s
        if claims is None or wait <= 0 or not claims.synced or not self.inventory().dra.classes:
            return
        keys = pod_claims(pod)
        if all(claims.claim(k) is not None for k in keys):
            return
        for _ in range(max(1, round(wait / CLAIM_POLL_S))):
            await asyncio.sleep(CLAIM_POLL_S)
            if all(claims.claim(k) is not None for k in keys):
                return
        log.warning(
            "claim(s) %s not in the claim watch %.1fs after kube-scheduler asked: decided without them",
            ", ".join(k for k in keys if claims.claim(k) is None),
            wait,
        )

    def inventory(self) -> InventoryView:
        """The current inventory snapshot."""
        return self._inventory()

    def now(self) -> float:
        """The clock GPU data age is judged on (monotonic seconds)."""
        return self._clock()

    # The three verbs render one Decision each.

    def filter(self, args: ExtenderArgs) -> dict[str, Any]:
        answer, record = self.answer_filter(args)
        record()
        return answer

    def answer_filter(self, args: ExtenderArgs) -> tuple[dict[str, Any], Callable[[], None]]:
        """filter's answer, and what the call leaves behind (metrics, the decision log line, the
        waiting pods) as a step to run once the answer is on its way: kube-scheduler waits for the
        answer only. The binding gate hears of the answer here, before any later call is read."""
        d = self.decisions.decide(args)
        answered, uid = d.answered, d.pod.uid
        self.bindings.filtered(uid, d.pod, answered.passed)
        if d.group is not None:  # before any later call is read: its holds count for the next pod
            record_group(self.groups, d, uid)
        return filter_result(args, answered), partial(self._record_filter, uid, d)

    def _record_filter(self, uid: str, d: Decision) -> None:
        record_plan(self.metrics, self.settings.runtime_check, d)
        failures = record_filter(self.metrics, d)
        pod, outcome = d.pod, d.filtered
        if pod.gpus_needed or pod.mig_needed:
            self.waiting.record(
                uid=uid or pod.ref,  # a Pod kube-scheduler sends always has a uid
                pod=pod.ref,
                gpus=pod.gpus_needed,
                nodes=len(outcome.passed) + len(outcome.failed),
                passed=len(outcome.passed),
                fallback=outcome.fallback,
                assumed=bool(outcome.assumed),
                failures=failures.most_common(),
                now=self._clock(),
            )

    def prioritize(self, args: ExtenderArgs) -> list[dict[str, Any]]:
        d = self.decisions.decide(args)
        log_prioritize(d)
        return prioritize_result(d.scores, compact=self.settings.compact_priorities)

    def answer_preempt(self, args: PreemptionArgs) -> tuple[dict[str, Any], Callable[[], None]]:
        """ProcessPreemption: kube-scheduler's candidates checked against the GPUs (preempt_victims.py),
        and what the call leaves behind, as `answer_filter`."""
        names = [p.node for p in args.proposals]
        d = self.decisions.decide(ExtenderArgs(pod=args.pod, node_names=names, nodes=None))
        more = preempt_group.neighbours(d.group, names) if d.group is not None else []
        if more:  # a group member: its candidates' domains whole (nodes where it fits now are no candidates)
            d = self.decisions.decide(ExtenderArgs(pod=args.pod, node_names=names + more, nodes=None))
        known = d.known
        ledger = self.sources.ledger
        bound = ledger.lookup() if ledger is not None else lambda _uid: None
        facts = self._node_facts(known.summary, tables=d.group is None)
        budgets = self.sources.budgets
        policy = known.policy
        strict = d.strict
        grouped = None
        if d.group is not None:
            passing = set(strict.passed).difference(strict.assumed) if strict.assumed else strict.passed
            grouped = preempt_group.plan_group(
                d.pod,
                d.group,
                args.proposals,
                strict.failed,
                passing,
                facts,
                known.now,
                policy.stale_after_s,
                bound,
                budgets.violations,
            )
        if grouped is not None:
            record_group_preemption(self.groups, d, grouped)  # before any later call is read, as filter's
            return preemption_result(grouped.plan, args.plain), partial(
                self._record_preempt, d.pod.uid, d, grouped.plan
            )
        plan = preempt_victims.plan(
            d.pod,
            args.proposals,
            strict.failed,
            facts,
            known.now,
            policy.stale_after_s,
            policy.stale_policy,
            bound,
            budgets.violations,
            budgets.generation,
        )
        return preemption_result(plan, args.plain), partial(self._record_preempt, d.pod.uid, d, plan)

    def _node_facts(self, summary: Lookup, *, tables: bool) -> Callable[[str], preempt_victims.NodeFacts]:
        """What the preempt verb reads of a node; kept between calls (preempt_facts.py)."""
        reported = self.state.reported
        kept = self._preempt_facts
        if kept is None:  # (no ledger: no bound pod known)
            return lambda node: preempt_victims.NodeFacts(summary(node), reported(node), ())
        return kept.lookup(summary, reported, table=tables)

    def _record_preempt(self, uid: str, d: Decision, plan: preempt_victims.PreemptionPlan) -> None:
        record_preemption(self.metrics, d.pod, plan)
        self.preemptions.record(uid or d.pod.ref, d.pod.ref, plan, self._clock())

    def explain(self, args: ExtenderArgs) -> dict[str, Any]:
        if args.node_names is not None or args.nodes is not None:
            return self._with_preemption(args, explain_decision(self.decisions.decide(args)))
        # No candidates named (`gpu-extender explain POD.yaml`, the fleet page's form): every node the
        # inventory or the agents know, by name, as many as one /explain takes.
        known = sorted(set(self._inventory().node_labels).union(self.state.node_names()))
        args = replace(args, node_names=known[:EXPLAIN_MAX_CANDIDATES])
        answer = explain_decision(self.decisions.decide(args))
        answer["candidates"] = {
            "source": "every known node",
            "known": len(known),
            "explained": len(args.candidate_names()),
        }
        return self._with_preemption(args, answer)

    def _with_preemption(self, args: ExtenderArgs, answer: dict[str, Any]) -> dict[str, Any]:
        """The pod's latest preempt call, if any (kube-scheduler's candidates and what became of each)."""
        now = self._clock()
        found = self.preemptions.latest(pod_uid(args.pod) or answer["pod"], now)
        if found is not None:
            ledger = self.sources.ledger
            uids = {uid for n in found.plan.nodes for uid in n.proposed + n.victims}
            names = {uid: b.key for uid in uids if ledger is not None and (b := ledger.get(uid)) is not None}
            answer["preemption"]["lastCall"] = explained(found, now, names)
        return answer


def _recorded(record: Callable[[], None]) -> None:
    """A verb's bookkeeping after its answer: a failure is logged, never lost in the loop."""
    try:
        with collector_paused():
            record()
    except Exception:
        log.exception("recording a decision failed (its answer was sent)")


def _json(payload: Any, status: int = 200) -> web.Response:
    return web.Response(body=encode(payload), status=status, content_type="application/json")


# The status counted in gpu_extender_requests_total when the client hung up before its body
# was complete (nginx's convention): nobody reads the answer, and it is not our error.
CLIENT_CLOSED = 499
# The accept queue we ask for: at aiohttp's 128, 1,000 calls arriving at once overflowed it and
# the kernel reset connections. The kernel caps it at net.core.somaxconn anyway.
LISTEN_BACKLOG = 4096


class _Refused(Exception):
    """A request refused before its body was parsed; `close` drops the connection after."""

    def __init__(self, status: int, code: str, message: str, *, close: bool = False) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.close = status, code, message, close


class _HungUp(Exception):
    """The client closed the connection before its body was complete."""


async def _read_body(request: web.Request, settings: ApiSettings) -> bytes:
    """The body, refused before any of it is read when its encoding or declared size is wrong."""
    encoding = ", ".join(request.headers.getall("Content-Encoding", ()))  # every header, not the first
    if any(token.strip().lower() not in ("", "identity") for token in encoding.split(",")):
        # kube-scheduler never compresses; a compressed body is refused unread, never inflated
        # (a 2 MB gzip body of zeros is 2 GiB). The AppRunner must not auto-decompress: new_runner().
        raise _Refused(
            415,
            "unsupported_encoding",
            f"Content-Encoding {shown_value(encoding)} is not accepted: "
            "send the body uncompressed (identity), as kube-scheduler does",
        )
    if request.content_length is not None and request.content_length > settings.max_body_bytes:
        raise _too_large(settings)  # declared: refused before reading a byte
    try:
        if request.content.is_eof():  # all of it has arrived (the usual body): no timer to arm
            return await request.read()
        async with asyncio.timeout(settings.body_read_timeout_s):
            return await request.read()
    except TimeoutError:
        raise _Refused(
            408,
            "body_timeout",
            f"request body not complete within {settings.body_read_timeout_s:g}s "
            "(--body-read-timeout); closing the connection",
            close=True,
        ) from None
    except web.HTTPRequestEntityTooLarge:  # chunked: refused once the limit is passed
        raise _too_large(settings) from None
    except web.RequestPayloadError as exc:  # broken chunked framing and the like
        raise _Refused(400, "bad_body", f"request body could not be read: {shown_value(str(exc))}") from None
    except ConnectionError:
        raise _HungUp from None


def _too_large(settings: ApiSettings) -> _Refused:
    return _Refused(
        413,
        "too_large",
        f"request body is larger than {settings.max_body_bytes} bytes; raise "
        "--max-body-bytes or configure kube-scheduler with nodeCacheCapable: true",
    )


def new_runner(app: web.Application, **options: Any) -> web.AppRunner:
    """The AppRunner for build_app(): aiohttp inflates compressed bodies as they arrive,
    even ones the handler refuses unread; auto_decompress=False keeps them compressed."""
    return web.AppRunner(app, auto_decompress=False, **options)


def listen_backlog(somaxconn: str = "/proc/sys/net/core/somaxconn") -> int:
    """LISTEN_BACKLOG, or the kernel's cap when that is lower (said once in the log)."""
    try:
        with open(somaxconn) as f:
            cap = int(f.read())
    except (OSError, ValueError):
        return LISTEN_BACKLOG
    if cap < LISTEN_BACKLOG:
        log.warning(
            "net.core.somaxconn is %d: the scheduler API's accept queue holds only that many "
            "connections arriving at once (raise the sysctl to %d)",
            cap,
            LISTEN_BACKLOG,
        )
    return max(1, min(cap, LISTEN_BACKLOG))


# A POST verb's handler from (metric label, the answer from the body): the one home of body bounds,
# refusals and per-verb metrics, for the scheduler's verbs and the fleet page's form alike.
VerbHandler = Callable[[str, Callable[[bytes], Awaitable[Any]]], Callable[[web.Request], Awaitable[web.StreamResponse]]]
# Adds routes of another stage (the fleet page) to the app: (app, api, path prefix, verb handler).
PageRoutes = Callable[[web.Application, SchedulerApi, str, VerbHandler], object]


def build_app(api: SchedulerApi, pages: PageRoutes | None = None) -> web.Application:
    """The verbs' routes and /healthz, /readyz, /metrics; `pages` adds more (the fleet page: app.py)."""
    settings = api.settings
    metrics = api.metrics
    max_containers = settings.max_body_bytes // BYTES_PER_CONTAINER

    def refuse(verb: str, request: web.Request, status: int, code: str, message: str) -> web.Response:
        metrics.bad_requests.labels(verb=verb, reason=code).inc()
        log.warning(
            "%s: refused request from %s: %s",
            verb,
            request.remote,
            message,
            extra={"verb": verb, "reason": code, "peer": request.remote},
        )
        response = _json({"error": message, "reason": code}, status=status)
        if status == 415:
            response.headers["Accept-Encoding"] = "identity"  # RFC 7694: what we do accept
        return response

    def decided(
        decide: Callable[[ExtenderArgs], Any],
        max_candidates: int = settings.max_candidates,
        nodes_optional: bool = False,
        settle: bool = False,
        record_after: bool = False,
    ) -> Callable[[bytes], Awaitable[Any]]:
        """A verb that answers ExtenderArgs; `settle`: first wait for earlier pods' bindings (binding_gate.py);
        `record_after`: `decide` gives (answer, record) and `record` runs once the answer is sent
        (the loop's next step: before it reads any later call)."""

        async def respond(body: bytes) -> Any:
            with collector_paused():
                args = parse_extender_args(
                    body, max_candidates=max_candidates, max_containers=max_containers, nodes_optional=nodes_optional
                )
            if settle:
                await api.settle(args)
            with collector_paused():
                answer = decide(args)
                del args  # freed (by reference counts) before the collector runs again
            if record_after:
                answer, record = answer
                asyncio.get_running_loop().call_soon(_recorded, record)
            return answer

        return respond

    async def bind(body: bytes) -> Any:
        return await api.bindings.bind(parse_binding_args(body))

    async def from_peer(body: bytes) -> Any:
        return api.bindings.from_peer(body, api.instance_id)

    async def preempt(body: bytes) -> Any:
        with collector_paused():
            args = parse_preemption_args(
                body, max_candidates=min(settings.max_candidates, PREEMPT_MAX_CANDIDATES), max_containers=max_containers
            )
            answer, record = api.answer_preempt(args)
            del args
        asyncio.get_running_loop().call_soon(_recorded, record)
        return answer

    def scheduler_verb(
        verb: str, respond: Callable[[bytes], Awaitable[Any]]
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            started = time.perf_counter()
            try:
                body = await _read_body(request, settings)
                response = _json(await respond(body))
            except InvalidInput as exc:
                response = refuse(verb, request, 400, exc.code, exc.message)
            except _Refused as exc:
                response = refuse(verb, request, exc.status, exc.code, exc.message)
                if exc.close:
                    response.force_close()  # no lingering: a half-sent body must not hold the connection
            except _HungUp:
                log.info("%s: client %s hung up before its request body was complete", verb, request.remote)
                response = web.Response(status=CLIENT_CLOSED)  # never sent; counted below
            except Exception:
                log.exception("%s: internal error", verb)
                response = _json({"error": "internal error; see the gpu-extender log", "reason": "internal"}, 500)
            metrics.requests.labels(verb=verb, code=str(response.status)).inc()
            metrics.request_duration.labels(verb=verb).observe(time.perf_counter() - started)
            return response

        return handle

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        reason = api.not_ready_reason()
        if reason is not None:
            return web.Response(status=503, text=f"not ready: {reason}\n")
        return web.Response(text=f"ready ({len(api.state)} node(s) with GPU data)\n")

    async def get_metrics(_: web.Request) -> web.Response:
        await metrics.refresh()  # the ingest series, asked of the ingest workers now
        return web.Response(body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application(client_max_size=settings.max_body_bytes)
    prefix = settings.path_prefix.rstrip("/")
    app.router.add_post(
        f"{prefix}/filter", scheduler_verb("filter", decided(api.answer_filter, settle=True, record_after=True))
    )
    app.router.add_post(f"{prefix}/prioritize", scheduler_verb("prioritize", decided(api.prioritize)))
    app.router.add_post(f"{prefix}/bind", scheduler_verb("bind", bind))
    app.router.add_post(f"{prefix}/preempt", scheduler_verb("preempt", preempt))
    app.router.add_post(
        f"{prefix}/explain",
        scheduler_verb(
            "explain", decided(api.explain, min(settings.max_candidates, EXPLAIN_MAX_CANDIDATES), nodes_optional=True)
        ),
    )
    app.router.add_post(PEER_PATH, scheduler_verb("peers", from_peer))
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", get_metrics)
    if pages is not None:
        pages(app, api, prefix, scheduler_verb)
    return app
