"""The bind verb and the binding wait, counted at scrape time (scheduler/binding.py,
scheduler/binding_gate.py)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector


class GateCounts(Protocol):
    races: int
    waited: int
    expired: int

    def open_count(self) -> int: ...


class BindingCounts(Protocol):
    """What scheduler/binding.Bindings shows of itself (it sits above this stage)."""

    @property
    def binds(self) -> Mapping[str, int]: ...
    @property
    def gate(self) -> GateCounts: ...
    @property
    def peer_counts(self) -> Mapping[str, int]: ...
    def peers_known(self) -> int: ...


class BindingsCollector(Collector):
    def __init__(self, bindings: BindingCounts) -> None:
        self._bindings = bindings

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        b, gate = self._bindings, self._bindings.gate
        binds = CounterMetricFamily(
            "gpu_extender_binds",
            "Bind verb calls by result (the Binding made, or an error answered to kube-scheduler).",
            labels=["result"],
        )
        for result, count in b.binds.items():
            binds.add_metric([result], count)
        yield binds
        yield CounterMetricFamily(
            "gpu_extender_binding_races",
            "Filters that decided while an earlier pod's binding was not known yet, "
            "the binding then arriving (the race the binding wait closes; with --binding-wait 0 every one).",
            value=gate.races,
        )
        yield CounterMetricFamily(
            "gpu_extender_binding_waits",
            "Filters that waited for an earlier pod's binding (--binding-wait).",
            value=gate.waited,
        )
        yield CounterMetricFamily(
            "gpu_extender_binding_wait_expired",
            "Earlier pods' bindings that did not arrive within --binding-wait "
            "(their scheduling cycle ended without a binding, or binding is slow).",
            value=gate.expired,
        )
        yield GaugeMetricFamily(
            "gpu_extender_bindings_open",
            "Pods filter answered whose binding is not known yet (this replica's, and its peers').",
            value=gate.open_count(),
        )
        peers = CounterMetricFamily(
            "gpu_extender_peer_bindings",
            "Open bindings told to the other replicas (--peers) or heard from them, by result: sent, "
            "failed (a peer did not take its message), dropped (a slow peer's backlog), received, widened "
            "(taken as going anywhere: the peers' bindings name too many nodes), overflow (not taken: too "
            "many of the peers' bindings open).",
            labels=["result"],
        )
        for result, count in b.peer_counts.items():
            peers.add_metric([result], count)
        yield peers
        yield GaugeMetricFamily(
            "gpu_extender_peers", "Other replicas this one tells of its open bindings (--peers).", value=b.peers_known()
        )
