"""Issue 35 on the real control plane: what gpu-extender knows about GPUs, a kube-scheduler that
never asks it (what Cluster Autoscaler and Karpenter simulate) honours.

The mixed fleet: 25 DRA nodes of 8 GPUs (5 with 6 GPUs busy outside Kubernetes, 5 with GPU 0
quarantined by XID 79) and 5 device-plugin nodes of 8 (one with every GPU unhealthy). The agents
are simulated in this process (real NodeReports over the real TLS gRPC stream, as in
tests/kube/groups.py); the extender (--kubernetes, --node-taint on) writes the DeviceTaintRules, the
GPUsUsable conditions and the node taint; kube-scheduler v1.35.4 runs the shipped gpu-scheduler
profile with its extender removed, DRA device taints on. 100 one-GPU claim pods and 10 one-GPU
device-plugin pods: none on a busy or unhealthy GPU, none pending. A claim pod that only the busy
GPUs could hold stays Pending.

The timing: with --busy-hold 3, a GPU turning busy is tainted no sooner than the hold, and untainted
no sooner than the hold after it idles; a GPU toggling every second writes nothing."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from gpuextender.v1 import gpu_state_pb2 as pb
from gpuextender.v1 import gpu_state_pb2_grpc as pb_grpc
from tests.control_plane import GPU, wait_for
from tests.extender.dra_objects import allocated_claim, device_class, gpu_slice
from tests.harness import ROOT, Proc, http, metric
from tests.kube.scene import EXTENDER_NAME, H100, NODE_LABEL, Scene
from tests.kube.test_device_taints import GATES, ours
from tests.kube.test_dra import DRA, claim_pod
from tests.kube_tools import KUBECTL, NO_KUBECTL, tool_env

GIB = 1024**3
IDLE, BUSY, SICK = "idle", "busy", "unhealthy"
BUSY_KEY, UNHEALTHY_KEY = "gpu-extender.io/busy-outside-kubernetes", "gpu-extender.io/unhealthy"
NODE_TAINT = "gpu-extender.io/no-usable-gpu"


def node_report(
    node: str, gpus: list[str], sequence: int, *, kubelet: bool, held: frozenset[int] = frozenset()
) -> pb.NodeReport:
    """`kubelet`: the agent read the kubelet (a pod of namespace `team` holds the GPUs `held`, no
    container any other); else allocation unknown."""
    report = pb.NodeReport(node_name=node, sequence=sequence, agent_version="publish", driver_version="550.127.05")
    report.sample_time.seconds = int(time.time())
    if kubelet:
        report.allocation_source = pb.ALLOCATION_KUBELET
    for index, state in enumerate(gpus):
        hot = state == BUSY
        g = report.gpus.add(
            index=index,
            uuid=f"GPU-{node}-{index}",
            name=H100["product"],
            healthy=state != SICK,
            utilization_gpu_percent=90 if hot else 2,
            memory_total_bytes=80 * GIB,
            memory_used_bytes=(64 if hot else 1) * GIB,
        )
        if index in held:
            g.holders.add(namespace="team", pod="notebook", container="main", device_id=g.uuid)
        if state == SICK:
            g.health = pb.HEALTH_UNHEALTHY
            g.health_reasons.append("XidCritical")
            g.xids.add(xid=79)
    return report


class Agents:
    """The fleet's agents, simulated: each `send` is one short stream per node with its next report."""

    def __init__(self, world: Scene, ext: Proc) -> None:
        self.target = f"127.0.0.1:{ext.ports['grpc']}"
        self.ca = world.ca.cert_pem.bytes()
        self.sequence = 0

    def send(
        self, gpus: dict[str, list[str]], kubelet: frozenset[str] = frozenset(), held: frozenset[int] = frozenset()
    ) -> None:
        self.sequence += 1
        asyncio.run(self._send(gpus, kubelet, held, self.sequence))

    async def _send(
        self, gpus: dict[str, list[str]], kubelet: frozenset[str], held: frozenset[int], sequence: int
    ) -> None:
        credentials = grpc.ssl_channel_credentials(root_certificates=self.ca)
        options = [("grpc.ssl_target_name_override", EXTENDER_NAME)]
        async with grpc.aio.secure_channel(self.target, credentials, options=options) as channel:
            stub = pb_grpc.GpuStateServiceStub(channel)
            gate = asyncio.Semaphore(16)

            async def one(node: str, states: list[str]) -> None:
                async with gate:
                    call = stub.StreamNodeReports(timeout=30)
                    report = node_report(node, states, sequence, kubelet=node in kubelet, held=held)
                    await call.write(report)
                    ack = await call.read()
                    await call.done_writing()
                    assert ack is not grpc.aio.EOF and ack.status == pb.ReportAck.ACCEPTED, (node, ack)
                    await call.code()

            await asyncio.gather(*(one(n, s) for n, s in gpus.items()))


