"""The members of multi-pod groups that exist as pods not yet bound (issue 53 item 5): a group's
room is held only for members that exist. Any user who may create pods can name a group of 64
members and create one; LeaderWorkerSet, JobSet and the PodGroup controllers create every member
at once, so a group whose members do not all exist as pods a grace after its room was held has its
hold released (state/group_book.GroupBook.members_missing) until another member comes.

An `InventorySink` for Pods that are Pending and unbound (`PENDING_POD`'s field selector): per
group key (model/pod_group.read_group), the UIDs of its members; a pod that binds leaves the
selector (the watch says deleted) and is then the ledger's. Not synced (no list yet, or the watch
not started: no --kubernetes) or past its bound, it knows nothing: `count` says None, and no hold
is released for members it cannot see (unknown is never absent).

Bounded: at most MAX_PENDING member pods in all (a cluster past it: counts unknown until the next
relist, as a pod left out then is missing from every count; one log line).
"""

from __future__ import annotations

import logging

from gpuextender.extender.model.kube_objects import KubeObject
from gpuextender.extender.model.pod_group import read_group
from gpuextender.extender.model.untrusted import object_at

log = logging.getLogger("gpu_extender.groups")

MAX_PENDING = 100_000  # member pods kept (a UID and a key each: ~20 MiB at the bound)


class PendingMembers:
    """`InventorySink` for PENDING_POD: the unbound members of each group."""

    def __init__(self, max_pods: int = MAX_PENDING) -> None:
        self._max = max_pods
        self._members: dict[str, set[str]] = {}  # group key -> member UIDs
        self._group_of: dict[str, str] = {}  # UID -> group key
        self.synced = False
        self.over = False  # a pod was not kept (past the bound): counts unknown until a relist

    def count(self, key: str) -> int | None:
        """The members of group `key` that exist as unbound pods; None when not known."""
        if not self.synced or self.over:
            return None
        return len(self._members.get(key, ()))

    def __len__(self) -> int:
        return len(self._group_of)

    def replace_all(self, kind: str, objects: list[KubeObject]) -> None:
        self._members, self._group_of, self.over = {}, {}, False
        for obj in objects:
            self._put(obj)
        self.synced = True

    def upsert(self, kind: str, obj: KubeObject) -> None:
        self._put(obj)

    def delete(self, kind: str, obj: KubeObject) -> None:
        uid = object_at(obj, "metadata").get("uid")
        if isinstance(uid, str):
            self._drop(uid)

    def _put(self, obj: KubeObject) -> None:
        meta = object_at(obj, "metadata")
        uid = meta.get("uid")
        if not isinstance(uid, str) or not uid:
            return
        ref = read_group(obj).ref
        if ref is None or meta.get("deletionTimestamp") or object_at(obj, "spec").get("nodeName"):
            self._drop(uid)  # (no group, being deleted, or bound: not a member that waits)
            return
        if uid not in self._group_of and len(self._group_of) >= self._max:
            if not self.over:
                log.warning(
                    "more than %d pending group member pods: holds are no longer released for members "
                    "that do not exist, until the pod watch lists again",
                    self._max,
                )
            self.over = True
            return
        self._drop(uid)
        self._group_of[uid] = ref.key
        self._members.setdefault(ref.key, set()).add(uid)

    def _drop(self, uid: str) -> None:
        key = self._group_of.pop(uid, None)
        if key is not None:
            members = self._members[key]
            members.discard(uid)
            if not members:
                del self._members[key]
