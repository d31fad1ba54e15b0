"""Both images built from the repository's Dockerfiles and run as the manifests run them (issue 26):
a daemonless builder from Debian's packages (podman/buildah, chroot isolation) on a base made here
with debootstrap (tests/image_build.py says why each part is as it is). Skipped with one line where
the tools or root are missing.

- gpu-agent: the DaemonSet's own arguments (rendered from deploy/) and volumes (the Secrets
  deploy/tls/make-certs.sh makes, the projected token, the control emptyDir, the kubelet's
  hostPath), uid/gid 65532 from the manifest, read-only root: --version, then running on --fake
  until /healthz answers.
- gpu-extender: uid 65532, read-only root, a file inventory; an agent image streams to it; /healthz
  and one filter that passes the node on live data.
- The root filesystem is really read-only and the process really non-root (a probe run the same way).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gpuextender import __version__
from tests import image_build as ib
from tests.deploy import manifests as m
from tests.harness import FIXTURES, free_port, http, metric, post_json, request_for, scrape, wait_until

pytestmark = pytest.mark.slow
REASON = ib.missing()
OPENSSL = shutil.which("openssl")
SCENARIO = FIXTURES / "scenarios" / "idle8.yaml"
UID = GID = 65532  # the manifests' runAsUser/runAsGroup (checked against them below)


@dataclass
class Built:
    agent: str
    extender: str
    logs: Path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    if REASON:
        pytest.skip(f"images: {REASON}")
    logs = tmp_path_factory.mktemp("images")
    base = ib.base_image()
    tags = Built(f"localhost/gpu-agent:{__version__}-test", f"localhost/gpu-extender:{__version__}-test", logs)
    ib.build("Dockerfile.agent", tags.agent, base, logs / "build-agent.log")
    ib.build("Dockerfile.extender", tags.extender, base, logs / "build-extender.log")
    return tags


@pytest.fixture
def containers() -> Iterator[list[ib.Container]]:
    made: list[ib.Container] = []
    yield made
    for container in made:
        container.remove()


def start(
    containers: list[ib.Container],
    tag: str,
    args: list[str],
    log: Path,
    *,
    binds: dict[str, Path] | None = None,
    writable: dict[str, Path] | None = None,
    entrypoint: list[str] | None = None,
) -> subprocess.Popen[bytes]:
    container = ib.Container.of(tag)
    containers.append(container)
    return ib.run(
        container,
        ib.config(tag),
        args,
        uid=UID,
        gid=GID,
        binds=binds,
        writable=writable,
        entrypoint=entrypoint,
        log=log,
    )


def wait(what: str, check: Callable[[], bool], proc: subprocess.Popen[bytes], log: Path, timeout: float = 30.0) -> None:
    def running_and() -> bool:
        if proc.poll() is not None:  # not retried: the container is gone
            raise RuntimeError(f"{what}: the process exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        return check()

    wait_until(f"{what} ({log})", running_and, timeout=timeout, interval=0.2)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, as the kubelet stops a container: the program itself gets it (image_build.run starts
    nothing in between) and exits; nothing is left running after the test."""
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"pid {proc.pid} did not stop within 15 s of SIGTERM") from None


def test_the_images_say_what_they_are(built: Built) -> None:
    for tag, program, port in ((built.agent, "gpu-agent", "9402/tcp"), (built.extender, "gpu-extender", "8888/tcp")):
        image = ib.config(tag)
        assert image.entrypoint == [program] and image.user == f"{UID}:{GID}"
        assert image.labels["org.opencontainers.image.version"] == __version__
        assert image.labels["org.opencontainers.image.licenses"] == "Apache-2.0"
        assert port in image.exposed and image.architecture in ("amd64", "arm64")


def test_the_root_filesystem_is_read_only_and_the_process_not_root(
    built: Built, containers: list[ib.Container], tmp_path: Path
) -> None:
    probe = (
        "import json, os\n"
        "try:\n    open('/opt/venv/x', 'w'); ro = False\nexcept OSError as e:\n    ro = e.errno == 30\n"
        "open('/tmp/scratch', 'w').write('ok')\n"
        "caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')]\n"
        "print(json.dumps({'uid': os.getuid(), 'gid': os.getgid(), 'read_only': ro, 'cap_eff': caps[0]}))\n"
    )
    log = tmp_path / "probe.log"
    proc = start(containers, built.agent, ["-c", probe], log, entrypoint=["python"])
    assert proc.wait(60) == 0, log.read_text()
    seen = json.loads(log.read_text().strip().splitlines()[-1])
    assert seen == {"uid": UID, "gid": GID, "read_only": True, "cap_eff": "0000000000000000"}


