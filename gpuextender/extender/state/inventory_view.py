"""What the request path reads from the inventory: an immutable snapshot, rebuilt
off the request path whenever the store changes.

Invalid objects are skipped here, each with one log line (per object version,
not per rebuild) and a count per kind, so one bad object never hides the rest.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuextender.common.log_once import EVER, OncePer
from gpuextender.extender.model.dra import DeviceClassInfo, ResourceSliceInfo, parse_device_class, parse_resource_slice
from gpuextender.extender.model.kube_objects import (
    ACCELERATOR_CLASS,
    BASE_MODEL,
    CLUSTER_BASE_MODEL,
    CLUSTER_SERVING_RUNTIME,
    DEVICE_CLASS,
    INFERENCE_SERVICE,
    NODE,
    RESOURCE_SLICE,
    SERVING_RUNTIME,
    KubeObject,
    object_key,
)
from gpuextender.extender.model.ome.accelerator_class import (
    AcceleratorClass,
    parse_accelerator_class,
)
from gpuextender.extender.model.ome.node_class import (
    ClassMembership,
    classes_for_node,
    compile_classes,
    membership_from,
)
from gpuextender.extender.model.ome.ome_objects import (
    BaseModel,
    InferenceService,
    ServingRuntime,
    parse_base_model,
    parse_inference_service,
    parse_serving_runtime,
)
from gpuextender.extender.model.pod_gpus import parse_count
from gpuextender.extender.model.untrusted import InvalidInput, object_at
from gpuextender.extender.state.dra_inventory import DraInventory, PoolCache, build_dra, carried_over
from gpuextender.extender.state.inventory_store import InventoryStore

log = logging.getLogger("gpu_extender.inventory")


@dataclass(frozen=True, slots=True)
class InventoryView:
    version: int = 0
    allocatable_gpus: dict[str, int] = field(default_factory=dict)  # node -> allocatable GPUs
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    invalid: dict[str, int] = field(default_factory=dict)  # kind -> objects skipped
    classes: dict[str, AcceleratorClass] = field(default_factory=dict)  # valid AcceleratorClasses by name
    membership: ClassMembership = field(default_factory=lambda: membership_from({}, ()))
    # Valid OME objects, raw, by `namespace/name` (namespaced kinds) or `name` (cluster kinds).
    objects: dict[str, dict[str, KubeObject]] = field(default_factory=dict)
    # The same objects parsed for runtime selection (extender.decide.runtime_selector).
    runtimes: tuple[ServingRuntime, ...] = ()
    models: tuple[BaseModel, ...] = ()
    inference_services: dict[str, InferenceService] = field(default_factory=dict)
    dra: DraInventory = field(default_factory=DraInventory)  # GPUs that come through DRA, per node

    def get(self, kind: str, key: str) -> KubeObject | None:
        return self.objects.get(kind, {}).get(key)

    def namespaced_first(
        self, kind: str, cluster_kind: str, namespace: str, name: str
    ) -> tuple[str, KubeObject | None]:
        """OME's lookup order: the namespaced object, else the cluster-scoped one (§7.2)."""
        found = self.get(kind, f"{namespace}/{name}")
        if found is not None:
            return kind, found
        return cluster_kind, self.get(cluster_kind, name)


