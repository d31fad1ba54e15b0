"""Keeps one DeviceTaintRule per GPU the agents report unhealthy, degraded or busy outside Kubernetes
(state/device_taints.py), so that kube-scheduler's DRA allocator does not hand it out (issues 25,
35), and, through node_status_writer.py, each device-plugin GPU node's GPUsUsable condition and
no-usable-GPU taint: what every scheduler and autoscaler that reads only the API can honour.

- What stands is state/publication.py's, updated every `interval_s` in every replica (explain and
  the fleet page show it); only the leader writes it.

- Capabilities: at start and every `rediscover_s`, API discovery says whether resource.k8s.io serves
  `devicetaintrules` (v1beta2 in 1.36 behind DRADeviceTaintRules; v1alpha3 in 1.35). Without it the
  extender says once what it does instead (its filter only) and `mode` is "unsupported"; a 403 (the
  RBAC component deploy/components/device-taints not applied) is "forbidden".
- One writer: the replicas elect a leader with a Lease (coordination.k8s.io), and only the leader
  writes. Two replicas can hold different views for a moment (an agent's stream reaches one first);
  without a leader they would undo each other's rules. A replica that loses the Lease stops writing
  within its renew deadline; the next leader starts from the rules it lists.
- On a clean shutdown with --cleanup-on-exit (app.py), `finish` stops the leader's writing and runs
  the cleanup (inventory/cleanup.py) while the Lease is still held, and `release_lease` gives the
  Lease up once the election has stopped, so that no replica writes meanwhile and the next one need
  not wait for the Lease to expire.
- Writes are idempotent: the leader lists the rules it owns (label app.kubernetes.io/managed-by),
  adopts them, then creates what is missing, replaces what differs (taint key, value or effect) and
  deletes what no longer stands, every `interval_s`. Never NoExecute: the rules only keep the
  allocator from new allocations.
- A write budget: every write takes a token of one bucket (`writes_per_s`, bursts of as many); a
  pass that finds none left stops and goes on at the next, health rules first, then busy rules,
  then nodes. The holds (Hysteresis) bound a flapping GPU to one write per hold.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

import aiohttp
import orjson
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

from gpuextender.common.token_bucket import TokenBucket
from gpuextender.extender.inventory.idle_events import IdleEventWriter
from gpuextender.extender.inventory.node_status_writer import NodeStatusWriter
from gpuextender.extender.inventory.reclaim_writer import ReclaimWriter
from gpuextender.extender.kube.api_call import ApiError, Forbidden, call
from gpuextender.extender.state.device_taints import (
    BUSY_PREFIX,
    GROUP,
    LEASE_NAME,
    MANAGED_BY,
    PLURAL,
    TaintRule,
    TaintWriterStatus,
)
from gpuextender.extender.state.publication import Publication, PublishInputs

log = logging.getLogger("gpu_extender.device_taints")

VERSIONS = ("v1", "v1beta2", "v1alpha3")  # newest first
RESYNC_S = 60.0  # a leader goes over every rule and node this often, changed or not
RETRY_S = 10.0  # a refusal (an operator applying the RBAC) or an unreachable API is tried again this often


@dataclass(frozen=True)
class AlsoWritten:
    """What the leader writes besides DeviceTaintRules, each in its own part of a pass (None: not
    asked for): node conditions and taints, idle Events, reclaims."""

    nodes: NodeStatusWriter | None = None
    events: IdleEventWriter | None = None
    reclaim: ReclaimWriter | None = None


@dataclass(frozen=True)
class WriterPace:
    """How fast and how often the leader writes, and its Lease's timing."""

    writes_per_s: float = 20.0  # the write budget (--publish-writes-per-second)
    interval_s: float = 0.5  # between passes
    lease_s: tuple[int, int, int] = (15, 10, 2)  # duration, renew deadline, retry (whole seconds: the Lease's)
    rediscover_s: float = 300.0  # an API server without DeviceTaintRules is asked again this often