def test_the_agent_image_runs_with_the_daemonsets_arguments_and_volumes(
    built: Built, containers: list[ib.Container], tmp_path: Path
) -> None:
    if OPENSSL is None:
        pytest.skip("openssl is not installed: deploy/tls/make-certs.sh needs it")
    from tests.deploy.test_certs import run_script
    from tests.deploy.test_manifests_run import EMPTY_DIR_MARK, container_of, mount_volumes

    objects = m.kustomize(m.DEPLOY) if m.KUBECTL else m.load_source(m.BASE)
    ds, container = container_of(objects, "DaemonSet", "gpu-agent")
    pod = ds["spec"]["template"]["spec"]
    assert container["securityContext"].get("runAsUser", pod["securityContext"].get("runAsUser")) in (0, UID)
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    certs = tmp_path / "certs"
    run_script("-o", str(certs))
    mounts = mount_volumes(objects, ds, container, certs, tmp_path / "volumes", "a-token")
    ro = {path: local for path, local in mounts.items() if not (local / EMPTY_DIR_MARK).exists()}
    rw = {path: local for path, local in mounts.items() if (local / EMPTY_DIR_MARK).exists()}
    for local in rw.values():
        local.chmod(0o777)  # the kubelet makes an emptyDir writable for the pod's uid
    scenario = tmp_path / "scenario"
    scenario.mkdir()
    shutil.copyfile(SCENARIO, scenario / "gpus.yaml")
    ro["/etc/gpu-agent/scenario"] = scenario
    port = free_port()
    args = []
    for arg in container["args"]:  # the manifest's, except what cannot be the same here
        flag, _, value = arg.partition("=")
        if flag == "--metrics-addr":
            value = f"127.0.0.1:{port}"
        elif flag == "--extender-service":
            value = f"127.0.0.1:{free_port()}"  # nobody there: the agent keeps trying, as without replicas
        args.append(f"{flag}={value}")
    args += ["--fake=/etc/gpu-agent/scenario/gpus.yaml", "--node-name=gpu-node-1"]

    version_log = tmp_path / "version.log"
    version = start(containers, built.agent, ["--version"], version_log)
    assert version.wait(60) == 0 and __version__ in version_log.read_text()

    log = tmp_path / "agent.log"
    proc = start(containers, built.agent, args, log, binds=ro, writable=rw)
    try:
        wait("the agent's /healthz", lambda: http("GET", f"http://127.0.0.1:{port}/healthz")[0] == 200, proc, log)
        samples = scrape(f"http://127.0.0.1:{port}/metrics")
        assert metric(samples, "gpu_agent_nvml_ok", node="gpu-node-1") == 1
        assert "answering `gpu-agent --clear-xid` requests in /tmp/gpu-agent/control" in log.read_text()
    finally:
        stop(proc)


def test_the_extender_image_serves_and_filters_with_an_agent_image_streaming_to_it(
    built: Built, containers: list[ib.Container], tmp_path: Path
) -> None:
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "gpu-node-1", "labels": {"nvidia.com/gpu.present": "true"}},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
    }
    (inventory / "nodes.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [node]}))
    scenario = tmp_path / "scenario"
    scenario.mkdir()
    shutil.copyfile(SCENARIO, scenario / "gpus.yaml")
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    ext_log, agent_log = tmp_path / "extender.log", tmp_path / "agent.log"
    ext = start(
        containers,
        built.extender,
        [
            f"--http-addr=127.0.0.1:{http_port}",
            f"--grpc-addr=127.0.0.1:{grpc_port}",
            "--inventory=/etc/gpu-extender/inventory",
            "--readiness-grace=0",
        ],
        ext_log,
        binds={"/etc/gpu-extender/inventory": inventory},
    )
    agent = None
    try:
        url = f"http://127.0.0.1:{http_port}"
        wait("the extender's /healthz", lambda: http("GET", f"{url}/healthz")[0] == 200, ext, ext_log)
        agent = start(
            containers,
            built.agent,
            [
                "--fake=/etc/gpu-agent/scenario/gpus.yaml",
                "--node-name=gpu-node-1",
                f"--extender=127.0.0.1:{grpc_port}",
                f"--metrics-addr=127.0.0.1:{metrics_port}",
                "--pod-resources-socket=",
            ],
            agent_log,
            binds={"/etc/gpu-agent/scenario": scenario},
        )
        wait(
            "the node's data in the extender",
            lambda: metric(scrape(f"{url}/metrics"), "gpu_extender_node_idle_gpus", node="gpu-node-1") == 8,
            ext,
            ext_log,
        )
        status, answer = post_json(f"{url}/filter", request_for(["gpu-node-1"], gpus=2))
        assert status == 200 and answer["NodeNames"] == ["gpu-node-1"], answer
    finally:
        if agent is not None:
            stop(agent)
        stop(ext)