class ViewBuilder:
    """Keeps `current` in step with the store; rebuilds at most once per loop turn."""

    def __init__(
        self,
        store: InventoryStore,
        gpu_resources: Sequence[str],
        on_invalid: Callable[[str, str, str], None] | None = None,
    ) -> None:
        self._store = store
        self._gpu_resources = tuple(gpu_resources)
        self._on_invalid = on_invalid or (lambda kind, key, problem: None)
        self._say = OncePer(EVER)  # each invalid (kind, key, resourceVersion) once (bounded)
        self._scheduled = False
        self._rebuilt: list[Callable[[InventoryView], object]] = []
        self._class_report: tuple[object, ...] = ()
        # Per-node results of the last rebuild, reused while the store holds the same
        # object (keyed by id, checked by identity): one changed Node re-parses and
        # re-classifies one node, not all of them.
        self._parsed_nodes: dict[int, tuple[KubeObject, tuple[str, int, dict[str, str]]]] = {}
        self._node_classes: dict[int, tuple[KubeObject, tuple[str, ...]]] = {}
        self._classes_seen: list[AcceleratorClass] = []
        self._parsed_slices: dict[int, tuple[KubeObject, ResourceSliceInfo]] = {}
        self._invalid_pools: frozenset[tuple[str, str]] = frozenset()
        # The last DRA inventory and what it was built from (slice objects by identity, classes by
        # value): a rebuild for a Node or an OME object keeps it, costing no walk of the devices.
        self._dra_inputs: tuple[tuple[ResourceSliceInfo, ...], tuple[DeviceClassInfo, ...]] = ((), ())
        self._dra_last = DraInventory()
        self._dra_pools: PoolCache = {}  # build_dra's per-pool parts, reused while their slices are
        self.current = InventoryView()
        store.on_change(self._changed)

    def on_rebuild(self, listener: Callable[[InventoryView], object]) -> None:
        """Call `listener(view)` after every rebuild: derived state follows off the request path."""
        self._rebuilt.append(listener)

    def _changed(self, kind: str) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (tests, start-up): rebuild now
            self.rebuild()
            return
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self.rebuild)

    def _invalid(self, kind: str, obj: KubeObject, problem: str, counts: dict[str, int]) -> None:
        """A skipped object: counted in `counts` (the view's `invalid`), logged once per version."""
        counts[kind] = counts.get(kind, 0) + 1
        key = object_key(obj)
        version = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        if self._say(kind, key, version):
            log.warning("inventory: %s %s skipped: %s", kind, key, problem)
            self._on_invalid(kind, key, problem)

    def _report_classless(self, membership: ClassMembership, allocatable: dict[str, int]) -> None:
        """Log nodes in several classes, and GPU nodes in none, when that set changes."""
        unclassed = tuple(n for n in membership.no_class if allocatable.get(n, 0) > 0)
        report = (tuple(membership.multi_class.items()), unclassed)
        if report == self._class_report:
            return
        self._class_report = report
        if membership.multi_class:
            log.info(
                "inventory: %d node(s) in several AcceleratorClasses: %s",
                len(membership.multi_class),
                "; ".join(f"{n}: {', '.join(cs)}" for n, cs in list(membership.multi_class.items())[:10]),
            )
        if unclassed:
            log.info(
                "inventory: %d GPU node(s) match no AcceleratorClass (OME pods with class rules cannot land there): %s",
                len(unclassed),
                ", ".join(unclassed[:10]),
            )

    def _classify(self, nodes: list[KubeObject], classes: dict[str, AcceleratorClass]) -> ClassMembership:
        current = list(classes.values())
        if current != self._classes_seen:  # any class added, changed or removed: classify all again
            self._classes_seen = current
            self._node_classes = {}
        matchers = compile_classes(current)
        by_node: dict[str, tuple[str, ...]] = {}
        node_classes: dict[int, tuple[KubeObject, tuple[str, ...]]] = {}
        for node in nodes:
            cached = self._node_classes.get(id(node))
            names = cached[1] if cached is not None and cached[0] is node else classes_for_node(node, matchers)
            node_classes[id(node)] = (node, names)
            by_node[node["metadata"]["name"]] = names
        self._node_classes = node_classes
        return membership_from(by_node, classes)

    def rebuild(self) -> InventoryView:
        self._scheduled = False
        invalid: dict[str, int] = {}
        allocatable: dict[str, int] = {}
        labels: dict[str, dict[str, str]] = {}
        valid_nodes: list[KubeObject] = []
        parsed_nodes: dict[int, tuple[KubeObject, tuple[str, int, dict[str, str]]]] = {}
        for node in self._store.objects(NODE.kind):
            cached = self._parsed_nodes.get(id(node))
            if cached is not None and cached[0] is node:  # the same object as last time: same result
                result = cached[1]
            else:
                try:
                    result = _parse_node(node, self._gpu_resources)
                except InvalidInput as exc:
                    self._invalid(NODE.kind, node, exc.message, invalid)
                    continue
            parsed_nodes[id(node)] = (node, result)
            name, gpus, node_labels = result
            allocatable[name] = gpus
            labels[name] = node_labels
            valid_nodes.append(node)
        self._parsed_nodes = parsed_nodes
        classes: dict[str, AcceleratorClass] = {}
        for obj in self._store.objects(ACCELERATOR_CLASS.kind):
            try:
                accelerator_class = parse_accelerator_class(obj)
            except InvalidInput as exc:
                self._invalid(ACCELERATOR_CLASS.kind, obj, str(exc), invalid)
                continue
            classes[accelerator_class.name] = accelerator_class
        membership = self._classify(valid_nodes, classes)
        if classes:
            self._report_classless(membership, allocatable)
        objects: dict[str, dict[str, KubeObject]] = {}
        parsed: dict[str, list[Any]] = {}  # kind -> its parsed objects (each kind its own type)
        parsers = (
            (SERVING_RUNTIME, parse_serving_runtime),
            (CLUSTER_SERVING_RUNTIME, parse_serving_runtime),
            (INFERENCE_SERVICE, parse_inference_service),
            (BASE_MODEL, parse_base_model),
            (CLUSTER_BASE_MODEL, parse_base_model),
        )
        for kind, parse in parsers:
            valid = objects.setdefault(kind.kind, {})
            for obj in self._store.objects(kind.kind):
                try:
                    parsed.setdefault(kind.kind, []).append(parse(obj))
                except InvalidInput as exc:
                    self._invalid(kind.kind, obj, str(exc), invalid)
                    continue
                valid[object_key(obj)] = obj
        dra = self._dra(invalid)
        runtimes = tuple(parsed.get(SERVING_RUNTIME.kind, []) + parsed.get(CLUSTER_SERVING_RUNTIME.kind, []))
        models = tuple(parsed.get(BASE_MODEL.kind, []) + parsed.get(CLUSTER_BASE_MODEL.kind, []))
        services = {f"{i.namespace}/{i.name}": i for i in parsed.get(INFERENCE_SERVICE.kind, [])}
        self.current = InventoryView(
            self._store.version,
            allocatable,
            labels,
            invalid,
            classes,
            membership,
            objects,
            runtimes,
            models,
            services,
            dra,
        )
        for listener in self._rebuilt:
            listener(self.current)
        return self.current

    def _dra(self, invalid: dict[str, int]) -> DraInventory:
        """DeviceClasses and ResourceSlices into per-node DRA GPUs (state/dra_inventory.py); a slice
        is parsed once while the store holds the same object."""
        classes: list[DeviceClassInfo] = []
        for obj in self._store.objects(DEVICE_CLASS.kind):
            try:
                classes.append(parse_device_class(obj))
            except InvalidInput as exc:
                self._invalid(DEVICE_CLASS.kind, obj, str(exc), invalid)
        slices: list[ResourceSliceInfo] = []
        parsed: dict[int, tuple[KubeObject, ResourceSliceInfo]] = {}
        for obj in self._store.objects(RESOURCE_SLICE.kind):
            cached = self._parsed_slices.get(id(obj))
            if cached is not None and cached[0] is obj:
                info = cached[1]
            else:
                try:
                    info = parse_resource_slice(obj)
                except InvalidInput as exc:
                    self._invalid(RESOURCE_SLICE.kind, obj, str(exc), invalid)
                    continue
            parsed[id(obj)] = (obj, info)
            slices.append(info)
        self._parsed_slices = parsed
        last_slices, last_classes = self._dra_inputs
        # By identity: the last inputs are held here, so no new object can have one's id.
        if list(map(id, slices)) == list(map(id, last_slices)) and classes == list(last_classes):
            return self._dra_last
        self._dra_inputs = (tuple(slices), tuple(classes))
        dra = build_dra(slices, classes, self._gpu_resources, self._dra_pools)
        dra = self._dra_last = carried_over(self._dra_last, dra)
        for driver, pool in dra.invalid_pools - self._invalid_pools:
            log.warning(
                "inventory: DRA pool %s of driver %s names a device twice in its newest generation; "
                "its devices are not counted (kube-scheduler's allocator refuses the pool too)",
                pool,
                driver,
            )
        self._invalid_pools = dra.invalid_pools
        return dra


def _parse_node(obj: KubeObject, gpu_resources: Sequence[str]) -> tuple[str, int, dict[str, str]]:
    meta = object_at(obj, "metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInput("wrong_type", "metadata.name is missing")
    status = object_at(obj, "status")
    allocatable = object_at(status, "allocatable")
    gpus = sum(parse_count(allocatable[r], f"status.allocatable[{r}]") for r in gpu_resources if r in allocatable)
    raw_labels = meta.get("labels")
    if raw_labels is not None and not isinstance(raw_labels, dict):
        raise InvalidInput("wrong_type", "metadata.labels is not a map")
    return name, gpus, {str(k): str(v) for k, v in (raw_labels or {}).items()}
