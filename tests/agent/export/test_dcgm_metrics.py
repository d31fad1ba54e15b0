"""agent.export.dcgm_metrics: /metrics under dcgm-exporter's names, units and labels, parsed back with
prometheus_client's parser from what AgentMetrics really serves; and the agent's own process_* and
build_info series."""

from __future__ import annotations

import platform

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from gpuextender import __version__
from gpuextender.agent.export import dcgm_metrics
from gpuextender.agent.export.metrics import AgentMetrics
from gpuextender.agent.model.readings import (
    ALLOCATION_KUBELET,
    ErrorCounters,
    GpmReading,
    GpuReading,
    Holder,
    MigReading,
    NodeSample,
    XidEvent,
)

# dcgm-exporter's metric names as /work/shared/reference/peers.md §4.1 documents them: the default
# set of etc/default-counters.csv, plus the ECC totals it ships commented out.
PEERS_4_1_METRICS = {
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
}
# A DCGM field outside the shipped CSVs (a user adds it to theirs; dcgm-exporter serves any field
# under its DCGM name): the remap-pending gauge next to ROW_REMAP_FAILURE.
OTHER_DCGM_FIELDS = {"DCGM_FI_DEV_ROW_REMAP_PENDING"}
# peers.md §4.1 "Commented out by default": `DCGM_FI_PROF_SM_ACTIVE` / `SM_OCCUPANCY` (served from GPM).
PEERS_4_1_COMMENTED_OUT = {"DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY"}
# peers.md §4.1 "Labels (internal/pkg/rendermetrics/render_metrics.go)", DCGM_FI_DRIVER_VERSION being
# "exported as a label"; `Hostname` as released (tag 4.5.3-4.8.2).
PEERS_4_1_GPU_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}
PEERS_4_1_KUBERNETES_LABELS = {"pod", "namespace", "container"}
PEERS_4_1_MIG_LABELS = {"GPU_I_PROFILE", "GPU_I_ID"}

# What issue 11 item 6 asks for.
REQUIRED = {
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
}

GPU_LABELS = PEERS_4_1_GPU_LABELS | PEERS_4_1_KUBERNETES_LABELS
MIG_LABELS = GPU_LABELS | PEERS_4_1_MIG_LABELS
MIB = 2**20
MODEL = "NVIDIA A100-SXM4-80GB"


def holder(pod: str, device: str, container: str = "main", namespace: str = "team") -> Holder:
    return Holder(namespace, pod, container, "nvidia.com/gpu", device)


def full_gpu(index: int, **changes: object) -> GpuReading:
    """A GPU with every reading known."""
    reading = GpuReading(
        index=index,
        uuid=f"GPU-{index}",
        name=MODEL,
        pci_bus_id=f"00000000:{index + 7:02X}:00.0",
        memory_total_bytes=80 * 1024 * MIB,
        memory_used_bytes=1500 * MIB + 123,
        memory_free_bytes=78000 * MIB,
        memory_reserved_bytes=420 * MIB,
        utilization_gpu_percent=37,
        utilization_memory_percent=12,
        temperature_celsius=41,
        power_watts=212.5,
        energy_millijoules=9_876_543_210,
        sm_clock_mhz=1410,
        memory_clock_mhz=1593,
        errors=ErrorCounters(
            ecc_uncorrected_volatile=2,
            ecc_corrected_volatile=17,
            remapped_rows_correctable=3,
            remapped_rows_uncorrectable=1,
            remap_pending=True,
            remap_failure=False,
        ),
        xids=[XidEvent(48, 100.0), XidEvent(79, 200.0)],
        memory_temperature_celsius=44,
        pcie_replays=1,
        encoder_utilization_percent=3,
        decoder_utilization_percent=4,
        nvlink_data_kib=123_456_789,
        pcie_tx_bytes_per_s=2.5e9,
        pcie_rx_bytes_per_s=1.25e9,
        gpm=GpmReading(sm_active=12.5, sm_occupancy=6.25, tensor_active=50.0, dram_active=25.0, graphics_active=99.5),
    )
    for name, value in changes.items():
        setattr(reading, name, value)
    return reading


