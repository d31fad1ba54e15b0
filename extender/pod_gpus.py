"""How many GPUs a pod needs, read from its spec the way kube-scheduler counts it.

needed = max(sum over containers + restartable (sidecar) init containers,
             max over ordinary init containers of (its request + sidecars started before it))
A container's amount is its request, or its limit when no request is set (the
API server defaults extended-resource requests to limits). Every configured GPU
resource name is added up.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from extender.bad_request import BadRequest

_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)([a-zA-Z]*)$")
_SUFFIX = {
    "": 1, "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}  # fmt: skip


def parse_count(value: Any, where: str) -> int:
    """A Kubernetes quantity that must be a whole, non-negative count (e.g. "2", 2, "2000m")."""
    if isinstance(value, bool):
        raise BadRequest("wrong_type", f"{where}: expected a quantity, got {value!r}")
    if isinstance(value, int):
        amount = Decimal(value)
    elif isinstance(value, str) and (m := _QUANTITY.match(value.strip())) and m.group(2) in _SUFFIX:
        try:
            amount = Decimal(m.group(1)) * _SUFFIX[m.group(2)]
        except InvalidOperation:
            raise BadRequest("bad_quantity", f"{where}: {value!r} is not a quantity") from None
    else:
        raise BadRequest("bad_quantity", f"{where}: {value!r} is not a Kubernetes quantity")
    if amount < 0 or amount != amount.to_integral_value():
        raise BadRequest("bad_quantity", f"{where}: {value!r} is not a whole, non-negative number of devices")
    return int(amount)


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequest("wrong_type", f"{where}: expected an object, got {type(value).__name__}")
    return value


def _container_gpus(container: Any, where: str, resources: Sequence[str]) -> int:
    container = _object(container, where)
    spec = _object(container.get("resources"), f"{where}.resources")
    requests = _object(spec.get("requests"), f"{where}.resources.requests")
    limits = _object(spec.get("limits"), f"{where}.resources.limits")
    total = 0
    for name in resources:
        if name in requests:
            total += parse_count(requests[name], f"{where}.resources.requests[{name}]")
        elif name in limits:
            total += parse_count(limits[name], f"{where}.resources.limits[{name}]")
    return total


def _containers(spec: Mapping[str, Any], key: str) -> list[Any]:
    value = spec.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadRequest("wrong_type", f"Pod.spec.{key}: expected a list, got {type(value).__name__}")
    return value


def gpus_requested(pod: Mapping[str, Any], resources: Sequence[str]) -> int:
    spec = _object(pod.get("spec"), "Pod.spec")
    main = sum(
        _container_gpus(c, f"Pod.spec.containers[{i}]", resources) for i, c in enumerate(_containers(spec, "containers"))
    )
    sidecars = 0
    init_peak = 0
    for i, c in enumerate(_containers(spec, "initContainers")):
        amount = _container_gpus(c, f"Pod.spec.initContainers[{i}]", resources)
        if isinstance(c, dict) and c.get("restartPolicy") == "Always":  # sidecar: runs beside the app
            sidecars += amount
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + amount)
    return max(main + sidecars, init_peak)


def pod_ref(pod: Mapping[str, Any]) -> str:
    """`namespace/name` for logs; never fails."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
    return f"{meta.get('namespace', '?')}/{meta.get('name', '?')}"
