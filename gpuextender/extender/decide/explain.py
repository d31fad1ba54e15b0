"""`POST /explain`: the full reasoning behind filter and prioritize for one pod.

Takes the same ExtenderArgs as `filter` and answers, per candidate node: its
AcceleratorClasses (and those its labels match but its GPUs do not), GPU data (fresh/stale/none,
age, idle/healthy GPUs, mean utilization, where allocation came from or why it is unknown, free,
degraded and allocated-but-idle GPUs, and for a multi-GPU pod how well its best set of that many
GPUs connects), the filter verdict with reason code and sentence, the policy's class rank and the
score with its parts; plus what was resolved for the pod (InferenceService, runtime, class, policy,
each with where it came from).

It renders the same `decide.Decision` as the scheduler verbs, so what it says is
what they decided; it is meant for people (and `gpu-extender explain`), not for
the scheduler, and costs more than filter (one assess() per node). Nodes are listed best
score first; a failing node scores 0.
"""

from __future__ import annotations

from typing import Any

from gpuextender.common.idle_rule import JUDGED_BY_SM_ACTIVE, JUDGED_BY_UTILIZATION
from gpuextender.extender.decide.compute_domains import SHARED_CLIQUE_NOTE
from gpuextender.extender.decide.decision import Decision
from gpuextender.extender.decide.snapshot import Snapshot
from gpuextender.extender.decide.whole_gpus import DataState
from gpuextender.extender.state.bound_pods import pending
from gpuextender.extender.state.gpu_summary import GPU_STATE_NAMES, GPU_UNHEALTHY, NodeSummary
from gpuextender.extender.state.gpu_topology import TIER_NAMES, tier_for

NODE_FORMULA = (
    "1 + round(9 * v / (C + 1)), v from the node strategy; with m > 1 quality classes "
    "(q = 2 * GPU-set tier + degraded-only) among the fits: best class m + round((10 - m) * v / (C + 1)), "
    "class of rank r m - r (gpuextender/extender/decide/README.md, Prioritize)"
)
CLASS_FORMULA = (
    "round(1 + 9 * ((K - 1 - p) + node score / 10) / K) (gpuextender/extender/decide/README.md, Classes in the score)"
)


def _allocation(summary: NodeSummary | None) -> dict[str, Any]:
    """What the node's agent knows of allocation: with it, idle GPUs are the unallocated ones."""
    if summary is None:
        return {
            "allocation": None,
            "sharingInferred": None,
            "freeGpus": None,
            "degradedIdleGpus": None,
            "migDevices": None,
            "migDevicesFree": None,
            "allocatedIdleGpus": None,
            "allocatedIdleByNamespace": None,
        }
    known = summary.free_gpus is not None
    return {
        "allocation": summary.allocation if known else f"{summary.allocation}: idle readings alone decide",
        # Replicas per GPU read off the Node's allocatable (its agent cannot tell): None when not.
        "sharingInferred": (
            f"{summary.inferred_replicas} replicas per GPU, read off the Node's allocatable "
            f"({summary.gpu_count} for {summary.gpu_count // summary.inferred_replicas} GPUs): its agent "
            "reports no sharing"
            if summary.inferred_replicas
            else None
        ),
        "freeGpus": summary.free_gpus,  # healthy and held by no pod; None: allocation unknown
        "degradedIdleGpus": summary.degraded_idle_gpus,
        # MIG devices per profile: on healthy GPUs, and free (unheld, idle) of those.
        "migDevices": dict(summary.mig_instances),
        "migDevicesFree": dict(summary.mig_free),
        "allocatedIdleGpus": summary.allocated_idle_gpus if known else None,
        # The same GPUs by the namespace of the pods holding them (a shared GPU counts for each).
        "allocatedIdleByNamespace": dict(summary.idle_by_namespace) if known else None,
    }