def node_sample() -> NodeSample:
    exclusive = full_gpu(0, holders=[holder("train", "GPU-0")])
    free = full_gpu(1, xids=[])
    sliced = full_gpu(
        2,
        holders=[
            holder("a", "GPU-2::0"),
            holder("a", "GPU-2::1"),  # one container, two replicas: one series
            holder("a", "GPU-2::2", container="sidecar"),
            holder("b", "GPU-2::3"),
        ],
    )
    mig = full_gpu(
        3,
        utilization_gpu_percent=None,
        mig_instances=[
            MigReading(
                "MIG-aaa",
                "1g.10gb",
                9,
                0,
                memory_total_bytes=10 * 1024 * MIB,
                memory_used_bytes=2 * 1024 * MIB,
                holders=[Holder("ml", "mig-pod", "tf", "nvidia.com/mig-1g.10gb", "MIG-aaa")],
                gpm=GpmReading(sm_active=75.0),
            ),
            MigReading("MIG-bbb", "3g.40gb", 2, 0, memory_total_bytes=40 * 1024 * MIB, memory_used_bytes=None),
        ],
    )
    return NodeSample(
        sample_time=1.0,
        duration_s=0.01,
        driver_version="550.127.05",
        gpus=[exclusive, free, sliced, mig],
        allocation_source=ALLOCATION_KUBELET,
    )


def scrape(metrics: AgentMetrics) -> dict[str, list[Sample]]:
    families = text_string_to_metric_families(generate_latest(metrics.registry).decode())
    return {f.name: f.samples for f in families}


def types(metrics: AgentMetrics) -> dict[str, str]:
    return {f.name: f.type for f in text_string_to_metric_families(generate_latest(metrics.registry).decode())}


@pytest.fixture
def served() -> dict[str, list[Sample]]:
    metrics = AgentMetrics("gpu-node-7")
    metrics.observe_sample(node_sample())
    return scrape(metrics)


def series(samples: list[Sample], **labels: str) -> list[Sample]:
    return [s for s in samples if labels.items() <= s.labels.items()]


def value(samples: list[Sample], **labels: str) -> float:
    (found,) = series(samples, **labels)
    return found.value


def test_names_and_labels_are_dcgm_exporters_documented_ones() -> None:
    assert REQUIRED <= dcgm_metrics.METRIC_NAMES
    assert dcgm_metrics.METRIC_NAMES <= PEERS_4_1_METRICS | OTHER_DCGM_FIELDS | PEERS_4_1_COMMENTED_OUT
    assert set(dcgm_metrics.GPU_LABELS) == PEERS_4_1_GPU_LABELS
    assert set(dcgm_metrics.POD_LABELS) == PEERS_4_1_KUBERNETES_LABELS
    assert set(dcgm_metrics.MIG_LABELS) == PEERS_4_1_MIG_LABELS


def test_every_name_parses_back_with_exactly_dcgms_labels(served: dict[str, list[Sample]]) -> None:
    for name in REQUIRED | OTHER_DCGM_FIELDS:
        assert name in served, f"{name} missing from /metrics"
        assert served[name], f"{name} has no series"
        for s in served[name]:
            assert s.name == name  # no `_total` or other suffix
            expected = MIG_LABELS if "GPU_I_ID" in s.labels else GPU_LABELS
            assert set(s.labels) == expected, (name, s.labels)
            assert s.labels["Hostname"] == "gpu-node-7"
            assert s.labels["DCGM_FI_DRIVER_VERSION"] == "550.127.05"
            assert s.labels["modelName"] == MODEL  # raw NVML name, spaces and all
            assert s.labels["device"] == f"nvidia{s.labels['gpu']}"
            assert s.labels["UUID"] == f"GPU-{s.labels['gpu']}"  # MIG series carry the parent's UUID
    pci = {s.labels["gpu"]: s.labels["pci_bus_id"] for s in served["DCGM_FI_DEV_GPU_TEMP"]}
    assert pci == {"0": "00000000:07:00.0", "1": "00000000:08:00.0", "2": "00000000:09:00.0", "3": "00000000:0A:00.0"}


def test_every_family_is_a_gauge_so_the_names_stay_dcgms() -> None:
    # A counter family would be written `<name>_total` by prometheus_client (see the module docstring).
    metrics = AgentMetrics("n")
    metrics.observe_sample(node_sample())
    dcgm_types = {name: kind for name, kind in types(metrics).items() if name.startswith("DCGM_")}
    assert set(dcgm_types) == dcgm_metrics.METRIC_NAMES
    assert set(dcgm_types.values()) == {"gauge"}
    lines = generate_latest(metrics.registry).decode().splitlines()
    assert any(line.startswith("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{") for line in lines)
    assert not [line for line in lines if line.startswith("DCGM_") and line.split("{")[0].endswith("_total")]


