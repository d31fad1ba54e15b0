"""The ingest workers' series: summed over workers by name and labels; their count and restarts."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from gpuextender.extender.observe.worker_metrics import WorkerMetrics
from tests.harness import metric, parse_metrics

WORKER_0 = """# HELP gpu_extender_reports_total Node reports from agents, by result.
# TYPE gpu_extender_reports_total counter
gpu_extender_reports_total{result="accepted"} 5.0
gpu_extender_reports_total{result="rejected"} 1.0
# HELP gpu_extender_connected_agents Agent streams currently open.
# TYPE gpu_extender_connected_agents gauge
gpu_extender_connected_agents 3.0
"""
WORKER_1 = """# HELP gpu_extender_reports_total Node reports from agents, by result.
# TYPE gpu_extender_reports_total counter
gpu_extender_reports_total{result="accepted"} 7.0
# HELP gpu_extender_connected_agents Agent streams currently open.
# TYPE gpu_extender_connected_agents gauge
gpu_extender_connected_agents 4.0
"""


async def asked_nothing() -> None:
    return None


def exposition(worker_metrics: WorkerMetrics) -> str:
    registry = CollectorRegistry()
    registry.register(worker_metrics)
    return generate_latest(registry).decode()


def test_series_are_summed_over_the_workers() -> None:
    workers = WorkerMetrics(asked_nothing)
    workers.running(3)
    for index, text in enumerate((WORKER_0, WORKER_1, WORKER_1)):
        workers.received(index, text)
    workers.ended(2, "silent")  # its series go with it
    text = exposition(workers)
    samples = parse_metrics(text)
    assert metric(samples, "gpu_extender_reports_total", result="accepted") == 12
    assert metric(samples, "gpu_extender_reports_total", result="rejected") == 1  # one worker's alone
    assert metric(samples, "gpu_extender_connected_agents") == 7
    assert metric(samples, "gpu_extender_ingest_workers") == 2
    assert metric(samples, "gpu_extender_ingest_worker_restarts_total", reason="silent") == 1
    assert metric(samples, "gpu_extender_ingest_worker_restarts_total", reason="exited") == 0
    assert text.count("# TYPE gpu_extender_reports_total counter") == 1  # one family, not one per worker


def test_no_worker_text_yet_shows_only_the_workers_own_series() -> None:
    samples = parse_metrics(exposition(WorkerMetrics(asked_nothing)))
    assert metric(samples, "gpu_extender_connected_agents") is None
    assert metric(samples, "gpu_extender_ingest_workers") == 0
