"""common/program.run_program, the one start of gpu-extender, its ingest workers and the gpu-relay:
a refused setting or a port in use is one stderr line `NAME: why` and exit 2; otherwise main's code."""

from __future__ import annotations

import errno
from typing import Any

import pytest

from gpuextender.common import program
from gpuextender.common.program import run_program


class Refused(Exception):
    pass


@pytest.fixture(autouse=True)
def logging_said(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """What run_program configured logging with (not done for real: it replaces the root handlers
    of this test process)."""
    said: list[tuple[str, str]] = []
    monkeypatch.setattr(program, "configure_logging", lambda level, fmt: said.append((level, fmt)))
    return said


def run(load: Any, main: Any, **kwargs: Any) -> int:
    return run_program("prog", load, main, refused=(Refused,), log_settings=lambda _c: ("info", "text"), **kwargs)


async def exits(code: int) -> int:
    return code


def test_main_runs_over_what_load_gave_and_its_code_is_the_exit_code(logging_said: list[tuple[str, str]]) -> None:
    assert run(lambda: 7, lambda c: exits(c)) == 7
    assert logging_said == [("info", "text")]  # configured before main ran


@pytest.mark.parametrize("where", ["load", "main"])
def test_a_refused_setting_is_one_line_and_exit_2(where: str, capsys: pytest.CaptureFixture[str]) -> None:
    async def main(_c: Any) -> int:
        raise Refused("--flag 3 must be below 2")

    def load() -> int:
        if where == "load":
            raise Refused("--flag 3 must be below 2")
        return 0

    assert run(load, main) == 2
    assert capsys.readouterr().err == "prog: --flag 3 must be below 2\n"


def test_a_port_it_cannot_listen_on_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    async def main(_c: Any) -> int:
        raise OSError(errno.EADDRINUSE, "Address already in use")

    assert run(lambda: 0, main) == 2
    assert capsys.readouterr().err == "prog: cannot listen: Address already in use\n"


def test_ctrl_c_is_the_code_asked_for_or_goes_on() -> None:
    async def main(_c: Any) -> int:
        raise KeyboardInterrupt

    assert run(lambda: 0, main, interrupted=0) == 0
    with pytest.raises(KeyboardInterrupt):
        run(lambda: 0, main)
