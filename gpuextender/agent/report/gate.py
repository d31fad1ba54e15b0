"""Which samples are streamed: a report when something an extender decides with changed, a
heartbeat otherwise. Every sample still feeds /metrics (Prometheus keeps its 1 s samples).

What an extender decides with (gpuextender/extender/state/gpu_summary.py, whole_gpus.py):
- the node: NVML error, where allocation came from (or why it is unknown), GFD's sharing
  labels, the topology;
- per GPU: identity (UUID, name, memory total, compute capability), healthy, health state and
  reasons, critical XIDs, holders, sharing mode and replicas, MIG instances (profile, holders,
  idle), and whether it is idle under each extender's idle rule.
Utilization and memory beyond that idle bit only move a node within its rank (whole_gpus.py's v,
a fraction below one GPU): the heartbeat carries them.

Each extender says its idle rule and staleness TTL in its acks (ReportAck's 0.3 fields). Until
every extender the agent streams to has said its rule (an older extender never does), every
sample is sent, as before. The heartbeat is min(--heartbeat, the smallest stale_after / 3), so
a quiet node never goes stale while its agent lives, even if one heartbeat is lost.

A heartbeat goes light (contract 0.6: the readings only, report/light.py) to an extender that
says light_heartbeats and holds a full report of the same key (stream/streamer.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuextender.common.idle_rule import IdleRule, gpu_is_idle, mig_instance_is_idle
from gpuextender.v1 import gpu_state_pb2 as pb

STALE_SHARE = 3  # heartbeats per staleness TTL at least


@dataclass(frozen=True, slots=True)
class ExtenderRule:
    max_utilization_percent: float
    max_memory_used_percent: float
    stale_after_s: float  # 0: the extender did not say
    max_sm_active_percent: float | None = None  # the extender's SM-activity rule (0.5); None: off or not said


def rule_from_ack(ack: pb.ReportAck) -> ExtenderRule | None:
    """The extender's rule from an ACCEPTED ack; None from an extender that does not say it."""
    if not ack.HasField("idle_max_utilization_percent") or not ack.HasField("idle_max_memory_used_percent"):
        return None
    sm_active = ack.idle_max_sm_active_percent if ack.HasField("idle_max_sm_active_percent") else None
    return ExtenderRule(
        ack.idle_max_utilization_percent, ack.idle_max_memory_used_percent, ack.stale_after_ms / 1000.0, sm_active
    )


class ReportGate:
    """`admit(report, now)` once per sample: True when it must be streamed. `heartbeat_s` 0:
    every sample (the gate is off)."""

    def __init__(self, heartbeat_s: float) -> None:
        self.heartbeat_s = heartbeat_s
        self._rules: dict[str, ExtenderRule | None] = {}  # per extender target: what its acks said
        self._last_key: tuple[Any, ...] | None = None
        self._last_sent: float | None = None
        # Of the report admitted last: its key's epoch (one per run of equal keys, and every report
        # while the gate is off), and whether it was admitted as a heartbeat (its key unchanged):
        # only such a report may go light (report/light.py) where the epoch's full report went.
        self.epoch = 0
        self.repeats = False

    def learn(self, extender: str, rule: ExtenderRule | None) -> None:
        self._rules[extender] = rule

    def forget(self, extender: str) -> None:
        """The extender is no longer streamed to (its address went away)."""
        self._rules.pop(extender, None)

    def heartbeat(self) -> float | None:
        """Seconds between reports of a quiet node; None while every sample must be sent."""
        rules = self._rules.values()
        if self.heartbeat_s <= 0 or not rules or any(r is None for r in rules):
            return None
        ttls = [r.stale_after_s for r in rules if r is not None and r.stale_after_s > 0]
        return min([self.heartbeat_s, *(ttl / STALE_SHARE for ttl in ttls)])

    def admit(self, report: pb.NodeReport, now: float) -> bool:
        heartbeat = self.heartbeat()
        key = decision_key(report, self._thresholds()) if heartbeat is not None else None
        due = heartbeat is None or self._last_sent is None or now - self._last_sent >= heartbeat
        changed = heartbeat is None or self._last_sent is None or key != self._last_key
        if due or changed:
            if changed:
                self.epoch += 1
            self.repeats = not changed
            self._last_key, self._last_sent = key, now
            return True
        return False

    def _thresholds(self) -> tuple[IdleRule, ...]:
        rules = {
            IdleRule(r.max_utilization_percent, r.max_memory_used_percent, r.max_sm_active_percent)
            for r in self._rules.values()
            if r is not None
        }
        return tuple(
            sorted(
                rules,
                key=lambda r: (r.max_utilization_percent, r.max_memory_used_percent, r.max_sm_active_percent or -1.0),
            )
        )


def decision_key(report: pb.NodeReport, thresholds: tuple[IdleRule, ...]) -> tuple[Any, ...]:
    """Everything of `report` an extender decides with (module docstring), as one comparable value."""
    return (
        report.node_error,
        report.allocation_source,
        report.allocation_problem,
        tuple(sorted(report.sharing_labels.items())),
        report.topology.SerializeToString(),
        tuple(_gpu_key(g, thresholds) for g in report.gpus),
    )


def _gpu_key(g: pb.GpuSample, thresholds: tuple[IdleRule, ...]) -> tuple[Any, ...]:
    idle = tuple(gpu_is_idle(g, rule) for rule in thresholds)  # each extender's idle rule
    return (
        g.uuid,
        g.name,
        g.memory_total_bytes,
        g.compute_capability.major,
        g.compute_capability.minor,
        g.healthy,
        tuple(g.unhealthy_reasons),
        g.health,
        tuple(g.health_reasons),
        tuple(x.xid for x in g.xids),
        tuple((h.namespace, h.pod, h.container, h.device_id) for h in g.holders),
        g.sharing.mode,
        g.sharing.replicas,
        idle,
        tuple(_mig_key(i, thresholds) for i in g.mig_instances),
    )


def _mig_key(i: pb.MigInstance, thresholds: tuple[IdleRule, ...]) -> tuple[Any, ...]:
    idle = tuple(mig_instance_is_idle(i, rule) for rule in thresholds)
    return (i.uuid, i.profile, tuple((h.namespace, h.pod, h.container, h.device_id) for h in i.holders), idle)
