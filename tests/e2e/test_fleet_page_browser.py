"""The fleet page in a real browser: a real extender (file inventory) with real agents on fake
NVML, /ui opened in headless Chromium through Selenium. What a person sees: a busy GPU shows
busy, an idle one idle, a node with no agent unknown; an edit of the simulated GPUs shows up
without a reload; the form's answer lists the nodes and scores POST /explain gives."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.browser import MISSING, available, chromium
from tests.extender.ui.test_fleet_page import POD  # the same 2-GPU pod as the form's own tests
from tests.harness import ROOT, Proc, cluster, metric, post_json, request_for, scrape, url, wait_until

pytestmark = pytest.mark.skipif(not available(), reason=MISSING)

H100 = {"product": "NVIDIA H100 80GB HBM3", "memory_gib": 80, "compute_capability": "9.0"}


def write_scenario(path: Path, busy: int, idle: int) -> None:
    groups = []
    if busy:
        groups.append({**H100, "count": busy, "utilization_percent": 95, "memory_used_percent": 70})
    if idle:
        groups.append({**H100, "count": idle, "utilization_percent": 2, "memory_used_percent": 1})
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump({"gpus": groups}))
    tmp.replace(path)  # atomic, as a real edit lands


def write_inventory(directory: Path) -> None:
    shutil.copy(ROOT / "examples" / "ome" / "accelerator-classes.yaml", directory / "classes.yaml")
    nodes = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", **clique}},
            "status": {"allocatable": {"nvidia.com/gpu": "4"}},
        }
        for name, clique in (
            ("gpu-a", {"nvidia.com/gpu.clique": "nvl-1"}),
            ("gpu-b", {"nvidia.com/gpu.clique": "nvl-1"}),
            ("gpu-silent", {}),
        )
    ]
    (directory / "nodes.yaml").write_text("\n---\n".join(json.dumps(n) for n in nodes))


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    pytest.importorskip("selenium.webdriver")
    driver = chromium(tmp_path / "chromium")
    try:
        yield driver
    finally:
        driver.quit()


def cell(driver: Any, node: str, gpu: int) -> dict[str, str]:
    """What the page shows for one GPU: its state, text, hover text and colours (and the legend's)."""
    found: dict[str, str] | None = driver.execute_script(
        """
        const c = document.querySelector(`#fleet .node[data-node="${arguments[0]}"] .cell[data-gpu="${arguments[1]}"]`);
        if (!c) return null;
        const swatch = document.querySelector(`#legend [data-state="${c.dataset.state}"] .swatch`);
        const paint = (e) => { const s = getComputedStyle(e); return s.backgroundColor + " " + s.backgroundImage; };
        return {state: c.dataset.state, text: c.textContent, title: c.title, paint: paint(c), legend: paint(swatch)};
    """,
        node,
        gpu,
    )
    assert found is not None, f"no cell for {node} GPU {gpu}"
    return found


def wait_for(what: str, check: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def answer_rows(driver: Any) -> list[tuple[str, int]]:
    rows = driver.execute_script("""
        return [...document.querySelectorAll("#answer-table tbody tr")].map(
            (tr) => [tr.dataset.node, tr.querySelector("td.score").textContent]);
    """)
    return [(node, int(score)) for node, score in rows]


def explain_rows(ext: Proc) -> list[tuple[str, int]]:
    status, answer = post_json(url(ext, "/explain"), json.dumps({"Pod": yaml.safe_load(POD)}).encode())
    assert status == 200, answer
    return [(n["node"], n["score"]) for n in answer["nodes"]]


def test_the_fleet_page_shows_live_gpu_state_and_explains_a_pod(
    tmp_path: Path, browser: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from selenium.webdriver.common.by import By

    inventory = tmp_path / "inventory"
    inventory.mkdir()
    write_inventory(inventory)
    scenario_a, scenario_b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    write_scenario(scenario_a, busy=2, idle=2)
    write_scenario(scenario_b, busy=0, idle=4)
    # gpu-a's agent reads the kubelet (nobody holds its GPUs: free); gpu-b's cannot (holders unknown).
    kubelet_scenario, kubelet_socket = tmp_path / "kubelet-a.yaml", tmp_path / "kubelet-a.sock"
    kubelet_scenario.write_text(yaml.safe_dump({"allocatable": {"nvidia.com/gpu": [{"gpus": 4}]}, "pods": []}))
    with cluster(tmp_path) as c:
        ext = c.extender("--inventory", str(inventory))
        kubelet = ["--socket", str(kubelet_socket), "--scenario", str(kubelet_scenario), "--node", "gpu-a"]
        c.spawn("kubelet-gpu-a", "gpuextender.agent.fakes.kubelet", kubelet)
        wait_until("gpu-a's fake kubelet", kubelet_socket.exists)
        c.agent("gpu-a", scenario_a, ext, extra=("--pod-resources-socket", str(kubelet_socket)))
        c.agent("gpu-b", scenario_b, ext)
        wait_until(
            "2 nodes with data", lambda: metric(scrape(url(ext, "/metrics")), "gpu_extender_nodes_with_data") == 2
        )

        browser.get(url(ext, "/"))  # redirected to /ui
        assert browser.current_url.endswith("/ui")
        wait_for(
            "the fleet rows", lambda: browser.find_elements(By.CSS_SELECTOR, '#fleet .node[data-node="gpu-b"] .cell')
        )
        browser.execute_script("window.loadedOnce = 'yes'")

        busy, idle, unknown = cell(browser, "gpu-a", 0), cell(browser, "gpu-a", 3), cell(browser, "gpu-silent", 0)
        assert busy["state"] == "free-busy" and busy["text"] == "95"
        assert (
            "free, busy" in busy["title"]
            and "judged by utilization: 95 %" in busy["title"]
            and "of 80 GiB" in busy["title"]
        )
        assert idle["state"] == "free-idle" and idle["text"] == "2" and "judged by utilization: 2 %" in idle["title"]
        assert unknown["state"] == "unknown" and unknown["text"] == "?" and "no report" in unknown["title"]
        # Issue 26: a GPU whose holder its agent cannot read is never painted as free.
        unread = wait_for("gpu-b's cells", lambda: cell(browser, "gpu-b", 0))
        assert unread["state"] == "holder-unknown-idle" and "holder unknown" in unread["title"]
        for shown in (busy, idle, unknown, unread):
            assert shown["paint"] == shown["legend"]  # the colour the legend gives that state
        assert len({busy["paint"], idle["paint"], unknown["paint"], unread["paint"]}) == 4
        group = browser.find_element(By.CSS_SELECTOR, 'section[data-class="nvidia-h100-80gb"] h2').text
        assert "nvidia-h100-80gb" in group and "3 node(s), 12 GPU(s)" in group
        totals = browser.find_element(By.CSS_SELECTOR, '#totals [data-state="unknown"]').get_attribute("data-count")
        assert totals == "4"
        # Issue 34: the NVLink domains, with the GPUs a group could get there: gpu-a's 2 free idle and,
        # apart, gpu-b's 4 idle whose holder is unknown (issue 52: the counters' numbers, by one
        # rule); gpu-silent has no label.
        shown = {
            s: browser.find_element(By.CSS_SELECTOR, f'#totals [data-state="{s}"]').get_attribute("data-count")
            for s in ("free-idle", "holder-unknown-idle")
        }
        assert shown == {"free-idle": "2", "holder-unknown-idle": "4"}
        domain = wait_for(
            "the domains table",
            lambda: browser.find_elements(By.CSS_SELECTOR, '#domains-table tbody tr[data-domain="nvl-1"]'),
        )[0]
        assert [td.text for td in domain.find_elements(By.TAG_NAME, "td")] == ["nvl-1", "2", "2 of 8", "4", "-"]
        assert "nvidia.com/gpu.clique (1)" in browser.find_element(By.ID, "domains-head").text

        # The GPUs change; the page follows without a reload.
        write_scenario(scenario_b, busy=1, idle=3)
        edited = time.monotonic()
        wait_for("gpu-b GPU 0 busy on the page", lambda: cell(browser, "gpu-b", 0)["state"] == "holder-unknown-busy")
        print(f"page updated {time.monotonic() - edited:.1f} s after the scenario edit")
        assert browser.execute_script("return window.loadedOnce") == "yes"
        assert cell(browser, "gpu-b", 1)["state"] == "holder-unknown-idle"

        # The form: the table is what POST /explain answers for the same pod.
        textarea = browser.find_element(By.ID, "yaml")
        textarea.clear()
        textarea.send_keys(POD)
        for _ in range(3):  # the two answers are asked one after the other: retried if a report lands between
            browser.execute_script("document.getElementById('answer').replaceChildren()")
            browser.find_element(By.ID, "ask-button").click()
            shown_rows = wait_for("the answer table", lambda: answer_rows(browser))
            if shown_rows == explain_rows(ext):
                break
        assert shown_rows == explain_rows(ext)
        # 3 idle GPUs beat 2; the node without an agent fails while reporting nodes fit.
        assert [node for node, _ in shown_rows] == ["gpu-b", "gpu-a", "gpu-silent"]
        assert shown_rows[0][1] > shown_rows[1][1] > shown_rows[2][1] == 0
        reason = browser.find_element(By.CSS_SELECTOR, '#answer-table tr[data-node="gpu-silent"] td.reason').text
        assert reason.startswith("NoFreshGPUData: ")

        # A refused paste says why.
        textarea.clear()
        textarea.send_keys("kind: Deployment\n")
        browser.find_element(By.ID, "ask-button").click()
        error = wait_for("the refusal", lambda: browser.find_elements(By.ID, "answer-error"))[0].text
        assert "not_a_pod" in error and "kind 'Deployment'" in error

        textarea.clear()
        textarea.send_keys(POD)
        browser.find_element(By.ID, "ask-button").click()
        wait_for("the answer table", lambda: answer_rows(browser))
        screenshot = tmp_path / "fleet-page.png"
        browser.set_window_size(1400, 1400)
        browser.save_screenshot(str(screenshot))
        with capsys.disabled():  # in CI's output, not only on failure
            print(f"\nfleet page screenshot: {screenshot}")


def visible_rows(driver: Any) -> list[str]:
    nodes: list[str] = driver.execute_script(
        "return [...document.querySelectorAll('#fleet .node')].map((n) => n.dataset.node);"
    )
    return nodes


def test_the_page_searches_filters_to_problems_says_why_and_lists_waiting_pods(tmp_path: Path, browser: Any) -> None:
    """Issue 26: search, problems only, sort, dense mode, a GPU's reason, and the pods waiting for
    GPUs with the extender's latest verdict, through a real extender, agents and Chromium."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    inventory = tmp_path / "inventory"
    inventory.mkdir()
    write_inventory(inventory)
    scenario_a, scenario_b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    write_scenario(scenario_a, busy=0, idle=4)
    doc = yaml.safe_load(scenario_a.read_text())
    doc["events"] = [{"at_s": 0, "gpus": [3], "xid": 79}]  # GPU 3 of gpu-a falls off the bus
    scenario_a.write_text(yaml.safe_dump(doc))
    write_scenario(scenario_b, busy=0, idle=4)
    with cluster(tmp_path) as c:
        ext = c.extender("--inventory", str(inventory), "--no-fit-policy", "reject")
        c.agent("gpu-a", scenario_a, ext)
        c.agent("gpu-b", scenario_b, ext)
        wait_until(
            "gpu-a's XID at the extender",
            lambda: metric(scrape(url(ext, "/metrics")), "gpu_extender_node_idle_gpus", node="gpu-a") == 3,
        )
        status, answer = post_json(url(ext, "/filter"), request_for(["gpu-a", "gpu-b", "gpu-silent"], gpus=8))
        assert status == 200 and answer["NodeNames"] == [], answer  # 8 GPUs: no node has them

        browser.get(url(ext, "/ui"))
        wait_for("the rows", lambda: len(visible_rows(browser)) == 3)
        lost = cell(browser, "gpu-a", 3)
        assert lost["state"] == "unhealthy" and lost["text"] == "✕" and "why: xid-79" in lost["title"]
        waiting = wait_for("the waiting pod", lambda: browser.find_elements(By.CSS_SELECTOR, "#waiting-table tbody tr"))
        (row,) = waiting
        assert row.get_attribute("data-pod").endswith("/" + json.loads(request_for(["x"]))["Pod"]["metadata"]["name"])
        assert "no node fits" in row.text and "InsufficientGPUs: node has too few GPUs (3 of 3 nodes)" in row.text

        search = browser.find_element(By.ID, "search")
        search.send_keys("gpu-b")
        wait_for("the search", lambda: visible_rows(browser) == ["gpu-b"])
        search.clear()
        search.send_keys(" ")  # an input event with an empty needle: every row again
        wait_for("every row again", lambda: len(visible_rows(browser)) == 3)
        browser.find_element(By.ID, "problems").click()
        wait_for("problems only", lambda: sorted(visible_rows(browser)) == ["gpu-a", "gpu-silent"])
        browser.find_element(By.ID, "problems").click()
        Select(browser.find_element(By.ID, "sort")).select_by_value("idle")
        wait_for("most idle first", lambda: visible_rows(browser)[:2] == ["gpu-b", "gpu-a"])
        browser.find_element(By.ID, "dense").click()
        assert "dense" in browser.find_element(By.TAG_NAME, "body").get_attribute("class")
        size = browser.execute_script(
            "const r = document.querySelector('#fleet .cell').getBoundingClientRect(); return [r.width, r.height];"
        )
        assert size == [7, 7]


def test_each_gpu_cell_says_which_reading_judged_it(tmp_path: Path, browser: Any) -> None:
    """A GPM node (one spinning GPU, one running matrix products: the H100 measurements) beside a
    node whose agent reads no GPM: the cells show the reading that judged them, and say so."""
    from tests.e2e.test_gpm_end_to_end import NO_GPM_NODE, NODE
    from tests.e2e.test_gpm_end_to_end import write_inventory as gpm_inventory
    from tests.e2e.test_gpm_end_to_end import write_scenario as gpm_scenario

    scenario = gpm_scenario(tmp_path / "node.yaml")
    inventory = gpm_inventory(tmp_path / "inventory")
    with cluster(tmp_path) as c:
        ext = c.extender("--inventory", str(inventory))
        c.agent(NODE, scenario, ext, extra=("--interval", "0.2"))
        c.agent(NO_GPM_NODE, scenario, ext, extra=("--interval", "0.2", "--no-gpm"))
        # GPM needs two samples: wait until SM activity judges the spinning GPU (idle).
        wait_until(
            "the SM rule on the GPM node",
            lambda: (
                metric(scrape(url(ext, "/metrics")), "gpu_extender_node_gpus_judged", node=NODE, rule="sm-active") == 2
            ),
        )
        wait_until(
            "the GPM-less node's report",
            lambda: metric(scrape(url(ext, "/metrics")), "gpu_extender_node_idle_gpus", node=NO_GPM_NODE) is not None,
        )
        browser.get(url(ext, "/ui"))
        spinning = wait_for("the GPM node's cells", lambda: _judged_cell(browser, NODE, 0))
        matmul, plain = _judged_cell(browser, NODE, 1), _judged_cell(browser, NO_GPM_NODE, 0)
        assert (spinning["rule"], spinning["text"], spinning["state"]) == ("sm-active", "1", "holder-unknown-idle")
        assert "judged by SM activity: 0.75 % of SMs busy (utilization 100 %, not used)" in spinning["title"]
        assert (matmul["rule"], matmul["text"], matmul["state"]) == ("sm-active", "97", "holder-unknown-busy")
        assert (plain["rule"], plain["text"], plain["state"]) == ("utilization", "100", "holder-unknown-busy")
        assert "judged by utilization: 100 %" in plain["title"]
        rule = browser.execute_script("return document.getElementById('rule').textContent")
        assert rule.startswith("idle = SM activity < 10 % where the GPU reports it (the cell shows it), else ")


def _judged_cell(driver: Any, node: str, gpu: int) -> dict[str, str] | None:
    found: dict[str, str] | None = driver.execute_script(
        """
        const c = document.querySelector(`#fleet .node[data-node="${arguments[0]}"] .cell[data-gpu="${arguments[1]}"]`);
        return c && {state: c.dataset.state, rule: c.dataset.rule, text: c.textContent, title: c.title};
    """,
        node,
        gpu,
    )
    return found
