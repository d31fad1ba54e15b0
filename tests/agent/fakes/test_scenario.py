"""Scenario files: patterns, expansion, and clear errors for every kind of mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuextender.agent.fakes.scenario import ScenarioError, load_scenario, parse_scenario
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
        (
            {"gpus": [GPU], "errors": [{"call": "nvmlDeviceGetName", "error": "GpuIsGone"}]},
            "unknown NVML error 'GpuIsGone'",
        ),
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


# -- 0.2 keys ----------------------------------------------------------------------------------------


def test_health_keys_parse() -> None:
    from gpuextender.agent.fakes.scenario import FakeEcc, FakeRemappedRows

    scenario = parse_scenario(
        {
            "gpus": [
                {
                    **GPU,
                    "ecc": {"uncorrected": 2},
                    "remapped_rows": {"correctable": 3, "pending": True},
                    "retired_pages_pending": False,
                    "clock_event_reasons": ["hw_slowdown", "power_brake"],
                    "sm_clock_mhz": {"pattern": "ramp", "from": 1000, "to": 2000, "over_s": 10},
                    "memory_clock_mhz": 2619,
                    "energy_start_mj": 5,
                    "numa_node": 1,
                    "events_supported": False,
                },
                GPU,
            ]
        }
    )
    gpu, plain = scenario.gpus
    assert isinstance(gpu.ecc, FakeEcc) and gpu.ecc.uncorrected.at(0) == 2 and gpu.ecc.corrected.at(0) == 0
    assert gpu.remapped_rows == FakeRemappedRows(3, 0, True, False)
    assert gpu.clock_event_reasons == 0x08 | 0x80
    assert gpu.sm_clock_mhz is not None and gpu.sm_clock_mhz.at(5) == 1500
    assert (gpu.energy_start_mj, gpu.numa_node, gpu.events_supported, gpu.retired_pages_pending) == (5, 1, False, False)
    # Left out: not supported (None), never a default value.
    assert (
        plain.ecc,
        plain.remapped_rows,
        plain.clock_event_reasons,
        plain.sm_clock_mhz,
        plain.energy_start_mj,
        plain.numa_node,
        plain.mig,
        plain.retired_pages_pending,
    ) == (None,) * 8
    assert plain.events_supported and scenario.events == () and scenario.topology is None


def test_mig_events_and_topology_parse() -> None:
    scenario = parse_scenario(
        {
            "gpus": [{**GPU, "count": 2, "mig": [{"profile": "1g.10gb", "count": 2}, {"profile": "1c.2g.20gb+me"}]}],
            "events": [
                {"at_s": 3, "gpus": [0, 1], "xid": 79},
                {"gpus": [1], "type": "dbe"},
                {"gpus": [0], "type": "recovery_action", "action": "node_reboot"},
            ],
            "topology": {
                "pcie": "node",
                "pcie_groups": [{"gpus": [0, 1], "relation": "single"}],
                "nvlinks": [{"gpus": [1, 0], "links": 4}],
                "nvswitch_links": 2,
            },
        }
    )
    mig = scenario.gpus[0].mig
    assert mig is not None and [(m.profile, m.gpu_slices, m.compute_slices, m.memory_bytes) for m in mig] == [
        ("1g.10gb", 1, 1, 10 * 1024**3),
        ("1g.10gb", 1, 1, 10 * 1024**3),
        ("1c.2g.20gb+me", 2, 1, 20 * 1024**3),
    ]
    assert [(e.at_s, e.gpu, e.kind, e.data) for e in scenario.events] == [
        (3, 0, "xid", 79),
        (3, 1, "xid", 79),
        (0, 1, "dbe", 0),
        (0, 0, "recovery_action", 2),
    ]
    topology = scenario.topology
    assert topology is not None and topology.nvlinks == {(0, 1): 4} and topology.nvswitch_links == 2
    assert topology.pcie_level(1, 0) == 10 and topology.default_pcie == 40


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"gpus": [{**GPU, "ecc": {"uncorrected": -1}}]}, "gpus[0].ecc.uncorrected: -1 is outside"),
        ({"gpus": [{**GPU, "ecc": {"dbe": 1}}]}, "gpus[0].ecc: unknown field(s) ['dbe']"),
        ({"gpus": [{**GPU, "remapped_rows": {"pending": "yes"}}]}, "remapped_rows.pending: must be true or false"),
        ({"gpus": [{**GPU, "clock_event_reasons": ["thermal"]}]}, "clock_event_reasons: must be a list of names"),
        ({"gpus": [{**GPU, "numa_node": -1}]}, "numa_node: must be an integer in 0..63"),
        ({"gpus": [{**GPU, "mig": [{"profile": "big"}]}]}, "mig[0].profile: must look like '1g.10gb'"),
        ({"gpus": [{**GPU, "mig": [{"profile": "7g.80gb"}]}]}, "has more memory than the GPU"),
        (
            {"gpus": [{**GPU, "mig": [{"profile": "1g.5gb", "count": 5}, {"profile": "1g.5gb", "count": 3}]}]},
            "8 MIG devices; a GPU has at most 7",
        ),
        ({"gpus": [GPU], "events": [{"gpus": [0]}]}, "events[0].xid: must be an integer in 1..65535"),
        ({"gpus": [GPU], "events": [{"gpus": [1], "xid": 79}]}, "events[0].gpus: must be a list of at least 1 GPU"),
        ({"gpus": [GPU], "events": [{"gpus": [0], "type": "xyz"}]}, "events[0].type: must be one of"),
        ({"gpus": [GPU], "events": [{"gpus": [0], "type": "dbe", "xid": 3}]}, "events[0].xid: only for type xid"),
        ({"gpus": [GPU], "events": [{"gpus": [0], "type": "recovery_action"}]}, "events[0].action: must be one of"),
        ({"gpus": [GPU], "events": {"at_s": 1}}, "events: must be a list"),
        ({"gpus": [GPU, GPU], "topology": {"pcie": "far"}}, "topology.pcie: must be one of"),
        ({"gpus": [GPU, GPU], "topology": {"nvlinks": [{"gpus": [0, 0], "links": 1}]}}, "must name two different GPUs"),
        (
            {"gpus": [GPU, GPU], "topology": {"nvlinks": [{"gpus": [0, 1], "links": 40}]}},
            "links: must be an integer in 1..18",
        ),
        (
            {
                "gpus": [GPU, GPU, GPU],
                "topology": {
                    "nvlinks": [{"gpus": [0, 1], "links": 18}, {"gpus": [0, 2], "links": 18}],
                    "nvswitch_links": 1,
                },
            },
            "GPU 0 has 37 NVLinks; NVML has at most 36",
        ),
    ],
)
def test_health_key_mistakes_name_the_field(document: object, message: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(document, source="s.yaml")
    assert message in str(info.value)
