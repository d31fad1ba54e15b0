"""Which nodes belong to which AcceleratorClass.

A node is in a class when (ome-api.md §2.1 AcceleratorDiscovery, §7.14):

1. every `discovery.nodeSelector` key=value pair equals the node's label; and
2. if the class has `discovery.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`,
   one of its `nodeSelectorTerms` matches, with Kubernetes semantics: terms are ORed;
   inside a term every `matchExpressions` and `matchFields` entry must hold (AND); an
   empty term, or an empty term list, matches no node. Operators: In, NotIn (also true
   when the label is absent), Exists, DoesNotExist, Gt, Lt (label and value parsed as
   base-10 integers; an absent or non-integer label fails). `matchFields` supports
   `metadata.name` with In/NotIn. Preferred node affinity and pod (anti-)affinity are
   scheduling preferences or pod relations, not class membership: ignored here.
3. optionally, when the agent's live GPU facts for the node are given, the class
   `capabilities` hold for every GPU whose reading is known:
   - memory total >= class memory x (1 - `MEMORY_TOLERANCE`), 5 % by default, because
     NVML reports the usable total (an H100 "80GB" shows ~79.6 GiB against "80Gi");
   - compute capability equal to the class's, compared numerically as (major, minor)
     ("9.0" == "9"; "12.0" > "9.0"), or as trimmed case-insensitive text when the
     class value is not numeric.
   A GPU without a reading is not counted against the node (as in `gpu_summary`); GPU
   counts are `whole_gpus.py`'s business, so no facts at all means "not checked".

GPU product names: for the GFD label key `nvidia.com/gpu.product` (peers.md §4.2), values
are compared normalised on both sides (node label, class nodeSelector value and In/NotIn
values): GFD's sanitising applied (characters outside `[A-Za-z0-9-_. ]` dropped), case
folded, spaces and dashes equivalent (runs collapse to one "-"), the `-SHARED` suffix GFD
adds under GPU sharing dropped, and a leading "NVIDIA-" dropped. So a class written with
the NVML name "NVIDIA H100 80GB HBM3" and one written with the GFD label
"NVIDIA-H100-80GB-HBM3" select the same nodes, "NVIDIA-H100-80GB-HBM3-SHARED" included.
Every other label is compared exactly, as Kubernetes does.

Divergence from OME's AcceleratorClass controller (§2.2), deliberately: OME ignores
`discovery.affinity` when it lists a class's nodes and compares `memoryGB` with the
node's *host RAM* capacity; here affinity counts (OME copies it onto the pod, so a node
outside it can never run the pod) and memory is checked against the GPUs themselves.

Cost: `classify_nodes` compiles each class once and prepares each node's labels once
(O(nodes x classes) on an inventory change); `ClassMembership.classes_of` and
`nodes_of` are single dictionary lookups for the request path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from gpuextender.extender.model.gpu_facts import GpuFacts
from gpuextender.extender.model.ome.accelerator_class import (
    AcceleratorClass,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    parse_compute_capability,
)

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
MEMORY_TOLERANCE = 0.05  # fraction of the class memory a GPU may fall short by

# Check names reported in Mismatch.check.
NODE_SELECTOR = "nodeSelector"
AFFINITY = "affinity"
MEMORY = "memory"
COMPUTE_CAPABILITY = "computeCapability"

_GFD_DROP = re.compile(r"[^A-Za-z0-9\-_. ]")  # what GFD removes from the NVML name
_DASHES = re.compile(r"[\s-]+")
_INT64 = re.compile(r"^[+-]?\d+$")
_GIB = 1024**3


@dataclass(frozen=True, slots=True)
class Mismatch:
    """Why a node is not in a class: the check that failed and a sentence for explanations."""

    check: str  # NODE_SELECTOR | AFFINITY | MEMORY | COMPUTE_CAPABILITY
    detail: str


def normalize_gpu_product(value: str) -> str:
    """Canonical form of a GPU product name or GFD label value (see the module docstring)."""
    v = _DASHES.sub("-", _GFD_DROP.sub("", value).strip().lower()).strip("-")
    v = v.removesuffix("-shared")
    return v.removeprefix("nvidia-")


def _label_value(key: str, value: str) -> str:
    return normalize_gpu_product(value) if key == GPU_PRODUCT_LABEL else value


@dataclass(frozen=True, slots=True)
class _PreparedNode:
    name: str
    labels: Mapping[str, str]  # with the GPU product label already normalised


def _prepare_node(node: Mapping[str, Any]) -> _PreparedNode:
    metadata = node.get("metadata") if isinstance(node, Mapping) else None
    if not isinstance(metadata, Mapping):
        raise ValueError("Node: metadata is missing")
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("Node: metadata.name is missing")
    labels = metadata.get("labels") or {}
    if not isinstance(labels, Mapping):
        raise ValueError(f"Node {name!r}: metadata.labels is not an object")
    prepared = {str(k): str(v) for k, v in labels.items()}
    if GPU_PRODUCT_LABEL in prepared:
        prepared[GPU_PRODUCT_LABEL] = normalize_gpu_product(prepared[GPU_PRODUCT_LABEL])
    return _PreparedNode(name, prepared)


@dataclass(frozen=True, slots=True)
class _Requirement:
    source: NodeSelectorRequirement
    values: frozenset[str]  # normalised for the GPU product label
    number: int | None  # Gt/Lt operand

    def holds(self, value: str | None) -> bool:
        op = self.source.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        # Gt / Lt: Kubernetes parses the label as an integer; an absent or bad label fails.
        if value is None or not _INT64.match(value) or self.number is None:
            return False
        return int(value) > self.number if op == "Gt" else int(value) < self.number

    def describe(self) -> str:
        r = self.source
        return f"{r.key} {r.operator}" + (f" [{', '.join(r.values)}]" if r.values else "")


def _compile_requirement(r: NodeSelectorRequirement) -> _Requirement:
    number = int(r.values[0]) if r.operator in ("Gt", "Lt") else None
    return _Requirement(r, frozenset(_label_value(r.key, v) for v in r.values), number)


@dataclass(frozen=True, slots=True)
class _Term:
    expressions: tuple[_Requirement, ...]
    fields: tuple[_Requirement, ...]

    def first_failure(self, node: _PreparedNode) -> str | None:
        if not self.expressions and not self.fields:
            return "empty term"
        for req in self.expressions:
            if not req.holds(node.labels.get(req.source.key)):
                return req.describe()
        for req in self.fields:  # key is metadata.name (validated at parse time)
            if not req.holds(node.name):
                return req.describe()
        return None


def _compile_term(t: NodeSelectorTerm) -> _Term:
    return _Term(
        tuple(_compile_requirement(r) for r in t.match_expressions),
        tuple(_compile_requirement(r) for r in t.match_fields),
    )


def _fmt_gib(n: float) -> str:
    return f"{n / _GIB:.1f} GiB"


class ClassMatcher:
    """One AcceleratorClass compiled for matching many nodes."""

    __slots__ = ("_cc_text", "_cc_version", "_selector", "_terms", "cls")

    def __init__(self, cls: AcceleratorClass) -> None:
        self.cls = cls
        self._selector = tuple((k, _label_value(k, v)) for k, v in cls.node_selector.items())
        terms = cls.required_node_terms
        self._terms = None if terms is None else tuple(_compile_term(t) for t in terms)
        self._cc_version = cls.compute_capability_version
        self._cc_text = cls.compute_capability.strip().lower()

    @property
    def name(self) -> str:
        return self.cls.name

    def _mismatch(self, node: _PreparedNode, gpus: Sequence[GpuFacts] | None, tolerance: float) -> Mismatch | None:
        labels = node.labels
        for key, want in self._selector:
            have = labels.get(key)
            if have != want:
                has = "no such label" if have is None else f"{have!r}"
                return Mismatch(NODE_SELECTOR, f"nodeSelector {key}={want!r}: node has {has}")
        if self._terms is not None:
            failures = []
            for term in self._terms:
                failure = term.first_failure(node)
                if failure is None:
                    break
                failures.append(failure)
            else:
                why = "; ".join(f"term {i}: {f}" for i, f in enumerate(failures)) or "no terms"
                return Mismatch(AFFINITY, f"required node affinity not met ({why})")
        if gpus:
            return self.capability_mismatch(gpus, tolerance)
        return None

    def capability_mismatch(self, gpus: Sequence[GpuFacts], tolerance: float = MEMORY_TOLERANCE) -> Mismatch | None:
        """The class `capabilities` against a node's GPUs (see the module docstring, 3)."""
        need = self.cls.memory_bytes
        floor = None if need is None else need * (1.0 - tolerance)
        for i, (gpu_name, total, cc) in enumerate(gpus):
            if floor is not None and total is not None and total < floor:
                return Mismatch(
                    MEMORY,
                    f"GPU {i} ({gpu_name}) has {_fmt_gib(total)}; class needs {_fmt_gib(need or 0)}"
                    f" (at least {_fmt_gib(floor)} with {tolerance:.0%} tolerance)",
                )
            if self._cc_text and cc:
                if self._cc_version is not None:
                    have = parse_compute_capability(cc)
                    same = have is None or have == self._cc_version  # unparseable reading: unknown
                else:
                    same = cc.strip().lower() == self._cc_text
                if not same:
                    return Mismatch(
                        COMPUTE_CAPABILITY,
                        f"GPU {i} ({gpu_name}) has compute capability {cc}; class says {self.cls.compute_capability}",
                    )
        return None


