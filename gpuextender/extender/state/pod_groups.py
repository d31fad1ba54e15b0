"""PodGroups as the group sources define them (model/pod_group.py): the member count that makes a
group whole, and the label its members must share, by (source, namespace, name). JobSet's Jobs
likewise (their parallelism).

An `InventorySink` per source (the Workload API's, coscheduling's and Volcano's PodGroup kinds are
three APIs; JobSet's Jobs a fourth), fed by a read-only list+watch; like the bound-pod ledger, not part of the
InventoryStore (groups churn with jobs). A source whose API is not served is empty: its pods are
decided as single pods, and explain says their PodGroup is unknown. Bounded: at most MAX_POD_GROUPS
per source (a cluster past it keeps the first ones and logs once).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gpuextender.extender.model.kube_objects import KubeObject
from gpuextender.extender.model.pod_group import PodGroupSpec, read_pod_group
from gpuextender.extender.model.untrusted import object_at

log = logging.getLogger("gpu_extender.groups")

MAX_POD_GROUPS = 50_000  # per source; a spec is ~100 bytes: ~5 MiB at the bound


class PodGroups:
    """`InventorySink` for one source's PodGroup kind."""

    def __init__(self, source: str, max_groups: int = MAX_POD_GROUPS) -> None:
        self.source = source
        self._max = max_groups
        self._specs: dict[tuple[str, str], PodGroupSpec] = {}
        self.synced = False
        self.dropped = 0  # PodGroups not kept: past the bound
        self._deleted: list[Callable[[str, str], None]] = []

    def on_delete(self, listener: Callable[[str, str], None]) -> None:
        """`listener(namespace, name)` when a PodGroup is deleted (its group's hold goes with it)."""
        self._deleted.append(listener)

    def spec(self, namespace: str, name: str) -> PodGroupSpec | None:
        return self._specs.get((namespace, name))

    def __len__(self) -> int:
        return len(self._specs)

    def replace_all(self, kind: str, objects: list[KubeObject]) -> None:
        before = self._specs
        self._specs = {}
        for obj in objects:
            self._put(obj)
        self.synced = True
        for namespace, name in before.keys() - self._specs.keys():  # gone while the watch was down
            self._gone(namespace, name)

    def upsert(self, kind: str, obj: KubeObject) -> None:
        self._put(obj)

    def delete(self, kind: str, obj: KubeObject) -> None:
        key = _key(obj)
        if key is not None and self._specs.pop(key, None) is not None:
            self._gone(*key)

    def _gone(self, namespace: str, name: str) -> None:
        for listener in self._deleted:
            listener(namespace, name)

    def _put(self, obj: KubeObject) -> None:
        key = _key(obj)
        if key is None:
            return
        if key not in self._specs and len(self._specs) >= self._max:
            if not self.dropped:
                log.warning("%s PodGroups: more than %d, the rest are not read", self.source, self._max)
            self.dropped += 1
            return
        spec = read_pod_group(self.source, obj)
        if spec.problem:
            log.info("%s PodGroup %s/%s: %s: its pods are single pods", self.source, key[0], key[1], spec.problem)
        self._specs[key] = spec


def _key(obj: KubeObject) -> tuple[str, str] | None:
    meta = object_at(obj, "metadata")
    namespace, name = meta.get("namespace") or "default", meta.get("name")
    if not isinstance(namespace, str) or not isinstance(name, str):
        return None
    return namespace, name
