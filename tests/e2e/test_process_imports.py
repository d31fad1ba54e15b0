"""What the real processes load: an extender without --kubernetes and its ingest process, started
as a Deployment starts them, each writing its own sys.modules at exit (a sitecustomize on
PYTHONPATH, inherited by the ingest process). tests/extender/test_extender_imports.py checks the
same of fresh imports; this checks that nothing imported at start-up or while serving adds to it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.test_ingest_process import ingest_pids, scenario
from tests.harness import cluster, metric, scrape, url, wait_until

SITECUSTOMIZE = """
import atexit, json, os, sys
def _dump():
    with open(os.path.join(os.environ["GX_MODULES_DIR"], f"{os.getpid()}.json"), "w") as f:
        json.dump(sorted(sys.modules), f)
atexit.register(_dump)
"""


def test_the_running_extender_and_its_ingest_process_load_only_their_own_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site, out = tmp_path / "site", tmp_path / "modules"
    site.mkdir()
    out.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("GX_MODULES_DIR", str(out))
    with cluster(tmp_path) as c:
        ext = c.extender("--ingest-workers", "1")
        (pid,) = ingest_pids(ext)
        c.agent("gpu-node-1", scenario(tmp_path / "gpus.yaml"), ext)
        wait_until(
            "the agent's report", lambda: metric(scrape(url(ext, "/metrics")), "gpu_extender_nodes_with_data") == 1
        )
        ext_pid = ext.popen.pid
    wait_until(
        "both processes wrote their modules", lambda: {p.stem for p in out.iterdir()} >= {str(pid), str(ext_pid)}
    )
    ingest = set(json.loads((out / f"{pid}.json").read_text()))
    extender = set(json.loads((out / f"{ext_pid}.json").read_text()))
    assert "gpuextender.extender.ingest.service" in ingest and "grpc" in ingest
    assert not {m for m in ingest if m.split(".")[0] in ("aiohttp", "kubernetes_asyncio")}
    assert not {m for m in ingest if m.startswith(("gpuextender.extender.decide", "gpuextender.extender.scheduler"))}
    assert "aiohttp" in extender and "gpuextender.extender.decide.decision" in extender
    assert not {m for m in extender if m.split(".")[0] == "kubernetes_asyncio"}
