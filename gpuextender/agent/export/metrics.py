"""The agent's Prometheus metrics: per-GPU gauges, the same under dcgm-exporter's names
(agent.export.dcgm_metrics), allocated-but-idle GPUs (agent.rules.idle_tracker) and the agent's own health.

GPU gauges are produced at scrape time from the latest sample (custom
collectors), so a GPU that disappears also disappears from /metrics instead of
freezing at its last value.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuextender import __version__
from gpuextender.agent.export.dcgm_metrics import DcgmCollector
from gpuextender.agent.model.readings import GpuReading, NodeSample
from gpuextender.agent.rules.idle_tracker import DEFAULT_THRESHOLD_PERCENT, DEFAULT_WINDOW_S, IdleTracker

GPU_LABELS = ["node", "gpu", "uuid", "model"]

# (metric name, help, how to read it from a GpuReading)
_GPU_GAUGES = (
    (
        "gpu_agent_gpu_utilization_percent",
        "GPU utilization (NVML utilization.gpu), percent.",
        lambda g: g.utilization_gpu_percent,
    ),
    (
        "gpu_agent_gpu_memory_used_bytes",
        "GPU memory used, bytes (NVML v2: excludes reserved).",
        lambda g: g.memory_used_bytes,
    ),
    ("gpu_agent_gpu_memory_total_bytes", "GPU memory total, bytes.", lambda g: g.memory_total_bytes),
    ("gpu_agent_gpu_temperature_celsius", "GPU core temperature, degrees Celsius.", lambda g: g.temperature_celsius),
    ("gpu_agent_gpu_power_watts", "GPU power draw, watts.", lambda g: g.power_watts),
    (
        "gpu_agent_gpu_healthy",
        "1 when NVML can read the GPU and reports no fault, else 0.",
        lambda g: 1 if g.healthy else 0,
    ),
)


class _GpuCollector(Collector):
    def __init__(self, metrics: AgentMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[GaugeMetricFamily]:
        sample = self._metrics.last_sample
        gpus: list[GpuReading] = sample.gpus if sample else []
        node = self._metrics.node_name
        for name, help_text, read in _GPU_GAUGES:
            family = GaugeMetricFamily(name, help_text, labels=GPU_LABELS)
            for gpu in gpus:
                value = read(gpu)
                if value is not None:
                    family.add_metric([node, str(gpu.index), gpu.uuid, gpu.name], float(value))
            yield family
        ok = GaugeMetricFamily("gpu_agent_nvml_ok", "1 when the last sample could use NVML, else 0.", labels=["node"])
        if sample is not None:
            ok.add_metric([node], 0.0 if sample.node_error else 1.0)
        yield ok


class _IdleCollector(Collector):
    def __init__(self, metrics: AgentMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[GaugeMetricFamily]:
        idle, node = self._metrics.idle, self._metrics.node_name
        window = f"{idle.window_s:g}s"
        threshold = f"{idle.threshold_percent:g}%"
        seconds = GaugeMetricFamily(
            "gpu_agent_gpu_idle_seconds",
            f"Seconds this GPU has been idle (utilization <= {threshold} in every sample), 0 when busy; "
            "absent while utilization is unknown (unknown is never idle).",
            labels=GPU_LABELS,
        )
        for gpu in idle.gpu_idle():
            seconds.add_metric([node, str(gpu.index), gpu.uuid, gpu.model], gpu.idle_s)
        yield seconds
        pods = GaugeMetricFamily(
            "gpu_agent_pod_idle_gpus",
            f"GPUs this pod holds that have been idle (utilization <= {threshold}) for at least {window} while "
            "it held them. A time-sliced or MPS GPU counts for each pod holding it; MIG instances are not "
            "counted (no per-instance utilization). Absent while the kubelet cannot be asked.",
            labels=["node", "namespace", "pod"],
        )
        for (namespace, pod), count in sorted((idle.pod_idle_gpus() or {}).items()):
            pods.add_metric([node, namespace, pod], float(count))
        yield pods


class AgentMetrics:
    def __init__(
        self,
        node_name: str,
        registry: CollectorRegistry | None = None,
        *,
        dcgm_names: bool = True,
        idle_threshold_percent: float = DEFAULT_THRESHOLD_PERCENT,
        idle_window_s: float = DEFAULT_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node_name = node_name
        self.registry = registry or CollectorRegistry()
        self.last_sample: NodeSample | None = None
        # Set by a stream on the first ACCEPTED ack and never cleared: /readyz's "an extender
        # has taken our reports since start" (gpu_agent_stream_connected says whether one does now).
        self.report_accepted = False
        self.idle = IdleTracker(threshold_percent=idle_threshold_percent, window_s=idle_window_s, clock=clock)
        r = self.registry
        ProcessCollector(registry=r)  # process_*: the agent's own CPU, memory, open files
        Gauge(
            "gpu_agent_build_info",
            "Always 1; the agent's version and Python version as labels.",
            ["version", "python_version"],
            registry=r,
        ).labels(version=__version__, python_version=platform.python_version()).set(1)
        self.sample_duration = Histogram(
            "gpu_agent_sample_duration_seconds",
            "Time to read all GPUs through NVML once.",
            buckets=(0.0002, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=r,
        )
        self.last_sample_time = Gauge(
            "gpu_agent_last_sample_timestamp_seconds", "Unix time of the latest NVML sample.", registry=r
        )
        self.nvml_errors = Counter(
            "gpu_agent_nvml_errors",
            "NVML calls that failed, by call and NVML error name.",
            ["call", "error"],
            registry=r,
        )
        self.stream_connected = Gauge(
            "gpu_agent_stream_connected",
            "1 while the stream to this extender is up and acknowledged.",
            ["extender"],
            registry=r,
        )
        self.stream_reconnects = Counter(
            "gpu_agent_stream_reconnects",
            "Times the stream to this extender was (re)opened.",
            ["extender"],
            registry=r,
        )
        self.reports_sent = Counter("gpu_agent_reports_sent", "Node reports sent.", ["extender"], registry=r)
        self.light_heartbeats_sent = Counter(
            "gpu_agent_light_heartbeats_sent",
            "Of the reports sent, light heartbeats: readings only, for an extender holding the full report.",
            ["extender"],
            registry=r,
        )
        self.samples_not_streamed = Counter(
            "gpu_agent_samples_not_streamed",
            "Samples not streamed: nothing the extenders decide with changed and no heartbeat was due.",
            registry=r,
        )
        self.reports_rejected = Counter(
            "gpu_agent_reports_rejected", "Node reports the extender rejected.", ["extender"], registry=r
        )
        self.registry.register(_GpuCollector(self))
        self.registry.register(_IdleCollector(self))
        if dcgm_names:
            self.registry.register(DcgmCollector(node_name, lambda: self.last_sample))

    def observe_sample(self, sample: NodeSample) -> None:
        self.last_sample = sample
        self.idle.observe(sample)
        self.sample_duration.observe(sample.duration_s)
        self.last_sample_time.set(sample.sample_time)

    def count_nvml_error(self, call: str, error: str) -> None:
        self.nvml_errors.labels(call=call, error=error).inc()

    def note_report_accepted(self) -> None:
        self.report_accepted = True
