"""Inventory from Kubernetes YAML on disk (`--inventory PATH`): the cluster-free source.

PATH is a file or a directory of *.yaml / *.yml / *.json files, each holding one
or more documents (`---`) or `kind: List` wrappers, with the same objects
`kubectl get -o yaml` shows: Nodes and OME's custom resources. The directory is
polled and reloaded when a file is added, changed or removed, so editing an
AcceleratorClass changes the next decision without a restart.

A file that does not parse keeps its last good content (an editor's half-written
save must not make objects vanish) and is logged once per change; a document of
an unknown kind is ignored.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from extender.inventory.sink import KIND_BY_NAME, InventorySink, KubeObject

log = logging.getLogger("gpu_extender.inventory")

_SUFFIXES = (".yaml", ".yml", ".json")


class InventoryPathError(ValueError):
    """The inventory path itself is unusable (missing)."""


@dataclass(slots=True)
class _FileState:
    signature: tuple[float, int]  # (mtime, size)
    objects: list[KubeObject]


class FileInventorySource:
    def __init__(self, path: Path, sink: InventorySink, *, poll_interval_s: float = 1.0) -> None:
        if not path.exists():
            raise InventoryPathError(f"inventory {path}: no such file or directory")
        self.path = path
        self._sink = sink
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
            objects = _read_objects(path)
            if objects is None:  # unparseable: keep the last good content
                if state is not None:
                    state.signature = signature
                continue
            self._files[path] = _FileState(signature, objects)
            if not first:
                log.info("inventory: reloaded %s (%d object(s))", path, len(objects))
        by_kind: dict[str, list[KubeObject]] = {kind: [] for kind in KIND_BY_NAME}
        for state in self._files.values():
            for obj in state.objects:
                by_kind[obj["kind"]].append(obj)
        for kind, objects in by_kind.items():
            self._sink.replace_all(kind, objects)
        return True

    async def run(self) -> None:
        """Load, then poll for changes until cancelled."""
        self.load()
        while True:
            await asyncio.sleep(self._poll_interval_s)
            try:
                self.load()
            except OSError as exc:
                log.warning("inventory %s: %s", self.path, exc)


def _read_objects(path: Path) -> list[KubeObject] | None:
    try:
        documents = list(yaml.safe_load_all(path.read_text()))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        log.warning("inventory: %s not loaded (keeping its previous content): %s", path, exc)
        return None
    objects: list[KubeObject] = []
    for number, document in enumerate(documents):
        for obj in _unwrap(document):
            if not isinstance(obj, dict):
                log.warning("inventory: %s document %d: not an object, skipped", path, number)
                continue
            kind = obj.get("kind")
            if kind in KIND_BY_NAME:
                objects.append(obj)
            else:
                log.debug("inventory: %s document %d: kind %r not used, skipped", path, number, kind)
    return objects


def _unwrap(document: Any) -> list[Any]:
    """`kind: List` / `NodeList` / ... wrappers hold their objects in `items`."""
    if isinstance(document, dict) and str(document.get("kind", "")).endswith("List"):
        return list(document.get("items") or [])
    return [] if document is None else [document]
