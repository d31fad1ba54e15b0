"""Dynamic Resource Allocation objects (`resource.k8s.io/v1`) as the extender reads them: the GPU
devices a node's ResourceSlices publish, the DeviceClasses that map devices to an extended resource
(KEP-5004's `extendedResourceName`), and the devices each ResourceClaim holds.

Shapes (../shared/reference/dra.md): a slice names one driver, one pool
(`{name, generation, resourceSliceCount}`: a pool may span several slices, a newer generation
replaces the older) and its node (`spec.nodeName`; or, with `perDeviceNodeSelection`, each device
its own `nodeName`; `allNodes` and `nodeSelector` slices belong to no one node). A device is
`{name, attributes{<name>: {string|int|bool|version: v}}, capacity{<name>: {value}}, taints[]}`.
NVIDIA's driver (`gpu.nvidia.com`) names whole GPUs `gpu-<minor>` and MIG devices
`gpu-<parent>-mig-<profile>-<profileID>-<placement>`, with a `type` attribute `gpu` or `mig`.

A malformed object raises InvalidInput (model/untrusted.py) naming it and the field.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from gpuextender.extender.model.quantity import parse_quantity
from gpuextender.extender.model.untrusted import Fields, InvalidInput, object_at, shown

NVIDIA_GPU_DRIVER = "gpu.nvidia.com"
# NVIDIA's ComputeDomains (multi-node NVLink, IMEX; the same DRA driver's second plugin): a claim's
# ComputeDomain is the `domainID` (the ComputeDomain's UID) of its opaque config of this driver, of
# these kinds: a workload's IMEX channel, or the domain's daemon on a node. A node runs the daemon
# of one ComputeDomain at a time: a second one's pod is bound and then waits in ContainerCreating
# (NVIDIA/k8s-dra-driver-gpu #353).
COMPUTE_DOMAIN_DRIVER = "compute-domain.nvidia.com"
COMPUTE_DOMAIN_CONFIGS = frozenset({"ComputeDomainChannelConfig", "ComputeDomainDaemonConfig"})
MAX_CLAIM_CONFIGS = 32  # opaque configs per claim (the API server's own limit)
MAX_DOMAIN_ID_CHARS = 253  # a UID is 36
DeviceRef = tuple[str, str, str]  # (driver, pool, device): a device's identity in the cluster
# The one taint effect that leaves a device to the allocator: `None` only marks it. NoSchedule and
# NoExecute keep it from claims that do not tolerate them; an effect the API does not define (a
# hand-written file) is taken as keeping it too: unknown is never free.
MARK_ONLY_EFFECT = "None"
MAX_DEVICE_TAINTS = 16  # per device (the API server allows 4): bounds a hand-written file
# At most this many devices per slice (the API server's own limit is 128): bounds a hostile file.
MAX_SLICE_DEVICES = 128

_GPU_NAME = re.compile(r"gpu-\d+")
_MIG_NAME = re.compile(r"gpu-\d+-mig-.+-\d+-\d+")  # gpu-<parentMinor>-mig-<profile>-<profileID>-<placement>
# What the extender reads of CEL selectors: the driver, the `type` attribute and the MIG `profile`
# they require (a DeviceClass's, or a claim request's), each compared with ==.
_CEL_DRIVER = re.compile(r"device\.driver\s*==\s*['\"]([^'\"]+)['\"]")
_CEL_TYPE = re.compile(r"\.type\s*==\s*['\"](\w+)['\"]")
_CEL_PROFILE = re.compile(r"\.profile\s*==\s*['\"]([\w.+-]+)['\"]")
MAX_CEL_CHARS = 10 * 1024  # the API server's own limit per expression: bounds a hand-written file
MAX_SELECTORS = 32  # per DeviceClass or request (the API server's own limit)
MAX_ATTRIBUTE_CHARS = 64  # a device's string attribute (the API server's own limit)


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    key: str
    value: str
    effect: str  # None | NoSchedule | NoExecute


@dataclass(frozen=True, slots=True)
class Toleration:
    """A claim request's toleration of device taints (resource.k8s.io DeviceToleration)."""

    key: str = ""  # "" with Exists: every key
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # "" : every effect

    def tolerates(self, key: str, value: str, effect: str) -> bool:
        if self.effect and self.effect != effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == key
        return self.key == key and self.value == value


