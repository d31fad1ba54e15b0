"""AcceleratorClass (`ome.io/v1beta1`, cluster-scoped) parsed into what selection needs.

Shapes (ome-api.md §1, §2):
- `spec.discovery` and `spec.capabilities` are required (CRD `required`); both may be
  empty objects.
- `discovery.nodeSelector` (map) and `discovery.affinity` (a full corev1.Affinity) say
  which nodes belong to the class (used by `extender.model.ome.node_class`). Only
  `affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution` decides
  membership; it is validated here, like the API server would validate it on a pod,
  so node matching never meets a malformed term. The whole affinity is kept as given
  (OME copies it onto the pod, §7.14).
- `capabilities.memoryGB` is a Quantity interpreted as BYTES, like OME's
  `MemoryGB.Value()/1024^3` (§2.1, §7.15 item 8): write "80Gi"; `80` means 80 bytes.
  Three views are kept: `memory_bytes` (= Go `Value()`), `memory_gib` (float GiB, what
  BestFit and MostCapable use) and `memory_gb` (the integer division the min/maxMemory
  filter uses, §7.13 step 3.3).
- `capabilities.computeCapability` is a string ("9.0"); `compute_capability_version`
  is its numeric (major, minor) when it has that form, for numeric comparisons.
- `capabilities.memoryBandwidthGBps` is a Quantity whose `Value()` is the GB/s number.
- `capabilities.performance` holds integers `fp32Tflops`, `fp16Tflops`, `int8Tops`,
  `int4Tops` (no fp8/bf16 field: fp8 reads `int8Tops`, bf16 reads nothing, §2.1).
- `cost` (optional): `perHour`, `spotPerHour`, `perMillionTokens` Quantities ("2.21"),
  `tier` string (used only by the Cheapest policy).
- `resources[]`: `{name, quantity (default "1"), divisible}`, injected into the pod (§7.14).
- Not kept (OME reads none of them): `integration`, `discovery.pciVendorID/deviceIDs`,
  `capabilities.levelZeroVersion/clockSpeedMHz`, `performance.latency`, and `status`
  (no selection code reads AC status, §2.2). `model` is kept for display only.

A malformed object raises `InvalidInput` (model/untrusted.py), whose message names the object and
the field path ("AcceleratorClass 'h100': spec.capabilities.memoryGB: 'eighty' is not a
Kubernetes quantity"), so a caller can skip that one class with a single log line.

Deliberate strictness beyond OME (which would store these and misbehave later):
negative memory, bandwidth, performance or cost values are rejected; a nodeSelectorTerm
requirement is validated like Kubernetes validates it on a pod (operator known, In/NotIn
with values, Exists/DoesNotExist without, Gt/Lt with exactly one integer).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from types import MappingProxyType
from typing import Any

from gpuextender.extender.model.quantity import parse_quantity, quantity_value
from gpuextender.extender.model.untrusted import Fields, InvalidInput, described, shown

GIB = 1024**3
API_GROUP = "ome.io"
KIND = "AcceleratorClass"

# Kubernetes NodeSelectorOperator values (core/v1 types.go).
NODE_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
# Node field selectors: Kubernetes supports only metadata.name, with In/NotIn.
NODE_FIELD_KEYS = frozenset({"metadata.name"})
NODE_FIELD_OPERATORS = frozenset({"In", "NotIn"})

_COMPUTE_CAPABILITY = re.compile(r"^\s*(\d+)(?:\.(\d+))?\s*$")
_INT64 = re.compile(r"^[+-]?\d+$")


def _subject(name: str | None) -> str:
    return f"AcceleratorClass {name!r}" if name else "AcceleratorClass (unnamed)"


@dataclass(frozen=True, slots=True)
class Performance:
    fp32_tflops: int | None = None
    fp16_tflops: int | None = None
    int8_tops: int | None = None
    int4_tops: int | None = None

    def for_precision(self, precision: str) -> int:
        """OME's getTFLOPSForPrecision: fp8 reads int8Tops; unknown (bf16, ...) or unset -> 0."""
        p = precision.lower()
        if p == "fp32":
            value = self.fp32_tflops
        elif p == "fp16":
            value = self.fp16_tflops
        elif p in ("int8", "fp8"):
            value = self.int8_tops
        elif p == "int4":
            value = self.int4_tops
        else:
            value = None
        return value or 0

    def max_tflops(self) -> int:
        """OME's getMaxTFLOPS: the largest of the four figures, 0 when none is set."""
        return max(self.fp32_tflops or 0, self.fp16_tflops or 0, self.int8_tops or 0, self.int4_tops or 0)


@dataclass(frozen=True, slots=True)
class Cost:
    per_hour: float | None = None
    spot_per_hour: float | None = None
    per_million_tokens: float | None = None
    tier: str = ""


@dataclass(frozen=True, slots=True)
class AcceleratorResource:
    name: str
    quantity: Decimal
    divisible: bool = False


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    """One `matchExpressions` (label) or `matchFields` (field) entry, already validated."""

    key: str
    operator: str  # one of NODE_SELECTOR_OPERATORS
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    match_expressions: tuple[NodeSelectorRequirement, ...]
    match_fields: tuple[NodeSelectorRequirement, ...]


