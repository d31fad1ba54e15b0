"""Asks the kubelet's PodResources API which containers hold which GPUs.

The kubelet serves `v1.PodResourcesLister` on a unix socket
(/var/lib/kubelet/pod-resources/kubelet.sock). Each sample calls `List` (who holds which device
ID, and which devices DRA allocated to which container's claims: `dynamic_resources`, read for
NVIDIA's DRA driver only; a kubelet before 1.27 never sends it, and then none are);
`GetAllocatableResources` (every device ID the kubelet can hand out, which tells
time-slicing replicas apart) is asked at the first answer, again every `allocatable_refresh_s`,
after the kubelet comes back, and soon after a held ID shows up that it did not list.

Calls are synchronous with a short deadline: the sample loop already runs in a worker thread.
Expected failures never raise; they become a short stable problem code that the report carries
as allocation_problem (ALLOCATION_UNAVAILABLE: unknown, never "free"). What a kubelet sends is
bounded (message size, pods, containers, device IDs, name lengths), so a broken one cannot eat
the agent's memory or make the extender refuse the node's reports.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import grpc

from gpuextender.agent.model.dra_names import MAX_DEVICE_NAME_CHARS, NVIDIA_DRA_DRIVER
from gpuextender.agent.model.readings import NodeSample
from gpuextender.agent.sources.allocation import (
    DEFAULT_GPU_RESOURCES,
    PROBLEM_TOO_MANY_HOLDERS,
    AllocationResult,
    DeviceAssignment,
    DraAssignment,
    GpuResourceNames,
    KubeletAllocations,
    apply_allocation,
)
from gpuextender.podresources.v1 import api_pb2, api_pb2_grpc

log = logging.getLogger("gpu_agent.pod_resources")

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
# The kubelet answers List from memory in well under a millisecond; a second means it is stuck.
DEFAULT_TIMEOUT_S = 1.0
# Allocatable devices change only when the device plugin is reconfigured (time-slicing, MIG).
DEFAULT_ALLOCATABLE_REFRESH_S = 60.0
# Least time between two GetAllocatableResources calls asked for by an unknown held ID or an error.
ALLOCATABLE_MIN_GAP_S = 5.0

# allocation_problem codes (the wire carries them; keep them stable, <= 64 characters).
PROBLEM_SOCKET_MISSING = "socket_missing"  # no file at the socket path (kubelet down, wrong hostPath)
PROBLEM_NOT_A_SOCKET = "not_a_socket"  # something else at that path
PROBLEM_PERMISSION_DENIED = "permission_denied"  # EACCES on the socket or its directory
PROBLEM_KUBELET_UNAVAILABLE = "kubelet_unavailable"  # refused, reset, or no answer within the deadline
PROBLEM_RATE_LIMITED = "kubelet_rate_limited"  # the kubelet's limiter (100 calls/s, burst 10) said no
PROBLEM_ANSWER_TOO_LARGE = "answer_too_large"  # over PodResourcesLimits.max_message_bytes
PROBLEM_TOO_MANY_PODS = "too_many_pods"
PROBLEM_TOO_MANY_CONTAINERS = "too_many_containers"
PROBLEM_TOO_MANY_DEVICES = "too_many_devices"  # GPU device IDs over max_device_ids
PROBLEM_INVALID_ANSWER = "invalid_answer"  # a name longer than Kubernetes allows
PROBLEM_LIST_UNIMPLEMENTED = "list_unimplemented"  # not a v1 PodResources server (kubelet < 1.20)
PROBLEM_KUBELET_ERROR = "kubelet_error"  # any other gRPC status
PROBLEM_AGENT_ERROR = "agent_error"  # a bug of ours, logged with its traceback
# Only for GetAllocatableResources (logged; allocation itself stays known).
PROBLEM_ALLOCATABLE_UNIMPLEMENTED = "allocatable_unimplemented"  # kubelet before the RPC existed
PROBLEM_ALLOCATABLE_DISABLED = "allocatable_disabled"  # feature gate KubeletPodResourcesGetAllocatable off

# Kubernetes' own limits for the names a holder carries; the extender refuses a report with a
# longer one (extender.ingest.report_checks, kept equal by a test).
MAX_NAMESPACE_CHARS = 63
MAX_POD_NAME_CHARS = 253
MAX_CONTAINER_NAME_CHARS = 63
MAX_RESOURCE_NAME_CHARS = 316
MAX_CLAIM_NAME_CHARS = 253
MAX_POOL_NAME_CHARS = 253  # resource.k8s.io: a pool name is at most 253 characters


@dataclass(frozen=True, slots=True)
class PodResourcesLimits:
    """What one kubelet answer may hold; past a bound the answer is refused, not cut short
    (a shortened list would show held GPUs as free)."""

    max_message_bytes: int = 4 * 1024 * 1024  # gRPC receive limit; ~100x a 500-pod node's answer
    max_pods: int = 5_000  # kubelet --max-pods is 110 by default; large nodes run a few hundred
    max_containers: int = 20_000  # summed over pods
    # device IDs of GPU resources and DRA GPU devices, summed over containers (or allocatable)
    max_device_ids: int = 10_000
    # A longer ID cannot name one of our GPUs (NVML UUIDs are < 96 characters): it is dropped
    # and counted, which changes no GPU's holders. Equal to the extender's bound on a holder's ID.
    max_device_id_chars: int = 256


def diagnose_socket(path: str) -> str:
    """Why connecting to the unix socket at `path` would fail: a PROBLEM_* code, or "" if
    nothing is wrong with the file itself. Root passes the permission check (CAP_DAC_OVERRIDE)
    exactly as it passes connect()."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return PROBLEM_SOCKET_MISSING
    except PermissionError:  # a directory on the way is not searchable
        return PROBLEM_PERMISSION_DENIED
    except OSError as exc:
        return PROBLEM_SOCKET_MISSING if exc.errno == errno.ENOTDIR else PROBLEM_KUBELET_UNAVAILABLE
    if not stat.S_ISSOCK(st.st_mode):
        return PROBLEM_NOT_A_SOCKET
    if not os.access(path, os.W_OK):  # connect() on a unix socket needs write permission
        return PROBLEM_PERMISSION_DENIED
    return ""


