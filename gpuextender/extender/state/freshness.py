"""When a node's GPU data counts: one rule for the decisions, the binding wait, explain and the
fleet page. Ages are on the extender's own monotonic clock (when the report was received), never
the agent's sample time, so a skewed or stepped node clock cannot make data look fresh."""

from __future__ import annotations


def data_age(received_at: float, now: float) -> float:
    """Seconds since the report was received (0 for a report stored after `now` was read)."""
    return max(0.0, now - received_at)


def is_fresh(received_at: float, now: float, stale_after_s: float) -> bool:
    """Fresh up to and at exactly `stale_after_s` old; stale past it."""
    return now - received_at <= stale_after_s