def _idle_rule(summary: NodeSummary | None) -> list[dict[str, Any]] | None:
    """Per healthy GPU, the reading that judged it idle or busy (common/idle_rule.py) and its value."""
    if summary is None:
        return None
    sm_active = summary.sm_active
    rows: list[dict[str, Any]] = []
    for position, (index, state, util, _) in enumerate(summary.gpus):
        if state == GPU_UNHEALTHY:
            continue
        sm = sm_active[position] if sm_active else None
        if sm is not None:
            rows.append({"gpu": index, "judgedBy": JUDGED_BY_SM_ACTIVE, "smActivePercent": round(sm, 2)})
        else:
            rows.append({"gpu": index, "judgedBy": JUDGED_BY_UTILIZATION, "utilizationPercent": util})
    return rows


def _gpu_set(summary: NodeSummary | None, needed: int) -> str | None:
    if summary is None or needed < 2:
        return None
    return TIER_NAMES[tier_for(summary.set_tiers, needed)]


def _bound_pods(known: Snapshot, name: str, fresh: bool) -> dict[str, Any]:
    """The pods bound to the node that its data does not account for yet (bound_pods.py), taken
    off what it offers; and the agent's own idle count before that."""
    reported = known.reported(name) if known.reported is not None and fresh else None
    p = pending(reported, known.bound_pods(name))
    now = known.now
    return {
        "reportedIdleGpus": reported.idle_gpus if reported is not None else None,
        "boundPodsPending": [
            {
                "pod": b.key,
                "uid": b.uid,
                "gpus": b.gpus,
                "migDevices": dict(b.mig),
                "phase": b.phase or None,
                "ageSeconds": round(max(0.0, now - b.seen_at), 3),
                "inferenceService": b.inference_service or None,
            }
            for b in p.pods
        ],
        "boundPodsPendingGpus": p.units,
    }


def _dra_devices(known: Snapshot, name: str) -> list[dict[str, Any]] | None:
    """The node's whole GPUs that come through DRA (state/dra_inventory.py), each with the claim
    that holds it, its taints, and what its agent last read of it (`agent`: free or held by a
    container, idle or busy, degraded, unhealthy; None when no GPU of the agent's report is this
    device); None for a node without any."""
    devices = known.view.dra.devices(name)
    if not devices:
        return None
    held = known.claim_holders(name)
    summary = known.summary(name)

    def agent(uuid: str, device: str) -> str | None:
        state = summary.gpu_state(uuid, device) if summary is not None else None
        return GPU_STATE_NAMES[state] if state is not None else None

    return [
        {
            "device": ref[2],
            "pool": ref[1],
            "uuid": device.uuid or None,
            "product": device.product or None,
            "claim": held.get(ref),
            "taints": [f"{t.key}={t.value}:{t.effect}" for t in device.taints],
            "allocatable": device.allocatable and ref not in held,
            "agent": agent(device.uuid, device.name),
        }
        for ref, device in devices
    ]


def _published(known: Snapshot, name: str) -> dict[str, Any] | None:
    """What the extender publishes for every scheduler and autoscaler about this node (issue 35):
    its devices' taint rules, standing or pending (and for how long), and a device-plugin node's
    GPUsUsable condition. None: nothing."""
    found = known.published(name)
    if found is None:
        return None
    now = known.now
    return {
        "deviceTaints": [
            {
                "device": t.device,
                "taint": f"{t.key}={t.value}:{t.effect}",
                "stands": t.stands,
                # Seconds since what is asked began to differ from what stands (it changes once
                # that reaches the hold); None: it agrees.
                "pendingForSeconds": None if t.pending_since is None else round(max(now - t.pending_since, 0.0), 1),
            }
            for t in found.taints
        ],
        "gpusUsable": None
        if found.status is None
        else {
            "status": found.status.status,
            "reason": found.status.reason,
            "message": found.status.message,
            "noUsableGpu": found.status.no_usable_gpu,
        },
    }