def test_values_in_dcgms_units(served: dict[str, list[Sample]]) -> None:
    gpu0 = {"gpu": "0"}
    expected = {
        "DCGM_FI_DEV_GPU_UTIL": 37,
        "DCGM_FI_DEV_MEM_COPY_UTIL": 12,
        "DCGM_FI_DEV_FB_USED": 1500,  # MiB, rounded down (1500 MiB + 123 bytes)
        "DCGM_FI_DEV_FB_FREE": 78000,
        "DCGM_FI_DEV_FB_RESERVED": 420,
        "DCGM_FI_DEV_GPU_TEMP": 41,
        "DCGM_FI_DEV_POWER_USAGE": 212.5,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 9_876_543_210,  # mJ
        "DCGM_FI_DEV_SM_CLOCK": 1410,
        "DCGM_FI_DEV_MEM_CLOCK": 1593,
        "DCGM_FI_DEV_XID_ERRORS": 79,  # the last one seen
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 2,
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 17,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 1,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 3,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
        "DCGM_FI_DEV_ROW_REMAP_PENDING": 1,
    }
    assert {name: value(served[name], **gpu0) for name in expected} == expected
    assert value(served["DCGM_FI_DEV_XID_ERRORS"], gpu="1") == 0  # none since start


def test_unknown_readings_are_left_out_never_zero() -> None:
    bare = GpuReading(index=0, uuid="GPU-0", name=MODEL, pci_bus_id="00000000:07:00.0")
    metrics = AgentMetrics("n")
    metrics.observe_sample(NodeSample(sample_time=1.0, duration_s=0.01, gpus=[bare]))
    served = scrape(metrics)
    present = {name for name in dcgm_metrics.METRIC_NAMES if served[name]}
    assert present == {"DCGM_FI_DEV_XID_ERRORS"}  # 0 is a fact there: no XID since start
    errors_unknown = full_gpu(0, errors=ErrorCounters(ecc_uncorrected_volatile=0))  # only DBE readable
    metrics.observe_sample(NodeSample(sample_time=2.0, duration_s=0.01, gpus=[errors_unknown]))
    served = scrape(metrics)
    assert value(served["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]) == 0  # a known zero is served
    assert not served["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"] and not served["DCGM_FI_DEV_ROW_REMAP_FAILURE"]


def test_one_series_per_holder_and_empty_pod_labels_when_nobody_holds_the_gpu(
    served: dict[str, list[Sample]],
) -> None:
    def pods(gpu: str) -> set[tuple[str, str, str]]:
        return {
            (s.labels["namespace"], s.labels["pod"], s.labels["container"])
            for s in series(served["DCGM_FI_DEV_GPU_UTIL"], gpu=gpu)
        }

    assert pods("0") == {("team", "train", "main")}
    assert pods("1") == {("", "", "")}  # explicit empty strings, as dcgm-exporter --kubernetes printed
    assert pods("2") == {("team", "a", "main"), ("team", "a", "sidecar"), ("team", "b", "main")}
    assert len(series(served["DCGM_FI_DEV_GPU_UTIL"], gpu="2")) == 3  # no duplicate label sets
    assert all(s.value == 37 for s in series(served["DCGM_FI_DEV_GPU_UTIL"], gpu="2"))


def test_mig_instances_get_their_own_framebuffer_series(served: dict[str, list[Sample]]) -> None:
    used = series(served["DCGM_FI_DEV_FB_USED"], gpu="3")
    free = series(served["DCGM_FI_DEV_FB_FREE"], gpu="3")
    assert next(s for s in used if "GPU_I_ID" not in s.labels).value == 1500  # the whole GPU, nobody holds it
    assert value(used, GPU_I_ID="9", GPU_I_PROFILE="1g.10gb", pod="mig-pod", namespace="ml", container="tf") == 2048
    assert value(free, GPU_I_ID="9", GPU_I_PROFILE="1g.10gb") == 8192
    assert not series(used, GPU_I_ID="2")  # used unknown: left out, and so is free
    assert not series(free, GPU_I_ID="2")
    assert not series(served["DCGM_FI_DEV_GPU_UTIL"], gpu="3")  # NVML gives no utilization in MIG mode
    assert not any("GPU_I_ID" in s.labels for s in served["DCGM_FI_DEV_GPU_TEMP"])  # only FB per instance


def test_node_error_and_no_sample_serve_the_names_without_series() -> None:
    metrics = AgentMetrics("n")
    assert {n for n in scrape(metrics) if n.startswith("DCGM_")} == dcgm_metrics.METRIC_NAMES
    metrics.observe_sample(NodeSample(sample_time=1.0, duration_s=0.01, node_error="DriverNotLoaded"))
    served = scrape(metrics)
    assert not any(served[name] for name in dcgm_metrics.METRIC_NAMES)


def test_dcgm_names_can_be_turned_off() -> None:
    metrics = AgentMetrics("n", dcgm_names=False)
    metrics.observe_sample(node_sample())
    served = scrape(metrics)
    assert not [name for name in served if name.startswith("DCGM_")]
    assert served["gpu_agent_gpu_utilization_percent"]  # the agent's own names stay


def test_the_agent_serves_its_process_metrics_and_build_info() -> None:
    served = scrape(AgentMetrics("n"))
    assert value(served["gpu_agent_build_info"], version=__version__, python_version=platform.python_version()) == 1
    assert set(served["gpu_agent_build_info"][0].labels) == {"version", "python_version"}
    if platform.system() == "Linux":  # ProcessCollector reads /proc
        assert value(served["process_resident_memory_bytes"]) > 0
        assert served["process_cpu_seconds"][0].name == "process_cpu_seconds_total"
        assert served["process_start_time_seconds"]


def test_every_default_counter_nvml_can_give_is_served(served: dict[str, list[Sample]]) -> None:
    """dcgm-exporter's default set (peers.md §4.1) less what NVML has no reading for: the vGPU
    license (vGPU guests only)."""
    not_from_nvml = {"DCGM_FI_DEV_VGPU_LICENSE_STATUS"}
    aggregate_ecc = {"DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"}  # commented out there too
    for name in sorted(PEERS_4_1_METRICS - not_from_nvml - aggregate_ecc):
        assert series(served[name], gpu="0"), f"{name} is not served"
    assert value(served["DCGM_FI_DEV_MEMORY_TEMP"], gpu="0") == 44
    assert value(served["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"], gpu="0") == 1
    assert value(served["DCGM_FI_DEV_ENC_UTIL"], gpu="0") == 3 and value(served["DCGM_FI_DEV_DEC_UTIL"], gpu="0") == 4
    assert value(served["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"], gpu="0") == 123_456_789
    assert value(served["DCGM_FI_PROF_PCIE_TX_BYTES"], gpu="0") == 2.5e9  # B/s, as dcgm's gauge
    assert value(served["DCGM_FI_PROF_PCIE_RX_BYTES"], gpu="0") == 1.25e9


def test_gpm_is_served_as_dcgm_profiling_ratios_per_gpu_and_mig_instance(served: dict[str, list[Sample]]) -> None:
    assert value(served["DCGM_FI_PROF_SM_ACTIVE"], gpu="1") == 0.125  # percent / 100, as DCGM's ratios
    assert value(served["DCGM_FI_PROF_SM_OCCUPANCY"], gpu="1") == 0.0625
    assert value(served["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"], gpu="1") == 0.5
    assert value(served["DCGM_FI_PROF_DRAM_ACTIVE"], gpu="1") == 0.25
    assert value(served["DCGM_FI_PROF_GR_ENGINE_ACTIVE"], gpu="1") == 0.995
    instance = series(served["DCGM_FI_PROF_SM_ACTIVE"], gpu="3", GPU_I_ID="9")
    assert [(s.value, s.labels["GPU_I_PROFILE"], s.labels["pod"]) for s in instance] == [(0.75, "1g.10gb", "mig-pod")]
    assert not series(served["DCGM_FI_PROF_SM_ACTIVE"], gpu="3", GPU_I_ID="2")  # no GPM for it: absent
    assert not series(served["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"], GPU_I_ID="9")  # a metric it did not give


def test_gpm_absent_where_unsupported_never_zero() -> None:
    metrics = AgentMetrics("n")
    metrics.observe_sample(NodeSample(sample_time=1.0, duration_s=0.01, gpus=[full_gpu(0, gpm=None)]))
    served = scrape(metrics)
    assert not any(served[f.name] for f in dcgm_metrics.PROF_FIELDS)