def dra_nodes(world: Scene, names: list[str]) -> str:
    """DRA Nodes (no nvidia.com/gpu) with a ResourceSlice of 8 GPUs each; the DeviceClass's name."""
    kube, ns = world.kube, world.ns
    class_name = f"{ns}-gpu"
    kube.create(f"{DRA}/deviceclasses", device_class(class_name))
    world.dra_objects.append(f"{DRA}/deviceclasses/{class_name}")
    for n in names:
        kube.create_node(n, None, {NODE_LABEL: ns, "nvidia.com/gpu.product": str(H100["label"])})
        world.nodes.append(n)
        published = gpu_slice(n, 8, uuid_of=lambda minor, node=n: f"GPU-{node}-{minor}")
        kube.create(f"{DRA}/resourceslices", published)
        world.dra_objects.append(f"{DRA}/resourceslices/{published['metadata']['name']}")
    return class_name


def plugin_nodes(world: Scene, names: list[str]) -> None:
    for n in names:
        world.kube.create_node(n, 8, {NODE_LABEL: world.ns, "nvidia.com/gpu.product": str(H100["label"])})
        world.nodes.append(n)


def pinned_claim_pod(world: Scene, name: str, class_name: str, node: str, gpus: int, *, tolerate: str = "") -> None:
    """A pod on `node` only, with a claim of `gpus` GPUs (tolerating taint key `tolerate`, if given)."""
    request: dict[str, Any] = {"deviceClassName": class_name, "allocationMode": "ExactCount", "count": gpus}
    if tolerate:
        request["tolerations"] = [{"key": tolerate, "operator": "Exists", "effect": "NoSchedule"}]
    world.kube.create(
        f"{DRA}/namespaces/{world.ns}/resourceclaims",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": request}]}},
        },
    )
    container = {"name": "main", "image": "registry.example/llm:1", "resources": {"claims": [{"name": "gpus"}]}}
    world.kube.create(
        f"/api/v1/namespaces/{world.ns}/pods",
        {
            "metadata": {"name": name},
            "spec": {
                "schedulerName": "gpu-scheduler",
                "nodeSelector": {NODE_LABEL: world.ns, "kubernetes.io/hostname": node},
                "resourceClaims": [{"name": "gpus", "resourceClaimName": name}],
                "containers": [container],
            },
        },
    )


def node(world: Scene, name: str) -> dict[str, Any]:
    return dict(world.kube.get(f"/api/v1/nodes/{name}"))


def condition(world: Scene, name: str) -> dict[str, Any] | None:
    for c in node(world, name).get("status", {}).get("conditions") or ():
        if c.get("type") == "GPUsUsable":
            return dict(c)
    return None


def tainted(world: Scene, name: str) -> bool:
    return any(t.get("key") == NODE_TAINT for t in node(world, name).get("spec", {}).get("taints") or ())


