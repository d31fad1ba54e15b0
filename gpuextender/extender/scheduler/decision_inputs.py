"""One `Decision` per scheduler call: the pod read once, the call's candidates, and a snapshot of
what the extender knows now (GPU state, inventory, class membership, bound pods), with the pod's
class plan from a cache. Everything after this is pure (decide/)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from typing import Any

import orjson

from gpuextender.extender.decide import class_plan, compute_domains
from gpuextender.extender.decide.decision import Decision
from gpuextender.extender.decide.fit_index import FitIndex
from gpuextender.extender.decide.group_domains import ANY, NO_LABEL, Domain, LevelIndex, level_index
from gpuextender.extender.decide.group_member import GroupContext
from gpuextender.extender.decide.snapshot import Candidates, Snapshot
from gpuextender.extender.decide.whole_domains import WholeDomains
from gpuextender.extender.model.dra import pod_claims
from gpuextender.extender.model.ome.pod_intent import PodIdentity
from gpuextender.extender.model.pod_gpus import add_mig
from gpuextender.extender.model.pod_group import (
    GANG_SOURCES,
    HOSTNAME,
    JOBSET,
    SIZED_BY_OBJECT,
    GroupReading,
    pinned_keys,
    rbg_role,
)
from gpuextender.extender.model.pod_request import PodRequest, read_pod
from gpuextender.extender.model.untrusted import nominated_node
from gpuextender.extender.scheduler.cluster_sources import ClusterSources
from gpuextender.extender.scheduler.wire import ExtenderArgs
from gpuextender.extender.settings import ApiSettings
from gpuextender.extender.state.bound_pods import AllocatableLessBound, given_back
from gpuextender.extender.state.claim_ledger import gpus_total, mig_total
from gpuextender.extender.state.device_taints import TolerantView
from gpuextender.extender.state.dra_inventory import DraAllocatable, DraFree
from gpuextender.extender.state.gpu_state import GpuState
from gpuextender.extender.state.gpu_summary import NodeSummary
from gpuextender.extender.state.group_book import GroupBook, GroupPlan
from gpuextender.extender.state.inventory_view import InventoryView
from gpuextender.extender.state.live_classes import LiveClasses

PLAN_CACHE_SIZE = 4096  # distinct OME pod identities per inventory version; cleared when full
POD_CACHE_SIZE = 256  # distinct pods read; cleared when full
POD_CACHE_MAX_BYTES = 16 * 1024  # a pod's JSON past this is read every time, never kept


class PodReadings:
    """read_pod per distinct pod: kube-scheduler sends the same Pod to filter and then prioritize
    (and again on a retry), so its reading is kept, keyed by the Pod's JSON (a few microseconds to
    encode; reading it again costs ten times that). The same JSON reads the same: it is a pure
    function of the pod and the settings. Bounded in entries and in the size of a key."""

    def __init__(self, settings: ApiSettings, size: int = POD_CACHE_SIZE) -> None:
        self._settings = settings
        self._size = size
        self._read: dict[bytes, PodRequest] = {}

    def read(self, pod: dict[str, Any]) -> PodRequest:
        settings = self._settings
        try:
            key = orjson.dumps(pod)
        except orjson.JSONEncodeError:  # nested past orjson's depth: read_pod says why it refuses it
            key = b""
        reading = self._read.get(key) if key else None
        if reading is None:
            reading = read_pod(pod, settings.gpu_resources, settings.node_strategy, settings.random_seed)
            if key and len(key) <= POD_CACHE_MAX_BYTES:
                if len(self._read) >= self._size:
                    self._read.clear()
                self._read[key] = reading
        return reading


class PlanCache:
    """A pod's class plan depends only on its OME identity and the inventory, so it is computed
    once per (inventory version, identity): the replicas of one InferenceService and
    filter+prioritize share it."""

    def __init__(self, default_class_policy: str, runtime_check: str, size: int = PLAN_CACHE_SIZE) -> None:
        self._default_class_policy = default_class_policy
        self._runtime_check = runtime_check
        self._size = size
        self._plans: dict[PodIdentity, class_plan.ClassPlan] = {}
        self._version = -1

    def plan(self, pod: PodRequest, view: InventoryView) -> class_plan.ClassPlan:
        if pod.gpus_needed <= 0:
            return class_plan.ClassPlan(False)
        if self._version != view.version or len(self._plans) >= self._size:
            self._plans.clear()
            self._version = view.version
        plan = self._plans.get(pod.identity)
        if plan is None:
            plan = class_plan.plan_classes(pod.identity, view, self._default_class_policy, self._runtime_check)
            self._plans[pod.identity] = plan
        return plan


class DecisionInputs:
    def __init__(
        self,
        state: GpuState,
        settings: ApiSettings,
        inventory: Callable[[], InventoryView],
        classes: LiveClasses,
        clock: Callable[[], float],
        groups: GroupBook,
        sources: ClusterSources,
    ) -> None:
        self._state = state
        self._settings = settings
        self._inventory = inventory
        self._classes = classes
        self._clock = clock
        self._plans = PlanCache(settings.default_class_policy, settings.runtime_check)
        self._pods = PodReadings(settings)
        self._levels = LevelIndexes()
        self._groups = groups  # multi-pod groups' domains and holds (state/group_book.py)
        self._sources = sources  # bound pods, DRA claims, PodGroups, what is published (cluster_sources.py)
        self._dra_free = DraFree()
        state.on_offered_change(self._dra_free.summary_changed)
        self._fits = FitIndex(state.offered_summaries)
        state.on_offered_change(self._fits.changed)
        state.on_settle(self._fits.catch_up)
        self._whole = WholeDomains(state.offered_summaries)  # domains a single pod ranks last
        state.on_offered_change(self._whole.changed)

    def decide(self, args: ExtenderArgs) -> Decision:
        """The question (the pod, read once; the candidates) against what we know now."""
        settings = self._settings
        sources = self._sources
        self._groups.expire(self._clock())  # holds whose time ran out free their room for this call too
        self._groups.release_missing(self._existing_members, settings.group_members_grace_s)
        pod = self._pods.read(args.pod)
        view = self._inventory()
        claims = sources.claims
        keys = (
            pod_claims(args.pod)
            if claims is not None and (view.dra.classes or view.dra.mig_classes or claims.compute_domain_claims)
            else ()
        )
        if keys and claims is not None and (view.dra.classes or view.dra.mig_classes):
            # GPUs and MIG devices through the pod's ResourceClaims (DRA), on top of its
            # extended-resource requests; what was read of each claim, for explain.
            read = claims.read(keys, view.dra.classes.keys(), view.dra.mig_classes)
            pod = replace(
                pod,
                gpus_needed=pod.gpus_needed + gpus_total(read),
                mig_needed=add_mig(pod.mig_needed, mig_total(read)),
                claims_read=read,
            )
        if keys and claims is not None and claims.compute_domain_claims:  # multi-node NVLink (IMEX)
            pod = replace(pod, compute_domains=claims.compute_domains(keys))
        allocatable = args.allocatable(settings.gpu_resources, view.allocatable_gpus)
        summary: Callable[[str], NodeSummary | None] = self._state.summary
        # Nodes whose GPUs or MIG devices come through DRA: their unclaimed, untainted devices.
        if view.dra.gpu_devices or view.dra.mig_devices:
            free: Callable[[str], int | None]
            free, summary = self._dra_free.refresh(view.dra, claims, self._state.offered_summaries)
            tolerations = claims.tolerations(keys, view.dra.classes.keys()) if keys and claims is not None else ()
            if tolerations and claims is not None:  # a claim that tolerates device taints: its own view
                own = TolerantView(
                    view.dra, claims.allocated_on, tolerations, (free, summary), self._state.offered_summaries.get
                )
                free, summary = own.free, own.summary
            allocatable = DraAllocatable(allocatable, view.dra, free)
        ledger = sources.ledger
        if ledger is not None and len(ledger):  # nodes without usable agent data: less their bound pods
            allocatable = AllocatableLessBound(allocatable, ledger.pods_on)
        candidates = Candidates(args.candidate_names(), allocatable)
        group = self._group(pod, view, args.pod) if pod.group.ref is not None else None
        if isinstance(group, str):  # decided as a single pod: explain says why
            pod, group = replace(pod, group=GroupReading(None, group)), None
        if group is not None:
            held = dict(self._groups.own_units(group.ref.key))
            for node, members in group.placed_on.items():  # its gang's placed members' are not
                held[node] = held.get(node, 0) - members * group.per_member
            if held:  # the GPUs held for its own group are the member's to take
                summary = _given_back(summary, self._state.reported, held)
        classes = self._classes
        known = Snapshot(
            summary,
            view,
            classes.classes_by_node(view),
            self._clock(),
            settings.policy,
            nodes_in=lambda wanted: classes.nodes_in(view, wanted),
            excluded=lambda node: classes.excluded(view, node),
            bound_pods=ledger.pods_on if ledger is not None else lambda node: (),
            reported=self._state.reported,
            claim_holders=claims.holders_on if claims is not None else lambda node: {},
            fit_index=self._fits if summary is self._state.summary else None,
            published=sources.published,
            compute_domains_on=claims.compute_domains_on if claims is not None else lambda node: frozenset(),
        )
        kept_whole = self._kept_whole(view) if group is None else frozenset()
        return Decision(pod, self._plans.plan(pod, view), candidates, known, settings.shortlist, group, kept_whole)

    def _kept_whole(self, view: InventoryView) -> frozenset[str]:
        """The nodes of the first group level's whole domains (decide/whole_domains.py)."""
        level = self._settings.group_levels[0] if self._settings.group_levels else ""
        if not level:
            return frozenset()
        index = self._levels.index(view, level)
        if not index.value_of:
            return frozenset()
        return self._whole.whole_nodes(level, index.value_of, index.nodes_of)

    def _shared_cliques(self, view: InventoryView, pod: PodRequest) -> Callable[[Domain], bool] | None:
        """For a pod of a ComputeDomain: whether a domain (all its nodes) holds another one's claims
        (decide/compute_domains.shared_by_another); None for any other pod."""
        claims = self._sources.claims
        if not pod.compute_domains or claims is None:
            return None
        mine, on, levels = pod.compute_domains, claims.compute_domains_on, self._levels

        def shared(d: Domain) -> bool:  # (a domain of one node: that node, vetoed if it holds another)
            nodes = levels.index(view, d.level).nodes_of.get(d.value, frozenset()) if d.level != ANY else d.nodes
            return compute_domains.shared_by_another(mine, nodes, on)

        return shared

    def _existing_members(self, key: str) -> int | None:
        """Group `key`'s members that exist as pods, unbound or bound; None: not known."""
        pending = self._sources.pending_members(key)
        ledger = self._sources.ledger
        if pending is None:
            return None
        return pending + (sum(1 for _ in ledger.members(key)) if ledger is not None else 0)

    def _group(self, pod: PodRequest, view: InventoryView, raw: dict[str, Any]) -> GroupContext | str | None:
        """What is known of the pod's multi-pod group; None: a single pod (no GPU asked for, no size
        of 2 or more); a str: why a pod that names a group is decided as a single pod."""
        ref, book, sources = pod.group.ref, self._groups, self._sources
        if ref is None or not (pod.gpus_needed > 0 or pod.mig_needed):
            return None
        size, key = ref.size, ref.topology_key
        notes: list[str] = []
        if ref.source in SIZED_BY_OBJECT:
            spec = sources.pod_groups(ref.source, ref.namespace, ref.name)
            what = "Job" if ref.source == JOBSET else "PodGroup"
            if spec is None:
                return f"{ref.source} group {ref.namespace}/{ref.name}: its {what} is not known (yet): a single pod"
            if spec.size is None:
                return f"{ref.source} group {ref.namespace}/{ref.name}: its {what}: {spec.problem}: a single pod"
            size, key = spec.size, spec.topology_key or key
        if size is None or size < 2:
            return None
        plan = book.plan(ref.key)
        planned = None
        ledger = sources.ledger
        bound = tuple(p.node for p in ledger.members(ref.key)) if ledger is not None else ()

        gang = ref.source in GANG_SOURCES
        if plan is not None and not all(self._in_plan(view, plan, node) for node in bound):
            plan = None  # members were bound elsewhere (another replica chose): plan where they are
        if plan is not None:
            if plan.size != size:
                notes.append(f"members disagree on the group's size: {plan.size} (kept, the first seen) and {size}")
                size = plan.size
            planned = (plan.level, plan.value, plan.domain_name)
        placed_on: dict[str, int] = {}
        if plan is not None:
            uid = pod.uid
            if gang:
                placed_on = book.placed_on(ref.key, uid)
            else:  # the other members kube-scheduler nominated after their preemption
                book.member_nominated(ref.key, uid, nominated_node(raw))
                placed_on = book.nominated_on(ref.key, uid)
        released = book.released(ref.key)
        if released:
            notes.append(released)
        configured = self._settings.group_levels
        levels = _levels_for(key, configured)
        if not key and self._settings.group_preferred:  # no domain holds it: whole across domains
            levels = (*levels, ANY)
        # The unit its group is a role of: an OME InferenceService's engine or decoder, a
        # RoleBasedGroup's role.
        composite, role = pod.identity.composite, pod.identity.disaggregated_role
        if not composite:
            composite, role = rbg_role(raw)
        within, other_block = self._other_role_block(view, composite, role, levels[0], configured)
        return GroupContext(
            ref,
            size,
            bound,
            pod.gpus_needed,
            levels,
            partial(self._levels.index, view),
            planned,
            tuple(notes),
            can_plan=not (wait := book.wait_reason(ref.key, pod.uid)),
            wait=wait,
            placed_on=placed_on,
            gang=gang,
            second_choice=self._shared_cliques(view, pod),
            composite=composite,
            role=role,
            within=within,
            other_block=other_block,
            avoided=book.avoided(ref.key),
            pinned=not pinned_keys(raw).isdisjoint((*levels, HOSTNAME)),
            refused=book.refused_for(ref.key, pod.uid),
            held=dict(plan.holds) if plan is not None else {},
            expires_in=plan.expires_at - self._clock() if plan is not None else None,
            why=plan.why if plan is not None else "",
        )

    def _other_role_block(
        self, view: InventoryView, composite: str, role: str, first: str, configured: tuple[str, ...]
    ) -> tuple[frozenset[str] | None, str]:
        """For a role of a disaggregated InferenceService: the nodes of the block (the configured
        level above the group's first) where its other role is planned or bound, and that block's
        name; (None, "") where none is placed yet, or no level lies above."""
        at = configured.index(first) + 1 if composite and first in configured else 0
        if not at or at >= len(configured):
            return None, ""
        block = self._levels.index(view, configured[at])
        ledger = self._sources.ledger
        values: set[str] = set()
        for other in self._groups.partners(composite, role):
            plan = self._groups.plan(other)
            nodes = [
                *(plan.holds if plan is not None else ()),
                *(p.node for p in (ledger.members(other) if ledger else ())),
            ]
            values.update(v for n in nodes if (v := block.value_of.get(n)) is not None)
        if not values:
            return None, ""
        within = frozenset().union(*(block.nodes_of.get(v, frozenset()) for v in values))
        return within, ", ".join(f"{configured[at]}={v}" for v in sorted(values))

    def level_index(self, view: InventoryView, level: str) -> LevelIndex:
        """A label's values over the inventory's nodes (cached per inventory version)."""
        return self._levels.index(view, level)

    def _in_plan(self, view: InventoryView, plan: GroupPlan, node: str) -> bool:
        if plan.level == ANY:
            return True
        if plan.value == NO_LABEL:
            return plan.domain_name == f"node {node}"
        return self._levels.index(view, plan.level).value_of.get(node) == plan.value