@dataclass(frozen=True, slots=True)
class AcceleratorClass:
    name: str
    vendor: str
    family: str
    model: str
    node_selector: Mapping[str, str]  # discovery.nodeSelector (read-only view)
    affinity: Mapping[str, Any] | None  # discovery.affinity, as given (a private deep copy)
    # affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms;
    # None when that part is absent (no affinity restriction).
    required_node_terms: tuple[NodeSelectorTerm, ...] | None
    memory_bytes: int | None  # Go Value() of memoryGB; None when memoryGB is unset
    memory_gib: float | None  # memory_bytes / 1024^3
    memory_gb: int | None  # memory_bytes // 1024^3: OME's integer GB for min/maxMemory (§7.13)
    compute_capability: str  # "" when unset
    compute_capability_version: tuple[int, int] | None  # (9, 0) for "9.0"; None if not numeric
    memory_bandwidth_gbps: int | None  # Go Value() of memoryBandwidthGBps
    features: tuple[str, ...]
    performance: Performance | None
    cost: Cost | None
    resources: tuple[AcceleratorResource, ...]


def parse_compute_capability(text: str) -> tuple[int, int] | None:
    """ "9.0" -> (9, 0), "12.1" -> (12, 1), "9" -> (9, 0); anything else -> None."""
    m = _COMPUTE_CAPABILITY.match(text)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2) or 0)


def _quantity(r: Fields, value: Any, path: str) -> Decimal | None:
    if value is None:
        return None
    try:
        amount = parse_quantity(value)
    except InvalidInput as e:
        r.fail(path, e.problem)
    if amount < 0:
        r.fail(path, f"{shown(value)} is negative")
    return amount


def _count(r: Fields, value: Any, path: str) -> int | None:
    """A non-negative integer (989.0 reads as 989)."""
    value = r.integer(value, path, whole_floats=True)
    if value is not None and value < 0:
        r.fail(path, f"{shown(value)} is negative")
    return value


def _requirement(r: Fields, raw: Any, path: str, *, field: bool) -> NodeSelectorRequirement:
    m = r.mapping(raw, path, required=True)
    assert m is not None
    key = r.text(m.get("key"), f"{path}.key")
    if not key:
        r.fail(f"{path}.key", "required field is missing")
    operator = r.text(m.get("operator"), f"{path}.operator")
    values = r.strings(m.get("values"), f"{path}.values") or ()
    if field:
        if key not in NODE_FIELD_KEYS:
            r.fail(f"{path}.key", f"unsupported node field {shown(key)} (only metadata.name)")
        if operator not in NODE_FIELD_OPERATORS:
            r.fail(f"{path}.operator", f"unsupported operator {shown(operator)} for a node field (In, NotIn)")
        if len(values) != 1:
            r.fail(f"{path}.values", "a node field requirement takes exactly one value")
        return NodeSelectorRequirement(key, operator, values)
    if operator not in NODE_SELECTOR_OPERATORS:
        r.fail(f"{path}.operator", f"unknown operator {shown(operator)}")
    if operator in ("In", "NotIn") and not values:
        r.fail(f"{path}.values", f"{operator} needs at least one value")
    if operator in ("Exists", "DoesNotExist") and values:
        r.fail(f"{path}.values", f"{operator} takes no values")
    if operator in ("Gt", "Lt") and (len(values) != 1 or not _INT64.match(values[0])):
        r.fail(f"{path}.values", f"{operator} takes exactly one integer value")
    return NodeSelectorRequirement(key, operator, values)


def _required_terms(r: Fields, affinity: Mapping[str, Any] | None, path: str) -> tuple[NodeSelectorTerm, ...] | None:
    if affinity is None:
        return None
    node_affinity = r.mapping(affinity.get("nodeAffinity"), f"{path}.nodeAffinity")
    if node_affinity is None:
        return None
    rpath = f"{path}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    required = r.mapping(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), rpath)
    if required is None:
        return None
    terms = []
    for i, raw in enumerate(r.items(required.get("nodeSelectorTerms"), f"{rpath}.nodeSelectorTerms")):
        tpath = f"{rpath}.nodeSelectorTerms[{i}]"
        term = r.mapping(raw, tpath) or {}
        exprs = r.items(term.get("matchExpressions"), f"{tpath}.matchExpressions")
        fields = r.items(term.get("matchFields"), f"{tpath}.matchFields")
        terms.append(
            NodeSelectorTerm(
                tuple(_requirement(r, e, f"{tpath}.matchExpressions[{j}]", field=False) for j, e in enumerate(exprs)),
                tuple(_requirement(r, f, f"{tpath}.matchFields[{j}]", field=True) for j, f in enumerate(fields)),
            )
        )
    # An empty list stays an empty tuple: like Kubernetes, no term means no node matches.
    return tuple(terms)


