"""bench/device_fleet_scale.sh, the 20,000-node run prepared for a lent device machine (issue 36):
the command it runs is one bench_fleet_scale.py takes, with the layout the issue asks for (the
extender and its workers on their own CPUs, the load on the others, the floors in the same run),
and the overrides it documents reach that command. Nothing is run: the run needs 16 cores."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

import bench_fleet_scale as fs  # noqa: E402

SCRIPT = BENCH_DIR / "device_fleet_scale.sh"


def printed(**env: str) -> list[str]:
    out = subprocess.run(
        ["bash", str(SCRIPT), "--print"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.environ["PATH"], **env},
        cwd=BENCH_DIR.parent,
    ).stdout
    return shlex.split(out)


def test_the_device_command_is_the_issues_layout_and_the_bench_takes_it() -> None:
    python, script, *argv = printed(OUT="/out")
    assert (python, script) == ("python3", "bench/bench_fleet_scale.py")
    args = fs.parse_args(argv)
    assert args.sizes == [20_000]
    assert args.servers == ["floor", "floor-xopts", "extender"]  # the floors in the same run
    assert args.modes == ("light", "gated")
    assert args.ingest_workers == 8
    extender, load = fs.parse_cpus(args.extender_cpus), fs.parse_cpus(args.load_cpus)
    assert extender == set(range(9)) and load == set(range(9, 16))  # each its own cores
    assert args.load_processes == 6  # the load CPUs less one (the latency client's)
    assert (args.ingest_rounds, args.rounds) == (1, 1)
    assert str(args.json) == "/out/fleet_scale-20000.json"  # comes back from the device


def test_the_rehearsal_overrides_reach_the_command() -> None:
    python, _, *argv = printed(
        OUT="/tmp/x",
        FLEET_SIZES="300",
        FLEET_WORKERS="1",
        FLEET_EXTENDER_CPUS="0",
        FLEET_LOAD_CPUS="1",
        FLEET_PYTHON=".venv/bin/python",
    )
    args = fs.parse_args(argv)
    assert python == ".venv/bin/python"
    assert (args.sizes, args.ingest_workers, args.extender_cpus, args.load_cpus) == ([300], 1, "0", "1")
    assert args.load_processes == 1
    assert str(args.json) == "/tmp/x/fleet_scale-300.json"


def test_the_second_runs_overrides_reach_the_command() -> None:
    _, _, *argv = printed(
        OUT="/out", FLEET_SIZES="5000", FLEET_MODES="gated,paced", FLEET_SERVERS="floor,extender", FLEET_TIMEOUT="200"
    )
    args = fs.parse_args(argv)
    assert args.sizes == [5_000] and args.modes == ("gated", "paced") and args.servers == ["floor", "extender"]
    assert str(args.json) == "/out/fleet_scale-5000.json"


def test_the_relayed_runs_overrides_reach_the_command() -> None:
    """The header's relayed run: the extender on 0-2 with 2 workers, 4 relays on 3-8, the load on
    9-15 with a load process per relay at least."""
    _, _, *argv = printed(
        OUT="/out",
        FLEET_SERVERS="extender,relayed",
        FLEET_WORKERS="2",
        FLEET_EXTENDER_CPUS="0-2",
        FLEET_RELAY_CPUS="3-8",
    )
    args = fs.parse_args(argv)
    assert args.servers == ["extender", "relayed"] and args.relays == 4 and args.ingest_workers == 2
    extender, relays, load = (fs.parse_cpus(c) for c in (args.extender_cpus, args.relay_cpus, args.load_cpus))
    assert extender == {0, 1, 2} and relays == set(range(3, 9)) and load == set(range(9, 16))
    assert args.load_processes >= args.relays
    assert fs.parse_args(printed(OUT="/out")[2:]).relay_cpus == ""  # unset: the load's CPUs