def tolerated(tolerations: tuple[Toleration, ...], taint: DeviceTaint) -> bool:
    return any(t.tolerates(taint.key, taint.value, taint.effect) for t in tolerations)


@dataclass(frozen=True, slots=True)
class DraDevice:
    name: str
    kind: str  # "gpu" (a whole GPU), "mig" or "other"
    uuid: str  # "" when the driver gives none
    product: str
    memory_bytes: int | None
    taints: tuple[DeviceTaint, ...] = ()
    # A MIG device's profile as NVML names it ("1g.10gb"): its `profile` attribute ("": none, and the
    # device counts for nothing: its name holds the profile without dots, "gpu-0-mig-1g10gb-19-0").
    profile: str = ""
    parent_uuid: str = ""  # a MIG device's GPU (its `parentUUID` attribute)

    @property
    def allocatable(self) -> bool:
        """False when a taint keeps the allocator from choosing it (for claims that do not tolerate it)."""
        return all(t.effect == MARK_ONLY_EFFECT for t in self.taints)

    def allocatable_with(self, tolerations: tuple[Toleration, ...]) -> bool:
        """allocatable, for a claim with these tolerations."""
        return all(t.effect == MARK_ONLY_EFFECT or tolerated(tolerations, t) for t in self.taints)


@dataclass(frozen=True, slots=True)
class ResourceSliceInfo:
    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    devices: tuple[tuple[str | None, DraDevice], ...]  # (its node, or None: no one node's; the device)


@dataclass(frozen=True, slots=True)
class DeviceClassInfo:
    name: str
    drivers: frozenset[str]  # read from its CEL selectors; empty: none the extender can read
    device_type: str  # the `type` attribute its selectors require ("": any)
    extended_resource: str  # spec.extendedResourceName, "" when unset
    profile: str = ""  # the MIG profile its selectors require ("": any, or not a MIG class)


# A claim request's device count when its allocation mode is All: every matching device of the node.
ALL_DEVICES = -1


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """One request of a claim: `exactly` gives one choice, `firstAvailable` several, in the order
    the allocator tries them. Each choice is (DeviceClass name, count; ALL_DEVICES for All)."""

    name: str
    choices: tuple[tuple[str, int], ...]
    # Taints any of its choices tolerates (the allocator may take the tolerating choice).
    tolerations: tuple[Toleration, ...] = ()
    # Per choice, the MIG profile its own selectors require ("": none said); () when none does.
    profiles: tuple[str, ...] = ()
    selected: bool = False  # a choice has selectors of its own (CEL the extender does not evaluate)


@dataclass(frozen=True, slots=True)
class RequestReading:
    """What the extender reads of one claim request (`read_request`): whole GPUs, or MIG devices of
    one profile, or nothing (`skipped` says why); `why()` says it all, for explain (formatted only
    there: a decision reads the counts)."""

    request: str
    gpus: int = 0
    mig: tuple[str, int] | None = None  # (profile, count)
    skipped: str = ""  # why nothing was counted ("" when something was)
    choices: int = 1
    all_mode: bool = False  # a choice asks for All (counted as at least one)
    selected: bool = False  # its own selectors, not evaluated

    def why(self) -> str:
        if self.skipped:
            return self.skipped
        how = (" (All: at least one)" if self.all_mode else "") + (
            f", the smallest of {self.choices} choices" if self.choices > 1 else ""
        )
        unread = "; its own selectors are not evaluated (kube-scheduler's allocator checked them)"
        if self.mig is not None:
            return f"{self.mig[1]} MIG device(s) {self.mig[0]}{how}"
        return f"{self.gpus} whole GPU(s){how}{unread if self.selected else ''}"


@dataclass(frozen=True, slots=True)
class ClaimRead:
    """One of a pod's claims as a decision read it (explain's `resolved.claims`)."""

    key: str  # namespace/name
    state: str  # "to allocate", "allocated" (asks for nothing more), or "not listed yet" (demand unknown)
    requests: tuple[RequestReading, ...] = ()