def _levels_for(key: str, configured: tuple[str, ...]) -> tuple[str, ...]:
    """The levels a group's domain is chosen at: the configured ones (`--group-topology-levels`); for
    a group that names its own label, the configured levels up to it when it is one of them (a
    clique inside the block it asks for), else that label alone."""
    if not key:
        return configured
    return configured[: configured.index(key) + 1] if key in configured else (key,)


class LevelIndexes:
    """group_domains.level_index per (inventory version, label): the view is immutable per version,
    so each label's values are gathered once, not per call (a 5,000-name member's filter looked up
    every candidate's labels: ~3 ms). Bounded: MAX_LEVELS labels per version."""

    MAX_LEVELS = 16

    def __init__(self) -> None:
        self._version = -1
        self._indexes: dict[str, LevelIndex] = {}

    def index(self, view: InventoryView, level: str) -> LevelIndex:
        if view.version != self._version or len(self._indexes) >= self.MAX_LEVELS:
            self._indexes = {}
            self._version = view.version
        found = self._indexes.get(level)
        if found is None:
            found = self._indexes[level] = level_index(level, view.node_labels)
        return found


def _given_back(
    summary: Callable[[str], NodeSummary | None], reported: Callable[[str], NodeSummary | None], own: Mapping[str, int]
) -> Callable[[str], NodeSummary | None]:
    def lookup(node: str) -> NodeSummary | None:
        s = summary(node)
        units = own.get(node)
        return given_back(s, reported(node), units) if s is not None and units else s

    return lookup
