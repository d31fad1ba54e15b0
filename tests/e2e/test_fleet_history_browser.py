"""The fleet page's chart of the last 24 hours in a real browser: a real extender (file inventory,
its history's wall clock set by the test: fleet_history_extender.py), a real agent on fake NVML
with a fake kubelet, /ui in headless Chromium. The chart draws one point per sampled minute per
series, breaks the line where a minute has no point or no GPU had data (a gap, never a zero), and
names its four series; with no history it says so."""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.browser import MISSING, available
from tests.e2e.test_fleet_page_browser import H100, browser, wait_for, write_inventory  # noqa: F401 (a fixture)
from tests.harness import Cluster, Proc, cluster, free_port, http, post_json, request_for, url, wait_until

pytestmark = pytest.mark.skipif(not available(), reason=MISSING)

SERIES = ["free-idle", "holder-unknown-idle", "allocated-idle", "unhealthy", "waiting"]
LEGEND = [
    "free-idle GPUs",
    "idle GPUs, holder unknown",
    "allocated-idle GPUs",
    "unhealthy GPUs",
    "pods waiting for GPUs",
]


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """Unix socket paths are limited to ~107 bytes: pytest's tmp_path can be longer."""
    with tempfile.TemporaryDirectory(prefix="fhb-") as folder:
        yield Path(folder)


def start_extender(c: Cluster, *extra: str) -> Proc:
    """As Cluster.extender, through fleet_history_extender (the history's wall clock from a file)."""
    http_port, grpc_port = free_port(), free_port()
    proc = c.spawn(
        "extender",
        "tests.e2e.fleet_history_extender",
        [
            "--http-addr",
            f"127.0.0.1:{http_port}",
            "--grpc-addr",
            f"127.0.0.1:{grpc_port}",
            "--readiness-grace",
            "0",
            *extra,
        ],
        {"http": http_port, "grpc": grpc_port},
    )

    def ready() -> bool:
        if not proc.alive():
            raise RuntimeError(f"the extender exited:\n{proc.log()}")
        return http("GET", url(proc, "/readyz"))[0] == 200

    wait_until(f"extender /readyz ({proc.log_path})", ready)
    return proc


def set_wall(path: Path, wall: float) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(repr(wall))
    tmp.replace(path)  # atomic: the sampler never reads half a number


def history(ext: Proc) -> list[list[Any]]:
    status, raw = http("GET", url(ext, "/ui/history.json"))
    assert status == 200, raw
    points: list[list[Any]] = json.loads(raw)["points"]
    return points


def sampled(ext: Proc, wall_file: Path, minute: int, values: list[int | None]) -> None:
    """Move the history's clock into `minute` and wait until the point of it holds `values`."""
    set_wall(wall_file, minute + 20.0)
    wait_until(
        f"the point of minute {minute} = {values}",
        lambda: (points := history(ext)) and points[-1] == [minute, *values],
    )


def chart(driver: Any) -> dict[str, Any]:
    """What the chart draws: per series its path's runs (a run: the points joined by one line), the
    legend's names, the time labels."""
    drawn: dict[str, Any] = driver.execute_script("""
        const chart = document.getElementById("history-chart");
        return {
          shown: getComputedStyle(chart).display !== "none",
          paths: [...chart.querySelectorAll("path")].map((p) => [p.dataset.series, p.getAttribute("d")]),
          legend: [...document.querySelectorAll("#history-legend [data-series]")].map(
            (s) => [s.dataset.series, s.textContent]),
          ticks: [...chart.querySelectorAll(".h-tick")].map((t) => [Number(t.dataset.time), t.textContent]),
          note: document.getElementById("history-note").textContent,
          head: document.getElementById("history-head").textContent,
        };
    """)
    drawn["runs"] = {series: runs(d) for series, d in drawn["paths"]}
    return drawn


def runs(d: str) -> list[list[tuple[float, float]]]:
    """A path's subpaths, each its points: "M x y L x y ..." (a lone point: "M x y h0")."""
    out: list[list[tuple[float, float]]] = []
    for command, x, y in re.findall(r"([ML])\s*([-\d.]+) ([-\d.]+)", d):
        if command == "M":
            out.append([])
        out[-1].append((float(x), float(y)))
    return out


