"""A stand-in for the kubelet's PodResources service, for tests and the demo.

A real gRPC server on a unix socket speaking our copy of `v1.PodResourcesLister`, serving
scripted allocations. Its state can change while it runs (a test allocates and releases), it
can be told to fail with any status (UNAVAILABLE by default), to answer slowly, or be stopped.

Scenario (YAML or a dict; every device is a literal ID or a reference to a fake GPU by index, or
to a MIG device by GPU index, slot and profile, resolved to the UUID the fake NVML gives it for
the same node name):

    allocatable:                      # GetAllocatableResources
      nvidia.com/gpu: [{gpu: 0}, {gpu: 1}]
      nvidia.com/gpu.shared: [{gpu: 2, replicas: 4}]     # GPU-<uuid 2>::0 .. ::3
      nvidia.com/mig-1g.10gb: [{gpu: 3, mig: 0, profile: 1g.10gb}, "MIG-0c5e..."]  # MIG slot 0 of GPU 3
    # or, for all of GPUs 0..7:  nvidia.com/gpu: [{gpus: 8}]   ({gpus: 8, replicas: 4} too)
    pods:                             # List
      - namespace: ml
        name: train-0
        containers:
          - name: main
            devices:
              nvidia.com/gpu: [{gpu: 0}]
              nvidia.com/gpu.shared: [{gpu: 2, replica: 1}]   # GPU-<uuid 2>::1
            claims:                   # dynamic_resources: devices DRA allocated to its claims
              - claim: train-0-gpus   # namespace: the pod's; driver: gpu.nvidia.com; pool: the node
                devices: [{gpu: 3}, gpu-4]   # {gpu: i}: "gpu-<i>" (the fake NVML's minor is the index)

Run alone: python -m gpuextender.agent.fakes.kubelet --socket PATH --scenario FILE --node NAME
(the file is read again when it changes, so a demo allocates by editing it).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml

from gpuextender.podresources.v1 import api_pb2, api_pb2_grpc

log = logging.getLogger("fake_kubelet")

MAX_SCENARIO_BYTES = 1024 * 1024


class FakeKubeletError(ValueError):
    """A scenario the fake kubelet cannot serve, with where it went wrong."""


def _namespace(uuid_seed: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_DNS, f"fake-gpu.{uuid_seed or 'node'}")


def fake_gpu_uuid(uuid_seed: str, index: int) -> str:
    """The UUID fakes.nvml.FakeNvmlLibrary gives GPU `index` for `uuid_seed` (the node name):
    the same derivation, so a scenario can say "pod X holds GPU 1" (a test keeps the two equal)."""
    return f"GPU-{uuid.uuid5(_namespace(uuid_seed), str(index))}"


def fake_mig_uuid(uuid_seed: str, gpu: int, slot: int, profile: str) -> str:
    """The UUID the fake NVML gives MIG device `slot` (its index on the GPU) of GPU `gpu` while it
    has `profile` (a re-created device gets a new UUID, as on real GPUs)."""
    return f"MIG-{uuid.uuid5(_namespace(uuid_seed), f'{gpu}/{slot}/{profile}')}"


@dataclass(frozen=True, slots=True)
class FakeClaim:
    """Devices DRA allocated to one of a container's ResourceClaims."""

    namespace: str
    name: str
    devices: tuple[str, ...]  # device names, e.g. "gpu-3"
    driver: str = "gpu.nvidia.com"
    pool: str = ""


@dataclass(slots=True)
class FakeContainer:
    name: str
    devices: dict[str, list[str]] = field(default_factory=dict)  # resource name -> device IDs
    claims: list[FakeClaim] = field(default_factory=list)


@dataclass(slots=True)
class FakePod:
    namespace: str
    name: str
    containers: list[FakeContainer] = field(default_factory=list)


@dataclass(slots=True)
class FakeKubeletState:
    pods: list[FakePod] = field(default_factory=list)
    allocatable: dict[str, list[str]] = field(default_factory=dict)