def read_request(
    request: ClaimRequest, gpu_classes: Collection[str], mig_classes: Mapping[str, DeviceClassInfo]
) -> RequestReading:
    """The one reading of a claim request for the decisions and explain (decide/README.md, "Claim
    pods"): a request whose every choice is a GPU class counts the smallest choice in whole GPUs;
    one whose every choice is a MIG class of one known profile (the choice's own selectors, else its
    class's) counts that many MIG devices; All counts 1 (at least one). Anything else counts nothing:
    the extender cannot tell what the allocator will pick (kube-scheduler checked the claim fits)."""
    choices, name = request.choices, request.name
    if not choices:
        return RequestReading(name, skipped=NO_CLASS)
    count = min(1 if n == ALL_DEVICES else n for _, n in choices)
    all_mode = any(n == ALL_DEVICES for _, n in choices)
    if all(cls in gpu_classes for cls, _ in choices):
        return RequestReading(name, gpus=count, choices=len(choices), all_mode=all_mode, selected=request.selected)
    if all(cls in mig_classes for cls, _ in choices):
        profiles = request.profiles or ("",) * len(choices)
        found = {own or mig_classes[cls].profile for (cls, _), own in zip(choices, profiles, strict=True)}
        if len(found) != 1 or "" in found:
            return RequestReading(name, skipped=PROFILE_UNKNOWN)
        (profile,) = found
        return RequestReading(name, mig=(profile, count), choices=len(choices), all_mode=all_mode)
    if any(cls in gpu_classes or cls in mig_classes for cls, _ in choices):
        return RequestReading(name, skipped=OTHER_KIND_POSSIBLE)
    return RequestReading(name, skipped=NOT_A_GPU_CLASS)


# RequestReading.skipped: why a request counts for nothing.
NO_CLASS = "no device class: not counted"
PROFILE_UNKNOWN = "MIG devices of a profile no selector says, or of several: not counted (the allocator picks)"
OTHER_KIND_POSSIBLE = "may be given another kind of device: not counted (the allocator picks)"
NOT_A_GPU_CLASS = "not a GPU or MIG class: not counted"


@dataclass(frozen=True, slots=True)
class Claim:
    key: str  # namespace/name
    node: str  # where its devices are ("" when they are not one node's, or not allocated)
    devices: tuple[DeviceRef, ...]  # () until allocated
    requests: tuple[ClaimRequest, ...] = ()  # what it asks for (spec.devices.requests)
    allocated: bool = True
    uid: str = ""  # metadata.uid: an Event about the claim names it (kubectl describe matches on it)
    compute_domain: str = ""  # the ComputeDomain (UID) whose channel or daemon it is; "" for none


def device_kind(name: str, type_attribute: str) -> str:
    """ "gpu", "mig" or "other": the `type` attribute says, else NVIDIA's device names do."""
    if type_attribute in ("gpu", "mig"):
        return type_attribute
    if type_attribute:
        return "other"
    if _GPU_NAME.fullmatch(name):
        return "gpu"
    if _MIG_NAME.fullmatch(name):
        return "mig"
    return "other"


def _attribute(attributes: Mapping[str, Any], driver: str, name: str) -> str:
    """A string attribute's value, by its short name or qualified by the driver's domain; "" when
    absent, not a string, or longer than the API server allows (a hand-written file's worst case:
    a profile is a metric label)."""
    raw = attributes.get(name)
    if raw is None:
        raw = attributes.get(f"{driver}/{name}")
    if not isinstance(raw, Mapping) or len(raw) != 1:
        return ""
    value = next(iter(raw.values()))
    return value if isinstance(value, str) and len(value) <= MAX_ATTRIBUTE_CHARS else ""


def _meta(r: Fields, obj: Any, kind: str) -> tuple[Mapping[str, Any], str]:
    if not isinstance(obj, Mapping):
        r.fail("(object)", "expected an object")
    name = object_at(obj, "metadata").get("name")
    if not isinstance(name, str) or not name:
        r.fail("metadata.name", "required field is missing")
    r.subject = f"{kind} {shown(name)}"
    return r.mapping(obj.get("spec"), "spec", required=True) or {}, name