def explained(world: Scene, ext: Proc, tmp_path: Path) -> str:
    """`gpu-extender explain` of a one-GPU pod, as an operator runs it against the extender."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": world.ns},
        "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": {GPU: "1"}}}]},
    }
    manifest = tmp_path / "probe.json"
    manifest.write_text(json.dumps(pod))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuextender.extender",
            "explain",
            "--url",
            world.url(ext),
            "--cacert",
            str(world.ca_file),
            str(manifest),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def see_it_commands(world: Scene) -> dict[str, str]:
    """Each `kubectl get` command of deploy/README.md's "What other schedulers and autoscalers see",
    run word for word (its shell quoting included) against the suite's API server: command -> stdout."""
    if KUBECTL is None:
        pytest.skip(NO_KUBECTL)
    text = (ROOT / "deploy" / "README.md").read_text()
    section = text.split("## What other schedulers and autoscalers see\n", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"`(kubectl get [^`]+)`", " ".join(section.split()))
    assert len(commands) >= 2, commands
    env = {**tool_env(), "KUBECONFIG": str(world.plane.kubeconfig)}
    found = {}
    for command in commands:
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60, env=env)
        assert done.returncode == 0, f"{command}: {done.stderr}"
        found[command] = done.stdout
    return found


def fleet(world: Scene, ext: Proc) -> dict[str, Any]:
    status, raw = http("GET", world.url(ext) + "/ui/fleet.json", ssl_context=world.client_tls)
    assert status == 200, raw
    return dict(json.loads(raw))


def writes(world: Scene, ext: Proc) -> dict[str, float]:
    samples = world.scrape(ext)
    found = {op: metric(samples, "gpu_extender_device_taint_writes_total", op=op) or 0 for op in ("create", "delete")}
    for op in ("condition", "taint", "untaint"):
        found[op] = metric(samples, "gpu_extender_node_status_writes_total", op=op) or 0
    return found


