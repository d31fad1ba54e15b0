"""Nodes from Kubernetes YAML on disk (`--inventory PATH`): the cluster-free inventory.

PATH is a file or a directory of *.yaml / *.yml / *.json files, each holding one
or more documents (`---`), or `kind: List` / `NodeList` wrappers. Only `Node`
objects are read here; other kinds are left for the components that use them.
A document that cannot be used is skipped with a log line, never fatal.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from extender.bad_request import BadRequest
from extender.pod_gpus import parse_count

log = logging.getLogger("gpu_extender.inventory")

_SUFFIXES = (".yaml", ".yml", ".json")


class InventoryError(ValueError):
    """The inventory path itself is unusable (missing, unreadable)."""


@dataclass(frozen=True, slots=True)
class InventoryNode:
    name: str
    allocatable_gpus: int
    labels: dict[str, str] = field(default_factory=dict)


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.suffix in _SUFFIXES and p.is_file())
    if path.is_file():
        return [path]
    raise InventoryError(f"inventory {path}: no such file or directory")


def _objects(document: Any) -> Iterator[Any]:
    if isinstance(document, dict) and document.get("kind") in ("List", "NodeList"):
        yield from document.get("items") or []
    elif document is not None:
        yield document


def load_nodes(path: Path, gpu_resources: Sequence[str]) -> dict[str, InventoryNode]:
    nodes: dict[str, InventoryNode] = {}
    for file in _files(path):
        try:
            documents = list(yaml.safe_load_all(file.read_text()))
        except (OSError, yaml.YAMLError) as exc:
            log.warning("inventory %s skipped: %s", file, exc)
            continue
        for number, document in enumerate(documents):
            for obj in _objects(document):
                if not isinstance(obj, dict) or obj.get("kind") != "Node":
                    continue
                try:
                    node = _parse_node(obj, gpu_resources)
                except BadRequest as exc:
                    log.warning("inventory %s document %d: Node skipped: %s", file, number, exc.message)
                    continue
                nodes[node.name] = node
    log.info("inventory %s: %d node(s)", path, len(nodes))
    return nodes


def _parse_node(obj: dict[str, Any], gpu_resources: Sequence[str]) -> InventoryNode:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        raise BadRequest("wrong_type", "metadata.name is missing")
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    allocatable = status.get("allocatable") if isinstance(status.get("allocatable"), dict) else {}
    gpus = sum(parse_count(allocatable[r], f"{name}: status.allocatable[{r}]") for r in gpu_resources if r in allocatable)
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    return InventoryNode(name=name, allocatable_gpus=gpus, labels={str(k): str(v) for k, v in labels.items()})
