"""Benchmark: the fleet page at 5,000 GPU nodes x 8 GPUs in a real browser (Debian's Chromium,
headless, through Selenium), against a real extender app in a child process
(bench_fleet_page.serve: the same http_app, the nodes of bench_fleet_page.build_api; 40 pods
waiting for GPUs are filtered into it first).

Measured, in the page (its own timings: `document.body.dataset.renderMs` is fetch-to-drawn of one
refresh, `filterMs` one control change; `performance.now()` since navigation):
- first paint of every node: navigation start to the first render's end;
- each refresh (every 3 s): fetch + parse + render;
- a search, "problems only", a sort: one re-render each;
- the extender's CPU (its process's user+system time) over --seconds with the page open,
  against the same time with no page: what serving it costs.

Run: `.venv/bin/python bench/bench_fleet_browser.py [--nodes 5000] [--seconds 30]` (needs
/usr/bin/chromium and /usr/bin/chromedriver; about 90 s on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_fleet_page import _free_port, serve

from tests.browser import MISSING, available, chromium

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def waiting_pods(port: int, count: int) -> None:
    """`count` pods asking for 9 GPUs (no node has 9): each filtered once, so the page lists them."""
    for i in range(count):
        pod = {
            "metadata": {"name": f"big-{i}", "namespace": f"team-{i % 7}", "uid": f"uid-big-{i}"},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "9"}}}]},
        }
        body = json.dumps({"Pod": pod, "NodeNames": [f"gpu-node-{n:05d}" for n in range(0, 5000, 50)]}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/filter", data=body, headers={"Content-Type": "application/json"}
        )
        urllib.request.urlopen(request, timeout=30).read()


def wait_js(driver: Any, script: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(script)


def control(driver: Any, script: str) -> float:
    """Run `script` (which changes a control and dispatches its event); the re-render's ms."""
    driver.execute_script("delete document.body.dataset.filterMs;" + script)
    return float(wait_js(driver, "return document.body.dataset.filterMs"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=30.0, help="CPU window, with and without the page")
    parser.add_argument("--waiting", type=int, default=40)
    options = parser.parse_args()
    if not available():
        print(f"bench_fleet_browser: skipped: {MISSING}")
        return
    port = _free_port()
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    server = ctx.Process(target=serve, args=(port, options.nodes, ready), daemon=True)
    server.start()
    try:
        if not ready.wait(180):
            raise SystemExit("the extender did not start")
        waiting_pods(port, options.waiting)
        assert server.pid is not None
        idle_before = cpu_seconds(server.pid)
        time.sleep(options.seconds)
        idle_cpu = cpu_seconds(server.pid) - idle_before
        with tempfile.TemporaryDirectory() as user_dir:
            driver = chromium(Path(user_dir), window="1600,1000")
            try:
                results = measure(driver, port, server.pid, options)
            finally:
                driver.quit()
        results["extender_cpu_percent_without_page"] = round(100 * idle_cpu / options.seconds, 2)
        print(json.dumps(results, indent=1))
    finally:
        server.kill()


def measure(driver: Any, port: int, pid: int, options: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    driver.get(f"http://127.0.0.1:{port}/ui")
    wait_js(driver, "return Number(document.body.dataset.renders || 0) >= 1", timeout=120)
    first_paint_ms = driver.execute_script("return performance.now()")
    first_wall_s = time.perf_counter() - started
    cells = driver.execute_script("return document.querySelectorAll('#fleet .cell').length")
    waiting = driver.execute_script("return document.querySelectorAll('#waiting-table tbody tr').length")
    dense = driver.execute_script("return document.body.classList.contains('dense')")
    cpu_before = cpu_seconds(pid)
    refreshes: list[float] = []
    seen = 1
    deadline = time.monotonic() + options.seconds
    while time.monotonic() < deadline:
        renders = int(driver.execute_script("return document.body.dataset.renders"))
        if renders > seen:
            seen = renders
            refreshes.append(float(driver.execute_script("return document.body.dataset.renderMs")))
        time.sleep(0.1)
    page_cpu = cpu_seconds(pid) - cpu_before
    search = control(
        driver,
        "const s = document.getElementById('search'); s.value = 'gpu-node-012'; s.dispatchEvent(new Event('input'));",
    )
    shown = driver.execute_script("return document.querySelectorAll('#fleet .node').length")
    clear = control(
        driver, "const s = document.getElementById('search'); s.value = ''; s.dispatchEvent(new Event('input'));"
    )
    problems = control(driver, "document.getElementById('problems').click();")
    problem_rows = driver.execute_script("return document.querySelectorAll('#fleet .node').length")
    control(driver, "document.getElementById('problems').click();")
    sort = control(
        driver, "const s = document.getElementById('sort'); s.value = 'idle'; s.dispatchEvent(new Event('change'));"
    )
    heap = driver.execute_script("return performance.memory ? performance.memory.usedJSHeapSize : null")
    return {
        "nodes": options.nodes,
        "gpu_cells_drawn": cells,
        "dense_by_default": dense,
        "waiting_pods_listed": waiting,
        "first_paint_ms": round(first_paint_ms),
        "first_paint_wall_s": round(first_wall_s, 2),
        "refreshes": len(refreshes),
        "refresh_ms_median": round(statistics.median(refreshes), 1) if refreshes else None,
        "refresh_ms_max": round(max(refreshes), 1) if refreshes else None,
        "search_ms": search,
        "search_rows": shown,
        "clear_search_ms": clear,
        "problems_only_ms": problems,
        "problem_rows": problem_rows,
        "sort_ms": sort,
        "js_heap_mib": round(heap / 2**20, 1) if heap else None,
        "extender_cpu_percent_with_page": round(100 * page_cpu / options.seconds, 2),
    }


if __name__ == "__main__":
    main()
