"""AcceleratorClass membership, counted at scrape time from the live membership
(state/live_classes.py): nodes per class, nodes in several classes, GPU nodes in none."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuextender.extender.state.inventory_view import InventoryView
from gpuextender.extender.state.live_classes import LiveClasses


class LiveClassesCollector(Collector):
    """Class membership gauges, computed at scrape time from the live membership."""

    def __init__(self, classes: LiveClasses, inventory: Callable[[], InventoryView]) -> None:
        self._classes = classes
        self._inventory = inventory

    def collect(self) -> Iterator[GaugeMetricFamily]:
        view = self._inventory()
        by_node = self._classes.classes_by_node(view)
        per_class = GaugeMetricFamily(
            "gpu_extender_class_nodes",
            "Nodes in each AcceleratorClass (labels and, once reported, NVML facts).",
            labels=["accelerator_class"],
        )
        counts = dict.fromkeys(view.classes, 0)
        several = unclassed = 0
        for node, classes in by_node.items():
            for name in classes:
                counts[name] = counts.get(name, 0) + 1
            several += len(classes) > 1
            unclassed += not classes and view.allocatable_gpus.get(node, 0) > 0
        for name, count in sorted(counts.items()):
            per_class.add_metric([name], count)
        yield per_class
        if view.classes:
            yield GaugeMetricFamily(
                "gpu_extender_nodes_in_several_classes",
                "Nodes that match two or more AcceleratorClasses.",
                value=several,
            )
            yield GaugeMetricFamily(
                "gpu_extender_gpu_nodes_without_class",
                "Nodes with allocatable GPUs that match no AcceleratorClass.",
                value=unclassed,
            )
        yield GaugeMetricFamily(
            "gpu_extender_class_capability_mismatches",
            "(node, class) pairs where the labels match but the GPUs NVML reports do not meet the class "
            "capabilities (memory, compute capability).",
            value=self._classes.excluded_pairs(view),
        )
