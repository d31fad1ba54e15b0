"""Scenario files: patterns, expansion, and clear errors for every kind of mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuextender.agent.fake_scenario import ScenarioError, load_scenario, parse_scenario
from tests.harness import ROOT

GPU = {"product": "NVIDIA L40S", "memory_gib": 48}


def test_groups_expand_and_defaults_apply() -> None:
    scenario = parse_scenario({"gpus": [{**GPU, "count": 3}, {"product": "NVIDIA A100-SXM4-40GB", "memory_gib": 40}]})
    assert [g.product for g in scenario.gpus] == ["NVIDIA L40S"] * 3 + ["NVIDIA A100-SXM4-40GB"]
    assert scenario.gpus[0].memory_bytes == 48 * 1024**3
    assert scenario.gpus[0].compute_capability == (9, 0)
    assert scenario.gpus[0].utilization_percent.at(123) == 0


@pytest.mark.parametrize(
    ("pattern", "t", "expected"),
    [
        (7, 99, 7),
        ({"pattern": "sine", "min": 10, "max": 90, "period_s": 60}, 0, 10),
        ({"pattern": "sine", "min": 10, "max": 90, "period_s": 60}, 30, 90),
        ({"pattern": "steps", "values": [1, 2, 3], "every_s": 10}, 25, 3),
        ({"pattern": "steps", "values": [1, 2, 3], "every_s": 10}, 31, 1),
        ({"pattern": "ramp", "from": 0, "to": 100, "over_s": 50}, 25, 50),
        ({"pattern": "ramp", "from": 0, "to": 100, "over_s": 50}, 500, 100),
    ],
)
def test_patterns(pattern: object, t: float, expected: float) -> None:
    scenario = parse_scenario({"gpus": [{**GPU, "utilization_percent": pattern}]})
    assert scenario.gpus[0].utilization_percent.at(t) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "top level must be a mapping"),
        ({"gpus": []}, "gpus: must be a non-empty list"),
        ({"gpus": [GPU], "extra": 1}, "unknown field(s) ['extra']"),
        ({"gpus": [{**GPU, "count": 0}]}, "gpus[0].count: must be an integer in 1..64"),
        ({"gpus": [{"memory_gib": 80}]}, "gpus[0].product"),
        ({"gpus": [{**GPU, "memory_gib": "eighty"}]}, "gpus[0].memory_gib: must be a number"),
        ({"gpus": [{**GPU, "compute_capability": "nine"}]}, "must look like '9.0'"),
        ({"gpus": [{**GPU, "utilization_percent": 150}]}, "150 is outside 0..100"),
        ({"gpus": [{**GPU, "utilization_percent": {"pattern": "square"}}]}, "must be one of sine, steps, ramp"),
        ({"gpus": [{**GPU, "utilization_percent": {"pattern": "steps", "values": []}}]}, "non-empty list"),
        ({"gpus": [GPU], "errors": [{"call": "nvmlDeviceGetName", "error": "GpuIsGone"}]}, "unknown NVML error 'GpuIsGone'"),
        ({"gpus": [GPU], "errors": [{"call": "getName", "error": "GpuIsLost"}]}, "must be a pynvml function name"),
        ({"gpus": [GPU], "errors": [{"call": "*", "error": "GpuIsLost", "gpus": [1]}]}, "GPU indexes in 0..0"),
        ({"gpus": [GPU], "errors": {"call": "*"}}, "errors: must be a list"),
    ],
)
def test_mistakes_name_the_field(document: object, message: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(document, source="s.yaml")
    assert str(info.value).startswith("s.yaml: ")
    assert message in str(info.value)


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus: [\n")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario(bad)


def test_shipped_scenarios_load() -> None:
    files = sorted((ROOT / "examples" / "demo" / "scenarios").glob("*.yaml"))
    files += sorted((ROOT / "tests" / "fixtures" / "scenarios").glob("*.yaml"))
    assert len(files) >= 7
    for path in files:
        assert load_scenario(path).gpus