def _device(r: Fields, raw: Any, path: str, driver: str) -> tuple[str | None, DraDevice]:
    d = r.mapping(raw, path, required=True) or {}
    name = r.text(d.get("name"), f"{path}.name")
    if not name:
        r.fail(f"{path}.name", "required field is missing")
    attributes = r.mapping(d.get("attributes"), f"{path}.attributes") or {}
    uuid, product = _attribute(attributes, driver, "uuid"), _attribute(attributes, driver, "productName")
    memory = object_at(r.mapping(d.get("capacity"), f"{path}.capacity"), "memory").get("value")
    memory_bytes = None
    if memory is not None:
        try:
            memory_bytes = int(parse_quantity(memory))
        except InvalidInput as exc:
            r.fail(f"{path}.capacity.memory.value", exc.problem)
    taints = []
    raw_taints = r.items(d.get("taints"), f"{path}.taints")
    if len(raw_taints) > MAX_DEVICE_TAINTS:
        r.fail(f"{path}.taints", f"{len(raw_taints)} taints; at most {MAX_DEVICE_TAINTS} per device")
    for i, t in enumerate(raw_taints):
        tpath = f"{path}.taints[{i}]"
        t = r.mapping(t, tpath, required=True) or {}
        taints.append(
            DeviceTaint(
                r.text(t.get("key"), f"{tpath}.key"),
                r.text(t.get("value"), f"{tpath}.value"),
                r.text(t.get("effect"), f"{tpath}.effect"),
            )
        )
    node = r.string(d.get("nodeName"), f"{path}.nodeName") or None
    kind = device_kind(name, _attribute(attributes, driver, "type"))
    mig = kind == "mig"
    device = DraDevice(
        name,
        kind,
        uuid,
        product,
        memory_bytes,
        tuple(taints),
        _attribute(attributes, driver, "profile") if mig else "",
        _attribute(attributes, driver, "parentUUID") if mig else "",
    )
    return node, device


# What parse_resource_slice reads of a device: a driver publishes more (NVIDIA: architecture,
# cudaComputeCapability, driverVersion, PCI ids), which the inventory store need not keep.
_DEVICE_KEYS = ("name", "attributes", "capacity", "taints", "nodeName")
# Not resource.kubernetes.io/pcieRoot: keeping it cost 10 MiB per 40,000 devices in the store
# (bench/RESULTS.md) for a field no decision reads (the agent's NVML topology ranks GPU sets).
_READ_ATTRIBUTES = ("type", "uuid", "productName", "profile", "parentUUID")


def relevant_slice_part(obj: Any) -> Any:
    """A ResourceSlice as the inventory store keeps it: what `parse_resource_slice` reads and
    nothing else (the decoded JSON of 40,000 NVIDIA devices took 168 MiB, bench/RESULTS.md). Parts
    that are not what they should be are kept as they are, so the view still reports them invalid."""
    if not isinstance(obj, Mapping):
        return obj
    spec = obj.get("spec")
    if not isinstance(spec, Mapping) or not isinstance(spec.get("devices"), list):
        return obj
    devices = spec["devices"]
    driver = spec.get("driver")
    wanted = set(_READ_ATTRIBUTES) | ({f"{driver}/{n}" for n in _READ_ATTRIBUTES} if isinstance(driver, str) else set())
    slim_devices = []
    for device in devices:
        if not isinstance(device, Mapping):
            slim_devices.append(device)
            continue
        slim = {k: device[k] for k in _DEVICE_KEYS if k in device}
        attributes = slim.get("attributes")
        if isinstance(attributes, Mapping):
            slim["attributes"] = {k: v for k, v in attributes.items() if k in wanted}
        capacity = slim.get("capacity")
        if isinstance(capacity, Mapping):
            slim["capacity"] = {k: v for k, v in capacity.items() if k == "memory"}
        slim_devices.append(slim)
    meta = obj.get("metadata")
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {k: meta[k] for k in ("name", "resourceVersion", "uid") if k in meta}
        if isinstance(meta, Mapping)
        else meta,
        "spec": {**{k: v for k, v in spec.items() if k != "devices"}, "devices": slim_devices},
    }


