"""Inventory from Kubernetes YAML on disk (`--inventory PATH`): the cluster-free source.

PATH is a file or a directory of *.yaml / *.yml / *.json files, each holding one
or more documents (`---`) or `kind: List` wrappers, with the same objects
`kubectl get -o yaml` shows: Nodes and OME's custom resources. The directory is
polled and reloaded when a file is added, changed or removed, so editing an
AcceleratorClass changes the next decision without a restart.

A file that is not usable keeps its last good content, logged once per change of
that file: one that does not parse, that is empty (0 bytes, or only comments and
`---`), or with a document that is not a Kubernetes object (a scalar such as
`hello`, a list, a mapping without `kind`). A non-atomic save truncates the file
first and writes it piecemeal; none of those moments may make objects vanish.
**Deleting the file is how its objects are removed** (or, to keep the file,
`{kind: List, items: []}`). A file that is unusable when first seen contributes
nothing until it holds objects. A well-formed object of an unknown kind is
ignored; one the view cannot use is skipped there (`extender.state.inventory_view`).

`kind: Pod` objects go to the `pods` sink (the bound-pod ledger, extender/state/pod_ledger.py), and
`kind: ResourceClaim` ones to the `claims` sink (state/claim_ledger.py), not to the inventory
store: every load that changed anything replaces them all with the pods (claims) the files hold
now (ignored without that sink). A Pod without `metadata.uid` (written by hand)
is given `file:<namespace>/<name>`, so the same pod keeps its identity across reloads.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuextender.extender.model.kube_objects import KIND_BY_NAME, POD, RESOURCE_CLAIM, InventorySink, KubeObject
from gpuextender.extender.model.untrusted import InvalidInput, described

log = logging.getLogger("gpu_extender.inventory")

_SUFFIXES = (".yaml", ".yml", ".json")


class InventoryPathError(ValueError):
    """The inventory path itself is unusable (missing)."""


@dataclass(slots=True)
class _FileState:
    signature: tuple[float, int]  # (mtime, size)
    objects: list[KubeObject]
    good: bool = True  # False: unusable since first seen, so `objects` is empty, not a last good content


class FileInventorySource:
    def __init__(
        self,
        path: Path,
        sink: InventorySink,
        *,
        poll_interval_s: float = 1.0,
        pods: InventorySink | None = None,
        claims: InventorySink | None = None,
    ) -> None:
        if not path.exists():
            raise InventoryPathError(f"inventory {path}: no such file or directory")
        self.path = path
        self._sink = sink
        self._pods = pods
        self._claims = claims
        self._kinds = set(KIND_BY_NAME)
        if pods is not None:
            self._kinds.add(POD.kind)
        if claims is not None:
            self._kinds.add(RESOURCE_CLAIM.kind)
        self._poll_interval_s = poll_interval_s
        self._files: dict[Path, _FileState] = {}
        self._listing: tuple[tuple[str, float, int], ...] | None = None

    def _scan(self) -> dict[Path, tuple[float, int]]:
        if self.path.is_dir():
            candidates = [p for p in self.path.iterdir() if p.suffix in _SUFFIXES and p.is_file()]
        elif self.path.is_file():
            candidates = [self.path]
        else:
            candidates = []
        found = {}
        for p in sorted(candidates):
            try:
                st = p.stat()
            except OSError:
                continue  # removed between listing and stat
            found[p] = (st.st_mtime, st.st_size)
        return found

    def load(self) -> bool:
        """Read what changed on disk and push every kind to the sink. Returns
        whether anything changed (the first call always pushes)."""
        found = self._scan()
        listing = tuple((str(p), *sig) for p, sig in found.items())
        if listing == self._listing:
            return False
        first = self._listing is None
        self._listing = listing
        for gone in set(self._files) - set(found):
            log.info("inventory: %s removed", gone)
            del self._files[gone]
        for path, signature in found.items():
            state = self._files.get(path)
            if state is not None and state.signature == signature:
                continue
            try:
                objects = _read_objects(path, self._kinds)
            except InvalidInput as exc:
                self._keep(path, signature, state, str(exc))
                continue
            self._files[path] = _FileState(signature, objects)
            if not first:
                log.info("inventory: reloaded %s (%d object(s))", path, len(objects))
        by_kind: dict[str, list[KubeObject]] = {kind: [] for kind in self._kinds}
        for state in self._files.values():
            for obj in state.objects:
                by_kind[obj["kind"]].append(obj)
        pods = by_kind.pop(POD.kind, None)
        claims = by_kind.pop(RESOURCE_CLAIM.kind, None)
        if self._claims is not None and claims is not None:  # before the pods: their devices first
            self._claims.replace_all(RESOURCE_CLAIM.kind, claims)
        for kind, objects in by_kind.items():
            self._sink.replace_all(kind, objects)
        if self._pods is not None and pods is not None:
            self._pods.replace_all(POD.kind, pods)
        return True

    def _keep(self, path: Path, signature: tuple[float, int], state: _FileState | None, why: str) -> None:
        """An unusable file (read only when it changed, so this logs once per change)."""
        if state is not None and state.good:
            state.signature = signature
            log.warning(
                "inventory: %s %s; keeping its previous content (%d object(s)): delete the file to remove them",
                path,
                why,
                len(state.objects),
            )
            return
        self._files[path] = _FileState(signature, [], good=False)
        log.warning("inventory: %s %s; nothing loaded from it until it holds Kubernetes objects", path, why)

    async def run(self) -> None:
        """Load, then poll for changes until cancelled."""
        self.load()
        while True:
            await asyncio.sleep(self._poll_interval_s)
            try:
                self.load()
            except OSError as exc:
                log.warning("inventory %s: %s", self.path, exc)


def _read_objects(path: Path, kinds: set[str]) -> list[KubeObject]:
    """The objects of `kinds`; raises InvalidInput for a file that is not inventory as a whole."""
    try:
        documents = list(yaml.safe_load_all(path.read_text()))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InvalidInput("unusable_file", f"does not parse: {exc}") from None
    if all(d is None for d in documents):  # 0 bytes, whitespace, comments, empty `---` sections
        raise InvalidInput("unusable_file", "is empty (no YAML document)")
    objects: list[KubeObject] = []
    for number, document in enumerate(documents):
        if document is None:
            continue
        for obj in _unwrap(document, number):
            kind = obj["kind"]
            if kind in kinds:
                if kind == POD.kind:
                    _give_uid(obj)
                objects.append(obj)
            else:
                log.debug("inventory: %s document %d: kind %r not used, skipped", path, number, kind)
    return objects


def _give_uid(pod: KubeObject) -> None:
    meta = pod.get("metadata")
    if isinstance(meta, dict) and not meta.get("uid"):
        meta["uid"] = f"file:{meta.get('namespace') or 'default'}/{meta.get('name', '')}"


def _unwrap(document: Any, number: int) -> list[dict[str, Any]]:
    """One Kubernetes object, or the `items` of a `kind: List` / `NodeList` / ... wrapper."""
    _check_object(document, f"document {number}")
    if not document["kind"].endswith("List"):
        return [document]
    items = document.get("items") or []
    if not isinstance(items, list):
        raise InvalidInput(
            "unusable_file", f"document {number} ({document['kind']}): items is {described(items)}, not a list"
        )
    for index, item in enumerate(items):
        _check_object(item, f"document {number} ({document['kind']}) item {index}")
    return items


def _check_object(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise InvalidInput("unusable_file", f"{where} is {described(value)}, not a Kubernetes object")
    if not isinstance(value.get("kind"), str) or not value["kind"]:
        raise InvalidInput("unusable_file", f"{where} has no kind, so it is not a Kubernetes object")
