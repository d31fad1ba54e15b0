"""The bound-pod ledger fed by the extender's own Pod list+watch (kube_watch with POD's field
selector and main's list filter), in-process, against the real kube-apiserver: which pods it
holds, and that a pod leaves at once when it finishes, is deleted, or is marked for deletion.
The field selector is proven by what never reaches the sink: an unbound pod, a finished one."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import pytest

from gpuextender.extender.inventory.kube_watch import KubeInventorySource, KubeSourceTimings
from gpuextender.extender.kube.connection import load_kube_config
from gpuextender.extender.model.kube_objects import POD, KubeObject
from gpuextender.extender.model.pod_gpus import may_request
from gpuextender.extender.state.pod_ledger import PodLedger
from tests.control_plane import GPU
from tests.kube.scene import H100, Scene

MIG = "nvidia.com/mig-1g.10gb"
RESOURCES = (GPU, MIG)


class Recorder:
    """The ledger as the source sees it, recording (call, namespace/name, nodeName, phase) of every
    object offered to it."""

    def __init__(self, ledger: PodLedger) -> None:
        self.ledger = ledger
        self.seen: list[tuple[str, str, str, str]] = []

    def _note(self, call: str, obj: KubeObject) -> None:
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        self.seen.append(
            (
                call,
                f"{meta.get('namespace')}/{meta.get('name')}",
                spec.get("nodeName") or "",
                (obj.get("status") or {}).get("phase") or "",
            )
        )

    def replace_all(self, kind: str, objects: list[KubeObject]) -> None:
        for obj in objects:
            self._note("list", obj)
        self.ledger.replace_all(kind, objects)

    def upsert(self, kind: str, obj: KubeObject) -> None:
        self._note("upsert", obj)
        self.ledger.upsert(kind, obj)

    def delete(self, kind: str, obj: KubeObject) -> None:
        self._note("delete", obj)
        self.ledger.delete(kind, obj)

    def of(self, key: str) -> list[tuple[str, str, str]]:
        return [(call, node, phase) for call, k, node, phase in self.seen if k == key]


def pod(name: str, node: str | None, requests: dict[str, str], **labels: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "nobody",  # no scheduler binds what the test leaves unbound
        "containers": [
            {"name": "main", "image": "registry.example/llm:1", "resources": {"requests": requests, "limits": requests}}
        ],
    }
    if node is not None:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "labels": labels}, "spec": spec}


async def until(what: str, check: Callable[[], bool], timeout: float = 15.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.02)


def test_the_ledger_follows_bound_pods(world: Scene, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    kube, ns = world.kube, world.ns
    a, b = world.node("a", H100, 8), world.node("b", H100, 8)
    pods = f"/api/v1/namespaces/{ns}/pods"

    def create(obj: dict[str, Any]) -> None:
        kube.create(pods, obj)

    # Before the source starts: these reach it through the LIST.
    create(pod("serving", a, {GPU: "2"}, **{"ome.io/inferenceservice": "llama"}))
    create(pod("cpu-only", a, {"cpu": "100m"}))
    create(pod("waiting", None, {GPU: "1"}))  # not bound: the field selector keeps it out
    create(pod("mig", b, {MIG: "1"}))
    create(pod("no-gpu-for-us", b, {"example.com/fpga": "1"}))

    ledger = PodLedger(RESOURCES)
    sink = Recorder(ledger)
    changed: list[str] = []
    ledger.on_change(changed.append)

    def mine() -> dict[str, tuple[str, int, tuple[tuple[str, int], ...], str]]:
        return {
            p.key: (p.node, p.gpus, p.mig, p.inference_service)
            for n in list(ledger.nodes())
            for p in ledger.pods_on(n)
            if p.key.startswith(f"{ns}/")
        }

    async def scenario() -> None:
        connection = await load_kube_config(world.plane.kubeconfig)
        source = KubeInventorySource(
            sink,
            connection,
            kinds=(POD,),
            timings=KubeSourceTimings(backoff_initial_s=0.05, backoff_max_s=0.5),
            list_filter=lambda _kind, obj: may_request(obj, RESOURCES),
        )
        task = asyncio.create_task(source.run())
        try:
            await asyncio.wait_for(source.wait_ready(), 15)
            assert ledger.synced
            assert mine() == {f"{ns}/serving": (a, 2, (), "llama"), f"{ns}/mig": (b, 0, (("1g.10gb", 1),), "")}
            # The list filter dropped the pods that name no GPU resource before replace_all.
            assert sink.of(f"{ns}/cpu-only") == [] and sink.of(f"{ns}/no-gpu-for-us") == []
            await until("the watch is open", lambda: source.status()["Pod"].state == "watching")

            # Bound through the Binding subresource, as kube-scheduler binds: it enters then.
            create(pod("late", None, {GPU: "1"}))
            await asyncio.to_thread(
                kube.create,
                f"{pods}/late/binding",
                {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": "late"},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": b},
                },
            )
            await until("the bound pod in the ledger", lambda: f"{ns}/late" in mine())
            assert mine()[f"{ns}/late"] == (b, 1, (), "")
            assert [(call, node) for call, node, _ in sink.of(f"{ns}/late")][:1] == [("upsert", b)]
            # Bound at creation: a watch ADDED.
            create(pod("direct", a, {GPU: "4"}))
            await until("a pod created bound", lambda: f"{ns}/direct" in mine())

            # Finished (the kubelet's status update): it leaves the selection, so a DELETED (whose
            # object is the last state that matched: still Pending).
            changed.clear()
            await asyncio.to_thread(kube.merge_patch, f"{pods}/serving/status", {"status": {"phase": "Succeeded"}})
            await until("a finished pod leaves", lambda: f"{ns}/serving" not in mine())
            assert [call for call, _, _ in sink.of(f"{ns}/serving")] == ["list", "delete"] and changed == [a]

            # Deleted at once. The API server may first send a MODIFIED carrying the deletionTimestamp
            # (the ledger lets the pod go there already), then the DELETED.
            await asyncio.to_thread(kube.delete, f"{pods}/direct", 0)
            await until("a deleted pod leaves", lambda: f"{ns}/direct" not in mine())
            await until("its DELETED event", lambda: sink.of(f"{ns}/direct")[-1][0] == "delete")

            # Graceful deletion: no kubelet confirms it, so the pod stays, with a deletionTimestamp;
            # its GPUs are released at once, not when the grace period ends.
            await asyncio.to_thread(kube.delete, f"{pods}/mig", 600)
            await until("a pod marked for deletion leaves", lambda: f"{ns}/mig" not in mine())
            still = kube.pod(ns, "mig")
            assert still["metadata"].get("deletionTimestamp") and sink.of(f"{ns}/mig")[-1][0] == "upsert"

            assert mine() == {f"{ns}/late": (b, 1, (), "")}
            # What the field selector kept away never reached the sink at all.
            assert sink.of(f"{ns}/waiting") == []
            assert all(node for _, key, node, _ in sink.seen if key.startswith(f"{ns}/")), "an unbound pod was sent"
            assert not any(call != "delete" and phase in ("Succeeded", "Failed") for call, _, _, phase in sink.seen)
            assert source.status()["Pod"].lists == 1 and ledger.invalid == 0
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    asyncio.run(asyncio.wait_for(scenario(), 90))