def parse_resource_slice(obj: Any) -> ResourceSliceInfo:
    r = Fields("ResourceSlice", code="invalid_object")
    spec, name = _meta(r, obj, "ResourceSlice")
    driver = r.text(spec.get("driver"), "spec.driver")
    if not driver:
        r.fail("spec.driver", "required field is missing")
    pool = r.mapping(spec.get("pool"), "spec.pool", required=True) or {}
    pool_name = r.text(pool.get("name"), "spec.pool.name")
    generation = r.integer(pool.get("generation"), "spec.pool.generation", (0, 2**63 - 1)) or 0
    count = r.integer(pool.get("resourceSliceCount"), "spec.pool.resourceSliceCount", (1, 2**31)) or 1
    slice_node = r.string(spec.get("nodeName"), "spec.nodeName") or None
    per_device = r.boolean(spec.get("perDeviceNodeSelection"), "spec.perDeviceNodeSelection") or False
    raw_devices = r.items(spec.get("devices"), "spec.devices")
    if len(raw_devices) > MAX_SLICE_DEVICES:
        r.fail("spec.devices", f"{len(raw_devices)} devices; at most {MAX_SLICE_DEVICES} per slice")
    devices = []
    for i, raw in enumerate(raw_devices):
        device_node, device = _device(r, raw, f"spec.devices[{i}]", driver)
        devices.append((device_node if per_device else slice_node, device))
    return ResourceSliceInfo(name, driver, pool_name, generation, count, tuple(devices))


def parse_device_class(obj: Any) -> DeviceClassInfo:
    r = Fields("DeviceClass", code="invalid_object")
    spec, name = _meta(r, obj, "DeviceClass")
    drivers: set[str] = set()
    device_type = profile = ""
    for expression in _cel_expressions(r, spec, "spec"):
        drivers.update(_CEL_DRIVER.findall(expression))
        if m := _CEL_TYPE.search(expression):
            device_type = m.group(1)
        if m := _CEL_PROFILE.search(expression):
            profile = m.group(1)
    extended = r.text(spec.get("extendedResourceName"), "spec.extendedResourceName")
    return DeviceClassInfo(name, frozenset(drivers), device_type, extended, profile)


def _cel_expressions(r: Fields, m: Mapping[str, Any], path: str) -> list[str]:
    """The CEL expressions of `m`'s selectors, each cut at the API server's length limit."""
    items = r.items(m.get("selectors"), f"{path}.selectors")
    if len(items) > MAX_SELECTORS:
        r.fail(f"{path}.selectors", f"{len(items)} selectors; at most {MAX_SELECTORS}")
    found = []
    for i, selector in enumerate(items):
        cel = object_at(r.mapping(selector, f"{path}.selectors[{i}]"), "cel")
        found.append(r.text(cel.get("expression"), f"{path}.selectors[{i}].cel.expression")[:MAX_CEL_CHARS])
    return found


def _required_profile(r: Fields, raw: Any, path: str) -> str:
    """The MIG profile a request (or one of its choices) requires in its own selectors ("": none)."""
    m = r.mapping(raw, path, required=True) or {}
    for expression in _cel_expressions(r, m, path):
        if found := _CEL_PROFILE.search(expression):
            return found.group(1)
    return ""


