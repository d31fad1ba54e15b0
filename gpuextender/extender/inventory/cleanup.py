"""Removes what the extender wrote cluster-wide (issue 50, item 5): its DeviceTaintRules, every
Node's GPUsUsable condition and its node taint. Run by `gpu-extender cleanup` (ui/cleanup_cli.py)
with an admin's kubeconfig once the extender is gone, and by the leader of the device-taint Lease on
a clean shutdown with --cleanup-on-exit (app.py, through DeviceTaintWriter.finish). What to remove
and the lines said afterwards are state/cleanup_plan.py's; this is the I/O.

- The rules: the version of resource.k8s.io that serves them and the listing of ours are the
  writer's (device_taint_writer.served_version, list_owned); each is deleted with its uid as a
  precondition, so a rule made again under that name meanwhile is left alone.
- The Nodes: listed in pages; a Node that carries something of ours gets one patch per kind. A taint
  patch whose test fails (spec.taints changed meanwhile) reads the Node again, up to TAINT_TRIES.
- At most CONCURRENCY requests at a time. Every outcome lands in the CleanupReport as it happens, so
  a run cut short (the caller's timeout) still says what it did.
- The Kubernetes client is imported when a cleanup runs, not with this module (the extender
  without --kubernetes loads none of it: tests/extender/test_extender_imports.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

import aiohttp

from gpuextender.extender.kube.api_call import JSON_PATCH, STRATEGIC, ApiError, Forbidden, call
from gpuextender.extender.state.cleanup_plan import (
    CleanupReport,
    NodePlan,
    Removal,
    condition_patch,
    forbidden,
    lease_holder,
    node_plan,
    taint_patch,
)
from gpuextender.extender.state.device_taints import GROUP, LEASE_NAME, PLURAL

if TYPE_CHECKING:
    from kubernetes_asyncio import client as k8s

CONCURRENCY = 8
NODE_PAGE = 500  # Nodes per LIST page
TAINT_TRIES = 3
UNREACHABLE = (aiohttp.ClientError, TimeoutError, OSError)
RULES, LEASES = f"{PLURAL}.{GROUP}", "leases.coordination.k8s.io"  # as RBAC names them
T = TypeVar("T")


class CleanupError(Exception):
    """The cleanup cannot start (the kubeconfig's files); the message is one line for the user."""


async def clean_up(
    configuration: k8s.Configuration,
    report: CleanupReport,
    *,
    lease_namespace: str,
    now: datetime | None = None,
) -> None:
    """`gpu-extender cleanup`: whether a replica still holds the Lease, which version serves the
    rules, then `remove_writes`. Raises CleanupError when no client can be made."""
    from kubernetes_asyncio import client as k8s

    from gpuextender.extender.inventory.device_taint_writer import served_version

    try:
        api_client = k8s.ApiClient(configuration)
    except (OSError, ValueError) as exc:  # the kubeconfig's CA or client certificate cannot be read
        raise CleanupError(f"kubeconfig: {exc}") from None
    async with api_client:
        try:
            report.version = await served_version(api_client)
        except UNREACHABLE as exc:
            report.stopped = f"cannot reach the Kubernetes API server {configuration.host}: {_said(exc)}"
            return
        await _check_lease(api_client, lease_namespace, report, now or datetime.now(UTC))
        await remove_writes(api_client, report.version, report)


async def remove_writes(api_client: k8s.ApiClient, version: str | None, report: CleanupReport) -> None:
    """Delete our DeviceTaintRules (`version`: the one served; None: none is), then take our
    condition and taint off every Node; with `report.dry_run` only count them."""
    report.version = version
    await _remove_rules(api_client, version, report)
    await _clean_nodes(api_client, report)


async def _check_lease(api_client: k8s.ApiClient, namespace: str, report: CleanupReport, now: datetime) -> None:
    from kubernetes_asyncio import client as k8s

    report.lease = f"{namespace}/{LEASE_NAME}"
    coordination = k8s.CoordinationV1Api(api_client)
    pending = coordination.read_namespaced_lease(LEASE_NAME, namespace, _preload_content=False)
    lease, why = await _ask(call(pending, LEASES), "get", LEASES)
    if why:
        report.lease_note = f"cannot read the Lease {report.lease}: {why}"
        return
    report.leader = lease_holder(lease, now)


async def _remove_rules(api_client: k8s.ApiClient, version: str | None, report: CleanupReport) -> None:
    from kubernetes_asyncio import client as k8s

    from gpuextender.extender.inventory.device_taint_writer import list_owned

    rules = report.rules
    if version is None:  # not served: nothing can exist
        rules.listed = True
        return
    api = k8s.CustomObjectsApi(api_client)
    owned, why = await _ask(list_owned(api, version), "list", RULES)
    if owned is None:
        rules.fail(why)
        return
    rules.listed, rules.found = True, len(owned)
    if report.dry_run:
        return
    await _bounded(_delete_rule(api, version, name, rule, rules) for name, rule in sorted(owned.items()))


async def _delete_rule(
    api: k8s.CustomObjectsApi, version: str, name: str, rule: dict[str, Any], rules: Removal
) -> None:
    """Delete one listed rule, that very object (its uid): a rule made again under its name is left."""
    from kubernetes_asyncio import client as k8s

    uid = (rule.get("metadata") or {}).get("uid")
    options = k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid=uid) if uid else None)
    pending = api.delete_cluster_custom_object(GROUP, version, PLURAL, name, body=options, _preload_content=False)
    deleted, why = await _ask(call(pending, RULES, conflict_ok=True), "delete", RULES)
    if why:
        rules.fail(why)
    elif deleted is None:  # a 409: another object of that name now, not the one listed
        rules.fail(f"{name} was made again meanwhile (left alone)")
    else:
        rules.removed += 1  # deleted, or gone already (a 404)