class DeviceTaintWriter:
    def __init__(
        self,
        connection: k8s.Configuration,
        publication: Publication,
        inputs: Callable[[], PublishInputs],
        *,
        namespace: str,
        also: AlsoWritten = AlsoWritten(),
        status: TaintWriterStatus | None = None,
        pace: WriterPace = WriterPace(),
        identity: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._connection = connection
        self.publication = publication
        self._inputs = inputs
        nodes = self.nodes = also.nodes
        self.events = also.events
        self.reclaim = also.reclaim
        self._bucket = TokenBucket(pace.writes_per_s, max(pace.writes_per_s, 1.0), clock)
        self._namespace = namespace
        self._interval_s = pace.interval_s
        self._lease_s = pace.lease_s
        self._rediscover_s = pace.rediscover_s
        self.identity = identity or f"{socket.gethostname()}-{os.getpid()}"
        self._clock = clock
        # One status for the rules, the nodes and the events (its metrics): the writers share it.
        self.status = status or (nodes.status if nodes is not None else TaintWriterStatus())
        self._owned: dict[str, dict[str, Any]] = {}  # name -> the rule as the API server has it
        self._last_election_error = ""
        self._leading = False
        # While leading: the leader's task, its client and the version it writes (`finish` ends it).
        self._leading_with: tuple[asyncio.Task[Any], k8s.ApiClient, str | None] | None = None
        self._closing = False  # `finish` was called: a Lease won from now on writes nothing
        self._rules_seen = -1  # the publication's rules_version the last complete pass wrote
        self._resync_at = 0.0  # when the next pass goes over everything (what others may have undone)

    def track(self) -> None:
        """One update of what stands (every replica, every `interval_s`)."""
        publication, status = self.publication, self.status
        publication.update(self._inputs(), self._clock())
        keys: dict[str, int] = {}
        for rule in publication.rules.values():
            keys[rule.key] = keys.get(rule.key, 0) + 1
        conditions = dict.fromkeys(("True", "False", "Unknown"), 0)
        for node in publication.nodes.values():
            conditions[node.status] = conditions.get(node.status, 0) + 1
        status.standing, status.nodes_by_condition = keys, conditions
        status.idle_by_node, status.idle_claims = publication.idle_by_node, publication.idle_claims
        status.deferred = self._bucket.refused

    async def _track_forever(self) -> None:
        while True:
            try:
                if not self._leading:  # the leader's own loop tracks before it writes
                    self.track()
            except Exception:  # a bug here must not end what the other replicas' explain reads
                log.exception("device taints: updating what stands failed; trying again")
            await asyncio.sleep(self._interval_s)

    async def run(self) -> None:
        """Forever: follow what stands, find the API, take part in the election, write while leading."""
        tracking = asyncio.create_task(self._track_forever())
        api_client = k8s.ApiClient(self._connection)
        try:
            while True:
                version = await self._discover(api_client)
                unsupported = self.status.mode == "unsupported"
                if version is None and ((self.nodes is None and self.events is None) or not unsupported):
                    # not served and nothing else to write: look again now and then; unreachable: soon
                    await asyncio.sleep(self._rediscover_s if unsupported else RETRY_S)
                    continue
                refused = await self._refused(api_client, version)
                if refused:
                    self._set_mode("forbidden", f"{refused}: apply deploy/components/device-taints (its RBAC)", version)
                    if self.nodes is not None:  # no Lease, no leader: no node status either
                        self.status.node_mode = "forbidden"
                    await asyncio.sleep(RETRY_S)
                    continue
                if not await self._lease_namespace_exists(api_client):
                    self._set_mode(
                        "no-lease-namespace",
                        f"no rule is written: the namespace {self._namespace} of the replicas' Lease does not "
                        f"exist; create it (kubectl create namespace {self._namespace}) or set --leader-namespace "
                        f"(or POD_NAMESPACE) to the extender's own namespace; checking again every {RETRY_S:g}s",
                        version,
                    )
                    await asyncio.sleep(RETRY_S)
                    continue
                self._set_mode("standby", f"waiting for the Lease {self._namespace}/{LEASE_NAME}", version)
                duration, deadline, retry = self._lease_s
                election = leaderelection.LeaderElection(
                    electionconfig.Config(
                        LeaseLock(LEASE_NAME, self._namespace, self.identity, api_client),
                        duration,
                        deadline,
                        retry,
                        onstarted_leading=functools.partial(self._lead, api_client, version),
                        onstopped_leading=self._stopped,
                    )
                )
                try:
                    await election.run()  # returns when the lease is lost
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the election's own errors must not end the writer for good
                    # One line per distinct failure, not a traceback per retry (every 2 s).
                    why = f"leader election failed ({type(exc).__name__}: {str(exc)[:200]}); trying again"
                    if why != self._last_election_error:
                        log.warning("device taints: %s", why)
                        self._last_election_error = why
                    self._set_mode("standby", "leader election failed", version)
                    await asyncio.sleep(self._lease_s[2])
        finally:
            tracking.cancel()
            await api_client.close()

    async def _stopped(self) -> None:
        self._set_mode("standby", "lost the Lease: another replica writes the rules", "")
        if self.nodes is not None:
            self.status.node_mode = "standby"

    async def _discover(self, api_client: k8s.ApiClient) -> str | None:
        try:
            version = await served_version(api_client)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self._set_mode("standby", f"API discovery failed ({type(exc).__name__}: {exc}); retrying")
            return None
        if version is None:
            self._set_mode(
                "unsupported",
                "the API server serves no DeviceTaintRules (resource.k8s.io, DRADeviceTaintRules): GPU health "
                "stays in the extender's filter, and DRA's allocator may still hand out a GPU its agent "
                "reports unhealthy on a node the extender chose",
            )
        return version

    async def _refused(self, api_client: k8s.ApiClient, version: str | None) -> str:
        """Why this replica may not take part ("" when it may): it reads its rules (when served) and
        its Lease first, as the election would only retry a refusal quietly forever."""
        custom, coordination = k8s.CustomObjectsApi(api_client), k8s.CoordinationV1Api(api_client)
        rules: tuple[tuple[str, Callable[[], Any]], ...] = (
            (
                (
                    f"list {PLURAL}",
                    lambda: custom.list_cluster_custom_object(GROUP, version, PLURAL, limit=1, _preload_content=False),
                ),
            )
            if version is not None
            else ()
        )
        checks: tuple[tuple[str, Callable[[], Any]], ...] = (
            *rules,
            (
                f"get Lease {self._namespace}/{LEASE_NAME}",
                lambda: coordination.read_namespaced_lease(LEASE_NAME, self._namespace, _preload_content=False),
            ),
        )
        for what, request in checks:
            try:
                await call(request(), what)
            except Forbidden:
                return f"not allowed to {what}"
            except (aiohttp.ClientError, TimeoutError, OSError, ApiError) as exc:
                return f"cannot {what}: {exc}"
        return ""

    async def _lease_namespace_exists(self, api_client: k8s.ApiClient) -> bool:
        """Whether the Lease can be made in its namespace: a dry-run create answers 404 when the
        namespace does not exist (a GET of the Lease answers 404 for a Lease not made yet too). Any
        other answer leaves it to the election (which creates the Lease, or finds it)."""
        coordination = k8s.CoordinationV1Api(api_client)
        body = k8s.V1Lease(
            api_version="coordination.k8s.io/v1", kind="Lease", metadata=k8s.V1ObjectMeta(name=LEASE_NAME)
        )
        try:
            resp: aiohttp.ClientResponse = await coordination.create_namespaced_lease(  # type: ignore[assignment]
                self._namespace, body, dry_run="All", _preload_content=False
            )
        except (aiohttp.ClientError, TimeoutError, OSError):
            return True  # unreachable now: the election retries, and says so
        try:
            await resp.read()
        finally:
            resp.release()
        return resp.status != 404

    async def finish(self, work: Callable[[k8s.ApiClient, str | None], Awaitable[None]]) -> bool:
        """A clean shutdown that removes the writes (--cleanup-on-exit): when this replica leads, its
        writing stops and `work` runs with the leader's client and DeviceTaintRule version (None: not
        served) while the election still renews the Lease, so that no other replica writes meanwhile.
        False, and nothing run, when it does not lead."""
        self._closing = True
        leading = self._leading_with
        if leading is None:
            return False
        task, api_client, version = leading
        task.cancel()
        await asyncio.wait({task})
        await work(api_client, version)
        return True

    async def release_lease(self) -> None:
        """Give the Lease up once `run` has stopped (nothing renews it any more): the next replica
        leads at its next try instead of when the Lease expires. Only a Lease this replica holds; a
        failure is one log line (the Lease then expires by itself)."""
        where = f"{self._namespace}/{LEASE_NAME}"
        try:
            async with k8s.ApiClient(self._connection) as api_client:
                coordination = k8s.CoordinationV1Api(api_client)
                lease = await call(
                    coordination.read_namespaced_lease(LEASE_NAME, self._namespace, _preload_content=False), "leases"
                )
                spec = (lease or {}).get("spec") or {}
                if not lease or spec.get("holderIdentity") != self.identity:
                    return
                spec = {k: v for k, v in spec.items() if k != "holderIdentity"}
                body = {**lease, "spec": {**spec, "leaseDurationSeconds": 1}}
                done = await call(
                    cast(Any, coordination).replace_namespaced_lease(
                        LEASE_NAME, self._namespace, body, _preload_content=False
                    ),
                    "leases",
                    conflict_ok=True,
                )
        except (aiohttp.ClientError, TimeoutError, OSError, ApiError) as exc:
            log.warning("device taints: could not give up the Lease %s (%s): it expires by itself", where, exc)
            return
        if done is not None:
            log.info("device taints: gave up the Lease %s", where)

    async def _lead(self, api_client: k8s.ApiClient, version: str | None) -> None:
        if self._closing:  # shutting down: a Lease won now is held, not written with, until the writer stops
            return
        if version is not None:
            self._set_mode(
                "writing", f"leader (Lease {self._namespace}/{LEASE_NAME}): writing {GROUP}/{version} {PLURAL}"
            )
        else:
            log.info("device taints: leader (Lease %s/%s): writing node status only", self._namespace, LEASE_NAME)
        api = k8s.CustomObjectsApi(api_client)
        listed = version is None
        current = asyncio.current_task()
        assert current is not None
        self._leading = True
        self._leading_with = (current, api_client, version)
        try:
            while True:
                try:
                    if not listed and version is not None:
                        self._owned = await list_owned(api, version)
                        self.publication.adopt({n: r for n, item in self._owned.items() if (r := _rule_of(n, item))})
                        self._rules_seen = -1
                        listed = True
                    await self._pass(api_client, api, version)
                except Forbidden as exc:
                    self._set_mode("forbidden", f"{exc}: apply deploy/components/device-taints (its RBAC)")
                    await asyncio.sleep(RETRY_S)
                    self._set_mode("writing", "retrying after a 403")
                    listed = False
                    continue
                except (aiohttp.ClientError, TimeoutError, OSError, ApiError) as exc:
                    log.warning("device taints: %s; listing again", exc)
                    listed = version is None
                except asyncio.CancelledError:
                    raise
                except Exception:  # a bug must not leave a leader that holds the Lease and writes nothing
                    log.exception("device taints: a writing pass failed; listing again")
                    listed = version is None
                await asyncio.sleep(self._interval_s)
        finally:
            self._leading = False
            self._leading_with = None

    async def _pass(self, api_client: k8s.ApiClient, api: k8s.CustomObjectsApi, version: str | None) -> None:
        """One tick of the leader: track, then write in order of what matters (rules, nodes, Events);
        a writer that runs out of the budget ends the pass. A node's condition waits until this
        replica has followed the agents for a hold: a leader that starts cold knows no GPU's busy
        or unhealthy past (its marks start at zero) and would say a node usable that is not."""
        self.track()
        now = self._clock()
        if now >= self._resync_at:  # now and then, everything again (an operator's kubectl edit)
            self._resync_at = now + RESYNC_S
            self._rules_seen = -1
            if self.nodes is not None:
                self.nodes.resync()
        refused = self._bucket.refused
        if version is not None and self._rules_seen != self.publication.rules_version:
            seen = self.publication.rules_version
            if not await self._reconcile(api, version):
                raise ApiError("a rule changed meanwhile (409)")
            if self._bucket.refused == refused:
                self._rules_seen = seen
        if self._bucket.refused != refused:
            return
        if self.nodes is not None and self.publication.warm(now):
            await self.nodes.reconcile(api_client, self.publication, self._bucket.take)
        if self._bucket.refused != refused:
            return
        if self.events is not None:  # last: advice, after what schedulers honour
            publication = self.publication
            await self.events.reconcile(
                api_client, publication.idle_by_node, publication.idle_claims, self._bucket.take
            )
        if self.reclaim is not None and self._bucket.refused == refused:  # last: it acts on the idle signal
            await self.reclaim.reconcile(api_client, self._bucket.take)

    async def _reconcile(self, api: k8s.CustomObjectsApi, version: str) -> bool:
        """One pass; False when the owned rules must be listed again (a conflict). Health rules
        first (a failing GPU matters most), then busy ones; a pass out of tokens stops."""
        wanted = self.publication.rules
        owned = self._owned
        take = self._bucket.take
        for name in sorted((n for n in owned if n not in wanted), key=_busy_last):
            if not take():
                return True
            await call(api.delete_cluster_custom_object(GROUP, version, PLURAL, name, _preload_content=False), PLURAL)
            del owned[name]
            self.status.writes["delete"] += 1
            log.info(
                "device taint rule %s deleted: its GPU is %s",
                name,
                "idle or held by a pod again" if name.startswith(BUSY_PREFIX) else "healthy again",
            )
        for name in sorted(wanted, key=_busy_last):
            rule = wanted[name]
            have = owned.get(name)
            if have is not None and _same(have, rule):
                continue
            if not take():
                return True
            body = _body(rule, version)
            have = owned.get(name)
            if have is None:
                created = await call(
                    api.create_cluster_custom_object(GROUP, version, PLURAL, body, _preload_content=False),
                    PLURAL,
                    conflict_ok=True,
                )
                if created is None:
                    return False  # it exists already: list again
                owned[name] = created
                self.status.writes["create"] += 1
                log.info(
                    "device taint rule %s: %s/%s/%s %s=%s:%s",
                    name,
                    rule.driver,
                    rule.pool,
                    rule.device,
                    rule.key,
                    rule.value,
                    rule.effect,
                )
            else:
                body["metadata"]["resourceVersion"] = have.get("metadata", {}).get("resourceVersion")
                replaced = await call(
                    api.replace_cluster_custom_object(GROUP, version, PLURAL, name, body, _preload_content=False),
                    PLURAL,
                    conflict_ok=True,
                )
                if replaced is None:
                    return False
                owned[name] = replaced
                self.status.writes["update"] += 1
                log.info("device taint rule %s now %s=%s:%s", name, rule.key, rule.value, rule.effect)
        self.status.rules = len(owned)
        return True

    def _set_mode(self, mode: str, why: str, version: str | None = "") -> None:
        """The rules' mode; `version` None (DeviceTaintRules not served): the node writer's instead
        (the rules stay "unsupported")."""
        if version is None:
            if self.nodes is not None:
                node_mode = "forbidden" if mode in ("forbidden", "no-lease-namespace") else "standby"
                if node_mode != self.status.node_mode and node_mode == "forbidden":
                    log.warning("node status: %s", why)
                self.status.node_mode = node_mode
            return
        if self.status.mode == "unsupported" and mode == "standby" and not version:
            return
        if mode != self.status.mode:
            (log.warning if mode in ("unsupported", "forbidden") else log.info)("device taints: %s", why)
        self.status.mode = mode


async def served_version(api_client: k8s.ApiClient) -> str | None:
    """The newest version of resource.k8s.io that serves DeviceTaintRules, by API discovery (v1beta2
    in 1.36 behind DRADeviceTaintRules; v1alpha3 in 1.35); None when none does. Raises
    aiohttp.ClientError, TimeoutError or OSError when the API server cannot be reached."""
    api = k8s.CustomObjectsApi(api_client)
    for version in VERSIONS:
        resp: aiohttp.ClientResponse = await api.get_api_resources(GROUP, version, _preload_content=False)  # type: ignore[assignment]
        try:
            body = await resp.read()
        finally:
            resp.release()
        if resp.status != 200:
            continue
        try:
            listed = orjson.loads(body)
        except orjson.JSONDecodeError:
            listed = None
        resources = (listed.get("resources") if isinstance(listed, dict) else None) or []
        if any(isinstance(r, dict) and r.get("name") == PLURAL for r in resources):
            return version
    return None


async def list_owned(api: k8s.CustomObjectsApi, version: str) -> dict[str, dict[str, Any]]:
    """Every DeviceTaintRule labelled as ours (MANAGED_BY), by name, as the API server has it: what a
    new leader adopts, and all that `gpu-extender cleanup` deletes (never another rule)."""
    listed = await call(
        api.list_cluster_custom_object(
            GROUP, version, PLURAL, label_selector="=".join(MANAGED_BY), _preload_content=False
        ),
        PLURAL,
    )
    items = (listed or {}).get("items") or []
    return {item["metadata"]["name"]: item for item in items if isinstance(item, dict)}


def _body(rule: TaintRule, version: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "DeviceTaintRule",
        "metadata": {"name": rule.name, "labels": {MANAGED_BY[0]: MANAGED_BY[1]}},
        "spec": {
            "deviceSelector": {"driver": rule.driver, "pool": rule.pool, "device": rule.device},
            "taint": {"key": rule.key, "value": rule.value, "effect": rule.effect},
        },
    }


def _busy_last(name: str) -> tuple[bool, str]:
    return name.startswith(BUSY_PREFIX), name


def _rule_of(name: str, item: dict[str, Any]) -> TaintRule | None:
    """A listed rule as a TaintRule (None when it is not one of the shape this writer makes)."""
    spec = item.get("spec") if isinstance(item, dict) else None
    selector, taint = (spec or {}).get("deviceSelector") or {}, (spec or {}).get("taint") or {}
    fields = (
        selector.get("driver"),
        selector.get("pool"),
        selector.get("device"),
        taint.get("key"),
        taint.get("effect"),
    )
    if not all(isinstance(f, str) and f for f in fields):
        return None
    driver, pool, device, key, effect = (str(f) for f in fields)
    return TaintRule(name, driver, pool, device, key, str(taint.get("value") or ""), effect)


def _same(have: dict[str, Any], rule: TaintRule) -> bool:
    spec = have.get("spec") or {}
    selector, taint = spec.get("deviceSelector") or {}, spec.get("taint") or {}
    return (selector.get("driver"), selector.get("pool"), selector.get("device")) == (
        rule.driver,
        rule.pool,
        rule.device,
    ) and (taint.get("key"), taint.get("value"), taint.get("effect")) == (rule.key, rule.value, rule.effect)
