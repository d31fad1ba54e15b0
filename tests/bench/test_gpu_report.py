"""bench/RESULTS-gpu.md is rendered from the JSON bench/gpu_check.py writes on a GPU machine: the
renderer, run here on the committed H100 figures, must lay out every part (no raw fallback), so a
rare GPU session is not spent on a broken report."""

from __future__ import annotations

import json
from pathlib import Path

from tests.gpu import report

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_the_committed_figures_render_every_part() -> None:
    text = report.markdown(json.loads((BENCH / "gpu_check.json").read_text()))
    for heading in (
        "## The agent's reader against nvidia-smi",
        "## What NVML answered, call by call",
        "## Event thread and topology",
        "## Cost of a sampling pass, and RSS",
        "## Utilization and GPM under four loads",
        "## gpu-agent (real NVML) streaming to gpu-extender",
        "## pytest tests/gpu",
    ):
        assert heading in text, heading
    assert "(raw)" not in text and "Failed:" not in text
    assert "**NO**" not in text  # every reading within its tolerance of nvidia-smi
    assert "| spin | 100 |" in text and "11 passed" in text


def test_a_part_that_failed_or_changed_shape_is_shown_not_lost() -> None:
    text = report.markdown({"sampling cost": {"unexpected": 1}, "reader vs nvidia-smi": {"error": "Traceback: boom"}})
    assert "## cost (raw)" in text and '"unexpected": 1' in text
    assert "Failed:" in text and "boom" in text
