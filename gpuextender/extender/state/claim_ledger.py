"""The devices ResourceClaims hold, per node: what DRA's allocator has handed out.

An `InventorySink` for the kind ResourceClaim, fed by its own list+watch (or the file inventory),
kept out of the InventoryStore as pods are (pod_ledger.py): claims churn with every claim pod, and
must not rebuild the view. Only allocated claims are kept (`status.allocation`); a claim being
deleted still holds its devices while its allocation is there (a finalizer keeps it), so it still
counts. A claim the extender cannot read is skipped and counted in `invalid`.
"""

from __future__ import annotations

import logging
from collections.abc import Set as AbstractSet

from gpuextender.extender.model.dra import ClaimAllocation, DeviceRef, parse_resource_claim
from gpuextender.extender.model.kube_objects import KubeObject
from gpuextender.extender.model.untrusted import InvalidInput, object_at

log = logging.getLogger("gpu_extender.claims")

RESOURCE_CLAIM_KIND = "ResourceClaim"


class ClaimLedger:
    def __init__(self) -> None:
        self._claims: dict[str, ClaimAllocation] = {}  # namespace/name -> allocated claim
        self._by_node: dict[str, dict[str, ClaimAllocation]] = {}
        self._held: dict[str, frozenset[DeviceRef]] = {}  # node -> devices its claims hold
        self.synced = False
        self.invalid = 0

    def __len__(self) -> int:
        return len(self._claims)

    def allocated_on(self, node: str) -> AbstractSet[DeviceRef]:
        """The devices on `node` some claim holds (a device shared by several claims, once)."""
        return self._held.get(node, frozenset())

    def claim(self, key: str) -> ClaimAllocation | None:
        return self._claims.get(key)

    def _read(self, obj: KubeObject) -> ClaimAllocation | None:
        try:
            return parse_resource_claim(obj)
        except InvalidInput as exc:
            self.invalid += 1
            log.warning("claims: skipped: %s", exc.message)
            return None

    # -- InventorySink ---------------------------------------------------------

    def replace_all(self, kind: str, objects: list[KubeObject]) -> None:
        claims = {}
        for obj in objects:
            c = self._read(obj)
            if c is not None:
                claims[c.key] = c
        self._claims = claims
        self._by_node = {}
        for c in claims.values():
            self._by_node.setdefault(c.node, {})[c.key] = c
        self._held = {node: _devices(on_node) for node, on_node in self._by_node.items()}
        self.synced = True

    def upsert(self, kind: str, obj: KubeObject) -> None:
        c = self._read(obj)
        meta = object_at(obj, "metadata")
        key = c.key if c is not None else f"{meta.get('namespace')}/{meta.get('name')}"
        before = self._claims.get(key)
        if before == c:
            return
        if before is not None:
            self._drop(before)
        if c is not None:
            self._claims[key] = c
            self._by_node.setdefault(c.node, {})[key] = c
            self._held[c.node] = _devices(self._by_node[c.node])

    def delete(self, kind: str, obj: KubeObject) -> None:
        meta = object_at(obj, "metadata")
        before = self._claims.get(f"{meta.get('namespace')}/{meta.get('name')}")
        if before is not None:
            self._drop(before)

    def _drop(self, c: ClaimAllocation) -> None:
        del self._claims[c.key]
        on_node = self._by_node[c.node]
        del on_node[c.key]
        if on_node:
            self._held[c.node] = _devices(on_node)
        else:
            del self._by_node[c.node]
            del self._held[c.node]


def _devices(claims: dict[str, ClaimAllocation]) -> frozenset[DeviceRef]:
    return frozenset(d for c in claims.values() for d in c.devices)