def _dra_mig_devices(known: Snapshot, name: str) -> list[dict[str, Any]] | None:
    """The node's MIG devices that come through DRA, each with its profile, the claim that holds it
    and its taints; None for a node without any. (The agent's view is per profile: migDevicesFree.)"""
    devices = known.view.dra.mig_devices.get(name)
    if not devices:
        return None
    held = known.claim_holders(name)
    return [
        {
            "device": ref[2],
            "pool": ref[1],
            "profile": device.profile,
            "parentUuid": device.parent_uuid or None,
            "claim": held.get(ref),
            "taints": [f"{t.key}={t.value}:{t.effect}" for t in device.taints],
            "allocatable": device.allocatable and ref not in held,
        }
        for ref, device in devices
    ]


def explain(d: Decision) -> dict[str, Any]:
    """The Decision as a person reads it: every candidate with its numbers, verdict and score parts."""
    known, plan, pod = d.known, d.plan, d.pod
    classes_of = known.classes_by_node
    outcome, final, node_scores, ranking = d.filtered, dict(d.scores), d.node_scores, d.class_ranking
    position = {r.name: i for i, r in enumerate(ranking.ranked)} if ranking is not None else {}
    if plan.explicit:
        position = {plan.allowed[0]: 0}
    passed, held_back = set(outcome.passed), d.held_back
    nodes = []
    for name in d.candidates.names:
        a = d.assess(name)
        reason = outcome.failed.get(name)
        node_classes = classes_of.get(name, ())
        ranks = [position[c] for c in node_classes if c in position]
        excluded = known.excluded(name)
        nodes.append(
            {
                "node": name,
                "classes": list(node_classes),
                # Classes the node's labels match but its GPUs (as NVML reports them) do not.
                "classesExcludedByGpus": {c: m.detail for c, m in excluded.items()},
                "data": a.data.value,
                "dataAgeSeconds": None if a.data_age_s is None else round(a.data_age_s, 3),
                "gpus": a.gpu_count,
                "healthyGpus": a.healthy_gpus,
                "idleGpus": a.idle_gpus,
                **_allocation(known.summary(name)),
                # For a multi-GPU pod: how well the best set of that many available GPUs connects.
                "gpuSet": _gpu_set(known.summary(name), pod.gpus_needed),
                **_bound_pods(known, name, a.data is DataState.FRESH),
                "draDevices": _dra_devices(known, name),
                "draMigDevices": _dra_mig_devices(known, name),
                "published": _published(known, name),
                "meanUtilization": None if a.mean_utilization is None else round(a.mean_utilization, 1),
                "gpuIdleRule": _idle_rule(known.summary(name)),
                # The GPU numbers are assumed (agent silent or never heard): idle = needed, never all-idle.
                "assumedData": a.assumed,
                "result": "pass" if name in passed else "fail",
                # A pass that filter's answer left out: not among the --shortlist best (decision.py).
                "shortlisted": None if name not in passed else name not in held_back,
                "reasonCode": reason.code if reason else None,
                "reason": reason.sentence if reason else None,
                "unresolvable": reason.unresolvable if reason else None,
                "classRank": min(ranks) if ranks else None,
                "score": final.get(name, 0),
                "scoreParts": {
                    "nodeScore": node_scores.get(name, 0),
                    "classPosition": min(ranks) if ranks else None,
                    "classesRanked": len(position) if plan.applies else None,
                    # In a domain of the group level whose every GPU is idle: ranked after the
                    # others, kept whole for multi-pod groups (None: no such rule for this pod).
                    "inWholeDomain": (name in d.kept_whole) if d.kept_whole else None,
                },
            }
        )
    resolved: dict[str, Any] = dict(plan.why)
    resolved["nodeStrategy"] = pod.strategy
    resolved["classRulesApply"] = plan.applies
    if plan.applies:
        resolved["allowedClasses"] = list(plan.allowed)
    if plan.incompatible:
        resolved["incompatible"] = plan.incompatible
    if plan.no_class:  # why["classes"] has the sentence; this is the metric's reason code
        resolved["classPolicyNoClass"] = plan.no_class
    if plan.runtime_warning:
        resolved["runtimeWarning"] = plan.runtime_warning
    if pod.claims_read:  # what was read of each of its ResourceClaims, and what was not, and why
        resolved["claims"] = [
            {
                "claim": c.key,
                "state": c.state,
                "requests": [
                    {
                        "request": r.request,
                        "gpus": r.gpus,
                        "migDevices": dict([r.mig]) if r.mig else {},
                        "read": r.why(),
                    }
                    for r in c.requests
                ],
            }
            for c in pod.claims_read
        ]
    answer: dict[str, Any] = {
        "pod": pod.ref,
        "gpusNeeded": pod.gpus_needed,
        "migDevicesNeeded": dict(pod.mig_needed),  # profile -> count, from nvidia.com/mig-<profile>
        "resolved": resolved,
        "fallback": outcome.fallback,
        # Its priority, whether it may preempt, and on how many nodes the fallback was held back for
        # kube-scheduler's preemption (lower-priority GPU pods there: decide/preemption.py).
        "preemption": {
            "priority": pod.priority,
            "mayPreempt": pod.preempts,
            "nodesWithLowerPriorityGPUPods": outcome.preemptible,
        },
        "shortlist": d.shortlist or None,  # filter answers at most this many passing nodes (None: all)
        # Candidates in whole domains (every GPU idle), ranked after the others: kept for groups.
        "inWholeDomains": [n for n in d.candidates.names if n in d.kept_whole] if d.kept_whole else [],
        # Nodes that passed only on assumed data: no node with fresh data fit.
        "passedOnAssumedData": list(outcome.assumed),
        "formulas": {"node": NODE_FORMULA, "class": CLASS_FORMULA if plan.applies else None},
        # Best first, as kube-scheduler would pick; a failing node scores 0 (stable: request order within a score).
        "nodes": sorted(nodes, key=lambda row: -row["score"]),
    }
    if ranking is not None:
        answer["classRanking"] = {
            "policy": ranking.policy,
            "ranked": [{"class": r.name, "score": r.score, "basis": r.basis} for r in ranking.ranked],
            "excluded": [{"class": e.name, "stage": str(e.stage), "reason": e.reason} for e in ranking.excluded],
            "omeWouldChoose": ranking.ome_choice,
        }
    group = _group(d)
    if group is not None:
        answer["group"] = group
    return answer