def test_the_chart_draws_each_sampled_minute_and_a_gap_where_there_was_none(
    tmp_path: Path, short_dir: Path, browser: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    write_inventory(inventory)  # gpu-a, gpu-b, gpu-silent: 4 GPUs each; only gpu-a gets an agent
    scenario = tmp_path / "a.yaml"
    idle = {**H100, "count": 4, "utilization_percent": 2, "memory_used_percent": 1}
    scenario.write_text(yaml.safe_dump({"gpus": [idle], "events": [{"at_s": 0, "gpus": [3], "xid": 79}]}))
    kubelet_file, socket = tmp_path / "kubelet-a.yaml", short_dir / "kubelet.sock"
    held = {
        "namespace": "llm",
        "name": "vllm-0",
        "containers": [{"name": "e", "devices": {"nvidia.com/gpu": [{"gpu": 1}]}}],
    }
    kubelet_file.write_text(yaml.safe_dump({"allocatable": {"nvidia.com/gpu": [{"gpus": 4}]}, "pods": [held]}))
    wall_file = tmp_path / "wall"
    m0 = (int(time.time()) // 60 - 30) * 60  # half an hour ago: the minutes the test walks through
    set_wall(wall_file, m0 + 20.0)
    monkeypatch.setenv("FLEET_HISTORY_WALL", str(wall_file))
    minute = [m0 + 60 * i for i in range(10)]
    with cluster(tmp_path) as c:
        ext = start_extender(c, "--inventory", str(inventory), "--no-fit-policy", "reject")
        # No agent yet: 12 GPUs, every one unknown: no GPU count (null), not 0; no pod waits.
        sampled(ext, wall_file, minute[0], [None, None, None, None, 0])
        status, answer = post_json(url(ext, "/filter"), request_for(["gpu-a", "gpu-b", "gpu-silent"], gpus=8))
        assert status == 200 and answer["NodeNames"] == [], answer
        sampled(ext, wall_file, minute[0], [None, None, None, None, 1])  # the same minute's point, replaced
        # gpu-a reports: GPU 0 and 2 free and idle, 1 held by vllm-0 and idle, 3 lost (XID 79).
        # The clock leaves minute 0 first: a sample taken there once the agent reported would
        # replace its point (the sampler runs every 0.1 s).
        set_wall(wall_file, minute[1] + 20.0)
        c.spawn(
            "kubelet-gpu-a",
            "gpuextender.agent.fakes.kubelet",
            ["--socket", str(socket), "--scenario", str(kubelet_file), "--node", "gpu-a"],
        )
        wait_until("gpu-a's fake kubelet", socket.exists)
        c.agent("gpu-a", scenario, ext, extra=("--pod-resources-socket", str(socket)))
        for m in (1, 2, 5, 6, 8):  # minutes 3, 4 and 7: the extender took no sample
            sampled(ext, wall_file, minute[m], [2, 0, 1, 1, 1])
        assert [p[0] for p in history(ext)] == [minute[m] for m in (0, 1, 2, 5, 6, 8)]

        browser.get(url(ext, "/ui"))
        drawn = wait_for("the chart", lambda: (d := chart(browser))["paths"] and d)

    assert drawn["shown"] and drawn["head"] == "The last 24 hours (6 minute(s) of 1440)"
    assert [series for series, _ in drawn["paths"]] == SERIES
    assert [series for series, _ in drawn["legend"]] == SERIES
    assert [text.split(":")[0] for _, text in drawn["legend"]] == LEGEND
    assert [text for _, text in drawn["legend"]] == [
        "free-idle GPUs: 2",
        "idle GPUs, holder unknown: 0",
        "allocated-idle GPUs: 1",
        "unhealthy GPUs: 1",
        "pods waiting for GPUs: 1",
    ]
    gpu_runs = [[1, 2], [5, 6], [8]]  # minute 0 had no GPU data; 3, 4 and 7 no sample
    for series in SERIES[:4]:
        assert [len(run) for run in drawn["runs"][series]] == [len(run) for run in gpu_runs], series
    assert [len(run) for run in drawn["runs"]["waiting"]] == [3, 2, 1]  # minutes 0-2, 5-6, 8
    paths = dict(drawn["paths"])
    assert all(paths[s].endswith(" h0") for s in SERIES)  # minute 8 alone: a dot, no line to it
    # In time order, left to right, and nothing drawn across a gap: each run ends left of the next.
    for series in SERIES:
        xs = [x for run in drawn["runs"][series] for x, _ in run]
        assert xs == sorted(xs) and len(set(xs)) == len(xs)
        for before, after in zip(drawn["runs"][series], drawn["runs"][series][1:], strict=False):
            assert before[-1][0] < after[0][0]
    # The same count draws at the same height in every series (one axis): free-idle 2 above the rest.
    assert (
        drawn["runs"]["free-idle"][0][0][1] < drawn["runs"]["unhealthy"][0][0][1] == drawn["runs"]["waiting"][1][0][1]
    )
    times = [t for t, _ in drawn["ticks"]]
    assert times[0] == minute[0] and times[-1] == minute[8] and times == sorted(times) and len(times) == 5
    assert all(re.fullmatch(r"\d\d:\d\d( [AP]M)?", text) for _, text in drawn["ticks"])


def test_with_no_history_yet_the_chart_says_so(tmp_path: Path, browser: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Drawn from an empty history document (what a history with no sample serves) in the page
    a real extender served."""
    wall_file = tmp_path / "wall"
    set_wall(wall_file, time.time())
    monkeypatch.setenv("FLEET_HISTORY_WALL", str(wall_file))
    with cluster(tmp_path) as c:
        ext = start_extender(c)
        browser.get(url(ext, "/ui"))
        wait_for("the chart", lambda: chart(browser)["paths"])
        browser.execute_script(
            "renderHistory({stepSeconds: 60, windowSeconds: 86400, maxPoints: 1440, series: arguments[0], points: []})",
            SERIES,
        )
        drawn = chart(browser)
    assert not drawn["shown"] and drawn["paths"] == [] and drawn["legend"] == []
    assert drawn["note"].startswith("No history yet")
    assert drawn["head"] == "The last 24 hours (0 minute(s) of 1440)"


def test_a_short_history_has_a_time_label_per_minute_and_none_over_another(
    tmp_path: Path, browser: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 52 item 7: a history of 1, 2, 3 or 5 minutes (drawn from documents in the page a real
    extender served) has at most 5 time labels, each a different minute, none overlapping another."""
    wall_file = tmp_path / "wall"
    set_wall(wall_file, time.time())
    monkeypatch.setenv("FLEET_HISTORY_WALL", str(wall_file))
    m0 = (int(time.time()) // 60 - 30) * 60
    with cluster(tmp_path) as c:
        ext = start_extender(c)
        browser.get(url(ext, "/ui"))
        wait_for("the chart", lambda: chart(browser)["paths"])
        drawn = {}
        for minutes in (1, 2, 3, 5, 30):
            points = [[m0 + 60 * i, 1, 0, 0, 0, 0] for i in range(minutes)]
            drawn[minutes] = browser.execute_script(
                """
                renderHistory({stepSeconds: 60, windowSeconds: 86400, maxPoints: 1440, series: arguments[0],
                               points: arguments[1]});
                return [...document.querySelectorAll("#history-chart .h-tick")].map((t) => {
                  const b = t.getBBox();
                  return [Number(t.dataset.time), b.x, b.x + b.width];
                });
                """,
                SERIES,
                points,
            )
    for minutes, ticks in drawn.items():
        times = [t for t, _, _ in ticks]
        # One point: its minute and the next (the axis spans a minute at least); else one per minute, 5 at most.
        assert len(times) == min(5, max(minutes, 2)), (minutes, ticks)
        assert times == sorted(set(times)) and times[0] == m0, (minutes, ticks)
        spans = sorted((left, right) for _, left, right in ticks)
        assert all(a[1] < b[0] for a, b in pairwise(spans)), (minutes, spans)
