"""How many GPUs a pod needs, read from its spec the way kube-scheduler counts it.

needed = max(sum over containers + restartable (sidecar) init containers,
             max over ordinary init containers of (its request + sidecars started before it))
A container's amount is its request, or its limit when no request is set (the
API server defaults extended-resource requests to limits). Every configured GPU
resource name is added up.

Every bound is checked before any arithmetic, so a hostile value costs nothing:
"1e999999" once built a million-digit integer (26 s for one 2.3 KB request).
kube-scheduler only sends what the API server stored, and no real GPU count comes
near these bounds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Context, Decimal, Inexact, InvalidOperation, Overflow
from typing import Any

from gpuextender.extender.model.quantity import BINARY_SI, DECIMAL_SI, QUANTITY
from gpuextender.extender.model.untrusted import Fields, InvalidInput, object_at, shown

MAX_GPU_COUNT = 2**31  # per quantity, per Node and per pod (all its containers); inclusive
MAX_QUANTITY_CHARS = 64  # a real GPU quantity is a few characters ("8", "2k"); inclusive
MAX_EXPONENT = 64  # |n| in "1en": no 64-character mantissa brings a larger one back into range
MAX_CONTAINERS = 1_000  # containers + initContainers of one pod: each costs ~2 us on every call

# Exact arithmetic: a <= 64-digit mantissa times 2**60 fits 200 digits; anything inexact raises.
_EXACT = Context(prec=200, Emax=999, Emin=-999, traps=[InvalidOperation, Overflow, Inexact])


def parse_count(value: Any, where: str) -> int:
    """A Kubernetes quantity that must be a whole count in [0, 2**31] (e.g. "2", 2, "2000m")."""
    if isinstance(value, bool):
        raise InvalidInput("wrong_type", f"{where}: expected a quantity, got {value!r}")
    if isinstance(value, int):
        amount: int | Decimal = value
    elif isinstance(value, str):
        amount = _parse_quantity(value, where)
    else:
        raise InvalidInput("bad_quantity", f"{where}: {shown(value)} is not a Kubernetes quantity")
    if amount < 0 or amount != int(amount):  # int() is cheap: _parse_quantity bounded the value
        raise InvalidInput("bad_quantity", f"{where}: {shown(value)} is not a whole, non-negative number of devices")
    if amount > MAX_GPU_COUNT:
        raise InvalidInput("too_many_gpus", f"{where}: {shown(value)} is more than {MAX_GPU_COUNT} (2**31) devices")
    return int(amount)


def _parse_quantity(text: str, where: str) -> Decimal:
    """The exact value of `text`, refused before any arithmetic when it cannot be a GPU count."""
    if len(text) > MAX_QUANTITY_CHARS:
        raise InvalidInput("bad_quantity", f"{where}: {shown(text)} is longer than {MAX_QUANTITY_CHARS} characters")
    m = QUANTITY.fullmatch(text.strip())  # the grammar: model/quantity.py
    if m is None:
        raise InvalidInput("bad_quantity", f"{where}: {shown(text)} is not a Kubernetes quantity")
    number, suffix = m.groups()
    if suffix is None or suffix in DECIMAL_SI or suffix in BINARY_SI:
        scale = DECIMAL_SI.get(suffix or "", 0)
    else:  # a decimal exponent, "e3"
        scale = int(suffix[1:])  # <= 63 digits: cheap
    if abs(scale) > MAX_EXPONENT:
        raise InvalidInput("bad_quantity", f"{where}: {shown(text)} has an exponent beyond +-{MAX_EXPONENT}")
    try:
        amount = Decimal(number).scaleb(scale, _EXACT)
        if suffix in BINARY_SI:
            amount = _EXACT.multiply(amount, BINARY_SI[suffix])
    except ArithmeticError:  # unreachable within the bounds above; refused rather than a 500
        raise InvalidInput("bad_quantity", f"{where}: {shown(text)} is not a quantity") from None
    if amount > MAX_GPU_COUNT:  # before int(): never build a big integer
        raise InvalidInput("too_many_gpus", f"{where}: {shown(text)} is more than {MAX_GPU_COUNT} (2**31) devices")
    return amount


_POD = Fields(code="wrong_type")  # paths name the field from the Pod down: "Pod.spec.containers[0]"


def _object(value: Any, where: str) -> Mapping[str, Any]:
    return _POD.mapping(value, where) or {}


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
    return _POD.items(spec.get(key), f"Pod.spec.{key}")


def gpus_requested(pod: Mapping[str, Any], resources: Sequence[str]) -> int:
    spec = _object(pod.get("spec"), "Pod.spec")
    containers, init_containers = _containers(spec, "containers"), _containers(spec, "initContainers")
    if len(containers) + len(init_containers) > MAX_CONTAINERS:
        raise InvalidInput(
            "too_many_containers",
            f"Pod has {len(containers) + len(init_containers)} containers "
            f"and initContainers; at most {MAX_CONTAINERS} are read",
        )
    main = sum(_container_gpus(c, f"Pod.spec.containers[{i}]", resources) for i, c in enumerate(containers))
    sidecars = 0
    init_peak = 0
    for i, c in enumerate(init_containers):
        amount = _container_gpus(c, f"Pod.spec.initContainers[{i}]", resources)
        if isinstance(c, dict) and c.get("restartPolicy") == "Always":  # sidecar: runs beside the app
            sidecars += amount
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + amount)
    needed = max(main + sidecars, init_peak)
    if needed > MAX_GPU_COUNT:
        raise InvalidInput("too_many_gpus", f"Pod needs {needed} devices in total; at most {MAX_GPU_COUNT} (2**31)")
    return needed


def pod_ref(pod: Mapping[str, Any]) -> str:
    """`namespace/name` for logs; never fails, never longer than two Kubernetes names."""
    meta = object_at(pod, "metadata")
    return f"{_name(meta.get('namespace'))}/{_name(meta.get('name'))}"


def _name(value: Any) -> str:
    # A Kubernetes name is at most 253 characters; anything else is shown as "?" or cut.
    if not isinstance(value, str):
        return "?"
    return value if len(value) <= 253 else value[:253] + "..."


def may_request(pod: Any, resources: Sequence[str]) -> bool:
    """False only when no container or init container of `pod` names one of `resources` in its
    requests or limits and the pod uses no ResourceClaim, so it holds no GPU the ledger counts. Cheap (key lookups)
    and never raises: a malformed pod is True, for the caller's full parse to judge. The
    bound-pod watch drops most LIST items with it as each page arrives (kube_watch)."""
    if not isinstance(pod, dict):
        return True
    spec = pod.get("spec")
    if spec is None:
        return False
    if not isinstance(spec, dict) or spec.get("resourceClaims"):  # DRA: GPUs may come through its claims
        return True
    for key in ("containers", "initContainers"):
        containers = spec.get(key)
        if containers is None:
            continue
        if not isinstance(containers, list):
            return True
        for container in containers:
            if not isinstance(container, dict):
                return True
            amounts = container.get("resources")
            if amounts is None:
                continue
            if not isinstance(amounts, dict):
                return True
            for field in ("requests", "limits"):
                named = amounts.get(field)
                if named is None:
                    continue
                if not isinstance(named, dict) or any(r in named for r in resources):
                    return True
    return False


MIG_RESOURCE_PREFIX = "nvidia.com/mig-"  # GFD's mixed strategy: nvidia.com/mig-1g.10gb, ...

MigNeed = tuple[tuple[str, int], ...]  # (profile, count), sorted by profile


def add_mig(a: MigNeed, b: MigNeed) -> MigNeed:
    """Two MIG needs together, per profile (a pod's extended resources and its claims)."""
    total = dict(a)
    for profile, count in b:
        total[profile] = total.get(profile, 0) + count
    return tuple(sorted(total.items()))


def mig_profile(resource: str) -> str | None:
    """ "1g.10gb" for "nvidia.com/mig-1g.10gb"; None for any other resource."""
    if resource.startswith(MIG_RESOURCE_PREFIX) and len(resource) > len(MIG_RESOURCE_PREFIX):
        return resource[len(MIG_RESOURCE_PREFIX) :]
    return None


def whole_gpu_resources(resources: Sequence[str]) -> tuple[str, ...]:
    """The configured resources counted in whole GPUs (or their replicas): all but the MIG ones."""
    return tuple(r for r in resources if mig_profile(r) is None)