def parse_resource_claim(obj: Any) -> Claim:
    """What a claim asks for and, once allocated, the devices it holds and their node."""
    r = Fields("ResourceClaim", code="invalid_object")
    if not isinstance(obj, Mapping):
        r.fail("(object)", "expected an object")
    meta = object_at(obj, "metadata")
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not name or not isinstance(namespace, str) or not namespace:
        r.fail("metadata", "name and namespace are required")
    r.subject = f"ResourceClaim {shown(f'{namespace}/{name}')}"
    key = f"{namespace}/{name}"
    devices_spec = object_at(object_at(obj, "spec"), "devices")
    requests = _claim_requests(r, devices_spec.get("requests"))
    domain = _compute_domain(r, devices_spec.get("config"))
    allocation = r.mapping(object_at(obj, "status").get("allocation"), "status.allocation")
    if allocation is None:
        return Claim(key, "", (), requests, allocated=False, compute_domain=domain)
    devices = []
    results = object_at(allocation, "devices").get("results")
    for i, raw in enumerate(r.items(results, "status.allocation.devices.results")):
        path = f"status.allocation.devices.results[{i}]"
        result = r.mapping(raw, path, required=True) or {}
        if result.get("adminAccess") is True:  # a monitoring claim: the device stays allocatable
            continue
        devices.append(
            (
                r.text(result.get("driver"), f"{path}.driver"),
                r.text(result.get("pool"), f"{path}.pool"),
                r.text(result.get("device"), f"{path}.device"),
            )
        )
    uid = meta.get("uid")
    node = _allocated_node(allocation)
    return Claim(key, node, tuple(devices), requests, uid=uid if isinstance(uid, str) else "", compute_domain=domain)


def _compute_domain(r: Fields, raw: Any) -> str:
    """The ComputeDomain a claim's opaque config names (COMPUTE_DOMAIN_DRIVER), or "". Another
    driver's config, or one without a usable `domainID` (the driver refuses it), names none."""
    items = r.items(raw, "spec.devices.config")
    if len(items) > MAX_CLAIM_CONFIGS:
        r.fail("spec.devices.config", f"{len(items)} configs; at most {MAX_CLAIM_CONFIGS}")
    for item in items:
        opaque = object_at(item, "opaque")
        if opaque.get("driver") != COMPUTE_DOMAIN_DRIVER:
            continue
        parameters = object_at(opaque, "parameters")
        kind, domain = parameters.get("kind"), parameters.get("domainID")
        if (
            isinstance(kind, str)
            and kind in COMPUTE_DOMAIN_CONFIGS
            and isinstance(domain, str)
            and len(domain) <= MAX_DOMAIN_ID_CHARS  # ("" names none)
        ):
            return domain
    return ""


MAX_CLAIM_REQUESTS = 32  # the API server's own limit per claim


def _claim_requests(r: Fields, raw: Any) -> tuple[ClaimRequest, ...]:
    items = r.items(raw, "spec.devices.requests")
    if len(items) > MAX_CLAIM_REQUESTS:
        r.fail("spec.devices.requests", f"{len(items)} requests; at most {MAX_CLAIM_REQUESTS}")
    requests = []
    for i, item in enumerate(items):
        path = f"spec.devices.requests[{i}]"
        request = r.mapping(item, path, required=True) or {}
        exactly = r.mapping(request.get("exactly"), f"{path}.exactly")
        subrequests = r.items(request.get("firstAvailable"), f"{path}.firstAvailable")
        if len(subrequests) > MAX_CLAIM_REQUESTS:
            r.fail(f"{path}.firstAvailable", f"{len(subrequests)} choices; at most {MAX_CLAIM_REQUESTS}")
        if exactly is not None:
            raw_choices = [(exactly, f"{path}.exactly")]
        else:
            raw_choices = [(sub, f"{path}.firstAvailable[{j}]") for j, sub in enumerate(subrequests)]
        choices = [_choice(r, raw, where) for raw, where in raw_choices]
        tolerations = [t for raw, where in raw_choices for t in _tolerations(r, raw, where)]
        profiles = tuple(_required_profile(r, raw, where) for raw, where in raw_choices)
        selected = any(isinstance(raw, Mapping) and raw.get("selectors") for raw, _ in raw_choices)
        requests.append(
            ClaimRequest(
                r.text(request.get("name"), f"{path}.name"),
                tuple(choices),
                tuple(dict.fromkeys(tolerations)),
                profiles if any(profiles) else (),
                selected,
            )
        )
    return tuple(requests)


MAX_TOLERATIONS = 16  # the API server's own limit per request