def device_ids(refs: Any, *, uuid_seed: str, where: str, allocatable: bool = False) -> list[str]:
    """Resolve a list of device references: "literal", {gpu: i}, {gpu: i, replica: r},
    {gpu: i, mig: slot, profile: p[, replica: r]}, and in `allocatable` also
    {gpu: i, replicas: n} and {gpus: n[, replicas: n]}."""
    if not isinstance(refs, list):
        raise FakeKubeletError(f"{where}: expected a list of devices, got {type(refs).__name__}")
    ids: list[str] = []
    for i, ref in enumerate(refs):
        at = f"{where}[{i}]"
        if isinstance(ref, str):
            ids.append(ref)
            continue
        if not isinstance(ref, Mapping):
            raise FakeKubeletError(f"{at}: expected a device ID or a mapping, got {type(ref).__name__}")
        allowed = {"gpu", "mig", "profile", "replica"} | ({"replicas", "gpus"} if allocatable else set())
        unknown = set(ref) - allowed
        if unknown:
            raise FakeKubeletError(f"{at}: unknown key(s) {sorted(unknown)} (allowed: {sorted(allowed)})")
        if ("gpu" in ref) == ("gpus" in ref):
            raise FakeKubeletError(f"{at}: needs exactly one of gpu / gpus")
        if "replica" in ref and "replicas" in ref:
            raise FakeKubeletError(f"{at}: replica (one ID) and replicas (all of them) exclude each other")
        if ("mig" in ref) != ("profile" in ref) or ("mig" in ref and "gpus" in ref):
            raise FakeKubeletError(f"{at}: a MIG device is {{gpu: i, mig: slot, profile: p}}")
        if "profile" in ref and not isinstance(ref["profile"], str):
            raise FakeKubeletError(f"{at}.profile: expected a MIG profile such as 1g.10gb")
        indexes = range(_count(ref, "gpus", at)) if "gpus" in ref else [_count(ref, "gpu", at)]
        for index in indexes:
            base = (
                fake_mig_uuid(uuid_seed, index, _count(ref, "mig", at), ref["profile"])
                if "mig" in ref
                else fake_gpu_uuid(uuid_seed, index)
            )
            if "replica" in ref:
                ids.append(f"{base}::{_count(ref, 'replica', at)}")
            elif "replicas" in ref:
                ids.extend(f"{base}::{r}" for r in range(_count(ref, "replicas", at)))
            else:
                ids.append(base)
    return ids


def dra_device_names(refs: Any, where: str) -> tuple[str, ...]:
    """A claim's devices: literal names, or {gpu: i} for "gpu-<i>"."""
    if not isinstance(refs, list):
        raise FakeKubeletError(f"{where}: expected a list of devices, got {type(refs).__name__}")
    names: list[str] = []
    for i, ref in enumerate(refs):
        if isinstance(ref, str):
            names.append(ref)
        elif isinstance(ref, Mapping) and set(ref) == {"gpu"}:
            names.append(f"gpu-{_count(ref, 'gpu', f'{where}[{i}]')}")
        else:
            raise FakeKubeletError(f"{where}[{i}]: expected a device name or {{gpu: i}}")
    return tuple(names)


def _claims(document: Any, namespace: str, pool: str, where: str) -> list[FakeClaim]:
    if not isinstance(document, list):
        raise FakeKubeletError(f"{where}: expected a list of claims")
    claims = []
    for i, claim in enumerate(document):
        at = f"{where}[{i}]"
        if not isinstance(claim, Mapping) or not isinstance(claim.get("claim"), str):
            raise FakeKubeletError(f"{at}: expected a mapping with `claim` (its name) and `devices`")
        unknown = set(claim) - {"claim", "namespace", "driver", "pool", "devices"}
        if unknown:
            raise FakeKubeletError(f"{at}: unknown key(s) {sorted(unknown)}")
        claims.append(
            FakeClaim(
                str(claim.get("namespace", namespace)),
                claim["claim"],
                dra_device_names(claim.get("devices") or [], f"{at}.devices"),
                str(claim.get("driver", "gpu.nvidia.com")),
                str(claim.get("pool", pool)),
            )
        )
    return claims


