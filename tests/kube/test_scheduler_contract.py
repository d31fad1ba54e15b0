"""What the real kube-scheduler does with the shipped configs and with an extender that is down,
hung, or presents a certificate it cannot verify. Each test starts kube-scheduler from a file in
deploy/ and asserts on bindings and on the PodScheduled condition it writes."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
import trustme
import yaml

from tests.control_plane import kubeconfig_yaml
from tests.harness import ROOT, Proc, free_port, metric, wait_until
from tests.kube.scene import DEFAULT_SCHEDULER, H100, SECOND_SCHEDULER, Scene
from tests.tcp_forward import forwarding


@pytest.mark.parametrize("binary", ["kube-scheduler", "kube-scheduler-1.36"])
@pytest.mark.parametrize("shipped", [SECOND_SCHEDULER, DEFAULT_SCHEDULER], ids=["gpu-scheduler", "default-scheduler"])
def test_the_shipped_config_decodes_strictly_and_keeps_every_extender_field(
    shipped: Path, binary: str, tmp_path: Path, k8s_assets: Path
) -> None:
    """`kube-scheduler --write-config-to` decodes strictly, defaults and validates, then exits. Only
    what a cluster provides is replaced: the CA file (it must exist: kube-scheduler reads it when it
    builds the extender and exits without it) and the kubeconfig."""
    ca = tmp_path / "ca.crt"
    ca.write_bytes(trustme.CA().cert_pem.bytes())
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(kubeconfig_yaml("https://127.0.0.1:1", ca, "unused"))
    config = yaml.safe_load(shipped.read_text())
    config["extenders"][0]["tlsConfig"]["caFile"] = str(ca)
    config.setdefault("clientConnection", {})["kubeconfig"] = str(kubeconfig)
    shipped_ext = dict(config["extenders"][0])
    decoded = _write_config(k8s_assets, config, tmp_path, binary)
    assert decoded.returncode == 0, decoded.stdout
    written = yaml.safe_load((tmp_path / "out.yaml").read_text())
    ext = written["extenders"][0]
    # false values are omitted on output (omitempty): compare what was set to true or a value.
    for key, value in shipped_ext.items():
        if value is not False:
            assert key in ext, key
    assert ext["urlPrefix"] == shipped_ext["urlPrefix"] and ext["httpTimeout"] == "2s" and ext["weight"] == 5
    assert ext["nodeCacheCapable"] is True
    # gpu-scheduler: every pod calls the extender (claim pods request no extended resource); the
    # default scheduler: only pods that request nvidia.com/gpu.
    expected = None if shipped == SECOND_SCHEDULER else [{"name": "nvidia.com/gpu"}]
    assert ext.get("managedResources") == expected
    assert ext.get("ignorable", False) is shipped_ext["ignorable"]
    assert written["percentageOfNodesToScore"] == 100
    assert [p["schedulerName"] for p in written["profiles"]] == [p["schedulerName"] for p in config["profiles"]]

    # The check can fail: a mis-cased key is refused by the same decoder.
    config["extenders"][0]["enableHttps"] = config["extenders"][0].pop("enableHTTPS")
    refused = _write_config(k8s_assets, config, tmp_path, binary)
    assert refused.returncode != 0 and 'unknown field \\"extenders[0].enableHttps\\"' in refused.stdout


def test_the_shipped_scheduler_image_is_the_suites_own_kube_scheduler(k8s_assets: Path) -> None:
    """deploy/ ships registry.k8s.io/kube-scheduler (components/images pins it) at the version the
    suite runs (v1.35.4): what is shipped is what is tested."""
    pin = yaml.safe_load((ROOT / "deploy" / "components" / "images" / "kube-scheduler.yaml").read_text())
    assert pin["imageTag"]["name"] == "registry.k8s.io/kube-scheduler"
    tag = pin["imageTag"]["newTag"]
    version = subprocess.run(
        [str(k8s_assets / "kube-scheduler"), "--version"], capture_output=True, text=True, timeout=30
    ).stdout.split()
    assert version[-1] == tag == "v1.35.4", (version, tag)


def _write_config(
    folder: Path, config: dict, tmp_path: Path, binary: str = "kube-scheduler"
) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    (tmp_path / "out.yaml").unlink(missing_ok=True)
    return subprocess.run(
        [str(folder / binary), "--config", str(path), "--write-config-to", str(tmp_path / "out.yaml")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
    )


def _filter_calls(world: Scene, ext: Proc) -> float:
    return metric(world.scrape(ext), "gpu_extender_requests_total", verb="filter", code="200") or 0.0


def _placed(
    world: Scene, *extender_flags: str, ext_ports: tuple[int, int] | None = None
) -> tuple[Proc, dict[str, str]]:
    names = {"idle": world.node("idle", H100, 8), "busy": world.node("busy", H100, 0, 8)}
    http_port, grpc_port = ext_ports or (None, None)
    ext = world.extender(*extender_flags, http_port=http_port, grpc_port=grpc_port)
    for node in names.values():
        world.agent(node, ext)
    world.wait_idle(ext, names["idle"], 8)
    world.wait_idle(ext, names["busy"], 0)
    return ext, names


def test_the_default_scheduler_snippet_calls_the_extender_for_gpu_pods_only(world: Scene) -> None:
    ext, n = _placed(world)
    world.scheduler(ext, DEFAULT_SCHEDULER)
    assert world.bound(world.pod("gpu", 6, scheduler="default-scheduler")) == n["idle"]
    calls = _filter_calls(world, ext)
    assert calls >= 1
    # No nvidia.com/gpu request: managedResources keeps the extender out of it.
    assert world.bound(world.pod("cpu-only", 0, scheduler="default-scheduler")) in n.values()
    assert _filter_calls(world, ext) == calls


def test_the_scheduler_verifies_the_extenders_certificate(world: Scene) -> None:
    """tlsConfig as shipped (serverName + CA): with a CA that did not sign the extender's certificate
    kube-scheduler refuses the connection; it never sends the pod to an unverified extender."""
    ext, _n = _placed(world)
    world.scheduler(ext, ca_pem=trustme.CA().cert_pem.bytes())
    message = world.unschedulable(world.pod("gpu", 2))
    assert "x509: certificate signed by unknown authority" in message, message
    assert world.node_of("gpu") is None and _filter_calls(world, ext) == 0


def test_extender_down_and_not_ignorable_pods_wait_then_bind_when_it_is_back(world: Scene) -> None:
    """Not ignorable: while no extender answers, GPU pods wait (kube-scheduler retries them with
    backoff) and bind once one answers again. kube-scheduler reaches the extender through its Service,
    which sends calls only to a ready replica (every GPU node's agent has reported): a forwarder on the
    scheduler's address stands for it. Reached directly, a restarted extender answers a retry that comes
    before its agents reconnect on assumed data, where the idle and the busy node are equal (both pass
    with score 0: decide/whole_gpus.py), so such a pod may bind to either."""
    service, grpc_port = free_port(), free_port()
    ext, n = _placed(world, ext_ports=(free_port(), grpc_port))
    with forwarding(service, ext.ports["http"]):
        world.scheduler(None, port=service)  # the gpu-scheduler: ignorable: false as shipped
        ext.stop()
    # No ready endpoint: the Service's address refuses connections.
    message = world.unschedulable(world.pod("waits", 2))
    assert "connection refused" in message and "/filter" in message, message
    assert world.node_of("waits") is None
    back = world.extender(http_port=free_port(), grpc_port=grpc_port)
    world.wait_idle(back, n["idle"], 8)  # the agents found the new process on the same gRPC address
    world.wait_idle(back, n["busy"], 0)
    with forwarding(service, back.ports["http"]):
        assert world.bound(world.pod("waits-too", 2)) == n["idle"]
        assert world.bound("waits", timeout=60) == n["idle"]  # retried with backoff (at most 10 s apart)


def test_extender_down_and_ignorable_pods_bind_without_it(world: Scene) -> None:
    names = {"idle": world.node("idle", H100, 8), "busy": world.node("busy", H100, 0, 8)}
    world.scheduler(None, DEFAULT_SCHEDULER, port=free_port())  # ignorable: true as shipped; nothing listens
    # Placed blind: kube-scheduler's own nvidia.com/gpu count says both nodes fit, either may get it.
    assert world.bound(world.pod("blind", 2, scheduler="default-scheduler")) in names.values()


@pytest.mark.parametrize("shipped", [SECOND_SCHEDULER, DEFAULT_SCHEDULER], ids=["not-ignorable", "ignorable"])
def test_an_answer_slower_than_http_timeout(world: Scene, shipped: Path) -> None:
    """A hung extender (SIGSTOP: the kernel still accepts the connection, nothing answers) is a filter
    call that times out after httpTimeout (2 s). Not ignorable: the pod waits and binds once the
    extender answers again; ignorable: kube-scheduler binds it without the extender."""
    ext, n = _placed(world)
    scheduler_name = "gpu-scheduler" if shipped == SECOND_SCHEDULER else "default-scheduler"
    world.scheduler(ext, shipped)
    ext.popen.send_signal(signal.SIGSTOP)
    try:
        world.pod("slow", 2, scheduler=scheduler_name)
        if shipped == SECOND_SCHEDULER:
            message = world.unschedulable("slow")
            assert "/filter" in message and ("Client.Timeout exceeded" in message or "deadline exceeded" in message), (
                message
            )
            assert world.node_of("slow") is None
        else:
            assert world.bound("slow", timeout=20) in n.values()
    finally:
        ext.popen.send_signal(signal.SIGCONT)
    if shipped == SECOND_SCHEDULER:
        wait_until("extender answers again", lambda: world.scrape(ext))
        assert world.bound("slow", timeout=60) == n["idle"]