def _check_tolerance(tolerance: float) -> None:
    if not 0.0 <= tolerance < 1.0:
        raise ValueError(f"memory tolerance must be in [0, 1), got {tolerance!r}")


def compile_classes(classes: Iterable[AcceleratorClass | ClassMatcher]) -> tuple[ClassMatcher, ...]:
    """Compile classes once; names must be unique (AcceleratorClass is cluster-scoped)."""
    matchers = tuple(c if isinstance(c, ClassMatcher) else ClassMatcher(c) for c in classes)
    seen: set[str] = set()
    for m in matchers:
        if m.name in seen:
            raise ValueError(f"AcceleratorClass {m.name!r} given twice")
        seen.add(m.name)
    return matchers


def classes_for_node(
    node: Mapping[str, Any],
    matchers: Sequence[ClassMatcher],
    gpus: Sequence[GpuFacts] | None = None,
    *,
    memory_tolerance: float = MEMORY_TOLERANCE,
) -> tuple[str, ...]:
    """The names of the classes the node is in, in `matchers` order (one node's update)."""
    _check_tolerance(memory_tolerance)
    prepared = _prepare_node(node)
    return tuple(m.name for m in matchers if m._mismatch(prepared, gpus, memory_tolerance) is None)


@dataclass(frozen=True, slots=True)
class ClassMembership:
    """Node <-> class membership for a whole inventory, with what a caller should log."""

    classes_by_node: Mapping[str, tuple[str, ...]]  # every node given; () when in no class
    nodes_by_class: Mapping[str, tuple[str, ...]]  # every class given; node names sorted
    multi_class: Mapping[str, tuple[str, ...]]  # nodes in two or more classes
    no_class: tuple[str, ...]  # nodes in no class, sorted

    def classes_of(self, node_name: str) -> tuple[str, ...]:
        return self.classes_by_node.get(node_name, ())

    def nodes_of(self, class_name: str) -> tuple[str, ...]:
        return self.nodes_by_class.get(class_name, ())


def membership_from(classes_by_node: Mapping[str, Sequence[str]], class_names: Iterable[str]) -> ClassMembership:
    """Build the lookups from per-node results (e.g. after re-classifying one node)."""
    by_node = {n: tuple(cs) for n, cs in classes_by_node.items()}
    nodes_by_class: dict[str, list[str]] = {c: [] for c in class_names}
    for n, cs in by_node.items():
        for c in cs:
            nodes_by_class.setdefault(c, []).append(n)
    return ClassMembership(
        classes_by_node=MappingProxyType(by_node),
        nodes_by_class=MappingProxyType({c: tuple(sorted(ns)) for c, ns in nodes_by_class.items()}),
        multi_class=MappingProxyType({n: cs for n, cs in sorted(by_node.items()) if len(cs) > 1}),
        no_class=tuple(sorted(n for n, cs in by_node.items() if not cs)),
    )