MAX_ROOMS_SHOWN = 10  # domains listed per group, the best first


def _group(d: Decision) -> dict[str, Any] | None:
    """The pod's multi-pod group: source, size, domain and why, each domain's room, the hold."""
    g = d.group
    if g is None:
        problem = d.pod.group.problem
        return {"problem": problem} if problem else None
    member = d.member
    chosen, rooms = member.choice.chosen, member.choice.rooms
    notes = list(g.notes)
    if chosen is not None and g.second_choice is not None and g.second_choice(chosen.domain):
        notes.append(SHARED_CLIQUE_NOTE)
    return {
        "key": g.ref.key,
        "source": g.ref.source,
        "size": g.size,
        "boundMembers": len(g.bound),
        "gpusPerMember": g.per_member,
        "levels": [level or "any nodes" for level in g.levels],
        "domain": chosen.domain.name if chosen is not None else None,
        "plannedBefore": g.planned[2] if g.planned is not None else None,
        "why": g.why or None,
        "reason": member.choice.reason.sentence if member.choice.reason is not None else None,
        "held": dict(g.held),
        "holdExpiresInSeconds": None if g.expires_in is None else round(g.expires_in, 3),
        "rooms": [
            {"domain": r.domain.name, "members": r.members, "idleGpus": r.idle, "nodes": r.nodes}
            for r in rooms[:MAX_ROOMS_SHOWN]
        ],
        "domainsConsidered": member.choice.considered,
        # A role of a disaggregated InferenceService: placed in the block of its other role.
        "composite": {"inferenceService": g.composite, "role": g.role, "otherRoleIn": g.other_block or None}
        if g.composite
        else None,
        "notes": notes,
    }
