"""`gpu-extender cleanup` (ui/cleanup_cli.py): its help, its usage and kubeconfig errors (one line,
exit 2), and a whole run against an API server that serves no DeviceTaintRules
(tests/kube_apiserver.py, in a thread of its own). Against the real API server:
tests/kube/test_cleanup.py."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gpuextender.extender.cli import main as gpu_extender
from gpuextender.extender.ui.cleanup_cli import build_parser, main
from tests.kube_apiserver import KubeApiServer

KEY = "gpu-extender.io/no-usable-gpu"


def test_help_says_what_is_removed_what_is_not_when_to_run_it_and_the_exit_statuses() -> None:
    text = " ".join(build_parser().format_help().split())
    for phrase in (
        "app.kubernetes.io/managed-by=gpu-extender",
        "gpu-extender.<node>.<device>",
        "gpu-extender-busy.<node>.<device>",
        "GPUsUsable condition of every Node",
        "no other condition is touched",
        "no other taint is touched",
        "kubectl delete -k deploy/",
        "gpu-extender/gpu-extender-device-taints",
        "0 everything found was removed, 1 something was not",
        "2 a usage or kubeconfig error",
        f"(default: {KEY})",
        "--dry-run",
    ):
        assert phrase in text, phrase


def test_the_command_line_dispatches_cleanup(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        gpu_extender(["cleanup", "--help"])
    assert exited.value.code == 0 and capsys.readouterr().out.startswith("usage: gpu-extender cleanup")


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--node-taint-key", "Bad Key"], "--node-taint-key 'Bad Key' is not a taint key"),
        (["--node-taint-key", "a" * 64], "is not a taint key"),
        (["--timeout", "0"], "--timeout 0 must be a positive number of seconds"),
        (["--timeout", "nan"], "--timeout nan must be a positive number of seconds"),
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    ],
)
def test_a_usage_error_is_one_line_and_exit_2(argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2 and said in capsys.readouterr().err


def test_a_missing_kubeconfig_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["--kubeconfig", str(tmp_path / "missing")]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1
    assert out.err.startswith("gpu-extender cleanup: no Kubernetes configuration: not running in a pod (") and (
        f"no kubeconfig file at --kubeconfig {tmp_path / 'missing'}" in out.err
    )


def test_a_kubeconfig_naming_no_such_context_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    kubeconfig = KubeApiServer().write_kubeconfig(tmp_path / "kubeconfig")
    assert main(["--kubeconfig", str(kubeconfig), "--context", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpu-extender cleanup: kubeconfig {kubeconfig}: ") and err.count("\n") == 1


@contextmanager
def serving(server: KubeApiServer) -> Iterator[KubeApiServer]:
    """`server` on an event loop of its own thread, for a command that runs its own loop."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_against_an_api_server_without_device_taint_rules_it_says_so_and_exit_0(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    server = KubeApiServer()
    server.add("Node", {"metadata": {"name": "n"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    with serving(server):
        status = main(["--kubeconfig", str(server.write_kubeconfig(tmp_path / "kubeconfig"))])
    out = capsys.readouterr()
    assert (status, out.err) == (0, "")
    assert out.out.splitlines() == [
        "cleanup: the API server serves no DeviceTaintRules (resource.k8s.io): none to delete",
        "cleanup: removed the GPUsUsable condition from 0 Nodes",
        f"cleanup: removed taint {KEY} from 0 Nodes",
    ]


def test_a_run_out_of_time_says_what_it_had_done_and_exit_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def slow(*_args: object, **_kw: object) -> None:
        await asyncio.sleep(60)

    monkeypatch.setattr("gpuextender.extender.inventory.cleanup.clean_up", slow)
    server = KubeApiServer()
    status = main(["--kubeconfig", str(server.write_kubeconfig(tmp_path / "kubeconfig")), "--timeout", "0.05"])
    out = capsys.readouterr().out.splitlines()
    assert status == 1
    assert out[0] == "cleanup: stopped: out of time after 0.05s (--timeout): the API server answered too slowly"
    assert len(out) == 4
