"""Why a node fails the filter: every reason the extender can give, written once.

kube-scheduler copies the message word for word into the pod's
FailedScheduling event and counts identical strings together ("3 gpu-extender:
too few idle GPUs ..."), so messages carry no node-specific numbers, and
they are short: the scheduler decodes one per rejected node on every call. The
numbers are in the extender's log and its /metrics.

`unresolvable` decides the map: True puts the node under
FailedAndUnresolvableNodes, so kube-scheduler's preemption does not try to
evict pods there (evicting pods does not repair a lost GPU), and the no-fit
fallback never lets such a node through. Busy or stale nodes are soft failures.
"""

from __future__ import annotations

from typing import Any


class Reason(str):
    """A reason is its message, the str kube-scheduler shows (`gpu-extender: <sentence> (<code>)`):
    a filter answer sends it per failed node as it is, with no second map of messages to build.
    Beside it: `code` (machine-stable, a metric label), `sentence`, and `unresolvable`. Each is a
    singleton below; read-only once made."""

    code: str
    sentence: str
    unresolvable: bool

    def __new__(cls, code: str, sentence: str, unresolvable: bool) -> Reason:
        reason = super().__new__(cls, f"gpu-extender: {sentence} ({code})")
        object.__setattr__(reason, "code", code)
        object.__setattr__(reason, "sentence", sentence)
        object.__setattr__(reason, "unresolvable", unresolvable)
        return reason

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a Reason is read-only ({name})")

    @property
    def message(self) -> str:
        """The message as a plain str."""
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"Reason({self.code})"

    # A str subclass with fields beside its value: copies are the singleton itself, and pickling
    # (which would call __new__ with the value alone) makes it again from its fields.
    def __copy__(self) -> Reason:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Reason:
        return self

    def __reduce__(self) -> tuple[type[Reason], tuple[str, str, bool]]:
        return Reason, (self.code, self.sentence, self.unresolvable)


INSUFFICIENT_IDLE_GPUS = Reason("InsufficientIdleGPUs", "too few idle GPUs", unresolvable=False)
# Allocation known: too few GPUs no pod holds. Soft: preempting pods there would free them.
INSUFFICIENT_FREE_GPUS = Reason("InsufficientFreeGPUs", "too few free GPUs", unresolvable=False)
# Enough free idle GPUs by the agent's report, but not after the GPUs of pods just bound to the
# node that its agent does not attribute yet (decide/README.md, "Bound pods"). Soft: they may never start.
GPUS_TAKEN_BY_BOUND_PODS = Reason(
    "GPUsTakenByBoundPods", "too few GPUs left by pods bound here and not yet running", unresolvable=False
)
INSUFFICIENT_GPUS = Reason("InsufficientGPUs", "node has too few GPUs", unresolvable=True)
INSUFFICIENT_HEALTHY_GPUS = Reason("InsufficientHealthyGPUs", "too few healthy GPUs", unresolvable=True)
# Whole GPUs asked for, and the node's GPUs are MIG-partitioned: ask for nvidia.com/mig-<profile>.
MIG_PARTITIONED = Reason("MigPartitioned", "GPUs are MIG-partitioned: request MIG devices", unresolvable=True)
# nvidia.com/mig-<profile>: fewer instances of the profile on healthy GPUs than asked for.
INSUFFICIENT_MIG_DEVICES = Reason("InsufficientMigDevices", "too few MIG devices of the profile", unresolvable=True)
# ... or enough of them, but too few free and idle. Soft: pods may end or be preempted.
INSUFFICIENT_FREE_MIG_DEVICES = Reason(
    "InsufficientFreeMigDevices", "too few free MIG devices of the profile", unresolvable=False
)
NVML_UNAVAILABLE = Reason("NvmlUnavailable", "node agent cannot read NVML", unresolvable=True)
STALE_GPU_DATA = Reason("StaleGPUData", "node GPU data is stale", unresolvable=False)
# Fits only on assumed data (agent silent or never heard) while a reporting node fits.
NO_FRESH_GPU_DATA = Reason("NoFreshGPUData", "no fresh GPU data while reporting nodes fit", unresolvable=False)

CLASS_NOT_ALLOWED = Reason("AcceleratorClassNotAllowed", "GPU class not allowed for the pod", unresolvable=True)
CLASS_INCOMPATIBLE = Reason("AcceleratorClassIncompatible", "the pod's GPU class cannot be served", unresolvable=True)
RUNTIME_INCOMPATIBLE = Reason("RuntimeIncompatible", "the serving runtime cannot serve the model", unresolvable=True)
