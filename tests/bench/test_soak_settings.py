"""The soak's settings (bench/soak.py), read without a control plane: which fault kinds are drawn
from when processes are spared, and the flags refused before anything starts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

import soak  # noqa: E402


def test_nothing_spared_draws_from_every_kind_in_order() -> None:
    assert soak.drawable(soak.Settings()) == soak.FAULTS  # the seeded draws unchanged by the option


def test_one_replica_spared_keeps_the_replica_faults_for_the_other() -> None:
    assert soak.drawable(soak.Settings(spare=("a",))) == soak.FAULTS
    assert soak.drawable(soak.Settings(spare=("a", "r2"))) == soak.FAULTS


def test_both_replicas_spared_drops_only_the_replica_faults() -> None:
    left = soak.drawable(soak.Settings(spare=("a", "b")))
    assert left == tuple(k for k in soak.FAULTS if k not in ("replica_kill", "replica_stop"))


def test_both_relays_spared_drops_only_the_relay_faults() -> None:
    left = soak.drawable(soak.Settings(spare=("r1", "r2", "a")))
    assert left == tuple(k for k in soak.FAULTS if k not in ("relay_kill", "relay_stop"))


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--spare", "c"], "--spare: unknown ['c']"),
        (["--faults", "replica_kill,nope"], "--faults: unknown ['nope']"),
        (["--faults", "replica_kill,relay_stop", "--spare", "a,b,r1,r2"], "no fault kind left"),
    ],
)
def test_flags_refused_before_anything_starts(argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        soak.main(argv)
    assert exited.value.code == 2
    assert said in capsys.readouterr().err
