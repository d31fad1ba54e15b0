"""The health classifier: every code from its source, each threshold at its value on both sides,
ignored XIDs, the flags that configure it, and the same verdicts through the real pynvml path."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpuextender.agent.model.readings import (
    DEGRADED,
    HEALTHY,
    UNHEALTHY,
    ErrorCounters,
    GpuReading,
    NodeSample,
    XidEvent,
)
from gpuextender.agent.rules.health import (
    DEFAULT_IGNORED_XIDS,
    GpuEvents,
    HealthEnricher,
    HealthPolicy,
    apply,
    classify,
    parse_xid_list,
)
from gpuextender.agent.settings import ConfigError, build_config
from tests.agent.fake_gpus import H100, restored_pynvml, start_reader

POLICY = HealthPolicy()


@pytest.fixture(autouse=True)
def _restore_pynvml() -> Iterator[None]:
    with restored_pynvml():
        yield


def gpu(**fields: object) -> GpuReading:
    return GpuReading(index=0, uuid="GPU-a", **fields)  # type: ignore[arg-type]


def xids(*numbers: int) -> GpuEvents:
    return GpuEvents(xids=tuple(XidEvent(xid=n, time=100.0 + i) for i, n in enumerate(numbers)))


def test_a_plain_gpu_is_healthy_and_unknown_readings_change_nothing() -> None:
    verdict = classify(gpu(), None, POLICY)
    assert (verdict.health, verdict.reasons) == (HEALTHY, [])
    # Every 0.2 reading unknown (None): unknown is not a problem.
    assert classify(gpu(errors=ErrorCounters(), clock_event_reasons=None), GpuEvents(), POLICY).health == HEALTHY


@pytest.mark.parametrize(
    ("reading", "events", "code"),
    [
        (gpu(), xids(79), "XidCritical"),
        (gpu(errors=ErrorCounters(ecc_uncorrected_volatile=1)), None, "EccUncorrected"),
        (gpu(), GpuEvents(double_bit_ecc=1), "EccUncorrected"),
        (gpu(errors=ErrorCounters(remap_failure=True)), None, "RowRemapFailure"),
        (gpu(), GpuEvents(gpu_unavailable=True), "GpuUnavailable"),
        (gpu(), GpuEvents(recovery_action=1), "RecoveryActionRequired"),  # GPU_RESET
        (gpu(), GpuEvents(recovery_action=2), "RecoveryActionRequired"),  # NODE_REBOOT
        (gpu(), GpuEvents(recovery_action=4), "RecoveryActionRequired"),  # DRAIN_AND_RESET
    ],
)
def test_unhealthy_codes(reading: GpuReading, events: GpuEvents | None, code: str) -> None:
    verdict = apply(reading, events, POLICY)
    assert verdict.health == UNHEALTHY and verdict.unhealthy == (code,)
    assert reading.healthy is False and reading.health == UNHEALTHY
    assert reading.unhealthy_reasons == [code] and reading.health_reasons == [code]


@pytest.mark.parametrize(
    ("reading", "events", "codes"),
    [
        (gpu(errors=ErrorCounters(remap_pending=True)), None, ["RowRemapPending"]),
        (gpu(errors=ErrorCounters(retired_pages_pending=True)), None, ["RetiredPagesPending"]),
        (gpu(clock_event_reasons=0x20), None, ["ThermalSlowdown"]),  # SW thermal
        (gpu(clock_event_reasons=0x40), None, ["ThermalSlowdown"]),  # HW thermal
        (gpu(clock_event_reasons=0x80), None, ["PowerBrake"]),
        (gpu(clock_event_reasons=0x08), None, ["HwSlowdown"]),
        (gpu(clock_event_reasons=0x08 | 0x40 | 0x80), None, ["ThermalSlowdown", "PowerBrake", "HwSlowdown"]),
        (gpu(), GpuEvents(recovery_action=3), ["RecoveryDrainP2P"]),
    ],
)
def test_degraded_codes(reading: GpuReading, events: GpuEvents | None, codes: list[str]) -> None:
    verdict = apply(reading, events, POLICY)
    assert verdict.health == DEGRADED and list(verdict.degraded) == codes
    assert reading.healthy is True and reading.unhealthy_reasons == [] and reading.health_reasons == codes


@pytest.mark.parametrize("bit", [0x01, 0x02, 0x04, 0x10, 0x100])  # idle, app clocks, SW power cap, sync boost, display
def test_ordinary_clock_reasons_are_healthy(bit: int) -> None:
    assert classify(gpu(clock_event_reasons=bit), None, POLICY).health == HEALTHY


def test_zero_counters_are_healthy() -> None:
    counters = ErrorCounters(0, 0, 0, 0, False, False, False)
    assert classify(gpu(errors=counters, clock_event_reasons=0), GpuEvents(recovery_action=0), POLICY).health == HEALTHY


@pytest.mark.parametrize(
    ("correctable", "uncorrectable", "degraded"), [(7, 0, False), (8, 0, True), (3, 4, False), (4, 4, True)]
)
def test_remapped_rows_threshold_at_its_value(correctable: int, uncorrectable: int, degraded: bool) -> None:
    assert POLICY.remapped_rows_degraded == 8
    errors = ErrorCounters(remapped_rows_correctable=correctable, remapped_rows_uncorrectable=uncorrectable)
    verdict = classify(gpu(errors=errors), None, POLICY)
    assert ("RemappedRowsHigh" in verdict.degraded) is degraded


def test_remapped_rows_threshold_is_a_policy_and_can_be_off() -> None:
    errors = ErrorCounters(remapped_rows_correctable=2)
    assert classify(gpu(errors=errors), None, HealthPolicy(remapped_rows_degraded=2)).health == DEGRADED
    assert classify(gpu(errors=errors), None, HealthPolicy(remapped_rows_degraded=3)).health == HEALTHY
    big = ErrorCounters(remapped_rows_correctable=10_000)
    assert classify(gpu(errors=big), None, HealthPolicy(remapped_rows_degraded=None)).health == HEALTHY


@pytest.mark.parametrize(("uncorrected", "unhealthy"), [(0, False), (1, True)])
def test_uncorrected_ecc_threshold_is_any_error(uncorrected: int, unhealthy: bool) -> None:
    verdict = classify(gpu(errors=ErrorCounters(ecc_uncorrected_volatile=uncorrected)), None, POLICY)
    assert (verdict.health == UNHEALTHY) is unhealthy


def test_corrected_ecc_alone_is_not_classified() -> None:
    assert classify(gpu(errors=ErrorCounters(ecc_corrected_volatile=1_000_000)), None, POLICY).health == HEALTHY


def test_ignored_xids_stay_healthy_and_are_not_reported() -> None:
    assert DEFAULT_IGNORED_XIDS == {13, 31, 43, 45, 68, 109}
    reading = gpu()
    assert apply(reading, xids(13, 31, 43, 45, 68, 109), POLICY).health == HEALTHY
    assert reading.xids == []
    assert apply(reading, xids(13, 48), POLICY).health == UNHEALTHY
    assert [x.xid for x in reading.xids] == [48]
    # Overridable: nothing ignored, or a custom list.
    assert classify(gpu(), xids(13), HealthPolicy(ignored_xids=frozenset())).health == UNHEALTHY
    assert classify(gpu(), xids(79), HealthPolicy(ignored_xids=frozenset({79}))).health == HEALTHY


def test_reported_xids_are_the_newest_sixteen() -> None:
    reading = gpu()
    apply(reading, xids(*range(200, 220)), POLICY)
    assert [x.xid for x in reading.xids] == list(range(204, 220))


def test_nvml_error_reasons_stay_first_and_classifying_twice_gives_the_same_result() -> None:
    reading = gpu(healthy=False, unhealthy_reasons=["GpuIsLost"], clock_event_reasons=0x40)
    apply(reading, xids(79), POLICY)
    first = (reading.health, list(reading.health_reasons), list(reading.unhealthy_reasons), reading.healthy)
    apply(reading, xids(79), POLICY)
    assert (reading.health, reading.health_reasons, reading.unhealthy_reasons, reading.healthy) == first
    assert first == (UNHEALTHY, ["GpuIsLost", "XidCritical", "ThermalSlowdown"], ["GpuIsLost", "XidCritical"], False)


def test_a_cleared_quarantine_makes_the_gpu_healthy_again() -> None:
    reading = gpu()
    apply(reading, xids(79), POLICY)
    assert not reading.healthy
    apply(reading, GpuEvents(), POLICY)
    assert reading.healthy and reading.health == HEALTHY and reading.unhealthy_reasons == [] and reading.xids == []


def test_enricher_matches_events_by_uuid() -> None:
    sample = NodeSample(
        sample_time=0.0,
        duration_s=0.0,
        gpus=[GpuReading(index=0, uuid="GPU-a"), GpuReading(index=1, uuid="GPU-b"), GpuReading(index=2, uuid="")],
    )
    calls = []

    def snapshot() -> dict[str, GpuEvents]:
        calls.append(1)
        return {"GPU-b": xids(79), "": xids(79)}

    HealthEnricher(POLICY, snapshot)(sample)
    assert [g.health for g in sample.gpus] == [HEALTHY, UNHEALTHY, HEALTHY]  # no UUID: no events to match
    assert calls == [1]  # one snapshot per sample
    HealthEnricher(POLICY)(sample)  # no event source: readings only
    assert sample.gpus[1].health == HEALTHY


@pytest.mark.parametrize(
    ("text", "expected"),
    [("13,31,43,45,68,109", DEFAULT_IGNORED_XIDS), ("", frozenset()), (" 79 , 48,", frozenset({48, 79}))],
)
def test_parse_xid_list(text: str, expected: frozenset[int]) -> None:
    assert parse_xid_list(text) == expected


@pytest.mark.parametrize("text", ["13,abc", "0", "-4", "70000", "1.5"])
def test_parse_xid_list_rejects_non_xids(text: str) -> None:
    with pytest.raises(ValueError, match="is not an XID"):
        parse_xid_list(text)


# -- flags -------------------------------------------------------------------------------------------


def test_health_flags_defaults() -> None:
    config = build_config([], {"NODE_NAME": "n1"})
    assert config.ignored_xids == DEFAULT_IGNORED_XIDS
    assert config.health_events is True and config.clear_xids == ()
    assert (
        str(config.control_dir) == "/tmp/gpu-agent/control"
    )  # the shipped DaemonSet's (tests/deploy/test_workloads.py)


def test_health_flags() -> None:
    config = build_config(["--ignore-xids", "", "--no-health-events", "--control-dir", "/run/x"], {"NODE_NAME": "n1"})
    assert config.ignored_xids == frozenset() and config.health_events is False and str(config.control_dir) == "/run/x"
    assert build_config(["--ignore-xids", "13, 94"], {"NODE_NAME": "n1"}).ignored_xids == {13, 94}
    with pytest.raises(ConfigError, match="--ignore-xids: 'x' is not an XID"):
        build_config(["--ignore-xids", "13,x"], {"NODE_NAME": "n1"})


def test_clear_xid_is_a_one_shot_that_needs_no_node_name() -> None:
    config = build_config(["--clear-xid", "3", "--clear-xid", "GPU-abc", "--clear-xid", "3", "--clear-xid", "all"], {})
    assert config.clear_xids == ("3", "GPU-abc", "all") and config.node_name == ""
    with pytest.raises(ConfigError, match="expected a GPU index, a GPU-<uuid> or 'all'"):
        build_config(["--clear-xid", "MIG-1"], {})
    with pytest.raises(ConfigError, match="no node name"):
        build_config([], {})


# -- through the real pynvml path ----------------------------------------------------------------------


def test_counters_and_clock_reasons_read_through_pynvml_classify_as_documented() -> None:
    reader, _ = start_reader(
        {
            "gpus": [
                {**H100, "ecc": {"uncorrected": 0, "corrected": 40}, "clock_event_reasons": ["sw_power_cap"]},
                {**H100, "ecc": {"uncorrected": 2, "corrected": 0}},
                {**H100, "remapped_rows": {"correctable": 3, "uncorrectable": 0, "pending": True, "failure": False}},
                {**H100, "remapped_rows": {"correctable": 5, "uncorrectable": 3, "pending": False, "failure": True}},
                {**H100, "clock_event_reasons": ["hw_slowdown", "hw_thermal"]},
                {**H100, "clock_event_reasons": ["power_brake"], "retired_pages_pending": True},
                H100,  # nothing supported: unknown, healthy
            ]
        }
    )
    sample = reader.sample()
    HealthEnricher(POLICY)(sample)
    assert [(g.health, g.health_reasons) for g in sample.gpus] == [
        (HEALTHY, []),
        (UNHEALTHY, ["EccUncorrected"]),
        (DEGRADED, ["RowRemapPending"]),
        (UNHEALTHY, ["RowRemapFailure", "RemappedRowsHigh"]),
        (DEGRADED, ["ThermalSlowdown", "HwSlowdown"]),
        (DEGRADED, ["RetiredPagesPending", "PowerBrake"]),
        (HEALTHY, []),
    ]
    assert [g.healthy for g in sample.gpus] == [True, False, True, False, True, True, True]


@pytest.mark.parametrize(("value", "ok"), [("0", True), ("60", True), ("60.01", False), ("-0.01", False)])
def test_heartbeat_bounds(value: str, ok: bool) -> None:
    args = ["--heartbeat", value]
    if ok:
        assert build_config(args, {"NODE_NAME": "n1"}).heartbeat_s == float(value)
    else:
        with pytest.raises(ConfigError, match=r"--heartbeat .* must be within 0..60 seconds"):
            build_config(args, {"NODE_NAME": "n1"})
