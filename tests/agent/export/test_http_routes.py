"""gpu-agent /readyz: ready once NVML works and an extender has accepted a report since start
(NVML alone in metrics-only mode); 503 with a one-line reason otherwise.

The real agent and extender processes on loopback (tests.harness) for the paths that need a
stream; the routes in-process, behind the agent's real HTTP server on loopback, for the states a
process cannot be held in."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gpuextender.agent.export.http_get_server import GetServer, Handler
from gpuextender.agent.export.http_routes import routes
from gpuextender.agent.export.metrics import AgentMetrics
from gpuextender.agent.model.readings import GpuReading, NodeSample
from gpuextender.agent.report.latest import LatestReport
from gpuextender.agent.sampling.sample_loop import SampleLoop
from tests.harness import FIXTURES, Proc, cluster, free_port, http, metric, scrape, url, wait_until

IDLE = FIXTURES / "scenarios" / "idle8.yaml"


# -- in-process -------------------------------------------------------------------------------


def app_for(metrics: AgentMetrics, *, require_ack: bool = True) -> dict[str, Handler]:
    sampler = SampleLoop(
        None,
        LatestReport(),
        metrics,
        node_name="n",
        interval_s=1.0,  # type: ignore[arg-type]
        agent_version="test",
    )
    return routes(metrics, sampler, require_ack=require_ack)


def get(app: dict[str, Handler], path: str = "/readyz") -> tuple[int, str]:
    async def run() -> tuple[int, str]:
        server = GetServer(app)
        await server.start("127.0.0.1", 0)
        try:
            return await asyncio.to_thread(http, "GET", f"http://127.0.0.1:{server.port}{path}")
        finally:
            await server.close()

    status, body = asyncio.run(run())
    return status, body.decode()


def good_sample() -> NodeSample:
    return NodeSample(sample_time=1.0, duration_s=0.01, gpus=[GpuReading(index=0, uuid="GPU-0")])


def test_not_ready_before_the_first_sample() -> None:
    assert get(app_for(AgentMetrics("n"))) == (503, "not ready: no NVML sample yet\n")


def test_not_ready_while_nvml_is_unusable_even_after_an_ack() -> None:
    metrics = AgentMetrics("n")
    metrics.note_report_accepted()
    metrics.observe_sample(NodeSample(sample_time=1.0, duration_s=0.01, node_error="DriverNotLoaded"))
    assert get(app_for(metrics)) == (503, "not ready: NVML not initialised (DriverNotLoaded)\n")
    metrics.observe_sample(good_sample())  # the driver came back
    assert get(app_for(metrics)) == (200, "ready\n")


def test_not_ready_until_an_extender_accepted_a_report() -> None:
    metrics = AgentMetrics("n")
    metrics.observe_sample(good_sample())
    assert get(app_for(metrics)) == (503, "not ready: no extender has accepted a report yet\n")
    metrics.note_report_accepted()
    assert get(app_for(metrics)) == (200, "ready\n")


def test_metrics_only_mode_needs_nvml_alone() -> None:
    metrics = AgentMetrics("n")
    assert get(app_for(metrics, require_ack=False))[0] == 503
    metrics.observe_sample(good_sample())
    assert get(app_for(metrics, require_ack=False)) == (200, "ready\n")


def test_healthz_is_unchanged_by_readiness() -> None:
    metrics = AgentMetrics("n")
    metrics.observe_sample(good_sample())
    status, body = get(app_for(metrics), "/healthz")
    assert status == 503 and "no NVML sample for too long" in body  # this sampler never ran


# -- real processes ---------------------------------------------------------------------------


def readyz(agent: Proc) -> tuple[int, str]:
    status, body = http("GET", url(agent, "/readyz"))
    return status, body.decode()


def test_ready_once_an_extender_accepts_and_it_stays_ready_through_an_outage(tmp_path: Path) -> None:
    grpc_port = free_port()
    target = f"127.0.0.1:{grpc_port}"
    with cluster(tmp_path) as c:
        agent = c.agent("gpu-node-1", IDLE, extra=("--extender", target, "--reconnect-max-backoff", "0.5"))
        wait_until(
            "samples flowing",
            lambda: metric(scrape(url(agent, "/metrics")), "gpu_agent_nvml_ok", node="gpu-node-1") == 1,
        )
        assert readyz(agent) == (503, "not ready: no extender has accepted a report yet\n")

        ext = c.extender(grpc_port=grpc_port)
        wait_until("ready after the first ack", lambda: readyz(agent) == (200, "ready\n"))

        ext.stop()
        wait_until(
            "the stream noticed the outage",
            lambda: metric(scrape(url(agent, "/metrics")), "gpu_agent_stream_connected", extender=target) == 0,
        )
        assert readyz(agent)[0] == 200  # readiness latches: an extender outage must not unready every agent


def test_the_real_agent_serves_dcgm_names(tmp_path: Path) -> None:
    with cluster(tmp_path) as c:
        agent = c.agent("gpu-node-1", IDLE)

        def gpu_util() -> list[tuple[str, dict[str, str]]]:
            served = scrape(url(agent, "/metrics"))
            return [(name, dict(labels)) for name, labels in served if name == "DCGM_FI_DEV_GPU_UTIL"]

        samples = wait_until("DCGM series", gpu_util)
        assert len(samples) == 8
        labels = samples[0][1]
        assert labels["Hostname"] == "gpu-node-1" and labels["modelName"] == "NVIDIA H100 80GB HBM3"
        assert (labels["pod"], labels["namespace"], labels["container"]) == ("", "", "")
        assert any(name == "gpu_agent_build_info" for name, _ in scrape(url(agent, "/metrics")))


def test_not_ready_with_nvml_broken_although_the_extender_accepts(tmp_path: Path) -> None:
    scenario = tmp_path / "no-driver.yaml"
    scenario.write_text(IDLE.read_text() + "errors:\n  - call: nvmlInit\n    error: DriverNotLoaded\n")
    with cluster(tmp_path) as c:
        ext = c.extender()
        agent = c.agent("gpu-node-1", scenario, ext)
        wait_until(
            "acked",
            lambda: (
                metric(
                    scrape(url(agent, "/metrics")),
                    "gpu_agent_stream_connected",
                    extender=f"127.0.0.1:{ext.ports['grpc']}",
                )
                == 1
            ),
        )
        assert readyz(agent) == (503, "not ready: NVML not initialised (DriverNotLoaded)\n")
        assert http("GET", url(agent, "/healthz"))[0] == 200  # alive: it keeps sampling and retrying
