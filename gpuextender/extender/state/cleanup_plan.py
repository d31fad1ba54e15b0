"""What `gpu-extender cleanup` and a leader's --cleanup-on-exit remove of the extender's cluster-wide
writes (issue 50, item 5), decided from the objects as the API server has them, and what they say
afterwards. Pure: the I/O is inventory/cleanup.py.

- DeviceTaintRules: every rule labelled app.kubernetes.io/managed-by=gpu-extender (the writer's
  label, device_taints.MANAGED_BY), none other.
- A Node: its `GPUsUsable` condition (node_gpu_status.CONDITION_TYPE) and each taint whose key is
  the node taint's (settings.DEFAULT_NODE_TAINT_KEY unless --node-taint-key); no other condition,
  no other taint.
- The condition goes by a strategic-merge patch of nodes/status keyed by its type: the API server
  deletes that one entry of the list, whatever else changed meanwhile.
- The taints go by a JSON patch that tests each is still at its position as it was read, then
  removes it, the highest position first (the others keep theirs): a concurrent change to
  spec.taints fails the test (the Node is read again), and nobody's change is lost.
- One line per kind (rules, conditions, taints) with its counts, and the exit status: 0 when
  everything found was removed, 1 when something could not be (or a running extender holds the
  Lease: it writes them again).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuextender.extender.model.untrusted import timestamp
from gpuextender.extender.state.device_taints import GROUP, MANAGED_BY
from gpuextender.extender.state.node_gpu_status import CONDITION_TYPE, condition_of, taints_with_key

MAX_PROBLEMS = 2  # distinct reasons a line quotes


@dataclass(frozen=True, slots=True)
class NodePlan:
    """What of ours one Node carries: the condition, and each taint of our key with its position."""

    name: str
    condition: bool
    taints: tuple[tuple[int, dict[str, Any]], ...]


def node_plan(node: Mapping[str, Any], taint_key: str) -> NodePlan | None:
    """What to remove from `node` (a Node's JSON); None when it carries nothing of ours."""
    name = (node.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not name:
        return None
    condition = condition_of(node) is not None
    taints = tuple(taints_with_key(node, taint_key))
    if not condition and not taints:
        return None
    return NodePlan(name, condition, taints)


def condition_patch() -> dict[str, Any]:
    """The strategic-merge patch of nodes/status that deletes the GPUsUsable condition only."""
    return {"status": {"conditions": [{"type": CONDITION_TYPE, "$patch": "delete"}]}}


def taint_patch(plan: NodePlan) -> list[dict[str, Any]]:
    """The JSON patch that removes the plan's taints, each after testing it is still what was read."""
    ops: list[dict[str, Any]] = []
    for position, taint in sorted(plan.taints, key=lambda t: t[0], reverse=True):
        path = f"/spec/taints/{position}"
        ops += [{"op": "test", "path": path, "value": taint}, {"op": "remove", "path": path}]
    return ops


def forbidden(verb: str, resource: str) -> str:
    """A 403, said as what RBAC must allow."""
    return f"forbidden (RBAC: needs {verb} on {resource})"


@dataclass
class Removal:
    """One kind of write: how many were found, how many removed, and why not the others."""

    found: int = 0
    removed: int = 0
    listed: bool = False  # False: the list itself failed (`problems` says why)
    problems: list[str] = field(default_factory=list)  # distinct, in the order met

    def fail(self, why: str) -> None:
        if why not in self.problems:
            self.problems.append(why)

    @property
    def complete(self) -> bool:
        return not self.problems


@dataclass
class CleanupReport:
    """What one cleanup found and did; filled in as it goes (a run cut short says what it had done)."""

    taint_key: str
    dry_run: bool = False
    version: str | None = None  # the DeviceTaintRule version served; None: not served
    rules: Removal = field(default_factory=Removal)
    conditions: Removal = field(default_factory=Removal)
    taints: Removal = field(default_factory=Removal)
    leader: str = ""  # a replica holding the Lease now (it writes everything again)
    lease: str = ""  # namespace/name of the Lease looked at
    lease_note: str = ""  # why the Lease could not be looked at
    stopped: str = ""  # why the run ended early (unreachable, out of time)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _counted(removal: Removal, dry_run: bool, done: str, would: str, noun: str, rest: str) -> str:
    """`deleted 3 DeviceTaintRules (...)`, with what was not and why."""
    if dry_run:
        line = f"{would} {_plural(removal.found, noun)}{rest}"
    else:
        line = f"{done} {_plural(removal.removed, noun)}{rest}"
    if not removal.listed:
        return f"{line}: could not list them: {'; '.join(removal.problems[:MAX_PROBLEMS]) or 'not looked at'}"
    left = removal.found - removal.removed
    if removal.problems and not dry_run:
        return f"{line}; {left} not: {'; '.join(removal.problems[:MAX_PROBLEMS])}"
    return line


def lines(report: CleanupReport) -> list[str]:
    """What to print (or log): one line for the Lease when it says something, one per kind, and one
    when the run ended early."""
    out: list[str] = []
    if report.leader:
        out.append(
            f"warning: {report.leader} holds the Lease {report.lease}: a running gpu-extender writes what this "
            "removes again; stop it first (kubectl delete -k deploy/), then run this again"
        )
    elif report.lease_note:
        out.append(f"note: {report.lease_note}: not checked whether a gpu-extender still runs")
    if report.stopped:
        out.append(f"stopped: {report.stopped}")
    rules = report.rules
    if rules.listed and report.version is None:
        out.append(f"the API server serves no DeviceTaintRules ({GROUP}): none to delete")
    else:
        served = f"{GROUP}/{report.version}" if report.version else GROUP
        rest = f" ({'='.join(MANAGED_BY)}, {served})"
        out.append(_counted(rules, report.dry_run, "deleted", "would delete", "DeviceTaintRule", rest))
    out.append(
        _counted(
            report.conditions,
            report.dry_run,
            f"removed the {CONDITION_TYPE} condition from",
            f"would remove the {CONDITION_TYPE} condition from",
            "Node",
            "",
        )
    )
    key = report.taint_key
    out.append(
        _counted(
            report.taints, report.dry_run, f"removed taint {key} from", f"would remove taint {key} from", "Node", ""
        )
    )
    return out


def exit_status(report: CleanupReport) -> int:
    """0: everything found was removed (or, dry, could be looked at); 1: something was not, the run
    ended early, or a running extender holds the Lease."""
    kinds = (report.rules, report.conditions, report.taints)
    return 0 if not report.leader and not report.stopped and all(k.complete for k in kinds) else 1


def lease_holder(lease: Mapping[str, Any] | None, now: datetime) -> str:
    """Who holds the replicas' Lease now ("" for nobody): its holder, unless the holder gave it up (no
    holderIdentity) or let it lapse (renewed longer ago, or further ahead by a skewed clock, than its
    duration). A holder whose renewal cannot be read is taken to hold it."""
    spec = (lease or {}).get("spec") or {}
    holder = spec.get("holderIdentity")
    if not isinstance(holder, str) or not holder:
        return ""
    duration = spec.get("leaseDurationSeconds")
    renewed = timestamp(spec.get("renewTime"))
    if renewed is None or not isinstance(duration, int):
        return holder
    return holder if abs((now - renewed).total_seconds()) <= duration else ""
