"""In-memory store of the cluster objects the sources deliver.

Sources call `replace_all` / `upsert` / `delete` (the `InventorySink`
protocol). Every change bumps `version` and calls the `on_change` hook, which
the extender uses to rebuild its derived view (node classes, runtimes, ...)
off the request path.

Nodes are kept as the part the extender reads (name, labels, allocatable): a
full Node is ~10-20 KB of images and conditions, and the kubelet rewrites its
status every few minutes even when nothing changed. An update that leaves that
part unchanged is stored (its new resourceVersion) but is not a change: in a
5,000-node cluster that turns thousands of status writes per minute into no
view rebuilds at all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from gpuextender.extender.model.dra import relevant_slice_part
from gpuextender.extender.model.kube_objects import KIND_BY_NAME, KINDS, NODE, RESOURCE_SLICE, KubeObject, object_key
from gpuextender.extender.state.node_gpu_status import CONDITION_TYPE

# A Node's taints kept (the node-status writer's own is among the few a Node has; a Node with more
# than this many is malformed or hostile, and the rest are not ours to read).
MAX_KEPT_TAINTS = 64

log = logging.getLogger("gpu_extender.inventory")


_ALL_KINDS = tuple(k.kind for k in KINDS)


class InventoryStore:
    def __init__(self, kinds: Iterable[str] = _ALL_KINDS) -> None:
        self._objects: dict[str, dict[str, KubeObject]] = {kind: {} for kind in kinds}
        self._synced: set[str] = set()
        self.version = 0
        self._listeners: list[Callable[[str], None]] = []

    def on_change(self, listener: Callable[[str], None]) -> None:
        """Call `listener(kind)` after every change."""
        self._listeners.append(listener)

    def _changed(self, kind: str) -> None:
        self.version += 1
        for listener in self._listeners:
            listener(kind)

    def _bucket(self, kind: str) -> dict[str, KubeObject]:
        bucket = self._objects.get(kind)
        if bucket is None:
            raise ValueError(f"unknown kind {kind!r}; known: {sorted(KIND_BY_NAME)}")
        return bucket

    # -- InventorySink ---------------------------------------------------------

    def replace_all(self, kind: str, objects: list[KubeObject]) -> None:
        bucket = self._bucket(kind)
        fresh: dict[str, KubeObject] = {}
        for obj in objects:
            key = _key_or_none(kind, obj)
            if key is not None:
                fresh[key] = _relevant_part(kind, obj)
        bucket.clear()
        bucket.update(fresh)
        first = kind not in self._synced
        self._synced.add(kind)
        if first:
            log.info("inventory: %s synced (%d object(s))", kind, len(fresh))
        self._changed(kind)

    def upsert(self, kind: str, obj: KubeObject) -> None:
        key = _key_or_none(kind, obj)
        if key is None:
            return
        bucket = self._bucket(kind)
        obj = _relevant_part(kind, obj)
        if kind == NODE.kind:
            old = bucket.get(key)
            if old is not None and _without_version(old) == _without_version(obj):
                bucket[key] = obj
                return
        bucket[key] = obj
        self._changed(kind)

    def delete(self, kind: str, obj: KubeObject) -> None:
        key = _key_or_none(kind, obj)
        if key is not None and self._bucket(kind).pop(key, None) is not None:
            self._changed(kind)

    # -- reading -----------------------------------------------------------------

    def objects(self, kind: str) -> list[KubeObject]:
        return list(self._bucket(kind).values())

    def get(self, kind: str, key: str) -> KubeObject | None:
        return self._bucket(kind).get(key)

    def synced(self, kind: str) -> bool:
        return kind in self._synced

    @property
    def ready(self) -> bool:
        """Every kind has been listed at least once (the first full list is in)."""
        return self._synced >= set(self._objects)

    def counts(self) -> dict[str, int]:
        return {kind: len(bucket) for kind, bucket in self._objects.items()}


def _key_or_none(kind: str, obj: KubeObject) -> str | None:
    try:
        return object_key(obj)
    except (KeyError, TypeError, AttributeError):
        log.warning("inventory: %s object without metadata.name skipped", kind)
        return None


def _relevant_part(kind: str, obj: KubeObject) -> KubeObject:
    """What the store keeps of an object: the parts the view reads, for the kinds that are large."""
    if kind == NODE.kind:
        return relevant_node_part(obj)
    if kind == RESOURCE_SLICE.kind:
        slim: KubeObject = relevant_slice_part(obj)
        return slim
    return obj


def relevant_node_part(node: KubeObject) -> KubeObject:
    """What the extender reads of a Node (`view._parse_node`, `node_class`): identity,
    labels and status.allocatable; and what its node-status writer compares with what it wants
    (inventory/node_status_writer.py): the taints and the GPUsUsable condition only, which no
    decision reads (`_without_version` leaves them out: a write of ours rebuilds nothing).
    Malformed parts are kept as they are, so the view still reports them as invalid."""
    meta = node.get("metadata")
    if not isinstance(meta, dict):
        return node
    slim: KubeObject = {
        "apiVersion": node.get("apiVersion", "v1"),
        "kind": "Node",
        "metadata": {k: meta[k] for k in ("name", "labels", "resourceVersion", "uid") if k in meta},
    }
    status = node.get("status")
    if isinstance(status, dict) and "allocatable" in status:
        slim["status"] = {"allocatable": status["allocatable"]}
    elif status is not None and not isinstance(status, dict):
        slim["status"] = status
    spec = node.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("taints"), list) and spec["taints"]:
        slim["spec"] = {"taints": spec["taints"][:MAX_KEPT_TAINTS]}
    if isinstance(status, dict) and isinstance(status.get("conditions"), list):
        ours = [c for c in status["conditions"] if isinstance(c, dict) and c.get("type") == CONDITION_TYPE]
        if ours and isinstance(slim.get("status"), dict):
            slim["status"]["conditions"] = ours[:1]
    return slim


def _without_version(node: KubeObject) -> KubeObject:
    """The part of a kept Node a decision reads: no resourceVersion, taints or condition."""
    meta = node.get("metadata")
    status = node.get("status")
    if isinstance(meta, dict) and "resourceVersion" in meta:
        node = {**node, "metadata": {k: v for k, v in meta.items() if k != "resourceVersion"}}
    if "spec" in node:
        node = {k: v for k, v in node.items() if k != "spec"}
    if isinstance(status, dict) and "conditions" in status:
        node = {**node, "status": {k: v for k, v in status.items() if k != "conditions"}}
    return node