def _tolerations(r: Fields, raw: Any, path: str) -> list[Toleration]:
    m = r.mapping(raw, path, required=True) or {}
    items = r.items(m.get("tolerations"), f"{path}.tolerations")
    if len(items) > MAX_TOLERATIONS:
        r.fail(f"{path}.tolerations", f"{len(items)} tolerations; at most {MAX_TOLERATIONS}")
    found = []
    for i, item in enumerate(items):
        at = f"{path}.tolerations[{i}]"
        t = r.mapping(item, at, required=True) or {}
        operator = r.text(t.get("operator"), f"{at}.operator") or "Equal"
        if operator not in ("Equal", "Exists"):
            r.fail(f"{at}.operator", f"{shown(operator)} is neither Equal nor Exists")
        found.append(
            Toleration(
                r.text(t.get("key"), f"{at}.key"),
                operator,
                r.text(t.get("value"), f"{at}.value"),
                r.text(t.get("effect"), f"{at}.effect"),
            )
        )
    return found


def _choice(r: Fields, raw: Any, path: str) -> tuple[str, int]:
    """(DeviceClass, count): allocationMode ExactCount (the default) with count (default 1), or All."""
    m = r.mapping(raw, path, required=True) or {}
    device_class = r.text(m.get("deviceClassName"), f"{path}.deviceClassName")
    if r.text(m.get("allocationMode"), f"{path}.allocationMode") == "All":
        return device_class, ALL_DEVICES
    count = r.integer(m.get("count"), f"{path}.count", (1, MAX_SLICE_DEVICES * 64))
    return device_class, 1 if count is None else count


def pod_claims(pod: Any, *, extended: bool = False) -> tuple[str, ...]:
    """The ResourceClaims (namespace/name) a pod uses: those it names (`resourceClaimName`) and
    those made from its templates (`status.resourceClaimStatuses`, written once the claim exists).
    A template whose claim does not exist yet is not among them. Bounded: at most 32 (the API's limit).
    `extended`: also the claim kube-scheduler made for its extended-resource request (KEP-5004,
    `status.extendedResourceClaimStatus`), which its resource request already counts as GPUs."""
    meta = object_at(pod, "metadata")
    namespace = meta.get("namespace") or "default"
    spec_claims = object_at(pod, "spec").get("resourceClaims")
    status = object_at(pod, "status")
    made = status.get("resourceClaimStatuses")
    names: list[str] = []
    for entry in spec_claims[:MAX_CLAIM_REQUESTS] if isinstance(spec_claims, list) else ():
        if isinstance(entry, Mapping) and isinstance(entry.get("resourceClaimName"), str):
            names.append(entry["resourceClaimName"])
    for entry in made[:MAX_CLAIM_REQUESTS] if isinstance(made, list) else ():
        if isinstance(entry, Mapping) and isinstance(entry.get("resourceClaimName"), str):
            names.append(entry["resourceClaimName"])
    if extended:
        made_for_request = object_at(status, "extendedResourceClaimStatus").get("resourceClaimName")
        if isinstance(made_for_request, str):
            names.append(made_for_request)
    if not isinstance(namespace, str):
        return ()
    return tuple(dict.fromkeys(f"{namespace}/{n}" for n in names if n))


def _allocated_node(allocation: Mapping[str, Any]) -> str:
    """The node the scheduler wrote into a node-local allocation:
    nodeSelector.nodeSelectorTerms[0].matchFields = [{key: metadata.name, operator: In, values: [node]}]."""
    terms = object_at(allocation, "nodeSelector").get("nodeSelectorTerms")
    if not isinstance(terms, list) or len(terms) != 1 or not isinstance(terms[0], Mapping):
        return ""
    fields = terms[0].get("matchFields")
    if not isinstance(fields, list) or len(fields) != 1 or not isinstance(fields[0], Mapping):
        return ""
    field = fields[0]
    values = field.get("values")
    if field.get("key") != "metadata.name" or field.get("operator") != "In":
        return ""
    if not isinstance(values, list) or len(values) != 1 or not isinstance(values[0], str):
        return ""
    return values[0]


def served_by_dra(pod: Any) -> bool:
    """The pod's extended-resource request (e.g. nvidia.com/gpu) was given DRA devices (KEP-5004):
    kube-scheduler wrote `status.extendedResourceClaimStatus`; the devices are its claim's."""
    return bool(object_at(object_at(pod, "status"), "extendedResourceClaimStatus"))