class PodResourcesClient:
    """One gRPC channel to the kubelet's PodResources socket; `fetch()` once per sample.

    Thread-safe (one call at a time). The channel is dropped after any failed call and made anew
    on the next one, so a restarted kubelet is found at once rather than after gRPC's reconnect
    backoff."""

    def __init__(
        self,
        socket_path: str = DEFAULT_SOCKET,
        *,
        is_gpu_resource: Callable[[str], bool] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        allocatable_refresh_s: float = DEFAULT_ALLOCATABLE_REFRESH_S,
        limits: PodResourcesLimits = PodResourcesLimits(),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.socket_path = socket_path
        self._is_gpu = is_gpu_resource or GpuResourceNames()
        self._timeout_s = timeout_s
        self._refresh_s = allocatable_refresh_s
        self._limits = limits
        self._clock = clock
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._stub: Any = None
        self._allocatable: dict[str, tuple[str, ...]] | None = None
        self._allocatable_ids: frozenset[str] = frozenset()
        self._allocatable_due = 0.0  # clock time of the next GetAllocatableResources (0: next answer)
        self._allocatable_asked: float | None = None
        self.allocatable_problem: str | None = None  # None: not asked yet; "" answered
        self.list_calls = 0
        self.allocatable_calls = 0

    @property
    def limits(self) -> PodResourcesLimits:
        return self._limits

    def fetch(self) -> KubeletAllocations:
        """Who holds which GPU device now, or why that is unknown. Never raises for a kubelet
        that is missing, slow, failing or sending too much."""
        with self._lock:
            return self._fetch()

    def close(self) -> None:
        with self._lock:
            self._drop_channel()

    # -- internals -----------------------------------------------------------

    def _fetch(self) -> KubeletAllocations:
        if self._channel is None:
            problem = diagnose_socket(self.socket_path)
            if problem:
                return KubeletAllocations(allocatable=self._allocatable, problem=problem)
            self._open()
        self.list_calls += 1
        try:
            response = self._stub.List(api_pb2.ListPodResourcesRequest(), timeout=self._timeout_s)
        except grpc.RpcError as exc:
            problem = self._rpc_problem(exc)
            self._drop_channel()
            # The kubelet may come back with another device plugin config: ask again then.
            self._allocatable_due = 0.0
            return KubeletAllocations(allocatable=self._allocatable, problem=problem)
        assignments, claims, dropped, problem = self._read_list(response)
        if problem:
            return KubeletAllocations(allocatable=self._allocatable, problem=problem)
        now = self._clock()
        unknown_id_held = self._allocatable is not None and any(
            d not in self._allocatable_ids for a in assignments for d in a.device_ids
        )
        if now >= self._allocatable_due or (unknown_id_held and self._gap_passed(now)):
            self._refresh_allocatable(now)
        return KubeletAllocations(tuple(assignments), self._allocatable, "", dropped, tuple(claims))

    def _open(self) -> None:
        target = "unix:" + os.path.abspath(self.socket_path)
        self._channel = grpc.insecure_channel(
            target,
            options=[
                ("grpc.max_receive_message_length", self._limits.max_message_bytes),
                ("grpc.max_send_message_length", 64 * 1024),  # our requests are empty
                ("grpc.enable_http_proxy", 0),  # a node's https_proxy must not catch a local socket
                ("grpc.enable_retries", 0),  # one attempt per sample; the next sample is the retry
                # A channel made anew (after a failure) gets a new connection, not a subchannel the
                # process-wide pool kept from the old one (still in backoff, or from before the
                # kubelet restarted).
                ("grpc.use_local_subchannel_pool", 1),
            ],
        )
        self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)

    def _drop_channel(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = None
        self._stub = None

    def _gap_passed(self, now: float) -> bool:
        return self._allocatable_asked is None or now - self._allocatable_asked >= ALLOCATABLE_MIN_GAP_S

    def _rpc_problem(self, exc: grpc.RpcError) -> str:
        code = exc.code() if isinstance(exc, grpc.Call) else None
        details = (exc.details() if isinstance(exc, grpc.Call) else "") or ""
        if code == grpc.StatusCode.UNAVAILABLE:
            # Connection refused, reset, or the file vanished or changed mode since: say which.
            # An LSM (SELinux's connectto) can deny connect() where access(2) passes: gRPC's
            # details then carry the errno's text.
            diagnosed = diagnose_socket(self.socket_path)
            if diagnosed:
                return diagnosed
            return PROBLEM_PERMISSION_DENIED if "Permission denied" in details else PROBLEM_KUBELET_UNAVAILABLE
        if code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
            return PROBLEM_KUBELET_UNAVAILABLE
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            # The same status for our receive limit and for the kubelet's rate limiter.
            return PROBLEM_ANSWER_TOO_LARGE if "larger than max" in details else PROBLEM_RATE_LIMITED
        if code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
            return PROBLEM_PERMISSION_DENIED
        if code == grpc.StatusCode.UNIMPLEMENTED:
            return PROBLEM_LIST_UNIMPLEMENTED
        return PROBLEM_KUBELET_ERROR

    def _read_list(self, response: Any) -> tuple[list[DeviceAssignment], list[DraAssignment], int, str]:
        """The GPU assignments of a List answer (device plugin, DRA), the number of overlong IDs
        dropped, and a problem when a bound is crossed ("" if none)."""
        limits = self._limits
        pods = response.pod_resources
        if len(pods) > limits.max_pods:
            return [], [], 0, PROBLEM_TOO_MANY_PODS
        containers = device_ids = dropped = 0
        assignments: list[DeviceAssignment] = []
        claims: list[DraAssignment] = []
        for pod in pods:
            containers += len(pod.containers)
            if containers > limits.max_containers:
                return [], [], 0, PROBLEM_TOO_MANY_CONTAINERS
            for container in pod.containers:
                for claim in container.dynamic_resources:
                    for device in claim.claim_resources:
                        if device.driver_name != NVIDIA_DRA_DRIVER:
                            continue  # another driver's devices: its names are not ours to map
                        device_ids += 1
                        if device_ids > limits.max_device_ids:
                            return [], [], 0, PROBLEM_TOO_MANY_DEVICES
                        if (
                            _names_too_long(pod, container)
                            or len(claim.claim_namespace) > MAX_NAMESPACE_CHARS
                            or len(claim.claim_name) > MAX_CLAIM_NAME_CHARS
                            or len(device.pool_name) > MAX_POOL_NAME_CHARS
                        ):
                            return [], [], 0, PROBLEM_INVALID_ANSWER
                        if len(device.device_name) > MAX_DEVICE_NAME_CHARS:
                            dropped += 1  # not a name the API allows: it cannot be one of our GPUs
                            continue
                        claims.append(
                            DraAssignment(
                                pod.namespace,
                                pod.name,
                                container.name,
                                claim.claim_namespace,
                                claim.claim_name,
                                device.driver_name,
                                device.pool_name,
                                device.device_name,
                            )
                        )
                for devices in container.devices:
                    resource = devices.resource_name
                    if not self._is_gpu(resource):
                        continue  # other devices (NICs, FPGAs) are not ours to bound or report
                    ids = devices.device_ids
                    device_ids += len(ids)
                    if device_ids > limits.max_device_ids:
                        return [], [], 0, PROBLEM_TOO_MANY_DEVICES
                    if _names_too_long(pod, container) or len(resource) > MAX_RESOURCE_NAME_CHARS:
                        return [], [], 0, PROBLEM_INVALID_ANSWER
                    kept = tuple(d for d in ids if len(d) <= limits.max_device_id_chars)
                    dropped += len(ids) - len(kept)
                    assignments.append(DeviceAssignment(pod.namespace, pod.name, container.name, resource, kept))
        return assignments, claims, dropped, ""

    def _refresh_allocatable(self, now: float) -> None:
        self._allocatable_asked = now
        self.allocatable_calls += 1
        try:
            response = self._stub.GetAllocatableResources(
                api_pb2.AllocatableResourcesRequest(), timeout=self._timeout_s
            )
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            details = (exc.details() if isinstance(exc, grpc.Call) else "") or ""
            if code == grpc.StatusCode.UNIMPLEMENTED or (
                code == grpc.StatusCode.UNKNOWN and "disabled" in details.lower()
            ):
                # This kubelet cannot tell: sharing then comes from held IDs and GFD's labels.
                self._set_allocatable(None)
                problem = (
                    PROBLEM_ALLOCATABLE_UNIMPLEMENTED
                    if code == grpc.StatusCode.UNIMPLEMENTED
                    else PROBLEM_ALLOCATABLE_DISABLED
                )
                self._allocatable_due = now + self._refresh_s
            else:  # transient: keep the last good answer, try again soon
                problem = self._rpc_problem(exc)
                self._allocatable_due = now + ALLOCATABLE_MIN_GAP_S
            self._note_allocatable(problem)
            return
        self._allocatable_due = now + self._refresh_s
        allocatable, problem = self._read_allocatable(response)
        if problem:  # over a bound: unknown, as if the kubelet could not tell
            self._set_allocatable(None)
        else:
            self._set_allocatable(allocatable)
        self._note_allocatable(problem)

    def _read_allocatable(self, response: Any) -> tuple[dict[str, tuple[str, ...]], str]:
        limits = self._limits
        by_resource: dict[str, list[str]] = {}
        count = 0
        for devices in response.devices:
            resource = devices.resource_name
            if not self._is_gpu(resource):
                continue
            count += len(devices.device_ids)
            if count > limits.max_device_ids:
                return {}, PROBLEM_TOO_MANY_DEVICES
            kept = [d for d in devices.device_ids if len(d) <= limits.max_device_id_chars]
            by_resource.setdefault(resource, []).extend(kept)
        return {name: tuple(ids) for name, ids in by_resource.items()}, ""

    def _set_allocatable(self, allocatable: dict[str, tuple[str, ...]] | None) -> None:
        self._allocatable = allocatable
        self._allocatable_ids = frozenset(d for ids in (allocatable or {}).values() for d in ids)

    def _note_allocatable(self, problem: str) -> None:
        """Log GetAllocatableResources' state when it changes, not every refresh."""
        if problem == self.allocatable_problem:
            return
        if problem:
            log.warning(
                "kubelet GetAllocatableResources at %s: %s; time-slicing replicas are then judged from "
                "held device IDs and GFD's labels",
                self.socket_path,
                problem,
            )
        elif self.allocatable_problem:
            log.info("kubelet GetAllocatableResources at %s answers again", self.socket_path)
        self.allocatable_problem = problem


def _names_too_long(pod: Any, container: Any) -> bool:
    """A holder's names longer than Kubernetes allows (the extender would refuse the report)."""
    return (
        len(pod.namespace) > MAX_NAMESPACE_CHARS
        or len(pod.name) > MAX_POD_NAME_CHARS
        or len(container.name) > MAX_CONTAINER_NAME_CHARS
    )


class PodAttribution:
    """Per sample: ask the kubelet and put holders, sharing and the allocation source onto the
    NodeSample (allocation.apply_allocation). Logs news once: a problem when it starts (and its
    code), the recovery, device IDs that name none of our GPUs."""

    _SHOWN_IDS = 5  # unmatched device IDs quoted in one log line
    _REMEMBERED_IDS = 10_000  # unmatched device IDs already logged

    def __init__(
        self,
        socket_path: str = DEFAULT_SOCKET,
        *,
        resource_patterns: Iterable[str] = DEFAULT_GPU_RESOURCES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        limits: PodResourcesLimits = PodResourcesLimits(),
        client: PodResourcesClient | None = None,
    ) -> None:
        self.is_gpu_resource = GpuResourceNames(resource_patterns)
        self.client = client or PodResourcesClient(
            socket_path, is_gpu_resource=self.is_gpu_resource, timeout_s=timeout_s, limits=limits
        )
        self.problem: str | None = None  # None: not asked yet
        self._problem_since = 0.0
        self._logged_unmatched: set[str] = set()  # each unmatched ID is logged once
        self._logged_dropped = False

    def annotate(self, sample: NodeSample) -> AllocationResult:
        """Fill `sample` (its sharing_labels already set) from the kubelet. Blocks up to about
        the client's timeout; run it where NVML is read, off the event loop."""
        try:
            answer = self.client.fetch()
        except Exception:  # a bug of ours must not stop sampling: allocation becomes unknown
            if self.problem != PROBLEM_AGENT_ERROR:
                log.exception("asking the kubelet for pod resources failed")
            answer = KubeletAllocations(problem=PROBLEM_AGENT_ERROR)
        result = apply_allocation(sample, answer, is_gpu_resource=self.is_gpu_resource)
        self._note_problem(sample.allocation_problem)
        if sample.gpus:  # with NVML down every ID would look unmatched: nothing to learn
            self._note_unmatched(result.unmatched_device_ids)
        if answer.dropped_device_ids and not self._logged_dropped:
            log.warning(
                "the kubelet lists %d device ID(s) of GPU resources longer than %d characters: ignored",
                answer.dropped_device_ids,
                self.client.limits.max_device_id_chars,
            )
        self._logged_dropped = answer.dropped_device_ids > 0
        return result

    def close(self) -> None:
        self.client.close()

    def _note_problem(self, problem: str) -> None:
        previous = self.problem
        self.problem = problem
        if problem == previous:
            return
        now = time.monotonic()
        path = self.client.socket_path
        if problem and not previous:
            self._problem_since = now
            why = (
                "reports over the extender's holder bound"
                if problem == PROBLEM_TOO_MANY_HOLDERS
                else f"kubelet PodResources at {path}"
            )
            if problem in (PROBLEM_SOCKET_MISSING, PROBLEM_PERMISSION_DENIED):
                why += ": mount its directory read-only and run as uid 0 (deploy/components/kubelet-allocation)"
            log.warning("GPU allocation unknown: %s (%s); reported as unavailable until it recovers", problem, why)
        elif problem:  # one problem gave way to another: not news enough for a warning every sample
            log.debug("GPU allocation still unknown: %s", problem)
        elif previous:
            log.info("GPU allocation known again from the kubelet at %s after %.0fs", path, now - self._problem_since)
        else:
            log.info("GPU allocation from the kubelet's PodResources API at %s", path)

    def _note_unmatched(self, unmatched: tuple[str, ...]) -> None:
        new = [d for d in unmatched if d not in self._logged_unmatched]
        if not new:
            return
        if len(self._logged_unmatched) + len(new) > self._REMEMBERED_IDS:
            self._logged_unmatched.clear()  # bounded memory; at worst an ID is logged again
        self._logged_unmatched.update(new)
        shown = ", ".join(repr(d[:64]) for d in new[: self._SHOWN_IDS])
        more = f" and {len(new) - self._SHOWN_IDS} more" if len(new) > self._SHOWN_IDS else ""
        log.warning(
            "GPU device ID(s) held by containers that name no GPU or MIG instance NVML reports: %s%s",
            shown,
            more,
        )
