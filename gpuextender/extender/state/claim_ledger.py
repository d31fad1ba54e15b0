"""The devices ResourceClaims hold, per node: what DRA's allocator has handed out.

An `InventorySink` for the kind ResourceClaim, fed by its own list+watch (or the file inventory),
kept out of the InventoryStore as pods are (pod_ledger.py): claims churn with every claim pod, and
must not rebuild the view. Every claim is kept with what it asks for (a pod's GPU demand:
`read`); allocated ones (`status.allocation`) also hold devices. A claim being deleted still
holds its devices while its allocation is there (a finalizer keeps it), so it still counts. A claim
the extender cannot read is skipped and counted in `invalid`.

Each version's change is logged by node (`nodes_changed_since`), so a cache of per-node figures
(dra_inventory.DraFree) recomputes the one node a claim moved, not the fleet: at 100 claim changes
a second, every scheduler call would otherwise pay a 5,000-node recount (bench/RESULTS.md, "DRA at
fleet scale").
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Collection, Iterable, Mapping
from collections.abc import Set as AbstractSet

from gpuextender.extender.model.dra import (
    Claim,
    ClaimRead,
    DeviceClassInfo,
    DeviceRef,
    Toleration,
    parse_resource_claim,
    read_request,
)
from gpuextender.extender.model.kube_objects import KubeObject
from gpuextender.extender.model.pod_gpus import MigNeed
from gpuextender.extender.model.untrusted import InvalidInput, object_at

log = logging.getLogger("gpu_extender.claims")

TO_ALLOCATE, ALLOCATED, NOT_LISTED = "to allocate", "allocated", "not listed yet"  # ClaimRead.state


def gpus_total(read: Iterable[ClaimRead]) -> int:
    """The whole GPUs the claims read ask for, all together (a claim not listed yet: none known)."""
    return sum(r.gpus for c in read for r in c.requests)


def mig_total(read: Iterable[ClaimRead]) -> MigNeed:
    """The MIG devices per profile the claims read ask for, all together."""
    total: dict[str, int] = {}
    for c in read:
        for r in c.requests:
            if r.mig is not None:
                total[r.mig[0]] = total.get(r.mig[0], 0) + r.mig[1]
    return tuple(sorted(total.items()))


RESOURCE_CLAIM_KIND = "ResourceClaim"
MAX_POD_TOLERATIONS = 64  # distinct tolerations of one pod's claims a decision matches (tolerations)
# Changes remembered by node: a reader further behind than this recomputes everything.
CHANGE_LOG = 4096


class ClaimLedger:
    def __init__(self) -> None:
        self._claims: dict[str, Claim] = {}  # namespace/name -> claim, allocated or not
        self._by_node: dict[str, dict[str, Claim]] = {}  # allocated claims only
        self.synced = False
        self.invalid = 0
        self.version = 0  # changes with every change of what claims hold
        self._changes: deque[tuple[int, str]] = deque(maxlen=CHANGE_LOG)  # (version, node whose devices changed)
        self._reset_at = 0  # the version of the last replace_all: the log says nothing before it
        self._node_versions: dict[str, int] = {}  # node -> the version that last changed its claims
        self.compute_domain_claims = 0  # claims that name a ComputeDomain (none: a decision skips the rule)

    def __len__(self) -> int:
        return len(self._claims)

    def allocated_count(self) -> int:
        return sum(len(on_node) for on_node in self._by_node.values())

    def allocated_on(self, node: str) -> AbstractSet[DeviceRef]:
        """The devices on `node` some claim holds (a device shared by several claims, once). Computed
        per call: decisions ask once per node per claims version (dra_inventory.DraFree)."""
        return frozenset(d for c in self._by_node.get(node, {}).values() for d in c.devices)

    def compute_domains_on(self, node: str) -> frozenset[str]:
        """The ComputeDomains whose channel or daemon a claim allocated on `node` holds (model/dra.py)."""
        return frozenset(c.compute_domain for c in self._by_node.get(node, {}).values() if c.compute_domain)

    def compute_domains(self, claim_keys: Iterable[str]) -> frozenset[str]:
        """The ComputeDomains the claims `claim_keys` name (a pod's: allocated or not)."""
        return frozenset(c.compute_domain for key in claim_keys if (c := self._claims.get(key)) and c.compute_domain)

    def holders_on(self, node: str) -> dict[DeviceRef, str]:
        """Which claim holds each device on `node` (one of them, for a device several claims share)."""
        return {device: c.key for c in self._by_node.get(node, {}).values() for device in c.devices}

    def claim(self, key: str) -> Claim | None:
        return self._claims.get(key)

    def nodes_changed_since(self, version: int) -> set[str] | None:
        """The nodes whose held devices changed after `version`; None when that is not known any
        more (a re-list since, or more changes than the log keeps): then every node may have."""
        if version < self._reset_at:
            return None
        log_ = self._changes
        if len(log_) == log_.maxlen and log_[0][0] > version + 1:
            return None
        changed: set[str] = set()
        for v, node in reversed(log_):
            if v <= version:
                break
            changed.add(node)
        return changed

    def node_version(self, node: str) -> int:
        """A number that changes whenever what the claims hold on `node` may have (publication.py
        recomputes a node only then)."""
        return max(self._node_versions.get(node, 0), self._reset_at)

    def _changed(self, *claims: Claim | None) -> None:
        self.version += 1
        for c in claims:
            if c is not None and c.allocated:
                self._changes.append((self.version, c.node))
                self._node_versions[c.node] = self.version

    def read(
        self, claim_keys: Iterable[str], gpu_classes: Collection[str], mig_classes: Mapping[str, DeviceClassInfo]
    ) -> tuple[ClaimRead, ...]:
        """A pod's claims as the decision reads them (model/dra.read_request, per request): a claim
        already allocated asks for nothing more (its devices are held: a shared claim); one not
        listed yet is unknown."""
        found = []
        for key in claim_keys:
            c = self._claims.get(key)
            if c is None:
                found.append(ClaimRead(key, NOT_LISTED))
            elif c.allocated:
                found.append(ClaimRead(key, ALLOCATED))
            else:
                found.append(
                    ClaimRead(key, TO_ALLOCATE, tuple(read_request(r, gpu_classes, mig_classes) for r in c.requests))
                )
        return tuple(found)

    def tolerations(self, claim_keys: Iterable[str], gpu_classes: AbstractSet[str]) -> tuple[Toleration, ...]:
        """The device taints a pod's claims still being allocated tolerate, in their GPU requests
        (an operator's diagnostics claim on a quarantined GPU); () for nearly every pod. At most
        MAX_POD_TOLERATIONS, the first ones: each is matched against every taint of every device on
        the nodes with taints, per filter (the API allows 16 per request, 4,096 in one claim: 325 ms
        per filter over 1,000 nodes with a tainted device, against 12.5 ms for 64; bench/RESULTS.md),
        and tolerating fewer can only offer fewer GPUs, never more."""
        found: list[Toleration] = []
        for key in claim_keys:
            c = self._claims.get(key)
            if c is None or c.allocated:
                continue
            for request in c.requests:
                if request.tolerations and any(cls in gpu_classes for cls, _ in request.choices):
                    found.extend(request.tolerations)
        return tuple(dict.fromkeys(found))[:MAX_POD_TOLERATIONS]

    def _read(self, obj: KubeObject) -> Claim | None:
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
        self.compute_domain_claims = sum(1 for c in claims.values() if c.compute_domain)
        for c in claims.values():
            if c.allocated:
                self._by_node.setdefault(c.node, {})[c.key] = c
        self.synced = True
        self.version += 1
        self._reset_at = self.version
        self._changes.clear()
        self._node_versions.clear()

    def upsert(self, kind: str, obj: KubeObject) -> None:
        c = self._read(obj)
        meta = object_at(obj, "metadata")
        key = c.key if c is not None else f"{meta.get('namespace')}/{meta.get('name')}"
        before = self._claims.get(key)
        if before == c:
            return
        self._changed(before, c)
        if before is not None:
            self._drop(before)
        if c is not None:
            self._claims[key] = c
            self.compute_domain_claims += bool(c.compute_domain)
            if c.allocated:
                self._by_node.setdefault(c.node, {})[key] = c

    def delete(self, kind: str, obj: KubeObject) -> None:
        meta = object_at(obj, "metadata")
        before = self._claims.get(f"{meta.get('namespace')}/{meta.get('name')}")
        if before is not None:
            self._changed(before)
            self._drop(before)

    def _drop(self, c: Claim) -> None:
        del self._claims[c.key]
        self.compute_domain_claims -= bool(c.compute_domain)
        if not c.allocated:
            return
        on_node = self._by_node[c.node]
        del on_node[c.key]
        if not on_node:
            del self._by_node[c.node]
