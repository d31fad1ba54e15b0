"""PodDisruptionBudgets, kept to count honestly the victims the preempt verb adds (issue 51;
decide/preempt_victims.py): kube-scheduler picks among candidates by their `NumPDBViolations` first.

An `InventorySink` for the kind PodDisruptionBudget (policy/v1, read-only), fed by its own watch.
`violations(pods, before)` counts as kube-scheduler's preemption does (filterPodsWithPDBViolation):
per pod with labels, each budget of its namespace whose selector is not empty and matches its labels,
and that does not list the pod among its `status.disruptedPods`, gives one of its
`status.disruptionsAllowed`; a pod that takes one below zero violates it. `before` (kube-scheduler's
own victims) are counted first, so they take what the budgets allow before the added ones.

Unknown is never allowed: until the watch has listed the budgets (`synced`), `violations` is None
and the preempt verb adds no victim. `generation` changes with every change of what `violations`
reads: the preempt verb keeps a plan that read the budgets for the generation it read."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuextender.extender.model.kube_objects import KubeObject
from gpuextender.extender.model.label_selector import LabelSelector, read_selector
from gpuextender.extender.model.untrusted import object_at
from gpuextender.extender.state.pod_ledger import BoundPod

KIND = "PodDisruptionBudget"


@dataclass(frozen=True, slots=True)
class Budget:
    name: str
    selector: LabelSelector | None  # None: matches nothing
    allowed: int  # status.disruptionsAllowed (0 where absent)
    disrupted: frozenset[str]  # status.disruptedPods: pod names already counted


class DisruptionBudgets:
    def __init__(self) -> None:
        self._by_namespace: dict[str, dict[str, Budget]] = {}
        self.synced = False
        self.generation = 0  # (decide/preempt_victims.Budgets)

    def __len__(self) -> int:
        return sum(len(b) for b in self._by_namespace.values())

    def replace_all(self, kind: str, objects: list[KubeObject]) -> None:
        self._by_namespace = {}
        for obj in objects:
            self.upsert(kind, obj)
        self.synced = True
        self.generation += 1  # (a list of none changes `synced`)

    def upsert(self, kind: str, obj: KubeObject) -> None:
        meta = object_at(obj, "metadata")
        namespace, name = meta.get("namespace"), meta.get("name")
        if not isinstance(namespace, str) or not isinstance(name, str):
            return
        self.generation += 1
        status = object_at(obj, "status")
        allowed = status.get("disruptionsAllowed")
        disrupted = object_at(status, "disruptedPods")
        self._by_namespace.setdefault(namespace, {})[name] = Budget(
            name,
            read_selector(object_at(obj, "spec").get("selector")),
            allowed if isinstance(allowed, int) and not isinstance(allowed, bool) else 0,
            frozenset(k for k in disrupted if isinstance(k, str)),
        )

    def delete(self, kind: str, obj: KubeObject) -> None:
        self.generation += 1
        meta = object_at(obj, "metadata")
        budgets = self._by_namespace.get(str(meta.get("namespace")))
        if budgets is not None:
            budgets.pop(str(meta.get("name")), None)
            if not budgets:
                del self._by_namespace[str(meta.get("namespace"))]

    def violations(self, pods: Sequence[BoundPod], before: Iterable[BoundPod] = ()) -> int | None:
        """How many of `pods` evicting would take a budget below zero, after `before`; None until synced."""
        if not self.synced:
            return None
        left: dict[tuple[str, str], int] = {}
        for pod in before:
            self._take(pod, left)
        return sum(self._take(pod, left) for pod in pods)

    def _take(self, pod: BoundPod, left: dict[tuple[str, str], int]) -> bool:
        if not pod.labels:
            return False
        namespace, _, name = pod.key.partition("/")
        labels = dict(pod.labels)
        violated = False
        for budget in self._by_namespace.get(namespace, {}).values():
            selector = budget.selector
            if selector is None or selector.empty or not selector.matches(labels) or name in budget.disrupted:
                continue
            key = (namespace, budget.name)
            left[key] = left.get(key, budget.allowed) - 1
            if left[key] < 0:
                violated = True
        return violated