@pytest.mark.slow
def test_a_scheduler_without_the_extender_gives_no_busy_or_unhealthy_gpu_and_leaves_none_pending(
    world: Scene, capsys: pytest.CaptureFixture[str]
) -> None:
    kube, ns = world.kube, world.ns
    dra = [f"{ns}-d{i:02d}" for i in range(25)]
    plugin = [f"{ns}-p{i}" for i in range(5)]
    class_name = dra_nodes(world, dra)
    plugin_nodes(world, plugin)
    gpus = {n: [IDLE] * 8 for n in dra + plugin}
    for n in dra[:5]:
        gpus[n] = [BUSY] * 6 + [IDLE] * 2
    for n in dra[5:10]:
        gpus[n][0] = SICK
    gpus[plugin[0]] = [SICK] * 8
    bad = {(n, f"gpu-{i}") for n in dra for i, state in enumerate(gpus[n]) if state != IDLE}
    assert len(bad) == 35

    ext = world.extender(
        "--stale-after", "3600", "--forget-after", "7200", "--busy-hold", "2", "--device-taint-after", "1",
        "--device-taint-clear-after", "1", "--node-taint", "on",
    )  # fmt: skip
    world.wait_inventory(ext, "Node", len(kube.get("/api/v1/nodes")["items"]))
    Agents(world, ext).send(gpus, kubelet=frozenset(plugin))
    wait_for("35 device taint rules", lambda: len(ours(world)) == 35 or None, 60)
    rules = ours(world)
    keys = {
        (r["spec"]["deviceSelector"]["pool"], r["spec"]["deviceSelector"]["device"]): r["spec"]["taint"]
        for r in rules.values()
    }
    assert set(keys) == bad
    assert sum(1 for t in keys.values() if (t["key"], t["effect"]) == (BUSY_KEY, "NoSchedule")) == 30
    assert sum(1 for t in keys.values() if (t["key"], t["effect"]) == (UNHEALTHY_KEY, "NoSchedule")) == 5
    wait_for("the all-unhealthy device-plugin node tainted", lambda: tainted(world, plugin[0]) or None, 30)
    wait_for(
        "a GPUsUsable condition on every device-plugin node",
        lambda: all(condition(world, n) for n in plugin) or None,
        30,
    )
    sick = condition(world, plugin[0])
    assert sick is not None and (sick["status"], sick["reason"]) == ("False", "NoUsableGPU"), sick
    assert sick["message"].startswith("0 of 8 GPUs usable; 8 unhealthy"), sick
    assert [condition(world, n)["status"] for n in plugin[1:]] == ["True"] * 4  # type: ignore[index]
    assert not any(tainted(world, n) for n in plugin[1:])
    assert all(condition(world, n) is None for n in dra)  # DRA nodes: the rules say it per device

    world.scheduler_alone("kube-scheduler", GATES)
    # Only the busy GPUs could hold this one: 3 GPUs on a node with 6 busy and 2 idle.
    pinned_claim_pod(world, "stuck", class_name, dra[0], 3)
    reason = world.unschedulable("stuck", 60)
    for i in range(100):
        claim_pod(world, f"c{i:03d}", f"c{i:03d}", class_name, 1)
    for i in range(10):
        world.pod(f"g{i}", 1)
    started = time.monotonic()

    def bound() -> int:
        return sum(1 for p in kube.get(f"/api/v1/namespaces/{ns}/pods")["items"] if p["spec"].get("nodeName"))

    wait_for("110 pods bound", lambda: bound() == 110 or None, 240)
    took = time.monotonic() - started
    given = []
    for i in range(100):
        claim = kube.get(f"{DRA}/namespaces/{ns}/resourceclaims/c{i:03d}")
        given += [(r["pool"], r["device"]) for r in claim["status"]["allocation"]["devices"]["results"]]
    assert len(given) == 100 and not [g for g in given if g in bad], [g for g in given if g in bad]
    on_sick = [p for p in (f"g{i}" for i in range(10)) if world.node_of(p) == plugin[0]]
    assert on_sick == []
    assert world.node_of("stuck") is None
    # kube-scheduler 1.35 names no device taint in its reason: the pinned node "cannot allocate all
    # claims" (and the all-unhealthy device-plugin node "had untolerated taint(s)"). That the busy
    # taints are the cause: the same claim tolerating them is allocated there at once.
    assert "1 cannot allocate all claims" in reason and "1 node(s) had untolerated taint(s)" in reason, reason
    pinned_claim_pod(world, "tolerant", class_name, dra[0], 3, tolerate=BUSY_KEY)
    assert world.bound("tolerant", 60) == dra[0]
    with capsys.disabled():
        print(
            f"\npublish: 100 claim pods + 10 device-plugin pods bound in {took:.1f} s by kube-scheduler without "
            f"the extender; 0 on the 30 busy or 5 quarantined GPUs, 0 on the all-unhealthy node; "
            f"the busy-only pod: {reason[:160]!r}"
        )


