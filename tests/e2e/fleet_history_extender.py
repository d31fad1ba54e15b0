"""`python -m tests.e2e.fleet_history_extender ARGS`: the real extender (cli.main with ARGS) with its
fleet history's wall clock read from the file named by $FLEET_HISTORY_WALL (Unix seconds, written
by the test) and a sample every 0.1 s, so a test decides in which minute each sample lands
without waiting minutes (tests/e2e/test_fleet_history_browser.py). Nothing else is changed."""

from __future__ import annotations

import os
import sys
from functools import partial
from pathlib import Path

from gpuextender.extender.cli import main
from gpuextender.extender.ui import fleet_page
from gpuextender.extender.ui.fleet_history_sampler import HistorySampler

SAMPLE_EVERY_S = 0.1


def wall() -> float:
    return float(Path(os.environ["FLEET_HISTORY_WALL"]).read_text())


if __name__ == "__main__":
    fleet_page.HistorySampler = partial(HistorySampler, wall=wall, delay=lambda _: SAMPLE_EVERY_S)
    sys.exit(main())
