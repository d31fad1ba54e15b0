"""What the scheduler API reads besides the agents' GPU state and the inventory view: the sources a
cluster gives (app.py builds them first, with --kubernetes), handed to `SchedulerApi` when it is
built and never set on it afterwards. Each default is what a fleet without that source has: no
bound pods known, no DRA claims, no PodGroup objects, nothing published, no
PodDisruptionBudgets, no bind verb, an inventory that is listed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuextender.extender.decide.preempt_victims import Budgets
from gpuextender.extender.model.pod_group import PodGroupSpec
from gpuextender.extender.state.claim_ledger import ClaimLedger
from gpuextender.extender.state.pod_ledger import BoundPod, PodLedger
from gpuextender.extender.state.publication import NodePublished

if TYPE_CHECKING:  # the Kubernetes client is imported only with --kubernetes (app.py)
    from gpuextender.extender.scheduler.pod_binder import PodBinder

# A PodGroup's size and domain key by (source, namespace, name) (state/pod_groups.py).
PodGroupLookup = Callable[[str, str, str], PodGroupSpec | None]


def no_pod_group(_source: str, _namespace: str, _name: str) -> PodGroupSpec | None:
    return None


def nothing_published(_node: str) -> NodePublished | None:
    return None


class NoBudgets:
    """No PodDisruptionBudget: nothing an eviction breaks, ever (a generation that never changes)."""

    generation = 0

    def violations(self, _pods: Sequence[BoundPod], _before: Sequence[BoundPod]) -> int | None:
        return 0


NO_BUDGETS = NoBudgets()


def listed() -> bool:
    return True


@dataclass(frozen=True)
class ClusterSources:
    ledger: PodLedger | None = None  # bound pods (state/pod_ledger.py)
    claims: ClaimLedger | None = None  # the devices DRA claims hold (state/claim_ledger.py)
    pod_groups: PodGroupLookup = no_pod_group
    # A group's members that exist as unbound pods (state/pending_members.py); None: not known.
    pending_members: Callable[[str], int | None] = lambda _key: None
    published: Callable[[str], NodePublished | None] = nothing_published  # the device-taint writer's
    # The PodDisruptionBudgets (state/disruption_budgets.py): the preempt verb counts the ones its
    # added victims break.
    budgets: Budgets = NO_BUDGETS
    binder: PodBinder | None = None  # the bind verb's Bindings through the API server
    inventory_ready: Callable[[], bool] = listed  # /readyz: the first full list of every kind


NO_CLUSTER = ClusterSources()  # no bound pods, DRA claims or PodGroups known (a test, a benchmark)