def _count(ref: Mapping[str, Any], key: str, at: str) -> int:
    value = ref[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FakeKubeletError(f"{at}.{key}: expected a whole number >= 0, got {value!r}")
    return value


def parse_state(document: Any, *, uuid_seed: str = "") -> FakeKubeletState:
    """A FakeKubeletState from a scenario document (see the module docstring)."""
    if document is None:
        return FakeKubeletState()
    if not isinstance(document, Mapping):
        raise FakeKubeletError("the scenario must be a mapping with `pods` and/or `allocatable`")
    unknown = set(document) - {"pods", "allocatable"}
    if unknown:
        raise FakeKubeletError(f"unknown top-level key(s) {sorted(unknown)}")
    state = FakeKubeletState()
    allocatable = document.get("allocatable") or {}
    if not isinstance(allocatable, Mapping):
        raise FakeKubeletError("allocatable: expected a mapping of resource name -> devices")
    for resource, refs in allocatable.items():
        state.allocatable[str(resource)] = device_ids(
            refs, uuid_seed=uuid_seed, where=f"allocatable.{resource}", allocatable=True
        )
    pods = document.get("pods") or []
    if not isinstance(pods, list):
        raise FakeKubeletError("pods: expected a list")
    for p, pod in enumerate(pods):
        where = f"pods[{p}]"
        if not isinstance(pod, Mapping) or not isinstance(pod.get("name"), str):
            raise FakeKubeletError(f"{where}: expected a mapping with a name")
        fake_pod = FakePod(str(pod.get("namespace", "default")), pod["name"])
        for c, container in enumerate(pod.get("containers") or []):
            at = f"{where}.containers[{c}]"
            if not isinstance(container, Mapping) or not isinstance(container.get("name"), str):
                raise FakeKubeletError(f"{at}: expected a mapping with a name")
            devices = container.get("devices") or {}
            if not isinstance(devices, Mapping):
                raise FakeKubeletError(f"{at}.devices: expected a mapping of resource name -> devices")
            fake_pod.containers.append(
                FakeContainer(
                    container["name"],
                    {
                        str(r): device_ids(refs, uuid_seed=uuid_seed, where=f"{at}.devices.{r}")
                        for r, refs in devices.items()
                    },
                    _claims(container.get("claims") or [], fake_pod.namespace, uuid_seed, f"{at}.claims"),
                )
            )
        state.pods.append(fake_pod)
    return state


def load_state(path: str | os.PathLike[str], *, uuid_seed: str = "") -> FakeKubeletState:
    data = Path(path).read_bytes()
    if len(data) > MAX_SCENARIO_BYTES:
        raise FakeKubeletError(f"{path}: more than {MAX_SCENARIO_BYTES} bytes")
    try:
        document = yaml.safe_load(data)
    except yaml.YAMLError as exc:
        raise FakeKubeletError(f"{path}: not YAML: {exc}") from None
    return parse_state(document, uuid_seed=uuid_seed)


def _list_response(state: FakeKubeletState) -> api_pb2.ListPodResourcesResponse:
    return api_pb2.ListPodResourcesResponse(
        pod_resources=[
            api_pb2.PodResources(
                name=pod.name,
                namespace=pod.namespace,
                containers=[
                    api_pb2.ContainerResources(
                        name=c.name,
                        devices=[
                            api_pb2.ContainerDevices(resource_name=r, device_ids=ids) for r, ids in c.devices.items()
                        ],
                        dynamic_resources=[
                            api_pb2.DynamicResource(
                                claim_name=claim.name,
                                claim_namespace=claim.namespace,
                                claim_resources=[
                                    api_pb2.ClaimResource(
                                        cdi_devices=[api_pb2.CDIDevice(name=f"k8s.{claim.driver}/device={d}")],
                                        driver_name=claim.driver,
                                        pool_name=claim.pool,
                                        device_name=d,
                                    )
                                    for d in claim.devices
                                ],
                            )
                            for claim in c.claims
                        ],
                    )
                    for c in pod.containers
                ],
            )
            for pod in state.pods
        ]
    )


def _allocatable_response(state: FakeKubeletState) -> api_pb2.AllocatableResourcesResponse:
    return api_pb2.AllocatableResourcesResponse(
        devices=[api_pb2.ContainerDevices(resource_name=r, device_ids=ids) for r, ids in state.allocatable.items()]
    )


class _Servicer(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, kubelet: FakeKubelet) -> None:
        self._kubelet = kubelet

    def List(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._kubelet._answer("List", context)

    def GetAllocatableResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._kubelet._answer("GetAllocatableResources", context)


class FakeKubelet:
    """The fake PodResources server on `socket_path`. Use as a context manager, or start()/stop()."""

    def __init__(self, socket_path: str, state: FakeKubeletState | None = None, *, uuid_seed: str = "") -> None:
        self.socket_path = socket_path
        self.uuid_seed = uuid_seed
        self._lock = threading.Lock()
        self._server: grpc.Server | None = None
        self._failures: dict[str, tuple[grpc.StatusCode, str]] = {}
        self.delay_s = 0.0  # answer this late (tests of the client's deadline)
        self.calls = {"List": 0, "GetAllocatableResources": 0}
        # Called with each response before it is sent; may return another (tests of odd kubelets).
        self.response_hook: Callable[[str, Any], Any] | None = None
        self.set_state(state or FakeKubeletState())

    # -- lifecycle --------------------------------------------------------------

    def start(self) -> FakeKubelet:
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="fake-kubelet"),
            options=[("grpc.max_send_message_length", 64 * 1024 * 1024)],  # let tests send too much
        )
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Servicer(self), server)
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)  # a stale socket from an earlier run, as the kubelet does
        server.add_insecure_port("unix:" + os.path.abspath(self.socket_path))
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        """Stop serving and remove the socket, like a kubelet that went away."""
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)

    def __enter__(self) -> FakeKubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what it serves -------------------------------------------------------

    def set_state(self, state: FakeKubeletState) -> None:
        with self._lock:
            self._state = state
            self._rebuild()

    def load(self, document: Any) -> None:
        """Serve a scenario document (dict or parsed YAML)."""
        self.set_state(parse_state(document, uuid_seed=self.uuid_seed))

    def gpu(self, index: int, replica: int | None = None) -> str:
        """The device ID of fake GPU `index` (or of one of its replicas)."""
        base = fake_gpu_uuid(self.uuid_seed, index)
        return base if replica is None else f"{base}::{replica}"

    def mig(self, gpu: int, slot: int, profile: str) -> str:
        """The device ID of MIG device `slot` of fake GPU `gpu`."""
        return fake_mig_uuid(self.uuid_seed, gpu, slot, profile)

    def allocate(self, namespace: str, pod: str, container: str, resource: str, ids: Sequence[str]) -> None:
        """Add devices to a container (making the pod and container if new)."""
        with self._lock:
            self._container(namespace, pod, container).devices.setdefault(resource, []).extend(ids)
            self._rebuild()

    def allocate_claim(self, namespace: str, pod: str, container: str, claim: FakeClaim) -> None:
        """Add a claim's DRA devices to a container (making the pod and container if new)."""
        with self._lock:
            self._container(namespace, pod, container).claims.append(claim)
            self._rebuild()

    def _container(self, namespace: str, pod: str, container: str) -> FakeContainer:
        found = next((p for p in self._state.pods if p.namespace == namespace and p.name == pod), None)
        if found is None:
            found = FakePod(namespace, pod)
            self._state.pods.append(found)
        holder = next((c for c in found.containers if c.name == container), None)
        if holder is None:
            holder = FakeContainer(container)
            found.containers.append(holder)
        return holder

    def release(self, namespace: str, pod: str) -> None:
        """The pod is gone (the kubelet lists it no more)."""
        with self._lock:
            self._state.pods = [p for p in self._state.pods if not (p.namespace == namespace and p.name == pod)]
            self._rebuild()

    def set_allocatable(self, resource: str, ids: Sequence[str]) -> None:
        with self._lock:
            self._state.allocatable[resource] = list(ids)
            self._rebuild()

    def fail(
        self,
        code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE,
        details: str = "fake kubelet failing",
        *,
        rpc: str = "*",
    ) -> None:
        """Answer `rpc` ("List", "GetAllocatableResources" or "*" for both) with an error status."""
        with self._lock:
            for name in self.calls if rpc == "*" else [rpc]:
                self._failures[name] = (code, details)

    def heal(self) -> None:
        with self._lock:
            self._failures.clear()

    def _rebuild(self) -> None:
        # Built once per change, not per call: the benchmark measures the client, not this.
        self._responses = {
            "List": _list_response(self._state),
            "GetAllocatableResources": _allocatable_response(self._state),
        }

    def _answer(self, rpc: str, context: grpc.ServicerContext) -> Any:
        with self._lock:
            self.calls[rpc] += 1
            failure = self._failures.get(rpc)
            response = self._responses[rpc]
            delay, hook = self.delay_s, self.response_hook
        if delay:
            time.sleep(delay)
        if failure is not None:
            context.abort(failure[0], failure[1])
        return hook(rpc, response) if hook is not None else response


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fake-kubelet", description=__doc__.split("\n\n")[0])
    parser.add_argument("--socket", required=True, help="unix socket to serve PodResources on")
    parser.add_argument("--scenario", required=True, help="YAML scenario (read again when it changes)")
    parser.add_argument("--node", default="", help="node name: fake GPU UUIDs as gpu-agent --fake makes them")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s fake-kubelet %(levelname)s %(message)s")
    try:
        kubelet = FakeKubelet(args.socket, load_state(args.scenario, uuid_seed=args.node), uuid_seed=args.node)
    except (OSError, FakeKubeletError) as exc:
        print(f"fake-kubelet: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    kubelet.start()
    log.info("serving PodResources on %s from %s", args.socket, args.scenario)
    seen = _mtime(args.scenario)
    while not stop.wait(0.5):
        now = _mtime(args.scenario)
        if now == seen:
            continue
        seen = now
        try:
            kubelet.set_state(load_state(args.scenario, uuid_seed=args.node))
            log.info("scenario reloaded")
        except (OSError, FakeKubeletError) as exc:  # a half-written file: keep serving the last good one
            log.warning("scenario not reloaded: %s", exc)
    kubelet.stop()
    return 0


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


if __name__ == "__main__":
    sys.exit(main())