@pytest.mark.slow
def test_busy_taints_follow_the_hold_and_a_flapping_gpu_writes_nothing(
    world: Scene, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    hold = 3.0
    dra = f"{world.ns}-d"
    plugin = f"{world.ns}-p"
    dra_nodes(world, [dra])
    plugin_nodes(world, [plugin])
    ext = world.extender(
        "--stale-after", "3600", "--forget-after", "7200", "--busy-hold", f"{hold:g}",
        "--device-taint-clear-after", f"{hold:g}", "--node-taint", "on",
    )  # fmt: skip
    world.wait_inventory(ext, "Node", len(world.kube.get("/api/v1/nodes")["items"]))
    # Someone else's taint and condition on the node: never touched.
    foreign_taint = {"key": "example.com/maintenance", "value": "soon", "effect": "PreferNoSchedule"}
    world.kube.merge_patch(f"/api/v1/nodes/{plugin}", {"spec": {"taints": [foreign_taint]}})
    foreign = {"type": "ExampleHealthy", "status": "True", "reason": "Fine", "message": "someone else's"}
    world.kube.request(
        "PATCH",
        f"/api/v1/nodes/{plugin}/status",
        {"status": {"conditions": [foreign]}},
        "application/strategic-merge-patch+json",
    )
    agents = Agents(world, ext)
    kubelet = frozenset({plugin})
    gpus = {dra: [IDLE] * 8, plugin: [IDLE] * 8}
    agents.send(gpus, kubelet)
    wait_for(
        "the device-plugin node's condition",
        lambda: (condition(world, plugin) or {}).get("status") == "True" or None,
        30,
    )
    base = writes(world, ext)
    assert base["condition"] == 1 and base["create"] == 0

    # Busy: GPU 1 of the DRA node, every GPU of the device-plugin node (no pod holds them).
    started = time.monotonic()
    gpus = {dra: [IDLE, BUSY] + [IDLE] * 6, plugin: [BUSY] * 8}
    agents.send(gpus, kubelet)
    rule = f"gpu-extender-busy.{dra}.gpu-1"
    wait_for("the busy rule", lambda: rule in ours(world) or None, hold + 30)
    to_taint = time.monotonic() - started
    wait_for("the node taint", lambda: tainted(world, plugin) or None, hold + 30)
    node_taint = time.monotonic() - started
    assert to_taint >= hold and node_taint >= hold  # never before the hold
    taint = ours(world)[rule]["spec"]["taint"]
    assert (taint["key"], taint["value"], taint["effect"]) == (BUSY_KEY, "no-pod-holds-it", "NoSchedule")
    version = ours(world)[rule]["metadata"]["resourceVersion"]
    wait_for("the condition False", lambda: (condition(world, plugin) or {}).get("status") == "False" or None, 30)
    assert foreign_taint in node(world, plugin)["spec"]["taints"]
    shown = explained(world, ext, tmp_path)
    assert f"published taint on gpu-1: {BUSY_KEY}=no-pod-holds-it:NoSchedule stands" in shown, shown
    assert (
        "condition GPUsUsable=False (NoUsableGPU): 0 of 8 GPUs usable; 8 busy outside Kubernetes for over 3s" in shown
    )
    see_it = see_it_commands(world)
    assert any(rule in out for out in see_it.values()), see_it
    assert any(re.search(rf"^{plugin}\s+False$", out, re.M) for out in see_it.values()), see_it
    rows = {r["node"]: r for c in fleet(world, ext)["classes"] for r in c["rows"]}
    assert rows[dra]["published"]["taints"] == {"gpu-1": BUSY_KEY}
    assert rows[dra]["gpus"][1][4] == "tainted: busy-outside-kubernetes"
    assert rows[plugin]["published"]["condition"]["status"] == "False"

    # GPU 2 toggles every second for four holds: faster than the hold, so nothing is written.
    before = writes(world, ext)
    for tick in range(12):
        gpus[dra][2] = BUSY if tick % 2 == 0 else IDLE
        agents.send(gpus, kubelet)
        time.sleep(1.0)
    assert writes(world, ext) == before
    assert set(ours(world)) == {rule} and ours(world)[rule]["metadata"]["resourceVersion"] == version

    # Idle again: the rule and the taint go, no sooner than the hold.
    started = time.monotonic()
    agents.send({dra: [IDLE] * 8, plugin: [IDLE] * 8}, kubelet)
    wait_for("the busy rule gone", lambda: rule not in ours(world) or None, hold + 30)
    to_untaint = time.monotonic() - started
    wait_for("the node taint gone", lambda: not tainted(world, plugin) or None, hold + 30)
    assert to_untaint >= hold
    wait_for("the condition True", lambda: (condition(world, plugin) or {}).get("status") == "True" or None, 30)
    kept = node(world, plugin)
    assert kept["spec"]["taints"] == [foreign_taint]
    assert {c["type"]: c["message"] for c in kept["status"]["conditions"]}["ExampleHealthy"] == "someone else's"
    after = writes(world, ext)
    # One create and one delete for the GPU, one taint and one untaint, two conditions.
    assert {k: after[k] - base[k] for k in after} == {
        "create": 1,
        "delete": 1,
        "condition": 2,
        "taint": 1,
        "untaint": 1,
    }
    with capsys.disabled():
        print(
            f"\npublish: hold {hold:g} s; busy rule after {to_taint:.2f} s, node taint after {node_taint:.2f} s, "
            f"rule gone {to_untaint:.2f} s after idle; 12 toggles at 1 s: 0 writes"
        )


@pytest.mark.slow
def test_gpus_held_and_idle_past_the_window_are_events_on_the_node_and_the_claim(world: Scene) -> None:
    """The reclaim signal: a device-plugin node whose pod holds two GPUs that stay idle, and a DRA
    claim allocated two GPUs that stay idle; --idle-window 10. An AllocatedGPUsIdle Event on each,
    once per window; the metrics per node and per claim. Nothing is evicted or deallocated."""
    kube, ns = world.kube, world.ns
    dra, plugin = f"{ns}-d", f"{ns}-p"
    dra_nodes(world, [dra])
    plugin_nodes(world, [plugin])
    claims = f"{DRA}/namespaces/{ns}/resourceclaims"
    request = {"name": "gpus", "exactly": {"deviceClassName": f"{ns}-gpu"}}
    kube.create(
        claims,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "idle"},
            "spec": {"devices": {"requests": [request]}},
        },
    )
    allocated = allocated_claim("idle", dra, ["gpu-0", "gpu-1"], namespace=ns)
    claim = kube.get(f"{claims}/idle")
    kube.request("PUT", f"{claims}/idle/status", {**claim, "status": allocated["status"] | {"reservedFor": []}})
    window = 10.0
    ext = world.extender("--stale-after", "3600", "--forget-after", "7200", "--idle-window", f"{window:g}")
    world.wait_inventory(ext, "Node", len(kube.get("/api/v1/nodes")["items"]))
    started = time.monotonic()
    Agents(world, ext).send({dra: [IDLE] * 8, plugin: [IDLE] * 8}, frozenset({plugin}), held=frozenset({0, 1}))

    def events() -> list[dict[str, Any]]:
        found = []
        for namespace in (ns, "default"):
            listed = kube.get(f"/api/v1/namespaces/{namespace}/events?fieldSelector=reason%3DAllocatedGPUsIdle")
            found += [e for e in listed["items"] if e["involvedObject"]["name"] in (plugin, "idle")]
        return found

    wait_for("two AllocatedGPUsIdle events", lambda: len(events()) == 2 or None, window + 30)
    took = time.monotonic() - started
    assert took >= window
    by_kind = {e["involvedObject"]["kind"]: e for e in events()}
    assert by_kind["Node"]["involvedObject"]["uid"] == node(world, plugin)["metadata"]["uid"]
    assert by_kind["Node"]["message"].startswith("2 GPU(s) held by pods read idle for over 10s")
    assert by_kind["ResourceClaim"]["involvedObject"]["uid"] == kube.get(f"{claims}/idle")["metadata"]["uid"]
    assert by_kind["ResourceClaim"]["metadata"]["namespace"] == ns
    samples = world.scrape(ext)
    assert metric(samples, "gpu_extender_node_gpus_idle_past_window", node=plugin) == 2
    assert metric(samples, "gpu_extender_node_gpus_idle_past_window", node=dra) == 2
    assert metric(samples, "gpu_extender_claim_gpus_idle_past_window", namespace=ns, claim="idle") == 2
    time.sleep(window / 2)  # within the window: no second event
    assert len(events()) == 2
    assert kube.get(f"{claims}/idle")["status"]["allocation"]  # nothing deallocated