async def _clean_nodes(api_client: k8s.ApiClient, report: CleanupReport) -> None:
    from kubernetes_asyncio import client as k8s

    core = k8s.CoreV1Api(api_client)
    conditions, taints = report.conditions, report.taints
    plans: list[NodePlan] = []
    token = ""
    while True:
        more: dict[str, Any] = {"_continue": token} if token else {}
        page, why = await _ask(
            call(core.list_node(limit=NODE_PAGE, _preload_content=False, **more), "nodes"), "list", "nodes"
        )
        if why:
            for kind in (conditions, taints):
                kind.fail(why)
            return
        for node in (page or {}).get("items") or ():
            plan = node_plan(node, report.taint_key) if isinstance(node, dict) else None
            if plan is not None:
                plans.append(plan)
        token = ((page or {}).get("metadata") or {}).get("continue") or ""
        if not token:
            break
    conditions.listed = taints.listed = True
    conditions.found = sum(1 for p in plans if p.condition)
    taints.found = sum(1 for p in plans if p.taints)
    if report.dry_run:
        return
    await _bounded(_clean_node(core, plan, report.taint_key, conditions, taints) for plan in plans)


async def _clean_node(core: k8s.CoreV1Api, plan: NodePlan, key: str, conditions: Removal, taints: Removal) -> None:
    patcher = cast(Any, core)  # the client's stubs do not name _content_type
    if plan.condition:
        pending = patcher.patch_node_status(
            plan.name, condition_patch(), _content_type=STRATEGIC, _preload_content=False
        )
        _, why = await _ask(call(pending, "nodes/status"), "patch", "nodes/status")
        if why:
            conditions.fail(why)
        else:
            conditions.removed += 1  # removed, or the Node is gone (a 404)
    current: NodePlan | None = plan
    tries = 0
    while current is not None and current.taints:  # none left: removed (or the Node is gone)
        if tries == TAINT_TRIES:
            taints.fail(f"node {plan.name}: its taints kept changing ({TAINT_TRIES} tries)")
            return
        tries += 1
        pending = patcher.patch_node(
            current.name, taint_patch(current), _content_type=JSON_PATCH, _preload_content=False
        )
        # A 409 or 422: a test failed, spec.taints changed meanwhile; read it again, and plan again.
        done, why = await _ask(call(pending, "nodes"), "patch", "nodes", again=(409, 422))
        if not why and done is None:
            node, why = await _ask(call(core.read_node(plan.name, _preload_content=False), "nodes"), "get", "nodes")
            current = node_plan(node, key) if node else None
        if why:
            taints.fail(why)
            return
        if done is not None:
            break
    if plan.taints:
        taints.removed += 1


async def _ask(request: Awaitable[T], verb: str, resource: str, *, again: tuple[int, ...] = ()) -> tuple[T | None, str]:
    """What `request` (an API call) answered, with ""; or None with why it failed (a 403 said as the
    `verb` on `resource` RBAC must allow). An ApiError whose status is in `again` is (None, "")."""
    try:
        return await request, ""
    except Forbidden:
        return None, forbidden(verb, resource)
    except ApiError as exc:
        return None, ("" if exc.status in again else _said(exc))
    except UNREACHABLE as exc:
        return None, _said(exc)


async def _bounded(jobs: Iterable[Awaitable[None]]) -> None:
    """Run `jobs` (each catches its own errors), at most CONCURRENCY at a time."""
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(job: Awaitable[None]) -> None:
        async with gate:
            await job

    await asyncio.gather(*(one(job) for job in jobs))


def _said(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