def _performance(r: Fields, raw: Any, path: str) -> Performance | None:
    m = r.mapping(raw, path)
    if m is None:
        return None
    return Performance(
        fp32_tflops=_count(r, m.get("fp32Tflops"), f"{path}.fp32Tflops"),
        fp16_tflops=_count(r, m.get("fp16Tflops"), f"{path}.fp16Tflops"),
        int8_tops=_count(r, m.get("int8Tops"), f"{path}.int8Tops"),
        int4_tops=_count(r, m.get("int4Tops"), f"{path}.int4Tops"),
    )


def _cost(r: Fields, raw: Any, path: str) -> Cost | None:
    m = r.mapping(raw, path)
    if m is None:
        return None

    def as_float(key: str) -> float | None:
        q = _quantity(r, m.get(key), f"{path}.{key}")
        return None if q is None else float(q)

    return Cost(
        per_hour=as_float("perHour"),
        spot_per_hour=as_float("spotPerHour"),
        per_million_tokens=as_float("perMillionTokens"),
        tier=r.text(m.get("tier"), f"{path}.tier"),
    )


def _resources(r: Fields, raw: Any, path: str) -> tuple[AcceleratorResource, ...]:
    out = []
    for i, item in enumerate(r.items(raw, path)):
        ipath = f"{path}[{i}]"
        m = r.mapping(item, ipath, required=True)
        assert m is not None
        name = r.text(m.get("name"), f"{ipath}.name")
        if not name:
            r.fail(f"{ipath}.name", "required field is missing")
        quantity = _quantity(r, m.get("quantity", "1"), f"{ipath}.quantity")  # CRD default "1"
        divisible = bool(r.boolean(m.get("divisible"), f"{ipath}.divisible"))
        out.append(AcceleratorResource(name, quantity if quantity is not None else Decimal(1), divisible))
    return tuple(out)


def parse_accelerator_class(obj: Any) -> AcceleratorClass:
    """Parse one AcceleratorClass object (a dict from the API server or YAML).

    Raises InvalidInput naming the object and the field path.
    """
    if not isinstance(obj, Mapping):
        Fields(_subject(None)).fail("(object)", f"expected an object, got {described(obj)}")
    metadata = obj.get("metadata")
    raw_name = metadata.get("name") if isinstance(metadata, Mapping) else None
    name = raw_name if isinstance(raw_name, str) and raw_name else None
    r = Fields(_subject(name))
    if name is None:
        r.fail("metadata.name", "required field is missing")

    kind = obj.get("kind")
    if kind is not None and kind != KIND:
        r.fail("kind", f"expected {KIND!r}, got {shown(kind)}")
    api_version = obj.get("apiVersion")
    if api_version is not None and (not isinstance(api_version, str) or not api_version.startswith(API_GROUP + "/")):
        r.fail("apiVersion", f"expected {API_GROUP}/<version>, got {shown(api_version)}")

    spec = r.mapping(obj.get("spec"), "spec", required=True)
    assert spec is not None
    discovery = r.mapping(spec.get("discovery"), "spec.discovery", required=True)
    capabilities = r.mapping(spec.get("capabilities"), "spec.capabilities", required=True)
    assert discovery is not None and capabilities is not None

    node_selector = r.string_map(discovery.get("nodeSelector"), "spec.discovery.nodeSelector")
    affinity = r.mapping(discovery.get("affinity"), "spec.discovery.affinity")
    terms = _required_terms(r, affinity, "spec.discovery.affinity")

    memory = _quantity(r, capabilities.get("memoryGB"), "spec.capabilities.memoryGB")
    memory_bytes = None if memory is None else quantity_value(memory)
    bandwidth = _quantity(r, capabilities.get("memoryBandwidthGBps"), "spec.capabilities.memoryBandwidthGBps")
    cc = r.text(capabilities.get("computeCapability"), "spec.capabilities.computeCapability")

    return AcceleratorClass(
        name=name,
        vendor=r.text(spec.get("vendor"), "spec.vendor"),
        family=r.text(spec.get("family"), "spec.family"),
        model=r.text(spec.get("model"), "spec.model"),
        node_selector=MappingProxyType(node_selector),
        affinity=None if affinity is None else copy.deepcopy(dict(affinity)),
        required_node_terms=terms,
        memory_bytes=memory_bytes,
        memory_gib=None if memory_bytes is None else memory_bytes / GIB,
        # Go's int64 division truncates toward zero; values are non-negative here, so // agrees.
        memory_gb=None if memory_bytes is None else memory_bytes // GIB,
        compute_capability=cc,
        compute_capability_version=parse_compute_capability(cc) if cc else None,
        memory_bandwidth_gbps=None if bandwidth is None else quantity_value(bandwidth),
        features=(r.strings(capabilities.get("features"), "spec.capabilities.features") or ()),
        performance=_performance(r, capabilities.get("performance"), "spec.capabilities.performance"),
        cost=_cost(r, spec.get("cost"), "spec.cost"),
        resources=_resources(r, spec.get("resources"), "spec.resources"),
    )
